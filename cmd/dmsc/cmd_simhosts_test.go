package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/hostsim"
)

func TestSimHostsUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-join", "127.0.0.1:1", "-hosts", "0"},
		{"-join", "127.0.0.1:1", "-tls-ca-file", "ca.pem"},
		{"-join", "127.0.0.1:1", "-churn-kills", "-1"},
		{"-join", "127.0.0.1:1", "-encrypt", "not base64!"},
		{"-join", "127.0.0.1:1", "extra"},
	} {
		ui := cli.NewMockUi()
		if code := (&simHostsCommand{ui: ui}).Run(args); code != exitUsage {
			t.Errorf("dmsc sim-hosts %s: exit %d, want %d; stderr %q", strings.Join(args, " "), code, exitUsage, ui.ErrorWriter.String())
		}
	}
}

// TestSimHostsControl: the control lines kill, restart and change the
// hosts they name, and answer with the hosts and counts.
func TestSimHostsControl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{Servers: 1, InMemory: true, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	sim, err := hostsim.Start(ctx, hostsim.Config{Hosts: 3, Join: []string{lc.Servers()[0].Self().GossipAddr},
		GossipProbeInterval: 100 * time.Millisecond})
	defer sim.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		line string
		want map[string]any
	}{
		{"kill 2", map[string]any{"hosts": []string{"sim-h00000", "sim-h00001"}}},
		{"status", map[string]any{"running": 1, "killed": 2}},
		{"restart 1", map[string]any{"hosts": []string{"sim-h00000"}}},
		{"change 5", map[string]any{"hosts": []string{"sim-h00000", "sim-h00002"}}},
		{"status", map[string]any{"running": 2, "killed": 1}},
		{"kill x", map[string]any{"error": "the count must be a number"}},
		{"fly 1", map[string]any{"error": "unknown command (kill, restart, change, status)"}},
	} {
		got := control(ctx, sim, c.line)
		for k, v := range c.want {
			if !equalJSONish(got[k], v) {
				t.Errorf("%q: %s = %v, want %v (answer %v)", c.line, k, got[k], v, got)
			}
		}
	}
}

func equalJSONish(a, b any) bool {
	as, aok := a.([]string)
	bs, bok := b.([]string)
	if aok && bok {
		return strings.Join(as, ",") == strings.Join(bs, ",")
	}
	return a == b
}
