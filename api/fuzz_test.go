package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// fuzzState is a small inventory that decoded commands are applied to, so
// that the fuzzers also drive what the decoders let through.
func fuzzState(t *testing.T) *fsm.State {
	s := fsm.New()
	res := s.Apply(1, &fsm.RegisterHost{
		Meta: fsm.Meta{Time: 1},
		Host: fsm.HostSpec{ID: "h1"},
		Devices: []fsm.DeviceSpec{
			{ID: "g1", Type: fsm.GPU, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 40}}},
			{ID: "c1", Type: fsm.CPU, Shareable: true, Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: 64}}},
		},
	})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return s
}

// checkDecodeErr fails unless a decoder's error is one the API answers
// with 400: a bad request.
func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	status, body := errorBody(err)
	var mbe *http.MaxBytesError
	if status != http.StatusBadRequest && !errors.As(err, &mbe) || body.Message == "" {
		t.Fatalf("decode error answered %d %+v", status, body)
	}
}

// applyChecked applies a decoded command and checks the state still holds.
func applyChecked(t *testing.T, cmd fsm.Command) {
	t.Helper()
	s := fuzzState(t)
	fsm.Stamp(cmd, s.Now())
	res := s.Apply(2, cmd)
	if res.Err != nil {
		status, _ := errorBody(res.Err)
		if status >= 500 {
			t.Fatalf("refusal %v answered %d", res.Err, status)
		}
	}
	if err := s.CheckInvariants(); err != nil {
		t.Fatalf("invariants after %T: %v", cmd, err)
	}
}

func FuzzDecodeAllocate(f *testing.F) {
	for _, seed := range []string{
		gpuReq,
		`{"claims":[{"type":"GPU","count":2,"capabilities":{"memory_gb":16,"custom":{"arch":"sm80|sm90"}}}],"priority":100,"timeout":"30s","lease_ttl":"1h","pool":"big","labels":{"required":{"a":"b"},"preferred":{"c":"d"},"forbidden":{"e":"*"}},"request_id":"r","wait":true}`,
		`{"claims":[{"type":"CPU","count":1,"amount":{"compute_units":4,"memory_gb":1}},{"type":"GPU","count":1,"pool":"p"}]}`,
		`{"claims":[{"type":"GPU","count":1}],"timeout":"9223372036s"}`,
		`{"claims":[]}`, `{}`, `[]`, `null`, ``, `{"claims":null,"x":1}`, `{"timeout":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, _, err := decodeAllocate(bytes.NewReader(data))
		checkDecodeErr(t, err)
		if err == nil {
			applyChecked(t, cmd)
		}
	})
}

func FuzzDecodeRenew(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"ttl":"1m"}`, `{"ttl":"-1s","request_id":"x"}`, `{"ttl":5}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := decodeRenew(bytes.NewReader(data), "a1")
		checkDecodeErr(t, err)
		if err == nil {
			applyChecked(t, cmd)
		}
	})
}

func FuzzDecodeDeviceStatus(f *testing.F) {
	for _, seed := range []string{`{"status":"draining"}`, `{"status":"offline"}`, `{"status":1}`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := decodeDeviceStatus(bytes.NewReader(data), "g1")
		checkDecodeErr(t, err)
		if err == nil {
			applyChecked(t, cmd)
		}
	})
}

func FuzzDecodeRegisterHost(f *testing.F) {
	for _, seed := range []string{
		`{"address":"10.0.0.1","labels":{"rack":"r1"},"devices":[{"id":"g1","type":"GPU","name":"A100","pool":"p","capabilities":{"memory_gb":40,"custom":{"arch":"sm80"}},"labels":{"x":"y"},"shareable":true}]}`,
		`{"devices":[{"id":"g1","type":"GPU"},{"id":"g1","type":"GPU"}]}`,
		`{"devices":[{"id":"","type":"QPU","capabilities":{"memory_gb":-1}}]}`, `{"devices":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := decodeRegisterHost(bytes.NewReader(data), "h1")
		checkDecodeErr(t, err)
		if err == nil {
			applyChecked(t, cmd)
		}
	})
}

func FuzzDecodePolicy(f *testing.F) {
	for _, seed := range []string{`{"policy":"BestFit"}`, `{"policy":"PriorityBased","preemption_gap":20}`, `{"policy":""}`, `{"policy":"X","preemption_gap":-5}`} {
		f.Add([]byte(seed), "GPU", "")
		f.Add([]byte(seed), "", "big")
	}
	f.Fuzz(func(t *testing.T, data []byte, typ, pool string) {
		cmd, err := decodePolicy(bytes.NewReader(data), fsm.DeviceType(typ), pool)
		checkDecodeErr(t, err)
		if err == nil {
			applyChecked(t, cmd)
		}
	})
}

func FuzzDecodeRetention(f *testing.F) {
	for _, seed := range []string{`{"max_count":10,"max_age":"1h"}`, `{"max_count":0,"max_age":"0s"}`, `{"max_count":1e9}`, `{"max_age":"-1h"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := decodeRetention(bytes.NewReader(data))
		checkDecodeErr(t, err)
		if err == nil {
			applyChecked(t, cmd)
		}
	})
}

func FuzzDecodeWrite(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"request_id":"r1"}`, `{"request_id":1}`, `null`, `{"force":true}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := decodeWrite(bytes.NewReader(data))
		checkDecodeErr(t, err)
		if err == nil {
			applyChecked(t, &fsm.Release{Meta: fsm.Meta{RequestID: body.RequestID}, AllocationID: "a1"})
		}
	})
}

// FuzzBatch posts arbitrary batches to a whole server: no input panics
// it; a batch is answered 200 with one result of a 2xx or 4xx status and
// a JSON body per request, or refused 4xx; the state's invariants hold.
func FuzzBatch(f *testing.F) {
	for _, seed := range []string{
		`{"requests":[{"method":"POST","path":"/v1/allocations","request_id":"r1","body":` + gpuReq + `}]}`,
		`{"requests":[{"method":"POST","path":"/v1/allocations?namespace=x&pretty","body":{"claims":[{"type":"GPU","count":1}]}},{"method":"POST","path":"/v1/allocations/a1/release"}]}`,
		`{"requests":[{"method":"POST","path":"/v1/batch","body":{"requests":[]}},{"method":"GET","path":"/v1/devices"}]}`,
		`{"requests":[{"method":"PO ST","path":"http://x/v1/allocations"},{"method":"POST","path":"/v1/allocations/%zz/cancel"}]}`,
		`{"requests":[{"method":"POST","path":"/v1/allocations/a1/renew","request_id":"a b","body":{"ttl":"-1s"}}]}`,
		`{"requests":[]}`, `{}`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e := newEnv(t, Options{})
		e.seed()
		r := e.do("POST", "/v1/batch", string(data))
		if r.code != http.StatusOK {
			if r.code < 400 || r.code >= 500 {
				t.Fatalf("batch answered %d: %s", r.code, r.body)
			}
			return
		}
		var req wire.BatchRequest
		var out wire.BatchResponse
		if err := json.Unmarshal(data, &req); err != nil {
			t.Fatalf("a batch that does not decode was served: %v", err)
		}
		if err := json.Unmarshal(r.body, &out); err != nil || len(out.Responses) != len(req.Requests) {
			t.Fatalf("answer %s (%v) to %d requests", r.body, err, len(req.Requests))
		}
		for _, res := range out.Responses {
			if res.Status < 200 || res.Status >= 500 || !json.Valid(res.Body) {
				t.Fatalf("result %d %s", res.Status, res.Body)
			}
		}
		var err error
		e.b.f.Read(func(st *fsm.State) { err = st.CheckInvariants() })
		if err != nil {
			t.Fatalf("invariants after a batch: %v", err)
		}
	})
}
