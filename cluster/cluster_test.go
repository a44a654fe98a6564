package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

func TestClusterFormsElectsAndReplicates(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)

	poll(t, 10*time.Second, "three voters", func() error {
		cfg, err := leader.RaftConfiguration()
		if err != nil {
			return err
		}
		voters := 0
		for _, s := range cfg.Servers {
			if s.Voter {
				voters++
			}
		}
		if voters != 3 {
			return fmt.Errorf("%d voters: %+v", voters, cfg.Servers)
		}
		return nil
	})
	mustApply(t, leader, staticHost("h1", gpu("g1", 40), gpu("g2", 80)))
	res := mustApply(t, leader, gpuRequest(60))
	if res.Allocation == nil || res.Allocation.Status != fsm.Active || res.Allocation.Devices[0].DeviceID != "g2" {
		t.Fatalf("allocation: %+v", res.Allocation)
	}
	for _, n := range nodes {
		poll(t, 5*time.Second, "allocation on "+n.cfg.NodeID, func() error {
			var ok bool
			stateOf(t, n, func(s *fsm.State) { _, ok = s.Allocation(res.Allocation.ID) })
			if !ok {
				return errors.New("missing")
			}
			return nil
		})
	}
	waitSame(t, nodes...)

	members := leader.Members()
	if len(members) != 3 {
		t.Fatalf("members: %+v", members)
	}
	leaders := 0
	for _, m := range members {
		if !m.Server || m.Status != MemberAlive || m.RaftAddr == "" || m.RPCAddr == "" {
			t.Errorf("member %+v", m)
		}
		if m.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d members marked leader", leaders)
	}
	for _, n := range nodes {
		if st := n.Status(); !st.KnownLeader || st.Leader != leader.cfg.NodeID {
			t.Errorf("status of %s: %+v", n.cfg.NodeID, st)
		}
	}
}

func TestWriteToFollowerIsAppliedOnce(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	fs := followers(leader, nodes...)
	mustApply(t, fs[0], staticHost("h1", gpu("g1", 40), gpu("g2", 40)))

	cmd := gpuRequest(10)
	res := mustApply(t, fs[0], cmd)
	id := fsm.RequestIDOf(cmd)
	if id == "" {
		t.Fatal("apply did not give the command a request ID")
	}
	// The same request again, through the other follower and the leader.
	for _, n := range []*Node{fs[1], leader} {
		again := gpuRequest(10)
		fsm.SetRequestID(again, id)
		r2 := mustApply(t, n, again)
		if r2.Allocation == nil || r2.Allocation.ID != res.Allocation.ID || r2.Index != res.Index {
			t.Fatalf("retry through %s gave %+v, first was %+v", n.cfg.NodeID, r2, res)
		}
	}
	for _, n := range nodes {
		poll(t, 5*time.Second, "one allocation on "+n.cfg.NodeID, func() error {
			var live int
			meta := stateOf(t, n, func(s *fsm.State) { live = len(s.Live()) })
			if meta.AppliedIndex < res.Index {
				return fmt.Errorf("applied %d < %d", meta.AppliedIndex, res.Index)
			}
			if live != 1 {
				return fmt.Errorf("%d live allocations", live)
			}
			return nil
		})
	}
	// A refusal travels back through the forwarding intact.
	res, err := fs[1].Apply(ctxT(t, 5*time.Second), gpuRequest(1000))
	if err != nil || !errors.Is(res.Err, fsm.ErrNoCapacity) {
		t.Fatalf("oversized request: %v / %v", err, res.Err)
	}
	var fe *fsm.Error
	if !errors.As(res.Err, &fe) || fe.WhyNot == nil {
		t.Fatalf("refusal lost its why-not: %#v", res.Err)
	}
}

func TestLeaderCrashNewLeaderAndWritesContinue(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("g1", 40), gpu("g2", 40), gpu("g3", 40)))
	first := mustApply(t, leader, gpuRequest(10))

	start := time.Now()
	tc.crash(leader.cfg.NodeID)
	rest := followers(leader, nodes...)
	// A write sent at once is held while there is no leader, then applied.
	res := mustApply(t, rest[0], gpuRequest(10))
	t.Logf("first write acknowledged %v after the leader crashed", time.Since(start).Round(time.Millisecond))
	next := tc.waitLeader(rest...)
	if next == leader {
		t.Fatal("crashed node still leads")
	}
	if res.Allocation.ID == first.Allocation.ID {
		t.Fatal("a new request got the old allocation")
	}
	mustApply(t, rest[1], gpuRequest(10))
	for _, n := range rest {
		poll(t, 5*time.Second, "three allocations on "+n.cfg.NodeID, func() error {
			var live int
			stateOf(t, n, func(s *fsm.State) { live = len(s.Live()) })
			if live != 3 {
				return fmt.Errorf("%d live", live)
			}
			return nil
		})
	}

	// The old leader comes back as a follower and catches up.
	back := tc.restart(leader.cfg.NodeID)
	all := append(rest, back)
	tc.waitLeader(all...)
	waitSame(t, all...)
}

func TestRetriedAllocateAfterLeaderChangeReturnsSameAllocation(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("g1", 40), gpu("g2", 40)))

	cmd := gpuRequest(10)
	fsm.SetRequestID(cmd, "client-req-1")
	first := mustApply(t, leader, cmd)

	tc.crash(leader.cfg.NodeID)
	rest := followers(leader, nodes...)
	next := tc.waitLeader(rest...)
	other := followers(next, rest...)[0]

	retry := gpuRequest(10)
	fsm.SetRequestID(retry, "client-req-1")
	got := mustApply(t, other, retry)
	if got.Allocation == nil || got.Allocation.ID != first.Allocation.ID || got.Allocation.Devices[0] != first.Allocation.Devices[0] {
		t.Fatalf("retry got %+v, first %+v", got.Allocation, first.Allocation)
	}
	var live int
	stateOf(t, next, func(s *fsm.State) { live = len(s.Live()) })
	if live != 1 {
		t.Fatalf("%d live allocations after the retry", live)
	}
}

func snapshotConfig(c *Config) {
	c.SnapshotThreshold = 16
	c.SnapshotInterval = 100 * time.Millisecond
	c.TrailingLogs = 8
}

func TestRestartedNodeCatchesUpFromLogAndSnapshot(t *testing.T) {
	tc := newTestCluster(t, snapshotConfig)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("g1", 40)))
	for i := 0; i < 40; i++ {
		mustApply(t, nodes[i%3], &fsm.SetDeviceStatus{DeviceID: "g1", Status: []fsm.DeviceStatus{fsm.Draining, fsm.Available}[i%2]})
	}
	follower := followers(leader, nodes...)[0]
	// Every server has snapshotted by now.
	for _, n := range nodes {
		poll(t, 10*time.Second, "a snapshot on "+n.cfg.NodeID, func() error {
			if lastSnapshot(t, n) == 0 {
				return errors.New("none yet")
			}
			return nil
		})
	}
	tc.stop(follower.cfg.NodeID)
	// Entries the stopped node has not seen: it will get them from the log.
	mustApply(t, leader, gpuRequest(1))
	for i := 0; i < 4; i++ {
		mustApply(t, leader, &fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: []fsm.Policy{fsm.FirstFit, fsm.BestFit}[i%2]}})
	}
	back := tc.restart(follower.cfg.NodeID)
	all := append(followers(follower, nodes...), back)
	waitSame(t, all...)
	var live int
	stateOf(t, back, func(s *fsm.State) { live = len(s.Live()) })
	if live != 1 {
		t.Fatalf("restarted node has %d live allocations, want 1", live)
	}
}

func TestLaggingFollowerReceivesSnapshotInstall(t *testing.T) {
	tc := newTestCluster(t, snapshotConfig)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("g1", 40), gpu("g2", 40)))
	lagger := followers(leader, nodes...)[0]
	tc.crash(lagger.cfg.NodeID)
	for i := 0; i < 60; i++ {
		mustApply(t, leader, &fsm.SetDeviceStatus{DeviceID: "g2", Status: []fsm.DeviceStatus{fsm.Draining, fsm.Available}[i%2]})
	}
	mustApply(t, leader, gpuRequest(1))
	if err := leader.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	leaderSnap := lastSnapshot(t, leader)
	first, err := leader.stores.logs.FirstIndex()
	if err != nil || first <= lastSnapshot(t, lagger) {
		t.Fatalf("leader log starts at %d (%v); the lagging node would not need a snapshot", first, err)
	}
	back := tc.restart(lagger.cfg.NodeID)
	all := append(followers(lagger, nodes...), back)
	waitSame(t, all...)
	if got := lastSnapshot(t, back); got < leaderSnap {
		t.Fatalf("restarted follower's newest snapshot is at %d, the leader's at %d: no snapshot was installed", got, leaderSnap)
	}
}

// lastSnapshot is the index of the newest snapshot in a node's store.
func lastSnapshot(t testing.TB, n *Node) uint64 {
	t.Helper()
	list, err := n.stores.snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 {
		return 0
	}
	return list[0].Index
}

// TestRestartedFollowerIsNotReadyBeforeItHearsTheCommitIndex samples a
// restarted follower's status as fast as it can: its replica starts
// empty, and the leader's heartbeats name the leader before any entry
// tells it the commit index, so until one does it must not say ready
// (after that, ready means applied within ReadyLag of it).
func TestRestartedFollowerIsNotReadyBeforeItHearsTheCommitIndex(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("g1", 40)))
	follower := followers(leader, nodes...)[0]
	id := follower.cfg.NodeID
	tc.crash(id)
	back := tc.restart(id)
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := back.Status()
		if st.Ready && (st.CommitIndex == 0 || st.CommitIndex > st.AppliedIndex+ReadyLag) {
			t.Fatalf("ready at commit index %d, applied %d", st.CommitIndex, st.AppliedIndex)
		}
		if st.Ready {
			var has bool
			waitSame(t, back, leader)
			back.fsm.Read(func(s *fsm.State) { _, has = s.Host("h1") })
			if !has {
				t.Fatal("caught up without the host committed before the restart")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 15s: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}
