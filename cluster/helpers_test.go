package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/dmsc/dmsc/fsm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testLog sends node logs to the test log until the test ends. Set
// DMSC_TEST_LOG=debug (or info, warn) to see more than errors.
type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func testLogger(t testing.TB) hclog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	level := hclog.Error
	if l := os.Getenv("DMSC_TEST_LOG"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: level, TimeFormat: "15:04:05.000"})
}

// testCluster runs nodes in this process on 127.0.0.1.
type testCluster struct {
	t      testing.TB
	log    hclog.Logger
	dir    string
	mu     sync.Mutex
	nodes  map[string]*Node
	cfgs   map[string]Config
	tweaks func(*Config)
}

func newTestCluster(t testing.TB, tweaks func(*Config)) *testCluster {
	tc := &testCluster{t: t, log: testLogger(t), dir: t.TempDir(), nodes: map[string]*Node{}, cfgs: map[string]Config{}, tweaks: tweaks}
	t.Cleanup(tc.stopAll)
	return tc
}

// fastConfig is a configuration with short timings for tests.
func (tc *testCluster) fastConfig(id string, server bool) Config {
	c := Config{
		NodeID:              id,
		DataDir:             filepath.Join(tc.dir, id),
		BindAddr:            "127.0.0.1",
		Server:              server,
		RetryJoinInterval:   100 * time.Millisecond,
		ReconnectInterval:   200 * time.Millisecond,
		TickInterval:        500 * time.Millisecond,
		ReconcileInterval:   100 * time.Millisecond,
		HostDownGrace:       time.Second,
		DeadServerGrace:     time.Hour,
		NoLeaderHold:        5 * time.Second,
		GossipProbeInterval: 200 * time.Millisecond,
		GossipSuspicionMult: 2,
		InventoryInterval:   100 * time.Millisecond,
		Logger:              tc.log.Named(id),
	}
	if tc.tweaks != nil {
		tc.tweaks(&c)
	}
	return c
}

// start starts a node with cfg and remembers it (and, for restarts, the
// ports it got).
func (tc *testCluster) start(cfg Config) *Node {
	tc.t.Helper()
	n, err := New(cfg)
	if err != nil {
		tc.t.Fatalf("new %s: %v", cfg.NodeID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		tc.t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	self := n.Self()
	cfg.RaftPort = port(tc.t, self.RaftAddr)
	cfg.RPCPort = port(tc.t, self.RPCAddr)
	cfg.GossipPort = port(tc.t, self.GossipAddr)
	tc.mu.Lock()
	tc.nodes[cfg.NodeID] = n
	tc.cfgs[cfg.NodeID] = cfg
	tc.mu.Unlock()
	return n
}

func port(t testing.TB, addr string) int {
	if addr == "" {
		return 0
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// servers starts n servers that bootstrap together.
func (tc *testCluster) servers(count int) []*Node {
	tc.t.Helper()
	var out []*Node
	var join []string
	for i := 1; i <= count; i++ {
		c := tc.fastConfig(fmt.Sprintf("s%d", i), true)
		c.BootstrapExpect = count
		c.Join = join
		n := tc.start(c)
		if i == 1 {
			join = []string{n.Self().GossipAddr}
		}
		out = append(out, n)
	}
	tc.waitLeader(out...)
	return out
}

func (tc *testCluster) node(id string) *Node {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.nodes[id]
}

// stop shuts a node down gracefully; crash stops it without handing over
// leadership or leaving gossip, as a killed process would.
func (tc *testCluster) stop(id string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.node(id).Shutdown(ctx); err != nil {
		tc.t.Errorf("shutdown %s: %v", id, err)
	}
}

func (tc *testCluster) crash(id string) {
	tc.t.Helper()
	n := tc.node(id)
	if err := n.closeAll(context.Background()); err != nil {
		tc.t.Errorf("crash %s: %v", id, err)
	}
}

// restart starts a stopped node again with its data directory and ports.
func (tc *testCluster) restart(id string) *Node {
	tc.t.Helper()
	tc.mu.Lock()
	cfg := tc.cfgs[id]
	// As a real command line would, join the other servers.
	cfg.Join = nil
	for other, c := range tc.cfgs {
		if other != id && c.Server {
			cfg.Join = append(cfg.Join, net.JoinHostPort(c.BindAddr, strconv.Itoa(c.GossipPort)))
		}
	}
	tc.mu.Unlock()
	var n *Node
	poll(tc.t, 10*time.Second, "restart "+id, func() error {
		nn, err := New(cfg)
		if err != nil {
			return err
		}
		if err := nn.Start(context.Background()); err != nil {
			return err // a port may still be held for a moment
		}
		n = nn
		return nil
	})
	tc.mu.Lock()
	tc.nodes[id] = n
	tc.mu.Unlock()
	return n
}

func (tc *testCluster) stopAll() {
	tc.mu.Lock()
	nodes := make([]*Node, 0, len(tc.nodes))
	for _, n := range tc.nodes {
		nodes = append(nodes, n)
	}
	tc.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
		}()
	}
	wg.Wait()
}

// waitLeader waits until every node agrees on a ready leader and returns it.
func (tc *testCluster) waitLeader(nodes ...*Node) *Node {
	tc.t.Helper()
	var leader *Node
	poll(tc.t, 15*time.Second, "a leader", func() error {
		leader = nil
		var id string
		for _, n := range nodes {
			l, ok := n.Leader()
			if !ok {
				return fmt.Errorf("%s knows no leader", n.cfg.NodeID)
			}
			if id != "" && l.ID != id {
				return fmt.Errorf("leaders disagree: %s and %s", id, l.ID)
			}
			id = l.ID
			if n.cfg.NodeID == id {
				leader = n
			}
		}
		if leader == nil {
			return fmt.Errorf("leader %s is not among the nodes", id)
		}
		if !leader.leaderReady.Load() {
			return fmt.Errorf("leader %s not ready", id)
		}
		return nil
	})
	return leader
}

func followers(leader *Node, nodes ...*Node) []*Node {
	var out []*Node
	for _, n := range nodes {
		if n != leader {
			out = append(out, n)
		}
	}
	return out
}

// poll retries f until it succeeds or the deadline passes.
func poll(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Fixtures.

func gpu(id string, memGB float64) fsm.DeviceSpec {
	return fsm.DeviceSpec{ID: id, Type: fsm.GPU, Name: "A100", Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: memGB}}}
}

func staticHost(id string, devs ...fsm.DeviceSpec) *fsm.RegisterHost {
	return &fsm.RegisterHost{Host: fsm.HostSpec{ID: id}, Devices: devs}
}

func gpuRequest(memGB float64) *fsm.Allocate {
	return &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{
		Type: fsm.GPU, Count: 1, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: memGB}},
	}}}}
}

// mustApply applies cmd on n and fails the test on any error.
func mustApply(t testing.TB, n *Node, cmd fsm.Command) fsm.Result {
	t.Helper()
	res, err := n.Apply(ctxT(t, 10*time.Second), cmd)
	if err != nil {
		t.Fatalf("apply %T on %s: %v", cmd, n.cfg.NodeID, err)
	}
	if res.Err != nil {
		t.Fatalf("apply %T on %s: refused: %v", cmd, n.cfg.NodeID, res.Err)
	}
	return res
}

// stateOf reads a node's replica.
func stateOf(t testing.TB, n *Node, f func(*fsm.State)) ReadMeta {
	t.Helper()
	meta, err := n.Read(ctxT(t, 5*time.Second), ReadOptions{}, f)
	if err != nil {
		t.Fatalf("read %s: %v", n.cfg.NodeID, err)
	}
	return meta
}

// waitSame waits until every node has applied the same index and holds
// byte-identical state there.
func waitSame(t testing.TB, nodes ...*Node) {
	t.Helper()
	poll(t, 15*time.Second, "identical replicas", func() error {
		var first []byte
		var firstIdx uint64
		for i, n := range nodes {
			var b []byte
			idx, _ := n.fsm.Read(func(s *fsm.State) { b = s.SnapshotBytes() })
			if i == 0 {
				first, firstIdx = b, idx
				continue
			}
			if idx != firstIdx {
				return fmt.Errorf("%s at %d, %s at %d", nodes[0].cfg.NodeID, firstIdx, n.cfg.NodeID, idx)
			}
			if string(b) != string(first) {
				return fmt.Errorf("%s and %s differ at index %d", nodes[0].cfg.NodeID, n.cfg.NodeID, idx)
			}
		}
		return nil
	})
}
