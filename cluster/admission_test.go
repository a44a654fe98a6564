package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// suffrage returns the configuration's servers: true for a voter, false
// for a non-voter.
func suffrage(t testing.TB, n *Node) map[string]bool {
	t.Helper()
	cfg, err := n.RaftConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range cfg.Servers {
		out[s.ID] = s.Voter
	}
	return out
}

// TestNewServerJoinsAsNonVoterThenVotes: a server joining a running
// cluster is first a non-voter and becomes a voter only once it has been
// healthy for the stabilization time.
func TestNewServerJoinsAsNonVoterThenVotes(t *testing.T) {
	const stabilization = 2 * time.Second
	tc := newTestCluster(t, func(c *Config) { c.ServerStabilization = stabilization })
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("g1", 1)))

	start := time.Now()
	s4 := tc.start(tc.fastConfig("s4", true))
	poll(t, 10*time.Second, "s4 a non-voter", func() error {
		if voter, ok := suffrage(t, leader)["s4"]; !ok || voter {
			return fmt.Errorf("configuration %v", suffrage(t, leader))
		}
		return nil
	})
	waitVoters(t, leader, "s1", "s2", "s3", "s4")
	if took := time.Since(start); took < stabilization {
		t.Fatalf("s4 became a voter after %v, before the stabilization time %v", took, stabilization)
	}
	waitSame(t, append(nodes, s4)...)
}

// TestRemovedServerStaysRemovedUntilReadmitted: a server an operator
// removed is not added back while it runs; once readmitted it returns
// through the same admission.
func TestRemovedServerStaysRemovedUntilReadmitted(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	victim := followers(leader, nodes...)[0].cfg.NodeID
	other := followers(leader, nodes...)[1]

	// Through a follower: the request is forwarded to the leader.
	if err := other.RemovePeer(ctxT(t, 10*time.Second), victim); err != nil {
		t.Fatal(err)
	}
	waitVoters(t, leader, leader.cfg.NodeID, other.cfg.NodeID)
	cfg, err := leader.RaftConfiguration()
	if err != nil || len(cfg.Removed) != 1 || cfg.Removed[0].ID != victim {
		t.Fatalf("configuration %+v (%v), want %s removed", cfg, err, victim)
	}
	// The victim keeps running and gossiping; reconcile runs every 100 ms.
	// It must stay out.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if _, in := suffrage(t, leader)[victim]; in {
			t.Fatalf("%s was added back while removed", victim)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Removing again is fine; readmitting twice is not.
	if err := leader.RemovePeer(ctxT(t, 10*time.Second), victim); err != nil {
		t.Fatalf("second removal: %v", err)
	}
	if err := leader.ReadmitPeer(ctxT(t, 10*time.Second), victim); err != nil {
		t.Fatal(err)
	}
	if err := leader.ReadmitPeer(ctxT(t, 10*time.Second), victim); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("second readmission: %v, want not found", err)
	}
	if err := leader.RemovePeer(ctxT(t, 10*time.Second), "ghost"); !errors.Is(err, fsm.ErrNotFound) {
		t.Fatalf("removing an unknown server: %v, want not found", err)
	}
	waitVoters(t, leader, "s1", "s2", "s3")
	mustApply(t, other, staticHost("h1", gpu("g1", 1)))
	waitSame(t, nodes...)
}
