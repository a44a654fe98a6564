package cluster

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// inventory is a host's device list that a test can change.
type inventory struct {
	mu      sync.Mutex
	devices []fsm.DeviceSpec
}

func (inv *inventory) get() (fsm.HostSpec, []fsm.DeviceSpec, error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return fsm.HostSpec{Labels: map[string]string{"rack": "r1"}}, append([]fsm.DeviceSpec(nil), inv.devices...), nil
}

func (inv *inventory) add(d fsm.DeviceSpec) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.devices = append(inv.devices, d)
}

// hostView reads a host and its devices' statuses from a server.
func hostView(t testing.TB, n *Node, id string) (fsm.Host, map[string]fsm.DeviceStatus, bool) {
	var (
		h   fsm.Host
		ok  bool
		dev = map[string]fsm.DeviceStatus{}
	)
	stateOf(t, n, func(s *fsm.State) {
		h, ok = s.Host(id)
		for _, d := range h.Devices {
			v, _ := s.Device(d)
			dev[d] = v.Status
		}
	})
	return h, dev, ok
}

func waitHost(t testing.TB, n *Node, id string, up bool, devices int, status fsm.DeviceStatus) fsm.Host {
	t.Helper()
	var h fsm.Host
	poll(t, 15*time.Second, fmt.Sprintf("host %s up=%v with %d %s devices", id, up, devices, status), func() error {
		var dev map[string]fsm.DeviceStatus
		var ok bool
		h, dev, ok = hostView(t, n, id)
		if !ok {
			return errors.New("not registered")
		}
		if h.Up != up || len(dev) != devices {
			return fmt.Errorf("up=%v devices=%v", h.Up, dev)
		}
		for d, s := range dev {
			if s != status {
				return fmt.Errorf("device %s is %s", d, s)
			}
		}
		return nil
	})
	return h
}

func TestHostAgentJoinsLeavesAndReturns(t *testing.T) {
	tc := newTestCluster(t, nil)
	servers := tc.servers(3)
	leader := tc.waitLeader(servers...)

	inv := &inventory{devices: []fsm.DeviceSpec{gpu("gpu-1", 40), gpu("gpu-2", 80)}}
	hc := tc.fastConfig("host-a", false)
	hc.Join = []string{servers[1].Self().GossipAddr}
	hc.Inventory = inv.get
	host := tc.start(hc)
	h := waitHost(t, leader, "host-a", true, 2, fsm.Available)
	if h.Address != host.Self().RPCAddr || h.Labels["rack"] != "r1" {
		t.Fatalf("registered host %+v", h)
	}
	if _, err := host.Read(ctxT(t, time.Second), ReadOptions{}, func(*fsm.State) {}); !errors.Is(err, ErrNotServer) {
		t.Fatalf("read on a host: %v", err)
	}
	// A host accepts writes and passes them to a server.
	alloc := mustApply(t, host, gpuRequest(60))
	if alloc.Allocation.Host != "host-a" || alloc.Allocation.Status != fsm.Active {
		t.Fatalf("allocation %+v", alloc.Allocation)
	}

	// A new device is noticed.
	inv.add(gpu("gpu-3", 24))
	waitHost(t, leader, "host-a", true, 3, fsm.Available)

	// The host dies: after the grace its devices are offline and its
	// allocation is lost.
	crashed := time.Now()
	tc.crash("host-a")
	waitHost(t, leader, "host-a", false, 3, fsm.Offline)
	if d := time.Since(crashed); d < hc.HostDownGrace {
		t.Fatalf("host marked down %v after the crash, before the %v grace", d, hc.HostDownGrace)
	}
	poll(t, 5*time.Second, "allocation lost", func() error {
		var a *fsm.Allocation
		stateOf(t, leader, func(s *fsm.State) { a, _ = s.Allocation(alloc.Allocation.ID) })
		if a == nil || a.Status != fsm.Lost {
			return fmt.Errorf("allocation %+v", a)
		}
		return nil
	})
	for _, n := range servers {
		waitHost(t, n, "host-a", false, 3, fsm.Offline)
	}

	// It comes back: devices available again.
	tc.restart("host-a")
	waitHost(t, leader, "host-a", true, 3, fsm.Available)
	mustApply(t, leader, gpuRequest(60))
}

func TestServerWithDevicesRegistersItself(t *testing.T) {
	inv := &inventory{devices: []fsm.DeviceSpec{gpu("g1", 16)}}
	tc := newTestCluster(t, func(c *Config) {
		c.DataDir = "" // in memory, as in dev mode
		c.Inventory = inv.get
	})
	n := tc.servers(1)[0]
	waitHost(t, n, "s1", true, 1, fsm.Available)
	if self := n.Self(); !self.Server || !self.Host {
		t.Fatalf("self %+v", self)
	}
}

func TestStaticHostIsNotMarkedDown(t *testing.T) {
	tc := newTestCluster(t, func(c *Config) { c.HostDownGrace = 300 * time.Millisecond })
	n := tc.servers(1)[0]
	mustApply(t, n, staticHost("static-1", gpu("s1", 8)))
	// Several grace periods pass: a host registered without an address is
	// not tracked through gossip.
	deadline := time.Now().Add(3 * tc.lc.Config("s1").HostDownGrace)
	for time.Now().Before(deadline) {
		if h, _, _ := hostView(t, n, "static-1"); !h.Up {
			t.Fatal("static host marked down")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestWholeClusterRestartKeepsAllocationsAndHosts(t *testing.T) {
	tc := newTestCluster(t, func(c *Config) {
		c.HostDownGrace = 10 * time.Second
		// Gossip stops talking to dead members after 30 probe intervals:
		// 3 s here. The servers stay down longer, so only reconnecting
		// brings the host back.
		c.GossipProbeInterval = 100 * time.Millisecond
	})
	servers := tc.servers(3)
	leader := tc.waitLeader(servers...)
	inv := &inventory{devices: []fsm.DeviceSpec{gpu("gpu-1", 40)}}
	hc := tc.fastConfig("host-a", false)
	hc.HostDownGrace = 10 * time.Second
	hc.Join = []string{servers[0].Self().GossipAddr, servers[1].Self().GossipAddr}
	hc.Inventory = inv.get
	tc.start(hc)
	waitHost(t, leader, "host-a", true, 1, fsm.Available)
	onHost := mustApply(t, leader, gpuRequest(10))
	mustApply(t, leader, staticHost("static", gpu("s1", 40)))
	onStatic := mustApply(t, servers[2], gpuRequest(10))

	for _, s := range servers {
		tc.crash(s.cfg.NodeID)
	}
	time.Sleep(4 * time.Second)
	var back []*Node
	for _, s := range servers {
		back = append(back, tc.restart(s.cfg.NodeID))
	}
	leader = tc.waitLeader(back...)
	// The host finds the servers again before its grace runs out.
	poll(t, 10*time.Second, "host seen alive by the leader", func() error {
		for _, m := range leader.Members() {
			if m.ID == "host-a" && m.Status == MemberAlive {
				return nil
			}
		}
		return fmt.Errorf("members %+v", leader.Members())
	})
	for _, id := range []string{onHost.Allocation.ID, onStatic.Allocation.ID} {
		var a *fsm.Allocation
		if _, err := leader.Read(ctxT(t, 5*time.Second), ReadOptions{Consistent: true}, func(s *fsm.State) { a, _ = s.Allocation(id) }); err != nil {
			t.Fatal(err)
		}
		if a == nil || a.Status != fsm.Active {
			t.Fatalf("allocation %s after the restart: %+v", id, a)
		}
	}
	if h, _, _ := hostView(t, leader, "host-a"); !h.Up {
		t.Fatal("host down after the restart")
	}
}
