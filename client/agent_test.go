package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
)

// testAgent is a cluster node in this process serving the HTTP API on a
// real listener, as `dmsc agent` does.
type testAgent struct {
	id   string
	node *cluster.Node
	srv  *http.Server
	addr string // http://127.0.0.1:port
}

// agentConfig is a node configuration with short timings for tests.
func agentConfig(dir, id string, bootstrap int, join []string) cluster.Config {
	return cluster.Config{
		NodeID:              id,
		DataDir:             filepath.Join(dir, id),
		BindAddr:            "127.0.0.1",
		Server:              true,
		BootstrapExpect:     bootstrap,
		Join:                join,
		RetryJoinInterval:   100 * time.Millisecond,
		ReconnectInterval:   200 * time.Millisecond,
		TickInterval:        100 * time.Millisecond,
		ReconcileInterval:   100 * time.Millisecond,
		HeartbeatTimeout:    500 * time.Millisecond,
		ElectionTimeout:     500 * time.Millisecond,
		HostDownGrace:       time.Minute,
		DeadServerGrace:     time.Hour,
		NoLeaderHold:        2 * time.Second,
		RPCTimeout:          2 * time.Second,
		GossipProbeInterval: 200 * time.Millisecond,
		GossipSuspicionMult: 2,
	}
}

// startAgent starts a node with the API on a free port of 127.0.0.1.
func startAgent(ctx context.Context, cfg cluster.Config) (*testAgent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.HTTPAddr = ln.Addr().String()
	node, err := cluster.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if err := node.Start(ctx); err != nil {
		ln.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Shutdown(sctx)
		return nil, err
	}
	a := &testAgent{
		id:   cfg.NodeID,
		node: node,
		srv:  &http.Server{Handler: api.New(node, api.Options{Version: "test", Role: "server", WaitGrace: 2 * time.Second})},
		addr: "http://" + ln.Addr().String(),
	}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

// stop closes the API at once (in-flight requests see their connection
// drop) and shuts the node down.
func (a *testAgent) stop() error {
	herr := a.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(herr, a.node.Shutdown(ctx))
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gpuSpec is an exclusive GPU with memGB of memory.
func gpuSpec(id string, memGB float64) client.DeviceSpec {
	return client.DeviceSpec{ID: id, Type: client.GPU, Name: "A100", Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: memGB}}}
}

// startSingle starts a one-node cluster in dir and waits until it leads.
func startSingle(dir string) (*testAgent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := startAgent(ctx, agentConfig(dir, "n1", 1, nil))
	if err != nil {
		return nil, err
	}
	if err := a.node.WaitForLeader(ctx); err != nil {
		_ = a.stop()
		return nil, err
	}
	return a, nil
}

// singleAgent starts a one-node cluster for a test.
func singleAgent(t *testing.T) *testAgent {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	a, err := startSingle(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Error(err)
		}
	})
	return a
}

// exampleAgent starts a one-node cluster with one host of two GPUs for
// the examples, which have no *testing.T; stop removes everything.
func exampleAgent() (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "dmsc-client-example-")
	if err != nil {
		return "", nil, err
	}
	a, err := startSingle(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		_ = a.stop()
		os.RemoveAll(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(client.Config{Addresses: []string{a.addr}})
	if err == nil {
		_, _, err = c.RegisterHost(ctx, "h1", client.RegisterHostRequest{Devices: []client.DeviceSpec{gpuSpec("g1", 80), gpuSpec("g2", 40)}})
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("register the example host: %w", err)
	}
	return a.addr, stop, nil
}
