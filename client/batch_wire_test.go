package client

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// twoPass is how the SDK read a batch's answer before readBatchAnswer:
// the response with each body raw, then each success's body into out.
func twoPass(data []byte, outs []any, okStatus []int) ([]batchResult, error) {
	var resp wire.BatchResponse
	if err := unmarshal(data, &resp); err != nil {
		return nil, err
	}
	var rs []batchResult
	for i, res := range resp.Responses {
		r := batchResult{status: res.Status, index: res.Index, requestID: res.RequestID, body: res.Body}
		if i < len(outs) && outs[i] != nil && (res.Status < 400 || res.Status == okStatus[i]) {
			r.err = unmarshal(res.Body, outs[i])
			r.body, r.decoded = nil, true
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// sampleAllocation is an answer to an allocate, as the API writes it.
func sampleAllocation(i int) []byte {
	at := time.Date(2026, 12, 7, 1, 2, 3, 4, time.UTC)
	b, err := json.Marshal(wire.Allocation{
		ID: fmt.Sprintf("a%d", i), RequestID: fmt.Sprintf("r%d", i), Namespace: "default", Status: "active", Policy: "BestFit",
		Host: "h1", Hosts: []string{"h1"},
		Devices:     []wire.Assignment{{DeviceID: fmt.Sprintf("h1-gpu%d", i%8), Claim: 0}},
		Request:     wire.Request{Claims: []wire.Claim{{Type: "GPU", Count: 1}}, Timeout: wire.Duration(time.Minute)},
		RequestedAt: at, AllocatedAt: at.Add(time.Second), Seq: uint64(i), CreateIndex: 9, ModifyIndex: 10,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// batchAnswerSeeds are answers to a batch of two writes, good and bad.
var batchAnswerSeeds = []string{
	`{"responses":[{"status":200,"index":7,"request_id":"r0","body":` + string(sampleAllocation(0)) + `},{"status":409,"request_id":"r1","body":{"error":{"code":"no_capacity","message":"no"}}}]}`,
	`{"responses":[{"body":{"id":"first"},"status":200},{"status":201,"body":null}]}`,
	`{"RESPONSES":[{"Status":200,"INDEX":3,"Request_ID":"x","BODY":{"ID":"a"}}],"extra":[1,{"a":2}]}`,
	`{"responses":[{"status":200,"body":{"id":5}}]}`,
	`{"responses":[{"status":200,"body":{"id":5,"hosts":"x","seq":-1}},{"status":200,"body":{"id":"b"}}]}`,
	`{"responses":[{"status":200,"body":{"request":{"timeout":"soon"}}},{"status":200,"body":{"id":"b"}}]}`,
	`{"responses":[{"status":"200","body":{}}]}`,
	`{"responses":[{"status":200.5,"body":{}}]}`,
	`{"responses":null}`,
	`{"responses":[],"responses":[{"status":200,"body":{"id":"second"}}]}`,
	`{"responses":[{"status":200,"body":{"id":"a"},"body":{"hosts":["h"]}}]}`,
	`{"responses":[{"status":404,"body":{"id":"a"}},{"status":200,"body":{"id":"b"}},{"status":200,"body":{"id":"c"}}]}`,
	`{"responses":[{"status":200,"body":{"id":"a"}}]} x`,
	`{"responses":[{"status":200,"body":{"id":"a"}}]}` + "\n",
	`{"responses":[1]}`, `[]`, `null`, ``, `{"responses":[{"status":200,"body":{"id":"a"`,
	"{\"responses\":[{\"status\":200,\"body\":{\"id\":\"a\xff\"}}]}",
}

// checkBatchAnswer fails unless readBatchAnswer reads data as the two
// passes did: the same results and outs, or an error from both.
func checkBatchAnswer(t *testing.T, data []byte) {
	t.Helper()
	okStatus := []int{0, 409}
	newCalls := func() ([]*batchCall, []any) {
		var calls []*batchCall
		var outs []any
		for _, ok := range okStatus {
			out := &wire.Allocation{Hosts: []string{"kept"}}
			calls = append(calls, &batchCall{rq: &request{out: out, okStatus: ok}})
			outs = append(outs, out)
		}
		return calls, outs
	}
	calls, got := newCalls()
	gotRes, gotErr := readBatchAnswer(data, calls)
	_, want := newCalls()
	wantRes, wantErr := twoPass(data, want, okStatus)
	if gotErr != nil && wantErr == nil && strings.Contains(gotErr.Error(), "twice in an object") {
		return // a member twice: refused in one pass (readBatchAnswer)
	}
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: readBatchAnswer %v, two passes %v", data, gotErr, wantErr)
	}
	if gotErr != nil {
		return
	}
	if !reflect.DeepEqual(got, want) || len(gotRes) != len(wantRes) {
		t.Fatalf("%q: readBatchAnswer %+v %+v\ntwo passes %+v %+v", data, gotRes, got, wantRes, want)
	}
	for i := range gotRes {
		g, w := gotRes[i], wantRes[i]
		if g.status != w.status || g.index != w.index || g.requestID != w.requestID || g.decoded != w.decoded || (g.err == nil) != (w.err == nil) ||
			!g.decoded && string(compact(g.body)) != string(compact(w.body)) {
			t.Fatalf("%q: result %d: readBatchAnswer %+v, two passes %+v", data, i, g, w)
		}
	}
}

func compact(b []byte) []byte {
	var sb strings.Builder
	for _, c := range string(b) {
		if c != ' ' && c != '\n' && c != '\t' && c != '\r' {
			sb.WriteRune(c)
		}
	}
	return []byte(sb.String())
}

// TestReadBatchAnswerReadsAsTwoPasses: one pass over a batch's answer
// reads what the two passes did, bodies decoded into their writes' outs.
func TestReadBatchAnswerReadsAsTwoPasses(t *testing.T) {
	for _, s := range batchAnswerSeeds {
		checkBatchAnswer(t, []byte(s))
	}
}

func FuzzReadBatchAnswer(f *testing.F) {
	for _, s := range batchAnswerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkBatchAnswer(t, data) })
}

// BenchmarkBatchAnswer reads the answer to a batch of 128 allocates.
func BenchmarkBatchAnswer(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"responses":[`)
	for i := range wire.MaxBatch {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"status":200,"index":%d,"request_id":"r%d","body":%s}`, 100+i, i, sampleAllocation(i))
	}
	sb.WriteString("]}\n")
	data := []byte(sb.String())
	calls := make([]*batchCall, wire.MaxBatch)
	outs := make([]any, wire.MaxBatch)
	ok := make([]int, wire.MaxBatch)
	for i := range calls {
		calls[i] = &batchCall{rq: &request{}}
	}
	reset := func() {
		for i := range calls {
			a := new(wire.Allocation)
			calls[i].rq.out, outs[i] = a, a
		}
	}
	b.Run("two-passes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			reset()
			if _, err := twoPass(data, outs, ok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			reset()
			if _, err := readBatchAnswer(data, calls); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendBatchRequestReadsAsEncodingJSON: the batch the SDK writes by
// hand reads, with encoding/json, as the wire.BatchRequest it stands for.
func TestAppendBatchRequestReadsAsEncodingJSON(t *testing.T) {
	items := []wire.BatchItem{
		{Method: "POST", Path: "/v1/allocations?namespace=ml", RequestID: "r-1", Body: sampleAllocation(1)},
		{Method: "POST", Path: "/v1/allocations/a%2F1/release", Body: json.RawMessage(`{"reason":"done <&> \u00e9"}`)},
		{Method: "PUT", Path: "/v1/allocations/a1/renew", RequestID: "r\"3\u2028\t"},
		{Method: "POST", Path: "/v1/x", RequestID: "", Body: json.RawMessage(" { \"a\" : [1, 2] } ")},
	}
	b, err := appendBatchRequest(nil, items)
	if err != nil {
		t.Fatal(err)
	}
	var got wire.BatchRequest
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := wire.BatchRequest{Requests: items}
	for i := range got.Requests {
		g, w := got.Requests[i], want.Requests[i]
		if g.Method != w.Method || g.Path != w.Path || g.RequestID != w.RequestID || string(compact(g.Body)) != string(compact(w.Body)) {
			t.Fatalf("item %d: read %+v, want %+v", i, g, w)
		}
	}
	if len(got.Requests) != len(items) {
		t.Fatalf("%d items, want %d", len(got.Requests), len(items))
	}
	if _, err := appendBatchRequest(nil, []wire.BatchItem{{Method: "POST", Path: "/v1/\xff"}}); err == nil {
		t.Fatal("a path that is not UTF-8 was written")
	}
}
