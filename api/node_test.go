package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// TestSingleNode serves the API over a real one-node cluster: writes go
// through Raft, reads carry the node's freshness, blocking queries and
// waiting allocations follow the replicated state, snapshots round-trip.
func TestSingleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers: 1,
		Dir:     t.TempDir(),
		Configure: func(c *cluster.Config) {
			c.TickInterval = 100 * time.Millisecond
			c.NoLeaderHold = 2 * time.Second
		},
		HTTP: NodeHandler(Options{Version: "test", Role: "server", WaitGrace: 2 * time.Second}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := lc.Close(sctx); err != nil {
			t.Error(err)
		}
	}()
	url := lc.Addresses()[0]
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	call := func(method, path, body string, want int, out any) http.Header {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			if path == "/v1/snapshot" {
				req.Header.Set("Content-Type", "application/octet-stream")
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, data)
		}
		if out != nil {
			if b, ok := out.(*[]byte); ok {
				*b = data
			} else if err := json.Unmarshal(data, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, data)
			}
		}
		return resp.Header
	}

	call("GET", "/v1/ready", "", 200, nil)
	call("PUT", "/v1/hosts/h1", `{"devices":[{"id":"g1","type":"GPU","capabilities":{"memory_gb":80}}]}`, 200, nil)

	var a wire.Allocation
	hdr := call("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":40}}],"request_id":"one"}`, 200, &a)
	if a.Status != wire.Active || hdr.Get(wire.HeaderRequestID) != "one" {
		t.Fatalf("allocation %+v", a)
	}
	var again wire.Allocation
	call("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":40}}],"request_id":"one"}`, 200, &again)
	if again.ID != a.ID {
		t.Fatalf("retry allocated %s, first %s", again.ID, a.ID)
	}

	// A consistent read carries the leader's freshness headers.
	hdr = call("GET", "/v1/allocations/"+a.ID+"?consistent", "", 200, nil)
	if hdr.Get(wire.HeaderKnownLeader) != "true" || hdr.Get(wire.HeaderLastContact) != "0" || hdr.Get(wire.HeaderIndex) == "" {
		t.Fatalf("read headers %v", hdr)
	}
	idx := hdr.Get(wire.HeaderIndex)

	// A waiting allocation is placed when the GPU is released.
	type answer struct {
		a    wire.Allocation
		code int
	}
	waited := make(chan answer, 1)
	go func() {
		resp, err := client.Post(url+"/v1/allocations?wait=true", "application/json",
			strings.NewReader(`{"claims":[{"type":"GPU","count":1}],"timeout":"30s"}`))
		if err != nil {
			waited <- answer{}
			return
		}
		defer resp.Body.Close()
		var got wire.Allocation
		_ = json.NewDecoder(resp.Body).Decode(&got)
		waited <- answer{got, resp.StatusCode}
	}()
	waitFor(t, func() bool {
		var q []wire.Allocation
		call("GET", "/v1/queue", "", 200, &q)
		return len(q) == 1
	})
	// A blocking query on the old index returns once the release lands.
	blocked := make(chan string, 1)
	go func() {
		resp, err := client.Get(url + "/v1/allocations?index=" + idx + "&wait=30s")
		if err != nil {
			blocked <- ""
			return
		}
		resp.Body.Close()
		blocked <- resp.Header.Get(wire.HeaderIndex)
	}()
	call("POST", "/v1/allocations/"+a.ID+"/release", "", 200, nil)
	select {
	case got := <-waited:
		if got.code != 200 || got.a.Status != wire.Active {
			t.Fatalf("waited allocation: %d %+v", got.code, got.a)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting allocation was not placed")
	}
	select {
	case got := <-blocked:
		if got == "" || got == idx {
			t.Fatalf("blocking query answered index %q (was %s)", got, idx)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the blocking query did not return")
	}

	// A request with a short timeout that cannot be placed times out on
	// the leader's tick and the wait reports it.
	start := time.Now()
	var refused wire.ErrorResponse
	call("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"timeout":"300ms","wait":true}`, http.StatusConflict, &refused)
	if refused.Error.Code != fsm.ErrNoCapacity.Code || refused.Error.AllocationID == "" || time.Since(start) > 10*time.Second {
		t.Fatalf("timed out wait: %+v after %v", refused.Error, time.Since(start))
	}

	// Errors without side effects.
	idxBefore := call("GET", "/v1/devices?consistent", "", 200, nil).Get(wire.HeaderIndex)
	call("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"bogus":1}`, 400, nil)
	call("POST", "/v1/allocations", `{"claims":[{"type":"QPU","count":1}]}`, 400, nil)
	call("POST", "/v1/allocations/nope/release", "", 404, nil)
	if idxAfter := call("GET", "/v1/devices?consistent", "", 200, nil).Get(wire.HeaderIndex); idxAfter != idxBefore {
		t.Fatalf("refused requests moved the state index from %s to %s", idxBefore, idxAfter)
	}
	var before []byte
	call("GET", "/v1/snapshot", "", 200, &before)

	// Cluster routes of the real node.
	var members []wire.Member
	call("GET", "/v1/cluster/members", "", 200, &members)
	var leader wire.Leader
	call("GET", "/v1/cluster/leader", "", 200, &leader)
	var rc wire.RaftConfiguration
	call("GET", "/v1/cluster/raft", "", 200, &rc)
	if len(members) != 1 || leader.ID != "s1" || len(rc.Servers) != 1 || !rc.Servers[0].Leader {
		t.Fatalf("members %+v leader %+v raft %+v", members, leader, rc)
	}
	call("DELETE", "/v1/cluster/raft/peers/ghost", "", 404, nil)
	var self wire.AgentSelf
	call("GET", "/v1/agent/self", "", 200, &self)
	if self.Member.ID != "s1" || self.Status.State != "Leader" {
		t.Fatalf("self %+v", self)
	}

	// Snapshot restore brings back the saved state.
	call("DELETE", "/v1/hosts/h1", "", 200, nil)
	call("GET", "/v1/hosts/h1", "", 404, nil)
	call("PUT", "/v1/snapshot", string(before), 200, nil)
	waitFor(t, func() bool {
		resp, err := client.Get(url + "/v1/hosts/h1")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	var metrics []byte
	call("GET", "/metrics", "", 200, &metrics)
	if !bytes.Contains(metrics, []byte(`dmsc_raft_apply_duration_seconds_count{command="allocate",outcome="ok"}`)) {
		t.Fatalf("metrics lack the apply latency:\n%s", metrics)
	}
}
