package integration

// Quorum-loss recovery (issue 13): two of three servers lost for good,
// the survivor brought back alone with DATA/raft/peers.json.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// writePeers writes p's recovery file naming ps as the voters, with
// `dmsc operator raft recover-peers`.
func writePeers(t *testing.T, p *Process, ps ...*Process) {
	t.Helper()
	args := []string{"operator", "raft", "recover-peers", "-data-dir", p.DataDir}
	for _, s := range ps {
		args = append(args, "-peer", s.Name+"="+s.RaftAddr)
	}
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("recover-peers: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(p.DataDir, "raft", "peers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var peers []map[string]any
	if err := json.Unmarshal(b, &peers); err != nil || len(peers) != len(ps) || peers[0]["id"] != ps[0].Name || peers[0]["non_voter"] != false {
		t.Fatalf("peers.json: %s (%v)", b, err)
	}
}

// TestQuorumLossRecovery: a 3-server cluster takes allocations; two
// servers (the leader among them) are killed and their data deleted. The
// survivor has no leader and refuses writes with 503 no_leader. With a
// peers.json naming only itself it is restarted: it leads alone, every
// acknowledged allocation is there, new writes succeed, and the recovery
// file is renamed. Then the two servers come back empty and join.
func TestQuorumLossRecovery(t *testing.T) {
	c := StartCluster(t, Options{Hosts: 1})
	ctx := testContext(t, 4*time.Minute)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	survivor := Except(c.Servers, leader)[0]
	lost := Except(c.Servers, survivor)

	var acked []string
	for i := range 6 {
		a := allocate(t, ctx, c, c.Servers, gpuRequest(fmt.Sprintf("before-%d", i), 1, ""))
		acked = append(acked, a.ID)
		if i%2 == 1 {
			release(t, ctx, c, c.Servers, a.ID)
		}
	}
	// The survivor has applied every acknowledged write (a consistent
	// read waits for the leader's commit index).
	for _, id := range acked {
		if _, err := getAllocation(ctx, c, survivor, id); err != nil {
			t.Fatalf("read %s on %s: %v", id, survivor.Name, err)
		}
	}

	// Lost for good.
	for _, p := range lost {
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(p.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	// How it shows: no leader, writes answer 503 no_leader.
	err = poll(ctx, 200*time.Millisecond, func() (bool, error) {
		var a wire.Allocation
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		_, err := c.do(actx, survivor, http.MethodPost, "/v1/allocations", "lost-quorum", gpuRequest("lost-quorum", 1, ""), &a)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable && ae.Body.Code == wire.CodeNoLeader {
			return true, nil
		}
		t.Logf("write without quorum: %v", err)
		return false, nil
	})
	if err != nil {
		t.Fatalf("the survivor never answered 503 no_leader: %v", err)
	}

	// Recovery: stop, peers.json naming the survivor alone, start.
	if err := survivor.Kill(); err != nil {
		t.Fatal(err)
	}
	writePeers(t, survivor, survivor)
	if err := c.Start(survivor); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l != survivor {
		t.Fatalf("leader %s, want %s", l.Name, survivor.Name)
	}
	t.Logf("%s leads alone %v after its restart", survivor.Name, time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(survivor.DataDir, "raft", "peers.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("peers.json is still there after the recovery: %v", err)
	}
	if _, err := os.Stat(filepath.Join(survivor.DataDir, "raft", "peers.info")); err != nil {
		t.Errorf("peers.info: %v", err)
	}
	if b, _ := os.ReadFile(survivor.LogPath); !strings.Contains(string(b), "quorum-loss recovery done") {
		t.Errorf("the log does not say what the recovery did:\n%s", tail(survivor.LogPath, 30))
	}
	for i, id := range acked {
		a, err := getAllocation(ctx, c, survivor, id)
		if err != nil {
			t.Fatalf("acknowledged allocation %s after the recovery: %v", id, err)
		}
		if want := map[bool]wire.AllocStatus{false: wire.Active, true: wire.Released}[i%2 == 1]; a.Status != want {
			t.Fatalf("allocation %s is %s, want %s", id, a.Status, want)
		}
	}
	after := allocate(t, ctx, c, []*Process{survivor}, gpuRequest("after-recovery", 1, ""))
	release(t, ctx, c, []*Process{survivor}, after.ID)

	// New servers (the lost ones, empty) join the recovered cluster.
	if err := c.Start(lost...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, c.Servers...); err != nil {
		t.Fatal(err)
	}
	err = poll(ctx, 200*time.Millisecond, func() (bool, error) {
		var cfg wire.RaftConfiguration
		if err := c.Get(ctx, survivor, "/v1/cluster/raft", &cfg); err != nil {
			return false, nil
		}
		voters := 0
		for _, s := range cfg.Servers {
			if s.Voter {
				voters++
			}
		}
		return voters == 3, nil
	})
	if err != nil {
		t.Fatalf("the new servers were not made voters: %v", err)
	}
	for _, p := range c.Servers {
		if _, err := getAllocation(ctx, c, p, after.ID); err != nil {
			t.Fatalf("read on %s after the rejoin: %v", p.Name, err)
		}
	}
	allocate(t, ctx, c, c.Servers, gpuRequest("after-rejoin", 1, ""))
	noPanics(t, c.All()...)
}
