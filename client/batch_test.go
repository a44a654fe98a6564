package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// batchNode is a node that serves POST /v1/batch: each allocate is
// answered with an allocation named after its request ID, except the
// request ID "full", refused no_capacity. The first batch is held until
// hold is closed.
type batchNode struct {
	srv     *httptest.Server
	hold    chan struct{}
	mu      sync.Mutex
	batches [][]wire.BatchItem
	alone   int
}

func newBatchNode(t *testing.T, serveBatches bool) *batchNode {
	n := &batchNode{hold: make(chan struct{})}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/v1/batch" {
			n.mu.Lock()
			n.alone++
			n.mu.Unlock()
			id := r.Header.Get(wire.HeaderRequestID)
			w.Header().Set(wire.HeaderRequestID, id)
			_ = json.NewEncoder(w).Encode(wire.Allocation{ID: "a-" + id, RequestID: id, Status: wire.Active})
			return
		}
		if !serveBatches {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(wire.ErrorResponse{Error: wire.Error{Code: wire.CodeNotFound, Message: "no route"}})
			return
		}
		var req wire.BatchRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		n.mu.Lock()
		n.batches = append(n.batches, req.Requests)
		first := len(n.batches) == 1
		n.mu.Unlock()
		if first {
			<-n.hold
		}
		var out wire.BatchResponse
		for i, it := range req.Requests {
			res := wire.BatchResult{Status: http.StatusOK, Index: uint64(100 + i), RequestID: it.RequestID}
			if it.RequestID == "full" {
				res.Status = http.StatusConflict
				res.Body, _ = json.Marshal(wire.ErrorResponse{Error: wire.Error{Code: wire.CodeNoCapacity, Message: "nothing fits"}})
			} else {
				res.Body, _ = json.Marshal(wire.Allocation{ID: "a-" + it.RequestID, RequestID: it.RequestID, Status: wire.Active})
			}
			out.Responses = append(out.Responses, res)
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(n.srv.Close)
	return n
}

// batchingClient is a client of node with BatchWrites, and a context
// that bounds the test.
func batchingClient(t *testing.T, node *batchNode) (*Client, context.Context) {
	t.Helper()
	c, err := New(Config{Addresses: []string{node.srv.URL}, BatchWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}

// waiting is how many writes wait for a batch to go.
func (b *batcher) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := 0
	for _, q := range b.nodes {
		k += len(q.waiting)
	}
	return k
}

func TestBatchWritesGather(t *testing.T) {
	node := newBatchNode(t, true)
	c, ctx := batchingClient(t, node)
	type result struct {
		id   string
		a    *Allocation
		meta *WriteMeta
		err  error
	}
	results := make(chan result, 20)
	allocate := func(id string) {
		a, meta, err := c.Allocate(ctx, AllocateRequest{RequestID: id, Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}}})
		results <- result{id, a, meta, err}
	}
	// The first write goes alone and is held; the others gather behind it.
	go allocate("w-0")
	poll(t, func() bool { node.mu.Lock(); defer node.mu.Unlock(); return len(node.batches) == 1 })
	for i := 1; i < 19; i++ {
		go allocate(fmt.Sprintf("w-%d", i))
	}
	go allocate("full")
	poll(t, func() bool { return c.batches.waiting() == 19 })
	close(node.hold)
	for range 20 {
		r := <-results
		if r.id == "full" {
			var ae *APIError
			if !errors.As(r.err, &ae) || !errors.Is(r.err, ErrNoCapacity) || ae.Status != http.StatusConflict {
				t.Errorf("full: %v, want a no_capacity APIError", r.err)
			}
			continue
		}
		if r.err != nil || r.a.ID != "a-"+r.id || r.meta.RequestID != r.id || r.meta.Index < 100 {
			t.Errorf("%s: %+v %+v %v", r.id, r.a, r.meta, r.err)
		}
	}
	if len(node.batches) != 2 || len(node.batches[1]) != 19 || node.alone != 0 {
		t.Fatalf("%d batches (the second of %d writes), %d sent alone; want 2, 19, 0", len(node.batches), len(node.batches[len(node.batches)-1]), node.alone)
	}
}

func TestBatchWritesFallBackToAlone(t *testing.T) {
	node := newBatchNode(t, false)
	c, ctx := batchingClient(t, node)
	for i := range 3 {
		id := fmt.Sprintf("w-%d", i)
		a, _, err := c.Allocate(ctx, AllocateRequest{RequestID: id, Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}}})
		if err != nil || a.ID != "a-"+id {
			t.Fatalf("%s: %+v %v", id, a, err)
		}
	}
	if !c.batches.off.Load() || node.alone != 3 {
		t.Fatalf("batches off %v, %d writes alone; want true, 3", c.batches.off.Load(), node.alone)
	}
}

func poll(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBatchWritesFullBatchGoesAtOnce(t *testing.T) {
	node := newBatchNode(t, true)
	c, ctx := batchingClient(t, node)
	errs := make(chan error, wire.MaxBatch+1)
	allocate := func(id string) {
		_, _, err := c.Allocate(ctx, AllocateRequest{RequestID: id, Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}}})
		errs <- err
	}
	go allocate("first")
	poll(t, func() bool { node.mu.Lock(); defer node.mu.Unlock(); return len(node.batches) == 1 })
	// While the first batch is held, a full one goes all the same.
	for i := range wire.MaxBatch {
		go allocate(fmt.Sprintf("w-%d", i))
	}
	poll(t, func() bool { node.mu.Lock(); defer node.mu.Unlock(); return len(node.batches) == 2 })
	close(node.hold)
	for range wire.MaxBatch + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(node.batches[1]); n != wire.MaxBatch {
		t.Fatalf("the second batch held %d writes, want %d", n, wire.MaxBatch)
	}
}

// When a batch returns, the next waits for the writers it answered to
// send again, and takes them all; without that wait it would go with the
// first to come, and the writers would split into batches taking turns.
func TestBatchWritesRegather(t *testing.T) {
	node := newBatchNode(t, true)
	c, ctx := batchingClient(t, node)
	// The count ends the wait, not the clock.
	c.batches.regatherMax, c.batches.regatherShare = time.Minute, 0
	const writers = 8
	// The first write goes alone and is held; the writers gather behind
	// it, then each writes twice more as soon as it is answered.
	first := make(chan error, 1)
	go func() {
		_, _, err := c.Allocate(ctx, AllocateRequest{RequestID: "w-0", Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}}})
		first <- err
	}()
	poll(t, func() bool { node.mu.Lock(); defer node.mu.Unlock(); return len(node.batches) == 1 })
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			for k := range 3 {
				if _, _, err := c.Allocate(ctx, AllocateRequest{RequestID: fmt.Sprintf("l-%d-%d", i, k), Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}}}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	poll(t, func() bool { return c.batches.waiting() == writers })
	close(node.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	sizes := make([]int, len(node.batches))
	for i, b := range node.batches {
		sizes[i] = len(b)
	}
	if fmt.Sprint(sizes) != fmt.Sprint([]int{1, writers, writers, writers}) {
		t.Fatalf("batch sizes %v, want [1 %d %d %d]", sizes, writers, writers, writers)
	}
}

// The wait for the writers a batch answered is bounded: when they do not
// write again, a write that comes alone goes after regatherMax.
func TestBatchWritesRegatherIsBounded(t *testing.T) {
	node := newBatchNode(t, true)
	c, ctx := batchingClient(t, node)
	const bound = 300 * time.Millisecond
	c.batches.regatherMax, c.batches.regatherShare = bound, 0
	allocate := func(id string) error {
		_, _, err := c.Allocate(ctx, AllocateRequest{RequestID: id, Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}}})
		return err
	}
	// A held batch of one, then a batch of three that gathered behind it.
	errs := make(chan error, 4)
	go func() { errs <- allocate("w-0") }()
	poll(t, func() bool { node.mu.Lock(); defer node.mu.Unlock(); return len(node.batches) == 1 })
	for i := range 3 {
		go func() { errs <- allocate(fmt.Sprintf("w-%d", i+1)) }()
	}
	poll(t, func() bool { return c.batches.waiting() == 3 })
	close(node.hold)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Its three writers write no more: a write alone waits for them, as
	// long as the bound.
	start := time.Now()
	if err := allocate("alone"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < bound*3/4 || took > 10*time.Second {
		t.Fatalf("a write alone after a batch of three took %v, want about %v", took, bound)
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	if n := len(node.batches); n != 3 || len(node.batches[2]) != 1 {
		t.Fatalf("%d batches, want 3, the last of the write alone", n)
	}
}
