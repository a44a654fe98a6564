package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// runCLI runs the dmsc command line in this process and returns its exit
// status, standard output and standard error.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ui := cli.NewMockUi()
	c := cli.NewCLI("dmsc", version)
	c.Args = args
	c.Commands = commands(ui)
	c.HelpWriter = ui.OutputWriter
	c.ErrorWriter = ui.ErrorWriter
	code, err := c.Run()
	if err != nil {
		t.Fatalf("dmsc %s: %v", strings.Join(args, " "), err)
	}
	return code, ui.OutputWriter.String(), ui.ErrorWriter.String()
}

// apiNode starts a one-node cluster serving the API, with host h1: GPUs g1
// (80 GB) and g2 (40 GB) and a shareable CPU c1 (64 cores), and points
// DMSC_ADDR at it.
func apiNode(t *testing.T) string {
	t.Helper()
	return apiNodeWith(t, api.Options{Version: "test", Role: "server", WaitGrace: time.Second})
}

// apiNodeWith is apiNode with the API's options.
func apiNodeWith(t *testing.T, opts api.Options) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers:   1,
		Dir:       t.TempDir(),
		Configure: func(c *cluster.Config) { c.TickInterval = 100 * time.Millisecond },
		HTTP:      api.NodeHandler(opts),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := lc.Close(sctx); err != nil {
			t.Error(err)
		}
	})
	node := lc.Node("s1")
	res, err := node.Apply(ctx, &fsm.RegisterHost{Host: fsm.HostSpec{ID: "h1", Labels: map[string]string{"zone": "a"}}, Devices: []fsm.DeviceSpec{
		{ID: "g1", Type: fsm.GPU, Name: "A100", Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 80}}},
		{ID: "g2", Type: fsm.GPU, Name: "A100", Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 40}}},
		{ID: "c1", Type: fsm.CPU, Shareable: true, Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: 64}}},
	}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	addr := lc.Addresses()[0]
	t.Setenv(client.AddressEnv, addr)
	return addr
}

// cliCase is one command line and what it must do.
type cliCase struct {
	args []string
	code int
	// out and errOut must appear in standard output and error.
	out, errOut []string
}

func (tc cliCase) check(t *testing.T) (stdout string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, tc.args...)
	if code != tc.code {
		t.Fatalf("dmsc %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(tc.args, " "), code, tc.code, stdout, stderr)
	}
	for _, s := range tc.out {
		if !strings.Contains(stdout, s) {
			t.Errorf("dmsc %s: stdout lacks %q:\n%s", strings.Join(tc.args, " "), s, stdout)
		}
	}
	for _, s := range tc.errOut {
		if !strings.Contains(stderr, s) {
			t.Errorf("dmsc %s: stderr lacks %q:\n%s", strings.Join(tc.args, " "), s, stderr)
		}
	}
	return stdout
}

// jsonOut runs a command with -json and decodes its output.
func jsonOut(t *testing.T, v any, args ...string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, append(args, "-json")...)
	if code != 0 {
		t.Fatalf("dmsc %s -json: exit %d: %s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("dmsc %s -json: %v:\n%s", strings.Join(args, " "), err, stdout)
	}
}

func TestCLIAllocations(t *testing.T) {
	apiNode(t)
	var a wire.Allocation
	jsonOut(t, &a, "alloc", "-type", "gpu", "-memory-gb", "50", "-ttl", "10m", "-request-id", "job-1")
	if a.Status != client.Active || a.Devices[0].DeviceID != "g1" || a.RequestID != "job-1" {
		t.Fatalf("allocation %+v", a)
	}
	for _, tc := range []cliCase{
		// The same request ID never allocates twice.
		{args: []string{"alloc", "-type", "GPU", "-memory-gb", "50", "-ttl", "10m", "-request-id", "job-1"}, out: []string{a.ID, "g1"}},
		// Another request under the same ID is refused.
		{args: []string{"alloc", "-type", "GPU", "-memory-gb", "50", "-request-id", "job-1"}, code: exitConflict, errOut: []string{"request_id_reused"}},
		{args: []string{"alloc", "list"}, out: []string{a.ID, "active", "1 x GPU (memory_gb>=50)", "h1"}},
		{args: []string{"alloc", "list", "-status", "pending"}, out: []string{"No allocations"}},
		{args: []string{"alloc", "status", a.ID}, out: []string{"ID            = " + a.ID, "Lease expires", "DEVICE", "g1"}},
		{args: []string{"renew", a.ID, "-ttl", "1h"}, out: []string{"Renewed allocation " + a.ID}},
		{args: []string{"alloc", "status", "nope"}, code: exitNotFound, errOut: []string{"not found"}},
		// Refusals explain themselves.
		{args: []string{"alloc", "-type", "GPU", "-memory-gb", "100"}, code: exitCapacity,
			errOut: []string{"Refused: no device fits the request.", "kept in the history as allocation", "Why not:",
				"REMOVED", "capability memory_gb too small"}},
		{args: []string{"alloc", "-type", "GPU", "-label", "zone=b"}, code: exitCapacity, errOut: []string{"required label"}},
		{args: []string{"alloc", "-type", "GPU", "-memory-gb", "50", "-timeout", "200ms", "-wait"}, code: exitCapacity, errOut: []string{"Why not:"}},
		// Shareable devices hand out amounts.
		{args: []string{"alloc", "-type", "CPU", "-amount-compute-units", "8", "-prefer", "zone=a", "-priority", "5"},
			out: []string{"c1", "compute_units=8", "Priority   = 5"}},
		// Usage errors.
		{args: []string{"alloc"}, code: exitUsage, errOut: []string{"needs -type"}},
		{args: []string{"alloc", "-type", "QPU"}, code: exitUsage, errOut: []string{"unknown device type"}},
		{args: []string{"alloc", "-type", "GPU", "-bogus"}, code: exitUsage, errOut: []string{"flag provided but not defined"}},
		{args: []string{"alloc", "-type", "GPU", "-custom", "novalue"}, code: exitUsage, errOut: []string{"key=value"}},
		{args: []string{"release"}, code: exitUsage, errOut: []string{"takes <allocation-id>"}},
		{args: []string{"alloc", "-h"}, out: []string{"Usage: dmsc alloc", "-amount-memory-gb", "Exit codes", "3  refused"}},
	} {
		tc.check(t)
	}

	// A request that waits is pending, then cancelled.
	var p wire.Allocation
	jsonOut(t, &p, "alloc", "-type", "GPU", "-memory-gb", "50", "-timeout", "1h")
	if p.Status != client.Pending {
		t.Fatalf("queued request %+v", p)
	}
	cliCase{args: []string{"alloc", "status", p.ID}, out: []string{"pending", "Deadline", "Why not:"}}.check(t)
	cliCase{args: []string{"release", p.ID}, code: exitConflict, errOut: []string{"not active"}}.check(t)
	cliCase{args: []string{"alloc", "cancel", p.ID}, out: []string{"is cancelled"}}.check(t)

	// A waiting request is placed when the GPU is released.
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		ui := cli.NewMockUi()
		c := cli.NewCLI("dmsc", version)
		c.Args = []string{"alloc", "-type", "GPU", "-memory-gb", "50", "-timeout", "30s", "-wait"}
		c.Commands = commands(ui)
		code, _ := c.Run()
		done <- result{code, ui.OutputWriter.String(), ui.ErrorWriter.String()}
	}()
	waitQueue(t, 1)
	cliCase{args: []string{"release", a.ID}, out: []string{"is released"}}.check(t)
	if got := <-done; got.code != 0 || !strings.Contains(got.out, "active") {
		t.Fatalf("waiting alloc: exit %d\n%s%s", got.code, got.out, got.errOut)
	}
	cliCase{args: []string{"release", a.ID}, code: exitConflict, errOut: []string{"not active"}}.check(t)
	cliCase{args: []string{"history", "-limit", "0"}, out: []string{a.ID, "released", "ENDED"}}.check(t)
	var hist []wire.Allocation
	jsonOut(t, &hist, "history", "-status", "cancelled")
	if len(hist) != 1 || hist[0].ID != p.ID {
		t.Fatalf("cancelled history %+v", hist)
	}
	var refused wire.ErrorResponse
	code, stdout, _ := runCLI(t, "alloc", "-type", "GPU", "-memory-gb", "100", "-json")
	if err := json.Unmarshal([]byte(stdout), &refused); err != nil || code != exitCapacity || refused.Error.WhyNot == nil {
		t.Fatalf("refusal as JSON: exit %d %v %s", code, err, stdout)
	}
}

// waitQueue waits until n requests wait in the queue.
func waitQueue(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var q []wire.Allocation
		code, stdout, _ := runCLI(t, "alloc", "list", "-status", "pending", "-json")
		if code == 0 && json.Unmarshal([]byte(stdout), &q) == nil && len(q) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in the queue, want %d", len(q), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCLIDevicesPoliciesOperator(t *testing.T) {
	addr := apiNode(t)
	snap := filepath.Join(t.TempDir(), "state.snap")
	junk := filepath.Join(t.TempDir(), "junk.snap")
	if err := os.WriteFile(junk, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, tc := range []cliCase{
		{args: []string{"device", "list"}, out: []string{"c1", "g1", "g2", "memory_gb=80", "available"}},
		{args: []string{"device", "list", "-type", "GPU", "-status", "draining"}, out: []string{"No devices"}},
		{args: []string{"device", "drain", "g2"}, out: []string{"Device g2 is draining"}},
		{args: []string{"device", "status", "g2"}, out: []string{"Status       = draining", "Labels       = zone=a"}},
		{args: []string{"device", "list", "-status", "draining"}, out: []string{"g2"}},
		{args: []string{"device", "undrain", "g2"}, out: []string{"Device g2 is available"}},
		{args: []string{"device", "unhealthy", "g2"}, out: []string{"Device g2 is unhealthy"}},
		{args: []string{"device", "undrain", "g2"}, out: []string{"available"}},
		{args: []string{"device", "status", "nope"}, code: exitNotFound},
		{args: []string{"device", "drain"}, code: exitUsage},
		{args: []string{"device"}, code: exitUsage, errOut: []string{"Subcommands: list, status, drain"}},
		{args: []string{"host", "list"}, out: []string{"h1", "up", "zone=a"}},

		{args: []string{"policy", "get"}, out: []string{"GPU", "BestFit"}},
		{args: []string{"policy", "set", "-type", "gpu", "-policy", "worstfit"}, out: []string{"GPU       WorstFit"}},
		{args: []string{"policy", "set", "-type", "GPU", "-policy", "PriorityBased", "-gap", "20"}, out: []string{"PriorityBased  20"}},
		{args: []string{"policy", "set", "-pool", "batch", "-policy", "FirstFit"}, out: []string{"POOL", "batch", "FirstFit"}},
		{args: []string{"policy", "set", "-pool", "batch", "-policy", ""}, out: []string{"TYPE"}},
		{args: []string{"policy", "set", "-type", "GPU", "-policy", "Fastest"}, code: exitUsage, errOut: []string{"invalid"}},
		{args: []string{"policy", "set", "-policy", "BestFit"}, code: exitUsage, errOut: []string{"one of -type or -pool"}},

		{args: []string{"alloc", "-type", "GPU"}, out: []string{"active"}},
		{args: []string{"stats"}, out: []string{"TYPE", "POOL", "UTIL", "GPU", "default", "PriorityBased", "1/2"}},
		{args: []string{"stats", "-type", "GPU", "-pool", "*"}, out: []string{"GPU   *"}},
		{args: []string{"stats", "-type", "QPU"}, code: exitUsage},
		{args: []string{"recommend", "-type", "GPU"}, out: []string{"GPU:", "Evidence:"}},

		{args: []string{"members"}, out: []string{"s1", "server", "alive", "true"}},
		{args: []string{"operator", "raft", "list-peers"}, out: []string{"s1", "leader", "true"}},
		{args: []string{"operator", "raft", "remove-peer", "ghost"}, code: exitNotFound},
		{args: []string{"operator", "snapshot", "save", snap}, out: []string{"Saved snapshot at index", snap}},
		{args: []string{"operator", "snapshot", "restore", snap}, out: []string{"Restored snapshot"}},
		{args: []string{"operator", "snapshot", "restore", junk}, code: exitUsage, errOut: []string{"snapshot"}},
		{args: []string{"operator"}, code: exitUsage},

		// Targets: -address beats DMSC_ADDR; a list may hold a dead node.
		{args: []string{"host", "list", "-address", deadAddr}, code: exitError, errOut: []string{"connection refused"}},
		{args: []string{"host", "list", "-address", deadAddr + "," + addr}, out: []string{"h1"}},
	} {
		tc.check(t)
	}
	var devs []client.Device
	jsonOut(t, &devs, "device", "list", "-type", "GPU")
	if len(devs) != 2 || devs[0].ID != "g1" {
		t.Fatalf("devices as JSON: %+v", devs)
	}
	var stats []client.Stats
	jsonOut(t, &stats, "stats", "-type", "GPU")
	if len(stats) == 0 || stats[0].Type != client.GPU {
		t.Fatalf("stats as JSON: %+v", stats)
	}
	if info, err := os.Stat(snap); err != nil || info.Size() == 0 {
		t.Fatalf("snapshot file: %v %v", info, err)
	}
}
