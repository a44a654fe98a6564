package integration

// Rolling upgrades (issue 13): a mixed-version cluster never crash-loops.
// "New" servers run with DMSC_TEST_EXTRA_COMMAND=1, which makes the binary
// know one more command type (fsm.TestNoopType, written by POST
// /v1/operator/test-noop) and advertise the feature level above; "old"
// ones run without it.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

var newVersionEnv = []string{"DMSC_TEST_EXTRA_COMMAND=1"}

// oldLevel and newLevel are the feature levels the old and the new
// version advertise: this build's, and the one the test command needs.
var (
	oldLevel    = fsm.FeatureLevel()
	newSince, _ = fsm.CommandSince(fsm.TestNoopType)
	newLevel    = newSince.Level
)

// writeNoop writes the new command type through p (which must run the new
// version: only it serves the route).
func writeNoop(ctx context.Context, c *Cluster, p *Process, requestID string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out map[string]uint64
	_, err := c.do(ctx, p, http.MethodPost, "/v1/operator/test-noop", requestID, nil, &out)
	return err
}

// waitLevels polls p's member list until every server has the feature
// level of want (by name).
func waitLevels(ctx context.Context, c *Cluster, p *Process, want map[string]int) error {
	var last string
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		var ms []wire.Member
		if err := c.Get(ctx, p, "/v1/cluster/members", &ms); err != nil {
			last = err.Error()
			return false, nil
		}
		got := map[string]int{}
		for _, m := range ms {
			if m.Server && m.Status == "alive" {
				got[m.ID] = max(m.FeatureLevel, 1)
			}
		}
		last = fmt.Sprint(got)
		for id, l := range want {
			if got[id] != l {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("feature levels seen by %s: %w (last %s, want %v)", p.Name, err, last, want)
	}
	return nil
}

// noPanics fails the test when a process's log holds a panic.
func noPanics(t *testing.T, ps ...*Process) {
	t.Helper()
	for _, p := range ps {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "panic:") {
			t.Errorf("%s's log has a panic:\n%s", p.Name, tail(p.LogPath, 60))
		}
	}
}

// allRunning fails the test unless every process of ps runs.
func allRunning(t *testing.T, ps ...*Process) {
	t.Helper()
	for _, p := range ps {
		if !p.Running() {
			t.Fatalf("%s is not running: %v\n%s", p.Name, p.ExitState(), tail(p.LogPath, 40))
		}
	}
}

// TestRollingUpgradeGatesNewCommand: one new and two old servers. The new
// command type is refused (409 feature_unavailable naming the old
// servers) while any old server is in the configuration; old commands and
// reads go on; nothing exits. Once the old servers are restarted as new
// ones, one at a time, the new type is accepted and applied everywhere.
func TestRollingUpgradeGatesNewCommand(t *testing.T) {
	c := NewCluster(t, Options{Hosts: 1})
	ctx := testContext(t, 3*time.Minute)
	s1, s2, s3 := c.Servers[0], c.Servers[1], c.Servers[2]
	s1.Env = newVersionEnv
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitLevels(ctx, c, s1, map[string]int{"s1": newLevel, "s2": oldLevel, "s3": oldLevel}); err != nil {
		t.Fatal(err)
	}

	// Gated: refused whoever leads, naming the old servers.
	err := writeNoop(ctx, c, s1, "noop-gated")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Body.Code != wire.CodeFeatureUnavailable || ae.Body.Retryable {
		t.Fatalf("new command in a mixed cluster: %v, want 409 %s", err, wire.CodeFeatureUnavailable)
	}
	for _, want := range []string{"s2 (dmsc", "s3 (dmsc", fmt.Sprintf("feature level %d", newLevel)} {
		if !strings.Contains(ae.Body.Message, want) {
			t.Errorf("refusal %q does not say %q", ae.Body.Message, want)
		}
	}
	if strings.Contains(ae.Body.Message, "s1 (") {
		t.Errorf("refusal %q names s1, which is new", ae.Body.Message)
	}
	t.Logf("gated: %s", ae.Body.Message)
	// Old commands and reads work in the mixed cluster, through any server.
	a := allocate(t, ctx, c, c.Servers, gpuRequest("upgrade-before", 1, ""))
	for _, p := range c.Servers {
		if _, err := getAllocation(ctx, c, p, a.ID); err != nil {
			t.Fatalf("read on %s: %v", p.Name, err)
		}
	}
	allRunning(t, c.All()...)

	// Rolling upgrade: s2, then s3. While s3 is old, still refused.
	for i, p := range []*Process{s2, s3} {
		if err := c.Stop(p); err != nil {
			t.Fatal(err)
		}
		p.Env = newVersionEnv
		if err := c.Start(p); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx, p); err != nil {
			t.Fatal(err)
		}
		allocate(t, ctx, c, c.Servers, gpuRequest(fmt.Sprintf("upgrade-during-%d", i), 1, ""))
		if i == 0 {
			if err := waitLevels(ctx, c, s1, map[string]int{"s1": newLevel, "s2": newLevel, "s3": oldLevel}); err != nil {
				t.Fatal(err)
			}
			if err := writeNoop(ctx, c, s2, "noop-half"); !errors.As(err, &ae) || ae.Body.Code != wire.CodeFeatureUnavailable || !strings.Contains(ae.Body.Message, "s3 (dmsc") {
				t.Fatalf("new command with s3 still old: %v", err)
			}
		}
	}
	// Every server new: accepted once the leader's gossip shows it.
	for _, p := range c.Servers {
		if err := waitLevels(ctx, c, p, map[string]int{"s1": newLevel, "s2": newLevel, "s3": newLevel}); err != nil {
			t.Fatal(err)
		}
	}
	err = poll(ctx, 200*time.Millisecond, func() (bool, error) {
		err := writeNoop(ctx, c, s3, "noop-upgraded")
		if errors.As(err, &ae) && (ae.Body.Code == wire.CodeFeatureUnavailable || ae.Body.Retryable) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("new command after the upgrade: %v", err)
	}
	// Applied everywhere: every server still answers consistent reads.
	for _, p := range c.Servers {
		if _, err := getAllocation(ctx, c, p, a.ID); err != nil {
			t.Fatalf("read on %s after the new command: %v", p.Name, err)
		}
	}
	allRunning(t, c.All()...)
	noPanics(t, c.All()...)
}

// TestBypassedFeatureGateStopsOldServers: a new leader with its gate
// turned off writes the new command type while two old servers are in
// the configuration. The old servers stop with a message naming the
// version they need, exit non-zero, refuse to start again as old (the
// same message, no panic), and come back once upgraded, with the entry.
func TestBypassedFeatureGateStopsOldServers(t *testing.T) {
	c := NewCluster(t, Options{Hosts: -1})
	ctx := testContext(t, 3*time.Minute)
	s1 := c.Servers[0]
	s1.Env = append(append([]string(nil), newVersionEnv...), "DMSC_TEST_SKIP_FEATURE_GATE=1")
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	// s1 must lead: an old leader cannot even decode the command. Restart
	// old leaders until it does.
	for try := 0; ; try++ {
		l, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l == s1 {
			break
		}
		if try == 12 {
			t.Fatalf("s1 never became the leader")
		}
		if err := c.Stop(l); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(l); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	old := c.Servers[1:]
	if err := writeNoop(ctx, c, s1, "noop-bypassed"); err != nil {
		t.Fatalf("new command with the gate off: %v", err)
	}
	want := fmt.Sprintf("has command type 250, which needs dmsc >= %s (feature level %d); this server runs dmsc", newSince.Version, newLevel)
	checkStopped := func(p *Process, what string) {
		t.Helper()
		if err := p.wait(30 * time.Second); err != nil {
			t.Fatalf("%s (%s): %v\n%s", p.Name, what, err, tail(p.LogPath, 40))
		}
		expectExit(p)
		st := p.ExitState()
		if st.Success() || st.ExitCode() <= 0 {
			t.Fatalf("%s (%s) exited with %v, want a non-zero exit", p.Name, what, st)
		}
		b, _ := os.ReadFile(p.LogPath)
		if !strings.Contains(string(b), want) || !strings.Contains(string(b), "upgrade this server") {
			t.Fatalf("%s (%s): log does not say %q:\n%s", p.Name, what, want, tail(p.LogPath, 40))
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, want) {
				t.Logf("%s (%s, %v): %s", p.Name, what, st, line)
				break
			}
		}
	}
	for _, p := range old {
		checkStopped(p, "applying the entry")
	}
	// Started again as old: it stops at once, the same way (no loop of
	// panics, no damage reported).
	if err := os.Truncate(old[0].LogPath, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(old[0]); err != nil {
		t.Fatal(err)
	}
	checkStopped(old[0], "restarted without the upgrade")
	if b, _ := os.ReadFile(old[0].LogPath); strings.Contains(string(b), "damaged") {
		t.Errorf("an old server reported damage for a newer command:\n%s", tail(old[0].LogPath, 40))
	}
	noPanics(t, c.Servers...)

	// Upgraded, they rejoin and the cluster works.
	for _, p := range old {
		p.Env = newVersionEnv
	}
	if err := c.Start(old...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, c.Servers...); err != nil {
		t.Fatal(err)
	}
	err := poll(ctx, 200*time.Millisecond, func() (bool, error) {
		err := writeNoop(ctx, c, old[0], "noop-after")
		var ae *APIError
		if errors.As(err, &ae) && ae.Body.Retryable {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("new command after upgrading: %v", err)
	}
	allRunning(t, c.Servers...)
	noPanics(t, c.Servers...)
}
