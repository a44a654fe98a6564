package hostsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// TestMain checks that no goroutine outlives the tests, except a probe
// memberlist had in flight when a node shut down: it ends at its own
// deadline, which a loaded machine can push past goleak's patience.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// TestSimulatedHostsRegisterDieAndChange: simulated hosts, each keeping
// four neighbours in its gossip membership, join a real server through
// gossip and are registered from their RPC inventory; a killed one is
// marked down by the leader, comes back up when restarted, and a changed
// inventory is registered again.
func TestSimulatedHostsRegisterDieAndChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lc := startServer(t, ctx)
	server := lc.Servers()[0]
	sim, err := Start(ctx, fast(Config{Hosts: 12, GPUsPerHost: 2, GossipPeers: 4, Join: []string{server.Self().GossipAddr}}))
	defer sim.Close()
	if err != nil {
		t.Fatal(err)
	}

	hosts := func() map[string]fsm.Host {
		out := map[string]fsm.Host{}
		if _, err := server.Read(ctx, cluster.ReadOptions{}, func(s *fsm.State) {
			for _, h := range s.Hosts() {
				out[h.ID] = h
			}
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	wait := func(what string, cond func(map[string]fsm.Host) error) {
		t.Helper()
		var last error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if last = cond(hosts()); last == nil {
				return
			}
		}
		t.Fatalf("%s: %v", what, last)
	}
	ids := sim.Running()
	wait("all registered", func(hs map[string]fsm.Host) error {
		for _, id := range ids {
			h, ok := hs[id]
			if !ok || !h.Up || len(h.Devices) != 2 || h.Address == "" {
				return fmt.Errorf("%s: %+v", id, h)
			}
		}
		return nil
	})
	addr := hosts()[ids[3]].Address

	if err := sim.Kill(ids[3]); err != nil {
		t.Fatal(err)
	}
	if got := sim.Killed(); len(got) != 1 || got[0] != ids[3] {
		t.Fatalf("killed %v", got)
	}
	wait("killed host down", func(hs map[string]fsm.Host) error {
		if hs[ids[3]].Up {
			return fmt.Errorf("%s still up", ids[3])
		}
		return nil
	})
	if err := sim.Restart(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	wait("restarted host up at its address", func(hs map[string]fsm.Host) error {
		if h := hs[ids[3]]; !h.Up || h.Address != addr {
			return fmt.Errorf("%+v, want up at %s", h, addr)
		}
		return nil
	})

	before := hosts()[ids[5]].InventoryHash
	if err := sim.Change(ids[5]); err != nil {
		t.Fatal(err)
	}
	wait("changed host registered again", func(hs map[string]fsm.Host) error {
		if h := hs[ids[5]]; h.InventoryHash == before || h.Labels["sim.generation"] != "1" {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
	if err := sim.Kill("nope"); err == nil {
		t.Error("killing an unknown host succeeded")
	}
	if len(sim.Running()) != len(ids) {
		t.Errorf("running %d, want %d", len(sim.Running()), len(ids))
	}
}

// TestChurnKillsRestartsAndChanges: a churn kills and changes hosts at
// its rates and restarts every host it killed before it returns.
func TestChurnKillsRestartsAndChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lc := startServer(t, ctx)
	sim, err := Start(ctx, fast(Config{Hosts: 6, Join: []string{lc.Servers()[0].Self().GossipAddr}}))
	defer sim.Close()
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	got := sim.Churn(cctx, Churn{KillsPerSecond: 2, Down: 300 * time.Millisecond, ChangesPerSecond: 3, Seed: 1})
	// 2 s at 2 kills and 3 changes per second: at least one of each even
	// on a starved machine, and every kill restarted.
	if got.Kills < 1 || got.Kills > 4 || got.Restarts != got.Kills || got.Changes < 1 || got.Changes > 6 || got.Errors != 0 {
		t.Errorf("churn %+v", got)
	}
	if k := sim.Killed(); len(k) != 0 {
		t.Errorf("hosts left killed: %v", k)
	}
}

// TestStartStopsWhenCancelled: a start cut short starts no more hosts,
// kills those it started and says so, at once rather than after starting
// the rest.
func TestStartStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	sim, err := Start(ctx, fast(Config{Hosts: 1000, StartRate: 20, Join: []string{"127.0.0.1:1"}}))
	defer sim.Close()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "of 1000 hosts started") {
		t.Fatalf("Start: %v, want how many hosts started before the context's deadline", err)
	}
	// Some 10 hosts started at 20 a second, and at most Parallel in
	// flight failed: not the 990 the start would have gone on to.
	if n := strings.Count(err.Error(), "\n") + 1; n > 40 {
		t.Errorf("Start reports %d errors: it went on starting hosts", n)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("Start returned %v after it was cut short", d)
	}
	if n := len(sim.Running()); n == 0 || n > 40 {
		t.Errorf("%d hosts running after the start was cut short", n)
	}
}

// TestNeighbours checks which hosts a simulated host keeps with
// GossipPeers 4: the two before it and the two after it in name order,
// around the ring, and so each of them keeps it.
func TestNeighbours(t *testing.T) {
	s := &Sim{cfg: Config{Hosts: 10, Prefix: "sim-h", GossipPeers: 4}}
	keep := func(i int) []int {
		var out []int
		for j := range 10 {
			if s.neighbours(i)(fmt.Sprintf("sim-h%05d", j)) {
				out = append(out, j)
			}
		}
		return out
	}
	for i, want := range map[int][]int{0: {1, 2, 8, 9}, 5: {3, 4, 6, 7}, 9: {0, 1, 7, 8}} {
		if got := keep(i); !slices.Equal(got, want) {
			t.Errorf("host %d keeps %v, want %v", i, got, want)
		}
	}
	for i := range 10 {
		for _, j := range keep(i) {
			if !slices.Contains(keep(j), i) {
				t.Errorf("host %d keeps %d, which does not keep it", i, j)
			}
		}
	}
	for _, name := range []string{"sim-h00010", "sim-h-0001", "other00001", "sim-h", "sim-hx"} {
		if s.neighbours(0)(name) {
			t.Errorf("host 0 keeps %q", name)
		}
	}
}

// fast sets the timings of a test: gossip notices a killed host within
// about a second (as cluster.LocalConfig.Fast does for its nodes).
func fast(c Config) Config {
	c.GossipProbeInterval = 100 * time.Millisecond
	c.RetryJoinInterval = 100 * time.Millisecond
	c.ReconnectInterval = 200 * time.Millisecond
	return c
}

// startServer starts a one-server cluster in this process, closed when
// the test ends.
func startServer(t *testing.T, ctx context.Context) *cluster.LocalCluster {
	t.Helper()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{Servers: 1, InMemory: true, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lc.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return lc
}
