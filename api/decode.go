package api

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/google/uuid"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// bodyOptions make the implementation of encoding/json/v2
// (github.com/go-json-experiment/json) read a request body exactly as
// encoding/json does (names in any case, a name twice, invalid UTF-8
// replaced, null over a set field), in about half its time, and
// refuse unknown fields as a Decoder told DisallowUnknownFields does.
var bodyOptions = jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(), jsonv2.RejectUnknownMembers(true))

// peekOptions read a body as encoding/json does, unknown fields ignored.
var peekOptions = jsonv1.DefaultOptionsV1()

// peekNamespace reads the namespace field of a request body, as
// encoding/json's Unmarshal into a struct of that one field reads it (in
// about half its time: the handler decodes the body again).
func peekNamespace(data []byte) (string, error) {
	var peek struct {
		Namespace string `json:"namespace"`
	}
	err := jsonv2.Unmarshal(data, &peek, peekOptions)
	return peek.Namespace, err
}

// decodeJSON reads one JSON value into v: unknown fields and trailing data
// are refused. An empty body leaves v as it is when emptyOK, and is a 400
// otherwise. A body over the route's cap gives the *http.MaxBytesError.
func decodeJSON(r io.Reader, v any, emptyOK bool) error {
	if r == nil {
		r = bytes.NewReader(nil)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return err
		case isTimeout(err):
			return errBodyTimeout
		}
		return badRequest("reading the request body: %v", err)
	}
	if len(bytes.Trim(data, " \t\r\n")) == 0 {
		if emptyOK {
			return nil
		}
		return badRequest("request body is empty; a JSON object is expected")
	}
	// One value and nothing after it but white space, as encoding/json's
	// Unmarshal reads.
	if err := jsonv2.Unmarshal(data, v, bodyOptions); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	return nil
}

// decodeAllocate reads the body of POST /v1/allocations.
func decodeAllocate(r io.Reader) (*fsm.Allocate, wire.AllocateRequest, error) {
	var body wire.AllocateRequest
	if err := decodeJSON(r, &body, false); err != nil {
		return nil, body, err
	}
	return &fsm.Allocate{Meta: fsm.Meta{RequestID: body.RequestID}, Request: requestFromWire(body.Request)}, body, nil
}

// decodeRenew reads the optional body of POST /v1/allocations/{id}/renew.
func decodeRenew(r io.Reader, id string) (*fsm.Renew, error) {
	var body wire.RenewRequest
	if err := decodeJSON(r, &body, true); err != nil {
		return nil, err
	}
	return &fsm.Renew{Meta: fsm.Meta{RequestID: body.RequestID}, AllocationID: id, TTL: body.TTL.Std()}, nil
}

// decodeWrite reads the optional body of a write without arguments.
func decodeWrite(r io.Reader) (wire.WriteRequest, error) {
	var body wire.WriteRequest
	err := decodeJSON(r, &body, true)
	return body, err
}

// decodeDeviceStatus reads the body of POST /v1/devices/{id}/status.
func decodeDeviceStatus(r io.Reader, id string) (*fsm.SetDeviceStatus, error) {
	var body wire.DeviceStatusRequest
	if err := decodeJSON(r, &body, false); err != nil {
		return nil, err
	}
	return &fsm.SetDeviceStatus{Meta: fsm.Meta{RequestID: body.RequestID}, DeviceID: id, Status: fsm.DeviceStatus(body.Status)}, nil
}

// decodeHostDrain reads the optional body of POST /v1/hosts/{id}/drain.
func decodeHostDrain(r io.Reader, id string) (*fsm.DrainHost, error) {
	var body wire.HostDrainRequest
	if err := decodeJSON(r, &body, true); err != nil {
		return nil, err
	}
	return &fsm.DrainHost{Meta: fsm.Meta{RequestID: body.RequestID}, HostID: id, Enable: true, Deadline: body.Deadline.Std()}, nil
}

// decodeRegisterHost reads the body of PUT /v1/hosts/{id}.
func decodeRegisterHost(r io.Reader, id string) (*fsm.RegisterHost, error) {
	var body wire.RegisterHostRequest
	if err := decodeJSON(r, &body, false); err != nil {
		return nil, err
	}
	return &fsm.RegisterHost{
		Meta:    fsm.Meta{RequestID: body.RequestID},
		Host:    fsm.HostSpec{ID: id, Address: body.Address, Labels: body.Labels},
		Devices: mapSlice(body.Devices, DeviceSpecFromWire),
	}, nil
}

// decodePolicy reads the body of PUT /v1/policies/{type} (pool == "") or
// PUT /v1/pools/{pool}/policy.
func decodePolicy(r io.Reader, typ fsm.DeviceType, pool string) (*fsm.SetPolicy, error) {
	var body wire.PolicyRequest
	if err := decodeJSON(r, &body, false); err != nil {
		return nil, err
	}
	return &fsm.SetPolicy{
		Meta:       fsm.Meta{RequestID: body.RequestID},
		DeviceType: typ, Pool: pool,
		Config: policyConfigFromWire(body),
	}, nil
}

// decodeRetention reads the body of PUT /v1/retention.
func decodeRetention(r io.Reader) (*fsm.SetRetention, error) {
	var body wire.RetentionRequest
	if err := decodeJSON(r, &body, false); err != nil {
		return nil, err
	}
	return &fsm.SetRetention{
		Meta:      fsm.Meta{RequestID: body.RequestID},
		Retention: retentionFromWire(body),
	}, nil
}

// maxRequestIDLen bounds a request ID.
const maxRequestIDLen = 128

// requestID settles a write's request ID: the body's, else the
// X-Request-Id header's (they must agree when both are given), else a new
// UUID. It is echoed in the X-Request-Id response header.
func requestID(w http.ResponseWriter, r *http.Request, fromBody string) (string, error) {
	header := r.Header.Get(wire.HeaderRequestID)
	id := fromBody
	switch {
	case fromBody != "" && header != "" && fromBody != header:
		return "", badRequest("request_id %q and the %s header %q differ", fromBody, wire.HeaderRequestID, header)
	case id == "":
		id = header
	}
	if id == "" {
		id = uuid.NewString()
	}
	if err := validRequestID(id); err != nil {
		return "", err
	}
	w.Header().Set(wire.HeaderRequestID, id)
	return id, nil
}

func validRequestID(id string) error {
	if len(id) > maxRequestIDLen {
		return badRequest("request ID longer than %d bytes", maxRequestIDLen)
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c > '~' {
			return badRequest("request ID %q has a character other than printable ASCII", id)
		}
	}
	return nil
}

// badParam is a bad request about a named query parameter.
func badParam(name, value, want string) *apiError {
	return badRequest("query parameter %s=%q: %s", name, value, want)
}
