package integration

// Storage damage and divergence (issue 13): each test ends in a clear
// error and a recovery by `dmsc operator raft resync`, or in an alarm,
// with no acknowledged write lost and no replica silently different.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// replicaState is a server's allocations (every status), read locally
// after a consistent read, in a form to compare across servers.
func replicaState(ctx context.Context, c *Cluster, p *Process) (string, error) {
	var list wire.AllocationList
	if err := c.Get(ctx, p, "/v1/allocations?consistent&limit=1000", &list); err != nil {
		return "", err
	}
	lines := make([]string, len(list.Allocations))
	for i, a := range list.Allocations {
		lines[i] = fmt.Sprintf("%s %s %s %v %d %s", a.ID, a.Status, a.Host, a.Devices, a.CreateIndex, a.RequestedAt.UTC().Format(time.RFC3339Nano))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// waitSameState polls until p's allocations are those of ref.
func waitSameState(ctx context.Context, c *Cluster, ref, p *Process) error {
	var last error
	err := poll(ctx, 200*time.Millisecond, func() (bool, error) {
		want, err := replicaState(ctx, c, ref)
		if err != nil {
			last = err
			return false, nil
		}
		got, err := replicaState(ctx, c, p)
		if err != nil {
			last = err
			return false, nil
		}
		if got != want {
			last = fmt.Errorf("%s has %d lines of allocations, %s %d, and they differ", p.Name, strings.Count(got, "\n")+1, ref.Name, strings.Count(want, "\n")+1)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return nil
}

// expectExit marks p's own exit as expected by the test.
func expectExit(p *Process) {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
}

// follower returns a running server that is not the leader.
func follower(t *testing.T, ctx context.Context, c *Cluster) (*Process, *Process) {
	t.Helper()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return Except(c.Servers, leader)[0], leader
}

// allocateMany writes n allocations of one GPU each, released again so
// that the devices do not run out (but the last), through the servers.
func allocateMany(t *testing.T, ctx context.Context, c *Cluster, targets []*Process, prefix string, n int) {
	t.Helper()
	for i := range n {
		a := allocate(t, ctx, c, targets, gpuRequest(fmt.Sprintf("%s-%d", prefix, i), 1, ""))
		if i != n-1 {
			release(t, ctx, c, targets, a.ID)
		}
	}
}

// runResync runs `dmsc operator raft resync` on p's data directory,
// through the API of another running server.
func runResync(t *testing.T, c *Cluster, p *Process) {
	t.Helper()
	other := Running(Except(c.Servers, p))[0]
	args := []string{"operator", "raft", "resync", "-data-dir", p.DataDir, "-node", p.Name, "-address", other.URL("")}
	if c.Token != "" {
		args = append(args, "-token", c.Token)
	}
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("resync %s: %v\n%s", p.Name, err, out)
	}
	t.Logf("resync: %s", bytes.TrimSpace(out))
}

// damageScenario: a follower is stopped, damage is done to its data
// directory, more writes land while it is down, and it is started again.
// It must either refuse to start (or stop) with a clear error naming the
// damage and the resync command, after which resync brings it back with
// the others' state; or, when the damage hit nothing in use, come back
// with exactly the others' state. It returns whether it refused.
//
// When given, settled says when the victim's data directory holds what the
// damage needs (a second snapshot, say): more writes are made until it
// does.
func damageScenario(t *testing.T, opts Options, writes int, damage func(t *testing.T, p *Process), settled ...func(p *Process) bool) bool {
	c := StartCluster(t, opts)
	ctx := testContext(t, 240*time.Second)
	waitInventory(t, ctx, c)
	allocateMany(t, ctx, c, c.Servers, "before", writes)
	victim, leader := follower(t, ctx, c)
	for i := 0; len(settled) > 0 && !settled[0](victim); i++ {
		if ctx.Err() != nil {
			t.Fatalf("%s never settled: %v", victim.Name, ctx.Err())
		}
		// Allocate and release: the GPUs stay free for what follows.
		a := allocate(t, ctx, c, c.Servers, gpuRequest(fmt.Sprintf("settle-%d", i), 1, ""))
		release(t, ctx, c, c.Servers, a.ID)
	}
	if err := victim.Stop(); err != nil {
		t.Fatal(err)
	}
	damage(t, victim)
	allocateMany(t, ctx, c, Except(c.Servers, victim), "while-down", 4)

	start := time.Now()
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	refused := false
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		if victim.ExitState() != nil {
			refused = true
			return true, nil
		}
		st, err := c.Status(ctx, victim)
		return err == nil && st.Ready, nil
	})
	if err != nil {
		t.Fatalf("%s neither refused nor became ready: %v", victim.Name, err)
	}
	if !refused {
		// Nothing in use was hit: the replica must be the same, and stay
		// up (a corrupt entry met later stops it: give it a moment).
		if err := waitSameState(ctx, c, leader, victim); err != nil {
			if victim.ExitState() == nil {
				t.Fatalf("%s came back serving a different state: %v", victim.Name, err)
			}
			refused = true
		} else {
			t.Logf("%s came back with the same state in %v: the damage hit no page in use", victim.Name, time.Since(start).Round(time.Millisecond))
		}
	}
	if refused {
		expectExit(victim)
		if err := victim.wait(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		st := victim.ExitState()
		log, _ := os.ReadFile(victim.LogPath)
		t.Logf("%s exited with %v after %v", victim.Name, st, time.Since(start).Round(time.Millisecond))
		if st.ExitCode() == 0 {
			t.Errorf("%s exited 0 after refusing", victim.Name)
		}
		for _, line := range bytes.Split(log, []byte("\n")) {
			if bytes.HasPrefix(line, []byte("dmsc agent:")) {
				t.Logf("%s said: %s", victim.Name, line)
			}
		}
		if bytes.Contains(log, []byte("panic:")) {
			t.Errorf("%s panicked:\n%s", victim.Name, tail(victim.LogPath, 40))
		}
		if !bytes.Contains(log, []byte("dmsc operator raft resync -data-dir")) ||
			!(bytes.Contains(log, []byte("damaged")) || bytes.Contains(log, []byte("corrupt"))) {
			t.Errorf("%s's log names no damage or no resync:\n%s", victim.Name, tail(victim.LogPath, 20))
		}
		// Restarting without the resync refuses again: no crash loop of
		// panics, the same clear error.
		runResync(t, c, victim)
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx, victim); err != nil {
			t.Fatalf("%s after resync: %v", victim.Name, err)
		}
		if err := waitSameState(ctx, c, leader, victim); err != nil {
			t.Fatalf("after resync: %v", err)
		}
		t.Logf("%s back after resync with the same state in %v", victim.Name, time.Since(start).Round(time.Millisecond))
	}
	// Every acknowledged write is there, on every server.
	allocateMany(t, ctx, c, c.Servers, "after", 2)
	for _, s := range c.Servers {
		if err := waitSameState(ctx, c, leader, s); err != nil {
			t.Fatal(err)
		}
	}
	return refused
}

// TestRandomBytesInRaftDB: 8 KB of random bytes at offset 64 KB of a
// stopped server's raft.db, then a restart.
func TestRandomBytesInRaftDB(t *testing.T) {
	damageScenario(t, Options{}, 60, func(t *testing.T, p *Process) {
		path := filepath.Join(p.DataDir, "raft", "raft.db")
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, _ := f.Stat()
		junk := make([]byte, 8<<10)
		_, _ = rand.Read(junk)
		if _, err := f.WriteAt(junk, 64<<10); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote 8 KB of random bytes at 64 KB into %s (%d bytes)", path, st.Size())
	})
}

// TestTruncatedRaftDB: a stopped server's raft.db cut to half its size.
func TestTruncatedRaftDB(t *testing.T) {
	refused := damageScenario(t, Options{}, 60, func(t *testing.T, p *Process) {
		path := filepath.Join(p.DataDir, "raft", "raft.db")
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		t.Logf("truncated %s from %d to %d bytes", path, st.Size(), st.Size()/2)
	})
	if !refused {
		t.Error("a server with a truncated raft.db started")
	}
}

// TestCorruptNewestSnapshot: the newest snapshot of a stopped server is
// damaged, with so few trailing logs that the log does not reach back to
// the older one.
func TestCorruptNewestSnapshot(t *testing.T) {
	snapshots := func(p *Process) []string {
		metas, _ := filepath.Glob(filepath.Join(p.DataDir, "raft", "snapshots", "*", "state.bin"))
		return metas
	}
	refused := damageScenario(t, Options{ServerArgs: []string{
		"-snapshot-threshold", "16", "-snapshot-interval", "200ms", "-trailing-logs", "8",
	}}, 40, func(t *testing.T, p *Process) {
		metas := snapshots(p)
		if len(metas) < 2 {
			t.Fatalf("%s has %d snapshots, want 2", p.Name, len(metas))
		}
		// Directory names are term-index-time.
		index := func(p string) int {
			var term, idx int
			fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d-%d-", &term, &idx)
			return idx
		}
		sort.Slice(metas, func(i, j int) bool { return index(metas[i]) < index(metas[j]) })
		newest := metas[len(metas)-1]
		f, err := os.OpenFile(newest, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, _ := f.Stat()
		if _, err := f.WriteAt([]byte("garbage!"), st.Size()/2); err != nil {
			t.Fatal(err)
		}
		t.Logf("damaged %s", newest)
	}, func(p *Process) bool { return len(snapshots(p)) >= 2 })
	if !refused {
		t.Error("a server with a corrupt newest snapshot and a short log started")
	}
}

// TestDivergentReplicaAlarm: one server applies one allocation
// differently (a test-only fault); the state hashes differ at the next
// checkpoint, the alarm shows on every server, and the divergent one
// stops answering reads. Resync brings it back in line.
func TestDivergentReplicaAlarm(t *testing.T) {
	c := NewCluster(t, Options{ServerArgs: []string{"-state-hash-interval", "16"}})
	bad := c.Servers[2]
	bad.BeforeStart = func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, "DMSC_TEST_DIVERGE_AT=1") }
	ctx := testContext(t, 180*time.Second)
	if err := c.Start(c.All()...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, c.All()...); err != nil {
		t.Fatal(err)
	}
	waitInventory(t, ctx, c)
	start := time.Now()
	good := Except(c.Servers, bad)
	allocateMany(t, ctx, c, good, "diverge", 40)

	// The divergent server reports it and refuses reads.
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		var h wire.Health
		_, err := c.Do(ctx, bad, http.MethodGet, "/v1/health", nil, &h)
		var apiErr *APIError
		return errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable, nil
	})
	if err != nil {
		t.Fatalf("%s never reported its divergence: %v", bad.Name, err)
	}
	t.Logf("divergence detected in %v", time.Since(start).Round(time.Millisecond))
	_, err = c.Do(ctx, bad, http.MethodGet, "/v1/allocations", nil, &wire.AllocationList{})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || apiErr.Body.Code != wire.CodeReplicaFailed {
		t.Fatalf("a read on the divergent server: %v", err)
	}
	// The others raise the alarm, naming it, and keep serving.
	for _, s := range good {
		err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
			var h wire.Health
			if _, err := c.Do(ctx, s, http.MethodGet, "/v1/health", nil, &h); err != nil {
				return false, err
			}
			return len(h.Alarms) > 0 && strings.Contains(h.Alarms[0], "divergent: "+bad.Name), nil
		})
		if err != nil {
			t.Fatalf("%s shows no alarm: %v", s.Name, err)
		}
		metrics, err := metricsText(ctx, c, s)
		if err != nil || !strings.Contains(metrics, "dmsc_state_divergence 1") {
			t.Errorf("%s metrics: %v", s.Name, err)
		}
		// The divergent server's own flag reaches the others by gossip.
		err = poll(ctx, 100*time.Millisecond, func() (bool, error) {
			var members []wire.Member
			if err := c.Get(ctx, s, "/v1/cluster/members", &members); err != nil {
				return false, err
			}
			for _, m := range members {
				if m.ID == bad.Name {
					return m.Integrity == "diverged", nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%s never listed %s as diverged: %v", s.Name, bad.Name, err)
		}
		if _, err := replicaState(ctx, c, s); err != nil {
			t.Errorf("%s stopped serving: %v", s.Name, err)
		}
	}
	if log, _ := os.ReadFile(bad.LogPath); !bytes.Contains(log, []byte("state differs from the other servers")) {
		t.Errorf("%s logged no divergence", bad.Name)
	}

	// Resync: stopped, moved aside, started without the fault.
	if err := bad.Stop(); err != nil {
		t.Fatal(err)
	}
	runResync(t, c, bad)
	// Resync took it out of the configuration: empty, it must not vote.
	var rc wire.RaftConfiguration
	if err := c.Get(ctx, good[0], "/v1/cluster/raft", &rc); err != nil {
		t.Fatal(err)
	}
	for _, srv := range rc.Servers {
		if srv.ID == bad.Name {
			t.Fatalf("after resync %s is still in the Raft configuration: %+v", bad.Name, rc.Servers)
		}
	}
	bad.BeforeStart = nil
	if err := bad.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, bad); err != nil {
		t.Fatal(err)
	}
	// Readmitted, it is added back as a non-voter first, then made a voter.
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		var rc wire.RaftConfiguration
		if err := c.Get(ctx, good[0], "/v1/cluster/raft", &rc); err != nil {
			return false, nil
		}
		for _, srv := range rc.Servers {
			if srv.ID == bad.Name {
				return srv.Voter, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%s never became a voter again: %v", bad.Name, err)
	}
	allocateMany(t, ctx, c, c.Servers, "after", 20)
	if err := waitSameState(ctx, c, good[0], bad); err != nil {
		t.Fatal(err)
	}
	var h wire.Health
	if _, err := c.Do(ctx, bad, http.MethodGet, "/v1/health", nil, &h); err != nil {
		t.Fatalf("health after resync: %v", err)
	}
}

// metricsText reads p's /metrics.
func metricsText(ctx context.Context, c *Cluster, p *Process) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL("/metrics"), nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return b.String(), err
}
