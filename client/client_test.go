package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// fakeNode is an API node whose answers a test scripts.
type fakeNode struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []*http.Request
	// bodies are the request bodies, in order.
	bodies []string
	handle func(n int, w http.ResponseWriter, r *http.Request)
}

func newFakeNode(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request)) *fakeNode {
	f := &fakeNode{handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.hits)
		f.hits = append(f.hits, r)
		f.bodies = append(f.bodies, string(body))
		handle := f.handle
		f.mu.Unlock()
		handle(n, w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// postCount is how many POST requests f served.
func postCount(f *fakeNode) int {
	k := 0
	for i := range f.count() {
		if r, _ := f.request(i); r.Method == http.MethodPost {
			k++
		}
	}
	return k
}

func (f *fakeNode) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.hits)
}

func (f *fakeNode) request(i int) (*http.Request, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[i], f.bodies[i]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code string, retryable bool) {
	writeJSON(w, status, wire.ErrorResponse{Error: wire.Error{Code: code, Message: code + " here", Retryable: retryable}})
}

// deadAddress is an address nothing listens on.
func deadAddress(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.RetryWait == 0 {
		cfg.RetryWait = time.Millisecond
		cfg.RetryWaitMax = 5 * time.Millisecond
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var gpuRequest = client.AllocateRequest{Request: client.Request{Claims: []client.Claim{{Type: client.GPU, Count: 1}}}}

func TestNewAddresses(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "127.0.0.1:4646", want: "http://127.0.0.1:4646"},
		{in: "http://10.0.0.1:8080/", want: "http://10.0.0.1:8080"},
		{in: "https://dmsc.example.com", want: "https://dmsc.example.com:4646"},
		{in: "node1", want: "http://node1:4646"},
		{in: "ftp://x:1", bad: true},
		{in: "http://", bad: true},
	} {
		got, err := client.NormalizeAddress(tc.in)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("NormalizeAddress(%q) = %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
	t.Setenv(client.AddressEnv, "a:1, b:2")
	c := newClient(t, client.Config{})
	if got := strings.Join(c.Addresses(), ","); got != "http://a:1,http://b:2" {
		t.Fatalf("addresses from %s: %s", client.AddressEnv, got)
	}
	t.Setenv(client.AddressEnv, "")
	if got := newClient(t, client.Config{}).Addresses(); len(got) != 1 || got[0] != client.DefaultAddress {
		t.Fatalf("default addresses %v", got)
	}
}

// A write that fails for a retryable reason is sent again with the same
// request ID, in the header and the body, until it succeeds.
func TestWriteRetriesWithSameRequestID(t *testing.T) {
	node := newFakeNode(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 0:
			apiError(w, 503, "no_leader", true)
		case 1:
			apiError(w, 504, "timeout", true)
		case 2:
			apiError(w, 429, "overloaded", true)
		default:
			w.Header().Set(wire.HeaderRequestID, r.Header.Get(wire.HeaderRequestID))
			w.Header().Set(wire.HeaderIndex, "42")
			writeJSON(w, 200, wire.Allocation{ID: "a1", Status: client.Active})
		}
	})
	c := newClient(t, client.Config{Addresses: []string{node.srv.URL}})
	a, meta, err := c.Allocate(ctxT(t), gpuRequest)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != "a1" || meta.Index != 42 || meta.RequestID == "" || node.count() != 4 {
		t.Fatalf("allocation %+v meta %+v after %d requests", a, meta, node.count())
	}
	for i := range node.count() {
		r, body := node.request(i)
		var got wire.AllocateRequest
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		if r.Header.Get(wire.HeaderRequestID) != meta.RequestID || got.RequestID != meta.RequestID {
			t.Fatalf("attempt %d sent request ID %q (header %q), want %q", i, got.RequestID, r.Header.Get(wire.HeaderRequestID), meta.RequestID)
		}
	}

	// A request ID given by the caller is kept.
	req := gpuRequest
	req.RequestID = "job-7"
	if _, meta, err = c.Allocate(ctxT(t), req); err != nil || meta.RequestID != "job-7" {
		t.Fatalf("caller's request ID: %+v %v", meta, err)
	}
}

// Errors map to the sentinels; only retryable ones are sent again.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		status    int
		code      string
		retryable bool
		sentinel  error
		attempts  int
	}{
		{400, "bad_request", false, client.ErrBadRequest, 1},
		{400, "invalid_argument", false, client.ErrInvalid, 1},
		{404, "not_found", false, client.ErrNotFound, 1},
		{409, "conflict", false, client.ErrConflict, 1},
		{409, "not_active", false, client.ErrNotActive, 1},
		{409, "no_capacity", false, client.ErrNoCapacity, 1},
		{413, "body_too_large", false, client.ErrTooLarge, 1},
		{500, "internal", false, client.ErrInternal, 1},
		{429, "overloaded", true, client.ErrOverloaded, 3},
		{503, "no_leader", true, client.ErrNoLeader, 3},
		{503, "not_leader", true, client.ErrNotLeader, 3},
		{503, "shutdown", true, client.ErrShutdown, 3},
		{503, "not_server", true, client.ErrNotServer, 3},
		{504, "timeout", true, client.ErrTimeout, 3},
		// Without the envelope, the status decides.
		{502, "", false, client.ErrInternal, 3},
		{503, "", false, client.ErrNoLeader, 3},
	} {
		t.Run(tc.code+"_"+http.StatusText(tc.status), func(t *testing.T) {
			node := newFakeNode(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				if tc.code == "" {
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte("upstream trouble"))
					return
				}
				writeJSON(w, tc.status, wire.ErrorResponse{Error: wire.Error{
					Code: tc.code, Message: "it failed", Retryable: tc.retryable, AllocationID: "a9",
					WhyNot: &client.WhyNot{Devices: 4, Summary: "0 of 4 fit"},
				}})
			})
			c := newClient(t, client.Config{Addresses: []string{node.srv.URL}, MaxRetries: 2})
			_, _, err := c.Allocate(ctxT(t), gpuRequest)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("error %v does not match %v", err, tc.sentinel)
			}
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || ae.Address != node.srv.URL {
				t.Fatalf("error %#v", err)
			}
			if tc.code != "" && (ae.AllocationID != "a9" || ae.WhyNot == nil || ae.WhyNot.Summary != "0 of 4 fit") {
				t.Fatalf("envelope details lost: %+v", ae)
			}
			if node.count() != tc.attempts {
				t.Fatalf("%d attempts, want %d", node.count(), tc.attempts)
			}
			if client.IsRetryable(err) != (tc.attempts > 1) {
				t.Fatalf("IsRetryable(%v) = %v", err, client.IsRetryable(err))
			}
		})
	}
	// An error matches the sentinel of its code, and no other.
	if err := error(&client.APIError{Code: "no_capacity"}); !errors.Is(err, client.ErrNoCapacity) || errors.Is(err, client.ErrNotFound) {
		t.Fatal("APIError does not match the sentinels by code")
	}
}

// A node that refuses connections is skipped for reads and writes, and
// writes stay on the node that answered.
func TestFailoverToLiveNode(t *testing.T) {
	var leaderAsks atomic.Int32
	live := newFakeNode(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/cluster/leader":
			leaderAsks.Add(1)
			apiError(w, 503, "no_leader", true)
		case r.Method == http.MethodGet:
			writeJSON(w, 200, []client.Device{{DeviceSpec: client.DeviceSpec{ID: "g1"}}})
		default:
			writeJSON(w, 200, wire.Allocation{ID: "a1", Status: client.Active})
		}
	})
	dead := deadAddress(t)
	c := newClient(t, client.Config{Addresses: []string{dead, live.srv.URL}})
	for range 4 {
		if _, _, err := c.Allocate(ctxT(t), gpuRequest); err != nil {
			t.Fatal(err)
		}
		devs, _, err := c.Devices(ctxT(t), nil, nil)
		if err != nil || len(devs) != 1 {
			t.Fatalf("devices %v %v", devs, err)
		}
	}
	posts := 0
	for i := range live.count() {
		if r, _ := live.request(i); r.Method == http.MethodPost {
			posts++
		}
	}
	if posts != 4 {
		t.Fatalf("%d allocate requests reached the live node, want 4", posts)
	}
	if leaderAsks.Load() > 1 {
		t.Fatalf("asked for the leader %d times; writes should stay on the node that answered", leaderAsks.Load())
	}
}

// Writes go to the leader when a node names it among the addresses.
func TestWritesFollowLeader(t *testing.T) {
	var leaderURL string
	var mu sync.Mutex
	handler := func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/cluster/leader" {
			mu.Lock()
			addr := strings.TrimPrefix(leaderURL, "http://")
			mu.Unlock()
			writeJSON(w, 200, wire.Leader{ID: "n3", HTTPAddr: addr})
			return
		}
		writeJSON(w, 200, wire.Allocation{ID: "a1", Status: client.Active})
	}
	n1, n2, n3 := newFakeNode(t, handler), newFakeNode(t, handler), newFakeNode(t, handler)
	mu.Lock()
	leaderURL = n3.srv.URL
	mu.Unlock()
	c := newClient(t, client.Config{Addresses: []string{n1.srv.URL, n2.srv.URL, n3.srv.URL}})
	for range 5 {
		if _, _, err := c.Allocate(ctxT(t), gpuRequest); err != nil {
			t.Fatal(err)
		}
	}
	if postCount(n3) != 5 || postCount(n1)+postCount(n2) != 0 {
		t.Fatalf("allocations went to n1 %d, n2 %d, n3 %d; want all on the leader n3", postCount(n1), postCount(n2), postCount(n3))
	}
}

// Reads are spread over the nodes in turn.
func TestReadsRoundRobin(t *testing.T) {
	handler := func(_ int, w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, []client.Device{}) }
	nodes := []*fakeNode{newFakeNode(t, handler), newFakeNode(t, handler), newFakeNode(t, handler)}
	c := newClient(t, client.Config{Addresses: []string{nodes[0].srv.URL, nodes[1].srv.URL, nodes[2].srv.URL}})
	for range 30 {
		if _, _, err := c.Devices(ctxT(t), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range nodes {
		if n.count() != 10 {
			t.Fatalf("node %d served %d of 30 reads", i, n.count())
		}
	}
}

// The context bounds the retries; the error tells both the context's end
// and the last failure.
func TestContextBoundsRetries(t *testing.T) {
	node := newFakeNode(t, func(_ int, w http.ResponseWriter, _ *http.Request) { apiError(w, 503, "no_leader", true) })
	c := newClient(t, client.Config{Addresses: []string{node.srv.URL}, MaxRetries: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := c.Allocate(ctx, gpuRequest)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("error %v", err)
	}
	if node.count() < 2 {
		t.Fatalf("only %d attempts", node.count())
	}
}

// An attempt that gets no answer in time is ErrTimeout and is retried.
func TestAttemptTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	node := newFakeNode(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		writeJSON(w, 200, wire.Allocation{ID: "a1", Status: client.Active})
	})
	c := newClient(t, client.Config{Addresses: []string{node.srv.URL}, Timeout: 100 * time.Millisecond})
	if _, _, err := c.Allocate(ctxT(t), gpuRequest); err != nil {
		t.Fatal(err)
	}
	c = newClient(t, client.Config{Addresses: []string{node.srv.URL}, Timeout: 100 * time.Millisecond, MaxRetries: -1})
	node.mu.Lock()
	node.handle = func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	node.mu.Unlock()
	if _, _, err := c.Allocate(ctxT(t), gpuRequest); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
}

// Requests without a request ID are not sent again when the outcome is
// unknown, but are when the answer proves nothing was done.
func TestNonIdempotentRetries(t *testing.T) {
	node := newFakeNode(t, func(_ int, w http.ResponseWriter, _ *http.Request) { apiError(w, 504, "timeout", true) })
	c := newClient(t, client.Config{Addresses: []string{node.srv.URL}})
	if _, err := c.RemovePeer(ctxT(t), "s3"); !errors.Is(err, client.ErrTimeout) || node.count() != 1 {
		t.Fatalf("remove peer after a timeout: %v after %d attempts", err, node.count())
	}
	node = newFakeNode(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			apiError(w, 503, "no_leader", true)
			return
		}
		writeJSON(w, 200, wire.RaftConfiguration{Index: 9})
	})
	c = newClient(t, client.Config{Addresses: []string{node.srv.URL}})
	if rc, err := c.RemovePeer(ctxT(t), "s3"); err != nil || rc.Index != 9 || node.count() != 2 {
		t.Fatalf("remove peer after no leader: %+v %v after %d attempts", rc, err, node.count())
	}
	// A restore's body is sent whole on every attempt.
	var puts atomic.Int32
	node = newFakeNode(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodPut:
			apiError(w, 404, "not_found", false)
		case puts.Add(1) == 1:
			apiError(w, 429, "overloaded", true)
		default:
			writeJSON(w, 200, wire.WriteResult{Index: 11})
		}
	})
	c = newClient(t, client.Config{Addresses: []string{node.srv.URL, node.srv.URL}})
	meta, err := c.SnapshotRestore(ctxT(t), strings.NewReader("snapshot bytes"))
	for i := range node.count() {
		if r, body := node.request(i); r.Method == http.MethodPut {
			if body != "snapshot bytes" {
				t.Fatalf("attempt %d sent %q", i, body)
			}
		}
	}
	if err != nil || meta.Index != 11 || puts.Load() != 2 {
		t.Fatalf("restore: %+v %v after %d attempts", meta, err, puts.Load())
	}
}

// Query options become parameters; the freshness headers become QueryMeta.
func TestQueryOptionsAndMeta(t *testing.T) {
	node := newFakeNode(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.HeaderIndex, "17")
		w.Header().Set(wire.HeaderLastContact, "0")
		w.Header().Set(wire.HeaderKnownLeader, "true")
		if r.URL.Path == "/v1/stats" {
			w.Header().Set(wire.HeaderLastContact, "-1")
			writeJSON(w, 200, []client.Stats{})
			return
		}
		writeJSON(w, 200, wire.AllocationList{})
	})
	c := newClient(t, client.Config{Addresses: []string{node.srv.URL}})
	_, meta, err := c.Allocations(ctxT(t), &client.AllocationFilter{
		Statuses: []client.AllocStatus{client.Active, client.Pending}, Type: client.GPU, Pool: "p", Host: "h",
		History: true, Limit: 5, Next: "9", Reverse: true,
	}, &client.QueryOptions{Consistent: true, WaitIndex: 16, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := node.request(0)
	q := r.URL.Query()
	for k, want := range map[string]string{
		"status": "active,pending", "type": "GPU", "pool": "p", "host": "h", "history": "true",
		"limit": "5", "next": "9", "reverse": "true", "index": "16", "wait": "1s", "consistent": "",
	} {
		if !q.Has(k) || q.Get(k) != want {
			t.Errorf("parameter %s = %q, want %q (query %s)", k, q.Get(k), want, r.URL.RawQuery)
		}
	}
	if meta.Index != 17 || !meta.KnownLeader || meta.LastContact != 0 || meta.Address != node.srv.URL {
		t.Fatalf("meta %+v", meta)
	}
	_, meta, _ = c.Stats(ctxT(t), &client.StatsFilter{Type: client.GPU, Pool: "*"}, &client.QueryOptions{MaxStale: 5 * time.Second})
	if r, _ := node.request(1); r.URL.Query().Get("max_stale") != "5s" || r.URL.Query().Get("pool") != "*" || meta.LastContact >= 0 {
		t.Fatalf("stats query %s, meta %+v", r.URL.RawQuery, meta)
	}
}

// WaitForPlacement keeps watching when the server answers a pending
// allocation, and reports a request that timed out as ErrNoCapacity.
func TestWaitForPlacementContinues(t *testing.T) {
	for _, final := range []client.AllocStatus{client.Active, client.TimedOut} {
		t.Run(string(final), func(t *testing.T) {
			node := newFakeNode(t, func(n int, w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPost:
					var body wire.AllocateRequest
					_ = json.Unmarshal([]byte(mustBody(t, r)), &body)
					w.Header().Set(wire.HeaderIndex, "5")
					writeJSON(w, 202, wire.Allocation{ID: "a1", Status: client.Pending, ModifyIndex: 5})
				case r.URL.Query().Get("index") == "5":
					w.Header().Set(wire.HeaderIndex, "6")
					writeJSON(w, 200, wire.Allocation{ID: "a1", Status: client.Pending, ModifyIndex: 5})
				default:
					w.Header().Set(wire.HeaderIndex, "7")
					writeJSON(w, 200, wire.Allocation{ID: "a1", Status: final, ModifyIndex: 7,
						WhyNot: &client.WhyNot{Summary: "all busy"}})
				}
			})
			c := newClient(t, client.Config{Addresses: []string{node.srv.URL}})
			req := gpuRequest
			req.Timeout = client.Duration(time.Second)
			a, _, err := c.Allocate(ctxT(t), req, client.WaitForPlacement())
			if final == client.Active {
				if err != nil || a.Status != client.Active {
					t.Fatalf("%+v %v", a, err)
				}
			} else {
				var ae *client.APIError
				if !errors.As(err, &ae) || !errors.Is(err, client.ErrNoCapacity) || ae.AllocationID != "a1" || ae.WhyNot == nil {
					t.Fatalf("error %v", err)
				}
			}
			_, body := node.request(0)
			if !strings.Contains(body, `"wait":true`) {
				t.Fatalf("the allocate did not ask to wait: %s", body)
			}
			for i := 1; i < node.count(); i++ {
				if r, _ := node.request(i); r.URL.Query().Get("index") == "" {
					t.Fatalf("watch read %d is not a blocking query: %s", i, r.URL.RawQuery)
				}
			}
		})
	}
}

func mustBody(t *testing.T, r *http.Request) string {
	var b bytes.Buffer
	_, _ = b.ReadFrom(r.Body)
	return b.String()
}

// Watch skips answers that did not move the index and stops when fn says.
func TestWatchSkipsUnchanged(t *testing.T) {
	var calls []uint64
	answers := []uint64{3, 3, 3, 5, 4, 5, 8}
	i := 0
	err := client.Watch(ctxT(t), nil, func(_ context.Context, q *client.QueryOptions) (int, *client.QueryMeta, error) {
		if i > 0 && q.WaitIndex == 0 {
			t.Errorf("read %d is not blocking", i)
		}
		if i == 2 {
			i++
			return 0, nil, &client.ConnError{Address: "x", Err: io.ErrUnexpectedEOF}
		}
		idx := answers[i]
		i++
		return int(idx), &client.QueryMeta{Index: idx}, nil
	}, func(v int, meta *client.QueryMeta) bool {
		calls = append(calls, meta.Index)
		return meta.Index < 8
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := calls; len(got) != 3 || got[0] != 3 || got[1] != 5 || got[2] != 8 {
		t.Fatalf("fn saw indexes %v, want [3 5 8]", got)
	}
	// A non-retryable error ends the watch.
	err = client.Watch(ctxT(t), nil, func(context.Context, *client.QueryOptions) (int, *client.QueryMeta, error) {
		return 0, nil, &client.APIError{Status: 404, Code: "not_found"}
	}, func(int, *client.QueryMeta) bool { return true })
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("watch error %v", err)
	}
}

// A write answered by a follower that forwarded it (X-Dmsc-Forwarded)
// moves the writes to the leader, alone or in batches; the nodes are asked
// who leads at most once per recheck interval, however many writes say
// they were forwarded.
func TestForwardedWritesMoveToTheLeader(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "batched"}[batched], func(t *testing.T) {
			var mu sync.Mutex
			var leader string // host:port of the leader's API
			var leaderAsks atomic.Int32
			var nodes []*fakeNode
			handler := func(i, hit int, w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				l := leader
				self := strings.TrimPrefix(nodes[i].srv.URL, "http://")
				mu.Unlock()
				if r.URL.Path == "/v1/cluster/leader" {
					leaderAsks.Add(1)
					writeJSON(w, 200, wire.Leader{ID: "leader", HTTPAddr: l})
					return
				}
				if l != self {
					w.Header().Set(wire.HeaderForwarded, "true")
				}
				if r.URL.Path == "/v1/batch" {
					var req wire.BatchRequest
					_, body := nodes[i].request(hit)
					_ = json.Unmarshal([]byte(body), &req)
					var resp wire.BatchResponse
					for range req.Requests {
						body, _ := json.Marshal(wire.Allocation{ID: "a1", Status: client.Active})
						resp.Responses = append(resp.Responses, wire.BatchResult{Status: 200, Body: body})
					}
					writeJSON(w, 200, resp)
					return
				}
				writeJSON(w, 200, wire.Allocation{ID: "a1", Status: client.Active})
			}
			for i := range 2 {
				nodes = append(nodes, newFakeNode(t, func(hit int, w http.ResponseWriter, r *http.Request) { handler(i, hit, w, r) }))
			}
			setLeader := func(addr string) {
				mu.Lock()
				leader = addr
				mu.Unlock()
			}
			setLeader(strings.TrimPrefix(nodes[0].srv.URL, "http://"))
			c := newClient(t, client.Config{Addresses: []string{nodes[0].srv.URL, nodes[1].srv.URL}, BatchWrites: batched})
			writes := func(k int) {
				t.Helper()
				for range k {
					if _, _, err := c.Allocate(ctxT(t), gpuRequest); err != nil {
						t.Fatal(err)
					}
				}
			}
			writes(2)
			// The leader moves: n0 now forwards; the write it answers
			// moves the next ones to n1.
			setLeader(strings.TrimPrefix(nodes[1].srv.URL, "http://"))
			writes(3)
			if p0, p1 := postCount(nodes[0]), postCount(nodes[1]); p0 != 3 || p1 != 2 {
				t.Fatalf("writes went to n0 %d, n1 %d; want 3 (the last forwarded) and 2", p0, p1)
			}
			// A leader outside the addresses: every write is forwarded,
			// and the nodes were asked who leads within the interval
			// already.
			asks := leaderAsks.Load()
			setLeader("127.0.0.1:1")
			writes(5)
			if got := leaderAsks.Load() - asks; got != 0 {
				t.Fatalf("asked who leads %d times within the recheck interval", got)
			}
		})
	}
}
