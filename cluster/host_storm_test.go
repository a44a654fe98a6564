package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestNewLeaderSkipsUnchangedHosts: after a leader change, a live host
// whose inventory hash the replicated record holds costs no RegisterHost
// command and no inventory request; a host whose inventory changed is
// registered again.
func TestNewLeaderSkipsUnchangedHosts(t *testing.T) {
	// Slower failure detection and a long grace: a host that a loaded
	// machine's gossip suspects for a moment is not marked down (which
	// would rightly cost a registration when it comes back).
	tc := newTestCluster(t, func(c *Config) {
		c.GossipProbeInterval = 500 * time.Millisecond
		c.GossipSuspicionMult = 4
		c.HostDownGrace = time.Minute
	})
	servers := tc.servers(3)
	leader := tc.waitLeader(servers...)

	const nHosts = 4
	invs := make([]*inventory, nHosts)
	hosts := make([]*Node, nHosts)
	for i := range invs {
		id := fmt.Sprintf("host-%d", i)
		invs[i] = &inventory{devices: []fsm.DeviceSpec{gpu(fmt.Sprintf("h%d-gpu-1", i), 40)}}
		hc := tc.fastConfig(id, false)
		hc.Inventory = invs[i].get
		hosts[i] = tc.start(hc)
	}
	for i := range hosts {
		id := fmt.Sprintf("host-%d", i)
		poll(t, time.Minute, id+" registered", func() error {
			if h, _, ok := hostView(t, leader, id); !ok || h.InventoryHash != advertised(hosts[i]) {
				return fmt.Errorf("host %+v", h)
			}
			return nil
		})
		h, _, _ := hostView(t, leader, id)
		if h.InventoryHash == "" || h.InventoryHash != advertised(hosts[i]) {
			t.Fatalf("host-%d registered with hash %q, advertises %q", i, h.InventoryHash, advertised(hosts[i]))
		}
	}
	waitSame(t, servers...)

	survivors := followers(leader, servers...)
	regBefore := make([]uint64, len(survivors))
	for i, s := range survivors {
		regBefore[i] = s.fsm.CommandsApplied(fsm.RegisterHostType)
	}
	servedBefore := make([]uint64, nHosts)
	for i, h := range hosts {
		servedBefore[i] = h.invServed.Load()
	}

	tc.crash(leader.cfg.NodeID)
	newLeader := tc.waitLeader(survivors...)
	// Let the new leader reconcile many times over.
	time.Sleep(20 * newLeader.cfg.ReconcileInterval)
	for i, s := range survivors {
		if d := s.fsm.CommandsApplied(fsm.RegisterHostType) - regBefore[i]; d != 0 {
			t.Errorf("%s applied %d RegisterHost commands after the leader change, want 0", s.cfg.NodeID, d)
		}
	}
	for i, h := range hosts {
		if d := h.invServed.Load() - servedBefore[i]; d != 0 {
			t.Errorf("host-%d answered %d inventory requests after the leader change, want 0", i, d)
		}
	}

	// A changed inventory still goes through the pull and is registered.
	invs[2].add(gpu("h2-gpu-2", 80))
	poll(t, time.Minute, "host-2 registered again", func() error {
		if h, _, _ := hostView(t, newLeader, "host-2"); len(h.Devices) != 2 || h.InventoryHash != advertised(hosts[2]) {
			return fmt.Errorf("host %+v", h)
		}
		return nil
	})
	time.Sleep(10 * newLeader.cfg.ReconcileInterval)
	for i, s := range survivors {
		if d := s.fsm.CommandsApplied(fsm.RegisterHostType) - regBefore[i]; d != 1 {
			t.Errorf("%s applied %d RegisterHost commands, want 1 (host-2)", s.cfg.NodeID, d)
		}
	}
	if h, _, _ := hostView(t, newLeader, "host-2"); h.InventoryHash != advertised(hosts[2]) {
		t.Errorf("host-2 stored hash %q, advertises %q", h.InventoryHash, advertised(hosts[2]))
	}
	waitSame(t, survivors...)
}

// advertised is the inventory hash a host advertises in gossip.
func advertised(n *Node) string {
	n.invMu.Lock()
	defer n.invMu.Unlock()
	return n.invHash
}
