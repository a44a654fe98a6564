package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

func TestClusterRoutes(t *testing.T) {
	e := newEnv(t, Options{Version: "1.2.3", Role: "server", Config: map[string]any{"data_dir": "/tmp/x"}})
	var members []wire.Member
	e.do("GET", "/v1/cluster/members", "").ok(200).decode(&members)
	if len(members) != 1 || members[0].ID != "n1" || members[0].Status != "alive" || !members[0].Leader {
		t.Fatalf("members %+v", members)
	}
	var l wire.Leader
	e.do("GET", "/v1/cluster/leader", "").ok(200).decode(&l)
	if l.ID != "n1" {
		t.Fatalf("leader %+v", l)
	}
	var rc wire.RaftConfiguration
	e.do("GET", "/v1/cluster/raft", "").ok(200).decode(&rc)
	if len(rc.Servers) != 2 || !rc.Servers[0].Leader {
		t.Fatalf("raft %+v", rc)
	}
	e.do("DELETE", "/v1/cluster/raft/peers/n2", "").ok(200).decode(&rc)
	if len(rc.Servers) != 1 {
		t.Fatalf("raft after removal %+v", rc)
	}
	e.do("DELETE", "/v1/cluster/raft/peers/n2", "").apiErr(404, fsm.ErrNotFound.Code)

	var self wire.AgentSelf
	e.do("GET", "/v1/agent/self", "").ok(200).decode(&self)
	if self.Version != "1.2.3" || self.Role != "server" || self.Member.ID != "n1" || !self.Status.Ready || self.Config["data_dir"] != "/tmp/x" {
		t.Fatalf("agent self %+v", self)
	}

	// Without a leader.
	e.b.mu.Lock()
	e.b.leader = false
	e.b.mu.Unlock()
	r := e.do("GET", "/v1/cluster/leader", "")
	if b := r.apiErr(503, cluster.ErrNoLeader.Code); !b.Retryable || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("no leader: %+v %v", b, r.hdr)
	}
	r = e.do("GET", "/v1/devices", "").ok(200)
	if r.hdr.Get(wire.HeaderKnownLeader) != "false" || r.hdr.Get(wire.HeaderLastContact) != "-1" {
		t.Fatalf("read headers without a leader: %v", r.hdr)
	}
}

func TestHealthReady(t *testing.T) {
	ready := true
	e := newEnv(t, Options{Ready: func() bool { return ready }})
	var h wire.Health
	e.do("GET", "/v1/health", "").ok(200).decode(&h)
	if h.Status != "ok" || h.Node != "n1" {
		t.Fatalf("health %+v", h)
	}
	var st wire.NodeStatus
	e.do("GET", "/v1/ready", "").ok(200).decode(&st)
	if !st.Ready || st.State != "Leader" {
		t.Fatalf("ready %+v", st)
	}
	ready = false
	e.do("GET", "/v1/ready", "").ok(503).decode(&st)
	if st.Ready {
		t.Fatal("not ready yet reports ready")
	}
	ready = true
	e.b.mu.Lock()
	e.b.leader = false
	e.b.mu.Unlock()
	e.do("GET", "/v1/ready", "").ok(503)
	e.do("GET", "/v1/health", "").ok(200)
}

func TestSnapshotSaveRestore(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	a := e.do("POST", "/v1/allocations", gpuReq).ok(200).alloc()
	r := e.do("GET", "/v1/snapshot", "").ok(200)
	if r.hdr.Get("Content-Type") != "application/octet-stream" || r.index() == 0 || len(r.body) == 0 {
		t.Fatalf("snapshot answer %v, %d bytes", r.hdr, len(r.body))
	}
	snap := append([]byte(nil), r.body...)

	// Change the state, then restore the snapshot: the change is gone.
	e.do("POST", "/v1/allocations/"+a.ID+"/release", "").ok(200)
	e.do("DELETE", "/v1/hosts/h2", "").ok(200)
	e.do("PUT", "/v1/snapshot", string(snap)).ok(200)
	if got := e.do("GET", "/v1/allocations/"+a.ID, "").ok(200).alloc(); got.Status != wire.Active {
		t.Fatalf("after restore the allocation is %s", got.Status)
	}
	e.do("GET", "/v1/hosts/h2", "").ok(200)

	e.noSideEffect(func() {
		e.do("PUT", "/v1/snapshot", "").apiErr(400, wire.CodeBadRequest)
		e.do("PUT", "/v1/snapshot", "not a snapshot").apiErr(400, fsm.ErrSnapshot.Code)
	})
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	e.do("POST", "/v1/allocations", gpuReq).ok(200)
	e.do("POST", "/v1/allocations", gpuReq).ok(200)
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"timeout":"1h"}`).ok(200)
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"timeout":"1h"}`).ok(202)
	e.do("GET", "/v1/allocations/nope", "").apiErr(404, fsm.ErrNotFound.Code)
	r := e.do("GET", "/metrics", "").ok(200)
	text := string(r.body)
	for _, want := range []string{
		`dmsc_http_requests_total{code="200",route="POST /v1/allocations"} 3`,
		`dmsc_http_requests_total{code="404",route="GET /v1/allocations/{id}"} 1`,
		`dmsc_http_request_duration_seconds_count{code="202",route="POST /v1/allocations"} 1`,
		`dmsc_raft_apply_duration_seconds_count{command="allocate",outcome="ok"} 4`,
		`dmsc_queue_length 1`,
		`dmsc_allocations{status="active",type="GPU"} 3`,
		`dmsc_allocations{status="pending",type="GPU"} 1`,
		`dmsc_device_utilisation{type="GPU"} 1`,
		`dmsc_devices{status="in_use",type="GPU"} 3`,
		`dmsc_hosts{state="up"} 2`,
		`dmsc_state_hosts 2`,
		`dmsc_state_devices `,
		`dmsc_state_allocations_live 4`,
		`dmsc_state_history_records 0`,
		`dmsc_state_estimated_bytes `,
		`dmsc_known_leader 1`,
		`dmsc_raft_leader 1`,
		`dmsc_host_registrations_total 2`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

func TestPprofOnlyWhenEnabled(t *testing.T) {
	off := newEnv(t, Options{})
	off.do("GET", "/debug/pprof/", "").apiErr(404, fsm.ErrNotFound.Code)
	on := newEnv(t, Options{EnableDebug: true})
	if r := on.do("GET", "/debug/pprof/", "").ok(200); !strings.Contains(string(r.body), "goroutine") {
		t.Fatalf("pprof index: %s", r.body)
	}
	on.do("GET", "/debug/pprof/goroutine?debug=1", "").ok(200)
	on.do("GET", "/debug/pprof/cmdline", "").ok(200)
	on.do("GET", "/debug/pprof/symbol", "").ok(200)
	on.do("POST", "/debug/pprof/symbol", "0x1").ok(200)
	on.do("GET", "/debug/pprof/trace?seconds=0.01", "").ok(200)
}

func TestOverloaded(t *testing.T) {
	e := newEnv(t, Options{MaxInFlight: 1})
	e.seed()
	gate := make(chan struct{})
	e.b.mu.Lock()
	e.b.applyGate = gate
	e.b.mu.Unlock()
	done := make(chan *resp, 1)
	go func() { done <- e.do("POST", "/v1/allocations", gpuReq) }()
	waitFor(t, func() bool {
		e.b.mu.Lock()
		defer e.b.mu.Unlock()
		return e.b.gated == 1
	})
	// While the write holds the only slot, another request is refused...
	r := e.do("GET", "/v1/devices", "")
	if b := r.apiErr(429, wire.CodeOverloaded); !b.Retryable || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("overloaded answer %+v", b)
	}
	// ...but probes and metrics are served, and readiness says so.
	e.do("GET", "/v1/health", "").ok(200)
	var st wire.NodeStatus
	e.do("GET", "/v1/ready", "").ok(503).decode(&st)
	if st.Ready || !strings.Contains(st.Reason, "overloaded") {
		t.Fatalf("ready while overloaded: %+v", st)
	}
	e.do("GET", "/metrics", "").ok(200)
	close(gate)
	(<-done).ok(200)
	e.do("GET", "/v1/devices", "").ok(200)
}

func TestClusterErrors(t *testing.T) {
	cases := []struct {
		err       error
		status    int
		code      string
		retryable bool
	}{
		{cluster.ErrNoLeader, 503, cluster.ErrNoLeader.Code, true},
		{cluster.ErrNotLeader, 503, cluster.ErrNotLeader.Code, true},
		{cluster.ErrShutdown, 503, cluster.ErrShutdown.Code, true},
		{cluster.ErrTimeout, 504, cluster.ErrTimeout.Code, true},
		{cluster.ErrNotServer, 503, cluster.ErrNotServer.Code, true},
		{errInjected, 500, wire.CodeInternal, false},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			e := newEnv(t, Options{})
			e.b.mu.Lock()
			e.b.applyErr = c.err
			e.b.mu.Unlock()
			r := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"request_id":"keep"}`)
			b := r.apiErr(c.status, c.code)
			if b.Retryable != c.retryable {
				t.Fatalf("retryable %v, want %v", b.Retryable, c.retryable)
			}
			if r.hdr.Get(wire.HeaderRequestID) != "keep" {
				t.Fatalf("request id not echoed on a failed write: %v", r.hdr)
			}
		})
	}
}

func TestWriteTimeout(t *testing.T) {
	e := newEnv(t, Options{WriteTimeout: 20 * time.Millisecond})
	e.b.mu.Lock()
	e.b.applyGate = make(chan struct{})
	e.b.mu.Unlock()
	b := e.do("POST", "/v1/devices/g1/drain", "").apiErr(504, cluster.ErrTimeout.Code)
	if !b.Retryable {
		t.Fatal("a timed-out write must be retryable")
	}
}

func TestReadModes(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	for _, q := range []string{"?consistent", "?consistent=true", "?stale", "?stale&max_stale=5s", "?index=0", "?pretty"} {
		r := e.do("GET", "/v1/devices"+q, "").ok(200)
		if r.index() == 0 {
			t.Fatalf("%s: no index header", q)
		}
	}
	for _, q := range []string{"?consistent&stale", "?consistent&max_stale=1s", "?max_stale=soon", "?index=x",
		"?index=-1", "?wait=forever", "?wait=-1s", "?consistent=maybe"} {
		e.do("GET", "/v1/devices"+q, "").apiErr(400, wire.CodeBadRequest)
	}
	if r := e.do("GET", "/v1/devices?pretty", "").ok(200); !bytes.Contains(r.body, []byte("\n  ")) {
		t.Fatalf("?pretty is not indented: %s", r.body)
	}
}

func TestBlockingQuery(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	idx := e.do("GET", "/v1/devices", "").ok(200).index()
	srv := httptest.NewServer(e.srv)
	defer srv.Close()
	get := func(path string) (*http.Response, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp, time.Since(start)
	}

	// Nothing changes: the query answers at its wait, with the same index.
	for _, path := range []string{"/v1/devices", "/v1/allocations", "/v1/stats"} {
		resp, took := get(path + "?index=" + itoa(idx) + "&wait=200ms")
		if resp.StatusCode != 200 || resp.Header.Get(wire.HeaderIndex) != itoa(idx) {
			t.Fatalf("%s: %d index %s", path, resp.StatusCode, resp.Header.Get(wire.HeaderIndex))
		}
		if took < 200*time.Millisecond {
			t.Fatalf("%s answered after %v, before its wait", path, took)
		}
	}

	// A change answers at once, well before the wait.
	type result struct {
		resp *http.Response
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := srv.Client().Get(srv.URL + "/v1/devices?index=" + itoa(idx) + "&wait=1m")
		if err == nil {
			resp.Body.Close()
		}
		done <- result{resp, time.Since(start)}
	}()
	waitFor(t, func() bool { return len(e.srv.blocking) == 1 })
	e.do("POST", "/v1/devices/g1/drain", "").ok(200)
	select {
	case res := <-done:
		if res.resp == nil || res.resp.StatusCode != 200 {
			t.Fatalf("blocking query failed: %+v", res)
		}
		if got := res.resp.Header.Get(wire.HeaderIndex); got == itoa(idx) {
			t.Fatalf("index %s did not move", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("blocking query did not return when the state changed")
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
