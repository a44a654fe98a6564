package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
)

// decodeJSONAsEncodingJSON is what decodeJSON did with encoding/json, the
// reference it must read alike: one value, unknown fields refused,
// nothing after it.
func decodeJSONAsEncodingJSON(data []byte, v any, emptyOK bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && emptyOK {
			return nil
		}
		return err
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one value")
	}
	return nil
}

// decodeSeeds are bodies a client might send, good and bad.
var decodeSeeds = []string{
	`{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":40}}],"priority":5,"timeout":"30s","request_id":"r1"}`,
	`{"CLAIMS":[{"Type":"GPU","COUNT":2}],"Request_ID":"r2"}`,
	`{"claims":[],"claims":[{"type":"CPU","count":1}]}`,
	"{\"request_id\":\"a\xff1\",\"claims\":[]}",
	`{"claims":null,"labels":null}`,
	`{"claims":[{"type":"GPU","count":1}],"gpu":1}`,
	`{"claims":[{"type":"GPU","count":1.5}]}`,
	`{"claims":[{"type":"GPU","count":"1"}]}`,
	`{"timeout":60000000000}`,
	`{"timeout":"soon"}`,
	`{"claims":[]} {"claims":[]}`,
	`{"claims":[]}x`,
	`{"claims":[]}` + "\n\t ",
	`{"claims":[`,
	`[1]`, `null`, ``, "  \n", `"s"`, `{}`,
	`{"requests":[{"method":"POST","path":"/v1/allocations","request_id":"r1","body":{"claims":[{"type":"GPU","count":1}]}}]}`,
	`{"requests":[{"method":"POST","path":"/v1/allocations/a1/release","body":null,"extra":1}]}`,
}

// checkReadsAlike decodes data into a fresh T with decodeJSON and with the
// reference, and fails unless both refuse it or both read the same value.
func checkReadsAlike[T any](t *testing.T, data []byte, emptyOK bool) {
	t.Helper()
	var got, want T
	gotErr := decodeJSON(bytes.NewReader(data), &got, emptyOK)
	wantErr := decodeJSONAsEncodingJSON(data, &want, emptyOK)
	if (gotErr == nil) != (wantErr == nil) || gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%T from %q: decodeJSON %+v, %v\nencoding/json %+v, %v", got, data, got, gotErr, want, wantErr)
	}
	checkDecodeErr(t, gotErr)
}

// checkPeeksAlike fails unless peekNamespace reads data's namespace as
// encoding/json's Unmarshal did, and refuses what it refused.
func checkPeeksAlike(t *testing.T, data []byte) {
	t.Helper()
	var want struct {
		Namespace string `json:"namespace"`
	}
	wantErr := json.Unmarshal(data, &want)
	got, gotErr := peekNamespace(data)
	if got != want.Namespace || (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("namespace of %q: peekNamespace %q, %v; encoding/json %q, %v", data, got, gotErr, want.Namespace, wantErr)
	}
}

// peekNamespace reads a body's namespace as encoding/json did.
func TestPeekNamespaceReadsAsEncodingJSON(t *testing.T) {
	seeds := append([]string{
		`{"namespace":"team-a","claims":[]}`, `{"NAMESPACE":"b"}`, `{"namespace":"a","namespace":"b"}`,
		`{"namespace":5}`, `{"namespace":"a","namespace":5}`, `{"namespace":"a","claims":[}`, `{"namespace":null}`,
		"{\"namespace\":\"a\xff\"}",
	}, decodeSeeds...)
	for _, body := range seeds {
		checkPeeksAlike(t, []byte(body))
	}
}

// decodeJSON reads a body as encoding/json did (names in any case, a name
// twice, invalid UTF-8, null) and refuses what it refused (unknown
// fields, a second value, malformed JSON), with a 400.
func TestDecodeJSONReadsAsEncodingJSON(t *testing.T) {
	for _, body := range decodeSeeds {
		for _, emptyOK := range []bool{false, true} {
			checkReadsAlike[wire.AllocateRequest](t, []byte(body), emptyOK)
			checkReadsAlike[wire.BatchRequest](t, []byte(body), emptyOK)
			checkReadsAlike[wire.WriteRequest](t, []byte(body), emptyOK)
		}
	}
}

func FuzzDecodeJSONAsEncodingJSON(f *testing.F) {
	for _, body := range decodeSeeds {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkPeeksAlike(t, data)
		checkReadsAlike[wire.AllocateRequest](t, data, false)
		checkReadsAlike[wire.BatchRequest](t, data, false)
		checkReadsAlike[wire.RenewRequest](t, data, true)
		checkReadsAlike[wire.RegisterHostRequest](t, data, false)
	})
}
