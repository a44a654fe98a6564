package cluster

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dmsc/dmsc/fsm"
)

func voters(t testing.TB, n *Node) map[string]bool {
	t.Helper()
	cfg, err := n.RaftConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range cfg.Servers {
		if s.Voter {
			out[s.ID] = true
		}
	}
	return out
}

func waitVoters(t testing.TB, n *Node, want ...string) {
	t.Helper()
	poll(t, 15*time.Second, fmt.Sprintf("voters %v", want), func() error {
		got := voters(t, n)
		if len(got) != len(want) {
			return fmt.Errorf("voters %v", got)
		}
		for _, id := range want {
			if !got[id] {
				return fmt.Errorf("voters %v", got)
			}
		}
		return nil
	})
}

func TestServerLeavingIsRemovedAtOnce(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	f := followers(leader, nodes...)
	if err := f[0].Leave(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, leader, leader.cfg.NodeID, f[1].cfg.NodeID)
	poll(t, 5*time.Second, "member left", func() error {
		for _, m := range leader.Members() {
			if m.ID == f[0].cfg.NodeID && m.Status != MemberLeft {
				return fmt.Errorf("member %+v", m)
			}
		}
		return nil
	})
	// The two remaining servers still take writes.
	mustApply(t, f[1], staticHost("h1", gpu("g1", 1)))
}

func TestDeadServerRemovedAfterGraceAndAddedBack(t *testing.T) {
	tc := newTestCluster(t, func(c *Config) { c.DeadServerGrace = time.Second })
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	f := followers(leader, nodes...)
	tc.crash(f[0].cfg.NodeID)
	waitVoters(t, leader, leader.cfg.NodeID, f[1].cfg.NodeID)
	back := tc.restart(f[0].cfg.NodeID)
	waitVoters(t, leader, leader.cfg.NodeID, f[0].cfg.NodeID, f[1].cfg.NodeID)
	mustApply(t, back, staticHost("h1", gpu("g1", 1)))
}

func TestGracefulLeaderShutdownHandsOver(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	tc.stop(leader.cfg.NodeID)
	rest := followers(leader, nodes...)
	next := tc.waitLeader(rest...)
	// A graceful stop keeps the server in the configuration: it is
	// expected back.
	waitVoters(t, next, leader.cfg.NodeID, rest[0].cfg.NodeID, rest[1].cfg.NodeID)
	back := tc.restart(leader.cfg.NodeID)
	mustApply(t, back, staticHost("h1", gpu("g1", 1)))
	waitSame(t, append(rest, back)...)
}

func TestShutdownLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	func() {
		tc := newTestCluster(t, nil)
		nodes := tc.servers(3)
		leader := tc.waitLeader(nodes...)
		inv := &inventory{devices: []fsm.DeviceSpec{gpu("g1", 8)}}
		hc := tc.fastConfig("host-a", false)
		hc.Join = []string{nodes[0].Self().GossipAddr}
		hc.Inventory = inv.get
		tc.start(hc)
		waitHost(t, leader, "host-a", true, 1, fsm.Available)
		mustApply(t, followers(leader, nodes...)[0], gpuRequest(1))
		if _, err := nodes[2].Read(ctxT(t, 5*time.Second), ReadOptions{Consistent: true}, func(*fsm.State) {}); err != nil {
			t.Fatal(err)
		}
		tc.stopAll()
		for _, n := range nodes {
			if err := n.Shutdown(ctxT(t, time.Second)); err != nil {
				t.Fatalf("second shutdown: %v", err)
			}
			if _, err := n.Apply(ctxT(t, time.Second), gpuRequest(1)); err != ErrShutdown {
				t.Fatalf("apply after shutdown: %v", err)
			}
		}
	}()
	goleak.VerifyNone(t, before)
}

func TestGossipMetadataStaysSmall(t *testing.T) {
	n := &Node{cfg: Config{Server: true, BootstrapExpect: 5, Version: "v1.22.333-rc.4+build.20260101", HTTPAddr: "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:4646",
		Inventory: func() (fsm.HostSpec, []fsm.DeviceSpec, error) { return fsm.HostSpec{}, nil, nil }}}
	addr := "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:65535"
	n.raftAddr, n.rpcAddr, n.invHash = addr, addr, "0123456789abcdef"
	n.leaving.Store(true)
	if b := n.localMeta(); len(b) > 300 {
		t.Fatalf("metadata is %d bytes: %s", len(b), b)
	}
}
