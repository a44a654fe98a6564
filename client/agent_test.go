package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
)

// startCluster starts servers nodes in this process, each serving the
// HTTP API on a real listener as `dmsc agent` does, with short timings,
// their data under dir ("" for a temporary directory that Close removes).
func startCluster(ctx context.Context, dir string, servers int) (*cluster.LocalCluster, error) {
	return startClusterACL(ctx, dir, servers, false)
}

// startClusterACL is startCluster with ACLs on or off.
func startClusterACL(ctx context.Context, dir string, servers int, acl bool) (*cluster.LocalCluster, error) {
	return cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers: servers,
		Dir:     dir,
		Fast:    true,
		Configure: func(c *cluster.Config) {
			c.TickInterval = 100 * time.Millisecond
			c.HostDownGrace = time.Minute
			c.NoLeaderHold = 2 * time.Second
			c.RPCTimeout = 2 * time.Second
		},
		HTTP:    api.NodeHandler(api.Options{Version: "test", Role: "server", WaitGrace: 2 * time.Second, ACLEnabled: acl}),
		Version: "test",
	})
}

// localCluster starts a cluster of servers for a test and closes it when
// the test ends.
func localCluster(t *testing.T, servers int) *cluster.LocalCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Raft nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := startCluster(ctx, t.TempDir(), servers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := lc.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	return lc
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

// exampleAgent starts a one-node cluster with one host of two GPUs for
// the examples, which have no *testing.T; stop removes everything.
func exampleAgent() (addr string, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := startCluster(ctx, "", 1)
	if err != nil {
		return "", nil, err
	}
	stop = func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = lc.Close(cctx)
	}
	addr = lc.Addresses()[0]
	c, err := client.New(client.Config{Addresses: []string{addr}})
	if err == nil {
		_, _, err = c.RegisterHost(ctx, "h1", client.RegisterHostRequest{Devices: []client.DeviceSpec{gpuSpec("g1", 80), gpuSpec("g2", 40)}})
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("register the example host: %w", err)
	}
	return addr, stop, nil
}

// exampleACLAgent is exampleAgent with ACLs on: it bootstraps them,
// registers the host with the management token, and returns the secret
// of a token whose policy "team-a" may write allocations in namespace
// team-a and read devices.
func exampleACLAgent() (addr, teamToken string, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := startClusterACL(ctx, "", 1, true)
	if err != nil {
		return "", "", nil, err
	}
	stop = func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = lc.Close(cctx)
	}
	addr = lc.Addresses()[0]
	teamToken, err = exampleACLSetup(ctx, addr)
	if err != nil {
		stop()
		return "", "", nil, fmt.Errorf("set up the example's ACLs: %w", err)
	}
	return addr, teamToken, stop, nil
}

func exampleACLSetup(ctx context.Context, addr string) (string, error) {
	// The bootstrap needs no token (one sent is not looked at).
	anon, err := client.New(client.Config{Addresses: []string{addr}})
	if err != nil {
		return "", err
	}
	boot, err := anon.ACLBootstrap(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	mgmt, err := client.New(client.Config{Addresses: []string{addr}, Token: boot.SecretID})
	if err != nil {
		return "", err
	}
	if _, _, err := mgmt.RegisterHost(ctx, "h1", client.RegisterHostRequest{Devices: []client.DeviceSpec{gpuSpec("g1", 80), gpuSpec("g2", 40)}}); err != nil {
		return "", fmt.Errorf("register the example host: %w", err)
	}
	rules := client.ACLRules{Namespaces: map[string]string{"team-a": "write"}, Devices: "read"}
	if _, err := mgmt.ACLPolicyApply(ctx, "team-a", "team A's jobs", rules); err != nil {
		return "", fmt.Errorf("policy: %w", err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx, client.ACLTokenSpec{Description: "team A", Policies: []string{"team-a"}})
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return tok.SecretID, nil
}
