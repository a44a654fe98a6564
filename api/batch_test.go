package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// batchOf encodes a batch body.
func batchOf(t *testing.T, items ...wire.BatchItem) string {
	t.Helper()
	b, err := json.Marshal(wire.BatchRequest{Requests: items})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (r *resp) batch(n int) []wire.BatchResult {
	r.t.Helper()
	var out wire.BatchResponse
	r.ok(http.StatusOK).decode(&out)
	if len(out.Responses) != n {
		r.t.Fatalf("%d results, want %d: %s", len(out.Responses), n, r.body)
	}
	return out.Responses
}

func itemErr(t *testing.T, res wire.BatchResult, status int, code string) {
	t.Helper()
	var env wire.ErrorResponse
	if err := json.Unmarshal(res.Body, &env); err != nil || res.Status != status || env.Error.Code != code || env.Error.Message == "" {
		t.Fatalf("result %d %s, want %d %s", res.Status, res.Body, status, code)
	}
}

func TestBatchServesEachRequestAsAlone(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	gpu := json.RawMessage(gpuReq)
	res := e.do("POST", "/v1/batch", batchOf(t,
		wire.BatchItem{Method: "POST", Path: "/v1/allocations", RequestID: "b-1", Body: gpu},
		wire.BatchItem{Method: "POST", Path: "/v1/allocations", RequestID: "b-2", Body: gpu},
		wire.BatchItem{Method: "GET", Path: "/v1/devices"},
		wire.BatchItem{Method: "POST", Path: "/v1/allocations?wait=true", Body: gpu},
		wire.BatchItem{Method: "POST", Path: "//elsewhere/v1/allocations", Body: gpu},
		wire.BatchItem{Method: "POST", Path: "/v1/allocations", RequestID: "b-3", Body: json.RawMessage(`{"claims":[{"type":"GPU","count":9}]}`)},
	)).batch(6)
	var ids []string
	for i, want := range []string{"b-1", "b-2"} {
		var a wire.Allocation
		if err := json.Unmarshal(res[i].Body, &a); err != nil || res[i].Status != http.StatusOK || a.Status != wire.Active {
			t.Fatalf("result %d: %d %s", i, res[i].Status, res[i].Body)
		}
		if res[i].RequestID != want || a.RequestID != want || res[i].Index == 0 {
			t.Fatalf("result %d: request ID %q (allocation's %q), index %d; want %q", i, res[i].RequestID, a.RequestID, res[i].Index, want)
		}
		ids = append(ids, a.ID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two requests made one allocation %s", ids[0])
	}
	itemErr(t, res[2], http.StatusBadRequest, wire.CodeBadRequest)
	itemErr(t, res[3], http.StatusBadRequest, wire.CodeBadRequest)
	itemErr(t, res[4], http.StatusBadRequest, wire.CodeBadRequest)
	itemErr(t, res[5], http.StatusConflict, wire.CodeNoCapacity)

	// The answer a request had in a batch is the one it has alone: a
	// retry of b-1 outside any batch finds the same allocation, and a
	// release in a batch ends it.
	var again wire.Allocation
	e.do("POST", "/v1/allocations", gpuReq, wire.HeaderRequestID, "b-1").ok(http.StatusOK).decode(&again)
	if again.ID != ids[0] {
		t.Fatalf("retry of b-1 made %s, the batch made %s", again.ID, ids[0])
	}
	rel := e.do("POST", "/v1/batch", batchOf(t,
		wire.BatchItem{Method: "POST", Path: "/v1/allocations/" + ids[0] + "/release", RequestID: "r-1"})).batch(1)
	var ended wire.Allocation
	if err := json.Unmarshal(rel[0].Body, &ended); err != nil || rel[0].Status != http.StatusOK || ended.Status != wire.Released {
		t.Fatalf("release in a batch: %d %s", rel[0].Status, rel[0].Body)
	}
}

func TestBatchRefusesBadBatches(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	many := make([]wire.BatchItem, wire.MaxBatch+1)
	for i := range many {
		many[i] = wire.BatchItem{Method: "POST", Path: "/v1/allocations", Body: json.RawMessage(gpuReq)}
	}
	for name, body := range map[string]string{
		"empty":     `{"requests":[]}`,
		"too many":  batchOf(t, many...),
		"malformed": `{"requests":[{"method":"POST","path":"/v1/allocations","body":{]}`,
		"unknown":   `{"requests":[],"extra":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			e.noSideEffect(func() { e.do("POST", "/v1/batch", body).apiErr(http.StatusBadRequest, wire.CodeBadRequest) })
		})
	}
	e.noSideEffect(func() {
		e.do("POST", "/v1/batch", `{"requests":[]}`, "Content-Type", "text/plain").apiErr(http.StatusUnsupportedMediaType, "unsupported_media_type")
	})
}

func TestBatchChecksEachRequestsToken(t *testing.T) {
	e, _ := newACLEnv(t, Options{})
	e.policy("team-a", rulesFor(fsm.AreaAllocations, "write", "team-a"))
	e.token = e.newToken("team-a")
	gpu := json.RawMessage(gpuReq)
	res := e.do("POST", "/v1/batch", batchOf(t,
		wire.BatchItem{Method: "POST", Path: "/v1/allocations?namespace=team-a", Body: gpu},
		wire.BatchItem{Method: "POST", Path: "/v1/allocations?namespace=team-b", Body: gpu},
		wire.BatchItem{Method: "POST", Path: "/v1/allocations", Body: json.RawMessage(`{"namespace":"team-b","claims":[{"type":"GPU","count":1}]}`)},
	)).batch(3)
	if res[0].Status != http.StatusOK {
		t.Fatalf("allowed request: %d %s", res[0].Status, res[0].Body)
	}
	itemErr(t, res[1], http.StatusForbidden, wire.CodePermissionDenied)
	itemErr(t, res[2], http.StatusForbidden, wire.CodePermissionDenied)

	e.token = ""
	anon := e.do("POST", "/v1/batch", batchOf(t, wire.BatchItem{Method: "POST", Path: "/v1/allocations", Body: gpu})).batch(1)
	itemErr(t, anon[0], http.StatusForbidden, wire.CodePermissionDenied)
	if strings.Contains(string(anon[0].Body), "team-a") {
		t.Fatalf("refusal names another namespace: %s", anon[0].Body)
	}
}

// TestItemWorkersEnd: workers run every task and end once idle.
func TestItemWorkersEnd(t *testing.T) {
	p := newItemWorkers(20 * time.Millisecond)
	var wg sync.WaitGroup
	var done atomic.Int64
	for range 3 {
		for range 8 {
			wg.Add(1)
			p.run(func() { defer wg.Done(); done.Add(1) })
		}
		wg.Wait()
	}
	if done.Load() != 24 {
		t.Fatalf("%d of 24 ran", done.Load())
	}
	if n := p.live.Load(); n < 1 || n > 24 {
		t.Fatalf("%d workers for 24 tasks", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.live.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers did not end", p.live.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBatchWriteTimeout: the writes of a batch share one deadline of
// WriteTimeout; each one that is not applied by then answers 504 timeout,
// as it would alone (TestWriteTimeout).
func TestBatchWriteTimeout(t *testing.T) {
	e := newEnv(t, Options{WriteTimeout: 20 * time.Millisecond})
	e.seed()
	e.b.mu.Lock()
	e.b.applyGate = make(chan struct{})
	e.b.mu.Unlock()
	gpu := json.RawMessage(gpuReq)
	start := time.Now()
	res := e.do("POST", "/v1/batch", batchOf(t,
		wire.BatchItem{Method: "POST", Path: "/v1/allocations", RequestID: "t-1", Body: gpu},
		wire.BatchItem{Method: "POST", Path: "/v1/allocations", RequestID: "t-2", Body: gpu},
	)).batch(2)
	for i := range res {
		itemErr(t, res[i], http.StatusGatewayTimeout, wire.CodeTimeout)
		var env wire.ErrorResponse
		if err := json.Unmarshal(res[i].Body, &env); err != nil || !env.Error.Retryable {
			t.Fatalf("result %d: a timed-out write must be retryable: %s", i, res[i].Body)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the batch took %v against a write timeout of 20ms", took)
	}
}

// TestWriteAnswerSaysForwarded: a write answered by a server that is not
// the leader says so (X-Dmsc-Forwarded), alone or in a batch; the
// leader's answers do not.
func TestWriteAnswerSaysForwarded(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	gpu := json.RawMessage(gpuReq)
	batch := batchOf(t, wire.BatchItem{Method: "POST", Path: "/v1/allocations", Body: gpu})
	for _, follower := range []bool{false, true} {
		e.b.mu.Lock()
		e.b.leaderID = map[bool]string{true: "n2"}[follower]
		e.b.mu.Unlock()
		want := map[bool]string{true: "true"}[follower]
		if got := e.do("POST", "/v1/allocations", gpuReq).ok(200).hdr.Get(wire.HeaderForwarded); got != want {
			t.Fatalf("follower %v: a write answered %s %q, want %q", follower, wire.HeaderForwarded, got, want)
		}
		if got := e.do("POST", "/v1/batch", batch).ok(200).hdr.Get(wire.HeaderForwarded); got != want {
			t.Fatalf("follower %v: a batch answered %s %q, want %q", follower, wire.HeaderForwarded, got, want)
		}
	}
}

// TestBatchResponseIsEncodingJSON: the batch's answer, written by hand
// around its items' bodies, is what encoding/json writes for it.
func TestBatchResponseIsEncodingJSON(t *testing.T) {
	items := make([]itemWriter, 4)
	for i, id := range []string{"", "959285df-1961-540f-9a27-c21c22c6a7bb", `a"<b>&\`, "µ\xff"} {
		items[i].header = http.Header{}
		if id != "" {
			items[i].header.Set(wire.HeaderRequestID, id)
		}
		if i%2 == 1 {
			items[i].header.Set(wire.HeaderIndex, strconv.Itoa(1000+i))
			items[i].WriteHeader(http.StatusAccepted)
			_, _ = items[i].Write([]byte(`{"id":"x"}` + "\n"))
		}
	}
	var want wire.BatchResponse
	for i := range items {
		want.Responses = append(want.Responses, items[i].result())
	}
	enc, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := appendBatchResponse(nil, items); string(got) != string(enc)+"\n" {
		t.Fatalf("batch answer\n%s\nencoding/json\n%s", got, enc)
	}
}
