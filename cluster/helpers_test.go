package cluster

import (
	"context"
	"fmt"
	"os"
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

// testCluster is a LocalCluster that fails the test on errors and stops
// when the test ends.
type testCluster struct {
	t      testing.TB
	log    hclog.Logger
	tweaks func(*Config)
	lc     *LocalCluster
}

// newTestCluster prepares a cluster with fast timings, its nodes
// configured by tweaks; servers starts it.
func newTestCluster(t testing.TB, tweaks func(*Config)) *testCluster {
	return &testCluster{t: t, log: testLogger(t), tweaks: tweaks}
}

// servers starts the cluster with count servers and waits until it is
// ready.
func (tc *testCluster) servers(count int) []*Node {
	tc.t.Helper()
	if tc.lc != nil {
		tc.t.Fatal("the test cluster runs already")
	}
	lc, err := StartLocal(ctxT(tc.t, 30*time.Second), LocalConfig{
		Servers: count, Dir: tc.t.TempDir(), Fast: true, Configure: tc.tweaks, Logger: tc.log,
	})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.lc = lc
	tc.t.Cleanup(tc.stopAll)
	return lc.Servers()
}

// fastConfig is the configuration of a new node of the cluster.
func (tc *testCluster) fastConfig(id string, server bool) Config {
	return tc.lc.NodeConfig(id, server)
}

// start starts a new node with cfg.
func (tc *testCluster) start(cfg Config) *Node {
	tc.t.Helper()
	n, err := tc.lc.StartNode(ctxT(tc.t, 10*time.Second), cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	return n
}

// stop shuts a node down gracefully; crash stops it without handing over
// leadership or leaving gossip, as a killed process would.
func (tc *testCluster) stop(id string) {
	tc.t.Helper()
	if err := tc.lc.Stop(ctxT(tc.t, 10*time.Second), id); err != nil {
		tc.t.Errorf("shutdown %s: %v", id, err)
	}
}

func (tc *testCluster) crash(id string) {
	tc.t.Helper()
	if err := tc.lc.Crash(id); err != nil {
		tc.t.Errorf("crash %s: %v", id, err)
	}
}

// restart starts a stopped node again with its data directory and ports.
func (tc *testCluster) restart(id string) *Node {
	tc.t.Helper()
	n, err := tc.lc.Restart(ctxT(tc.t, 10*time.Second), id)
	if err != nil {
		tc.t.Fatal(err)
	}
	return n
}

func (tc *testCluster) stopAll() {
	tc.t.Helper()
	if err := tc.lc.Close(ctxT(tc.t, 10*time.Second)); err != nil {
		tc.t.Errorf("close: %v", err)
	}
}

// waitLeader waits until every node agrees on a ready leader and returns it.
func (tc *testCluster) waitLeader(nodes ...*Node) *Node {
	tc.t.Helper()
	leader, err := tc.lc.WaitLeader(ctxT(tc.t, 15*time.Second), nodes...)
	if err != nil {
		tc.t.Fatal(err)
	}
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
