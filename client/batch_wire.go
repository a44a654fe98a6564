package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/dmsc/dmsc/client/wire"
)

// appendBatchRequest writes a wire.BatchRequest of items, their bodies as
// they are: JSON the SDK encoded itself, which encoding/json would scan
// and compact again for nothing.
func appendBatchRequest(b []byte, items []wire.BatchItem) ([]byte, error) {
	b = append(b, `{"requests":[`...)
	var err error
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"method":`...)
		if b, err = jsontext.AppendQuote(b, it.Method); err != nil {
			return nil, fmt.Errorf("dmsc client: encode request: %w", err)
		}
		b = append(b, `,"path":`...)
		if b, err = jsontext.AppendQuote(b, it.Path); err != nil {
			return nil, fmt.Errorf("dmsc client: encode request: %w", err)
		}
		if it.RequestID != "" {
			b = append(b, `,"request_id":`...)
			if b, err = jsontext.AppendQuote(b, it.RequestID); err != nil {
				return nil, fmt.Errorf("dmsc client: encode request: %w", err)
			}
		}
		if len(it.Body) > 0 {
			b = append(b, `,"body":`...)
			b = append(b, it.Body...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

// batchResult is one result of a batch as the SDK reads it: the status,
// index and request ID of wire.BatchResult, and the body either decoded
// into its write's out already or kept raw (an error's body, a body that
// came before its status, a write that wants no answer).
type batchResult struct {
	status    int
	index     uint64
	requestID string
	body      []byte
	decoded   bool
	// err is why the body could not go into out (a JSON value of the
	// wrong type): that write's error, not the batch's.
	err error
}

// errBatchAnswer marks an answer to a batch that is not a
// wire.BatchResponse.
var errBatchAnswer = errors.New("unreadable batch answer")

// readBatchAnswer reads a wire.BatchResponse in one pass, as
// encoding/json reads it (asEncodingJSON), decoding the body of each
// successful result straight into the out of the write it answers, the
// i-th result into calls[i]: a client of many writers spent a fifth of its
// CPU reading each body twice, once to keep it raw and once into out.
func readBatchAnswer(data []byte, calls []*batchCall) ([]batchResult, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(data), asEncodingJSON)
	var results []batchResult
	var seen members
	var err error
	if dec.PeekKind() == 'n' {
		_, err = dec.ReadToken()
	} else {
		err = readObject(dec, func(name string) error {
			if !strings.EqualFold(name, "responses") {
				return dec.SkipValue()
			}
			if err := seen.once("responses"); err != nil {
				return err
			}
			if dec.PeekKind() == 'n' {
				_, err := dec.ReadToken()
				return err
			}
			return readArray(dec, func() error {
				var out any
				okStatus := 0
				if i := len(results); i < len(calls) {
					out, okStatus = calls[i].rq.out, calls[i].rq.okStatus
				}
				r, err := readBatchResult(dec, out, okStatus)
				results = append(results, r)
				return err
			})
		})
	}
	if err == nil {
		if _, end := dec.ReadToken(); end != io.EOF {
			err = fmt.Errorf("%w: more after the response", errBatchAnswer)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBatchAnswer, err)
	}
	return results, nil
}

// readBatchResult reads one wire.BatchResult; a success's body goes into
// out (when not nil).
func readBatchResult(dec *jsontext.Decoder, out any, okStatus int) (batchResult, error) {
	var r batchResult
	var seen members
	err := readObject(dec, func(name string) error {
		for _, m := range []string{"status", "index", "request_id", "body"} {
			if strings.EqualFold(name, m) {
				if err := seen.once(m); err != nil {
					return err
				}
			}
		}
		switch {
		case strings.EqualFold(name, "status"):
			return jsonv2.UnmarshalDecode(dec, &r.status, asEncodingJSON)
		case strings.EqualFold(name, "index"):
			return jsonv2.UnmarshalDecode(dec, &r.index, asEncodingJSON)
		case strings.EqualFold(name, "request_id"):
			return jsonv2.UnmarshalDecode(dec, &r.requestID, asEncodingJSON)
		case strings.EqualFold(name, "body"):
			if seen.has("status") && out != nil && (r.status < 400 || r.status == okStatus) {
				r.body, r.decoded = nil, true
				r.err = jsonv2.UnmarshalDecode(dec, out, asEncodingJSON)
				if r.err != nil && malformed(r.err) {
					return r.err
				}
				return nil
			}
			v, err := dec.ReadValue()
			r.body, r.decoded = bytes.Clone(v), false
			return err
		}
		return dec.SkipValue()
	})
	if err == nil && !r.decoded && out != nil && (r.status < 400 || r.status == okStatus) {
		// The body came before the status, or none came (an error, as
		// for any answer that is not JSON).
		r.err = unmarshal(r.body, out)
		r.body, r.decoded = nil, true
	}
	return r, err
}

// malformed reports whether a decoding error is in the JSON text itself,
// after which the rest of the answer cannot be read; otherwise the value
// was read to its end and only did not fit the Go value.
func malformed(err error) bool {
	var syn *jsontext.SyntacticError
	return errors.As(err, &syn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// members are the names of an object read so far, of those that matter.
type members []string

// once refuses a member the object had already: read in one pass, a
// second one would come after the first had been acted on (encoding/json
// keeps the last; dmsc never writes one twice).
func (m *members) once(name string) error {
	if m.has(name) {
		return fmt.Errorf("%w: %q twice in an object", errBatchAnswer, name)
	}
	*m = append(*m, name)
	return nil
}

func (m members) has(name string) bool {
	for _, n := range m {
		if n == name {
			return true
		}
	}
	return false
}

// readObject reads a JSON object, calling member for each name with the
// decoder before its value, which member must read.
func readObject(dec *jsontext.Decoder, member func(name string) error) error {
	if tok, err := dec.ReadToken(); err != nil {
		return err
	} else if tok.Kind() != '{' {
		return fmt.Errorf("want an object, got %v", tok.Kind())
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := member(tok.String()); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return err
}

// readArray reads a JSON array, calling elem for each element, which elem
// must read.
func readArray(dec *jsontext.Decoder, elem func() error) error {
	if tok, err := dec.ReadToken(); err != nil {
		return err
	} else if tok.Kind() != '[' {
		return fmt.Errorf("want an array, got %v", tok.Kind())
	}
	for dec.PeekKind() != ']' {
		if err := elem(); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken()
	return err
}
