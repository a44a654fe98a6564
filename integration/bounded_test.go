package integration

// Restores that keep IDs and indexes, bounded waits, a locked data
// directory, bounded shutdowns and a full disk, each with real processes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// indexOf reads X-Dmsc-Index from an answer's header.
func indexOf(t *testing.T, h http.Header) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(h.Get(wire.HeaderIndex), 10, 64)
	if err != nil {
		t.Fatalf("%s %q: %v", wire.HeaderIndex, h.Get(wire.HeaderIndex), err)
	}
	return v
}

// writeIndexed sends a write and returns the header of the answer,
// retrying retryable failures (same request ID) on the next target.
func writeIndexed(ctx context.Context, c *Cluster, targets []*Process, path, requestID string, in, out any) (http.Header, error) {
	for i := 0; ; i++ {
		p := targets[i%len(targets)]
		actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
		h, err := c.do(actx, p, http.MethodPost, path, requestID, in, out)
		cancel()
		if err == nil || !Retryable(err) || ctx.Err() != nil {
			return h, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawDo sends a body that is not JSON (a snapshot).
func rawDo(ctx context.Context, c *Cluster, p *Process, method, path string, body []byte) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.URL(path), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode >= 300 {
		err = fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return b, resp.Header, err
}

// TestRestoreHighIndexIntoFreshCluster saves a snapshot after 500 writes,
// restores it into a fresh 3-server cluster, then makes 1,000 allocations:
// none conflicts, X-Dmsc-Index never goes back on any answer, and the two
// fresh clusters handed out different first allocation IDs.
func TestRestoreHighIndexIntoFreshCluster(t *testing.T) {
	ctx := testContext(t, 8*time.Minute)
	src := StartCluster(t, Options{Servers: 1, Hosts: 1})
	first := allocate(t, ctx, src, src.Servers, gpuRequest("src-first", 1, ""))
	release(t, ctx, src, src.Servers, first.ID)
	for i := range 250 {
		a := allocate(t, ctx, src, src.Servers, gpuRequest(fmt.Sprintf("src-%d", i), 1, ""))
		release(t, ctx, src, src.Servers, a.ID)
	}
	snap, h, err := rawDo(ctx, src, src.Servers[0], http.MethodGet, "/v1/snapshot", nil)
	if err != nil {
		t.Fatal(err)
	}
	saved := indexOf(t, h)
	if saved < 500 {
		t.Fatalf("snapshot saved at index %d, want at least 500", saved)
	}
	if err := src.Stop(src.All()...); err != nil {
		t.Fatal(err)
	}

	dst := StartCluster(t, Options{Servers: 3, Hosts: 1})
	dstFirst := allocate(t, ctx, dst, dst.Servers, gpuRequest("dst-first", 1, ""))
	if dstFirst.ID == first.ID {
		t.Fatalf("two fresh clusters handed out the same first allocation id %s", first.ID)
	}
	release(t, ctx, dst, dst.Servers, dstFirst.ID)
	leader, err := dst.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, h, err = rawDo(ctx, dst, leader, http.MethodPut, "/v1/snapshot", snap); err != nil {
		t.Fatal(err)
	}
	if got := indexOf(t, h); got <= saved {
		t.Logf("restore answered index %d (saved %d)", got, saved)
	}
	// Every server has the restored state and an index above the saved one.
	for _, s := range dst.Servers {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var a wire.Allocation
			hh, err := dst.Do(ctx, s, http.MethodGet, "/v1/allocations/"+first.ID, nil, &a)
			if err == nil && indexOf(t, hh) > saved {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: restored allocation %s not readable above index %d: %v", s.Name, first.ID, saved, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	const workers, each = 4, 250
	var (
		mu  sync.Mutex
		ids = map[string]string{}
		wg  sync.WaitGroup
	)
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			targets := append(dst.Servers[w%3:], dst.Servers[:w%3]...)
			last := saved
			check := func(h http.Header, what string) error {
				idx, err := strconv.ParseUint(h.Get(wire.HeaderIndex), 10, 64)
				if err != nil {
					return fmt.Errorf("%s: %s %q", what, wire.HeaderIndex, h.Get(wire.HeaderIndex))
				}
				if idx <= last {
					return fmt.Errorf("%s: %s went from %d to %d", what, wire.HeaderIndex, last, idx)
				}
				last = idx
				return nil
			}
			for i := range each {
				rid := fmt.Sprintf("dst-%d-%d", w, i)
				var a wire.Allocation
				h, err := writeIndexed(ctx, dst, targets, "/v1/allocations", rid, gpuRequest(rid, 1, ""), &a)
				if err != nil {
					errc <- fmt.Errorf("allocate %s: %w", rid, err)
					return
				}
				if err := check(h, "allocate "+rid); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				if prev, dup := ids[a.ID]; dup || a.ID == first.ID {
					mu.Unlock()
					errc <- fmt.Errorf("allocation id %s handed out to %s and %s", a.ID, prev, rid)
					return
				}
				ids[a.ID] = rid
				mu.Unlock()
				h, err = writeIndexed(ctx, dst, targets, "/v1/allocations/"+a.ID+"/release", "rel-"+rid, nil, nil)
				if err != nil {
					errc <- fmt.Errorf("release %s: %w", a.ID, err)
					return
				}
				if err := check(h, "release "+rid); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if len(ids) != workers*each && !t.Failed() {
		t.Fatalf("%d allocations, want %d", len(ids), workers*each)
	}
}

// TestFrozenLeaderFollowerWrite freezes the leader and sends a write to a
// follower: it answers within the request deadline (plus an election)
// with a retryable 503/504, or succeeds with the new leader. The frozen
// server is thawed after.
func TestFrozenLeaderFollowerWrite(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := StartCluster(t, Options{Servers: 3, Hosts: 1})
	for round := range 2 {
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		follower := Except(c.Servers, leader)[0]
		if err := leader.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		rid := fmt.Sprintf("frozen-%d", round)
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var a wire.Allocation
		_, werr := c.do(actx, follower, http.MethodPost, "/v1/allocations", rid, gpuRequest(rid, 1, ""), &a)
		cancel()
		took := time.Since(start)
		start = time.Now()
		var rerr error
		{
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, rerr = c.do(actx, follower, http.MethodGet, "/v1/allocations?consistent", "", nil, nil)
			cancel()
		}
		readTook := time.Since(start)
		if err := leader.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: write to %s with %s frozen: %v after %v; consistent read: %v after %v", round, follower.Name, leader.Name, werr, took, rerr, readTook)
		// The deadline (2x the 500 ms election timeout) and one election.
		const bound = 4 * time.Second
		for _, r := range []struct {
			what string
			err  error
			took time.Duration
		}{{"write", werr, took}, {"consistent read", rerr, readTook}} {
			var ae *APIError
			if r.err != nil && (!errors.As(r.err, &ae) || !ae.Body.Retryable || (ae.Status != 503 && ae.Status != 504)) {
				t.Fatalf("%s while the leader is frozen: %v, want success or a retryable 503/504", r.what, r.err)
			}
			if r.took > bound {
				t.Fatalf("%s while the leader is frozen took %v, more than %v", r.what, r.took, bound)
			}
		}
		// The write is safe to send again with its request ID.
		allocate(t, ctx, c, c.Servers, gpuRequest(rid, 1, ""))
		if err := c.WaitReady(ctx, c.Servers...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSecondAgentOnDataDir starts a second agent on the data directory of
// a running server: it exits non-zero within a few seconds, naming the
// directory.
func TestSecondAgentOnDataDir(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := StartCluster(t, Options{Servers: 1, Hosts: -1})
	s := c.Servers[0]
	other := newProcess(t, "s1-again", true, t.TempDir())
	args := append(other.commonArgs(), "-server", "-bootstrap-expect", "1", "-data-dir", s.DataDir)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, binary, args...)
	cmd.Env = agentEnv()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Fatalf("second agent: %v after %v, want a non-zero exit\n%s", err, took, out)
	}
	if took > 5*time.Second {
		t.Fatalf("second agent took %v to exit", took)
	}
	if !strings.Contains(string(out), s.DataDir) || !strings.Contains(string(out), "in use") {
		t.Fatalf("second agent's message does not name the directory %s:\n%s", s.DataDir, out)
	}
	t.Logf("second agent exited in %v: %s", took.Round(time.Millisecond), lastLine(out))
	// The first is unharmed.
	if err := c.WaitReady(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// TestFreezeResumeStop pauses the leader past an election, resumes it, then
// stops the whole cluster with SIGTERM, and starts it again: every server
// exits cleanly within 10 s each time. DMSC_TEST_STOP_CYCLES sets the
// number of cycles (the 50; 5 by default to fit CI).
func TestFreezeResumeStop(t *testing.T) {
	cycles := 5
	if v := os.Getenv("DMSC_TEST_STOP_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DMSC_TEST_STOP_CYCLES=%q", v)
		}
		cycles = n
	}
	ctx := testContext(t, time.Duration(cycles)*40*time.Second+time.Minute)
	c := StartCluster(t, Options{Servers: 3, Hosts: -1})
	var slowest time.Duration
	for cycle := range cycles {
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		if err := leader.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Past the election timeout: the others elect a new leader.
		time.Sleep(1500 * time.Millisecond)
		if err := leader.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(cycle%4) * 100 * time.Millisecond)
		start := time.Now()
		if err := c.Stop(c.Servers...); err != nil {
			t.Fatalf("cycle %d: stop after %v: %v", cycle, time.Since(start), err)
		}
		took := time.Since(start)
		slowest = max(slowest, took)
		if took > 10*time.Second {
			t.Fatalf("cycle %d: stopping the cluster took %v", cycle, took)
		}
		if err := c.Start(c.Servers...); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx, c.Servers...); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
	}
	t.Logf("%d cycles; slowest stop of the whole cluster %v", cycles, slowest)
}

// TestFullDiskFollower makes a follower's store writes fail as on a full
// disk (a fault file named by the test-only DMSC_TEST_STORE_FAULT_FILE):
// it goes not ready with the reason, refuses local reads with a retryable
// 503 storage_failed, and recovers by itself once the fault clears, with
// every acknowledged write.
func TestFullDiskFollower(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := NewCluster(t, Options{Servers: 3, Hosts: 1})
	faults := t.TempDir()
	for _, s := range c.Servers {
		fault := filepath.Join(faults, s.Name)
		s.BeforeStart = func(cmd *exec.Cmd) {
			cmd.Env = append(cmd.Env, "DMSC_TEST_STORE_FAULT_FILE="+fault)
		}
	}
	if err := c.Start(c.All()...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, c.All()...); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := Except(c.Servers, leader)[0]
	fault := filepath.Join(faults, f.Name)
	if err := os.WriteFile(fault, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var acked []string
	for i := range 10 {
		a := allocate(t, ctx, c, []*Process{leader}, gpuRequest(fmt.Sprintf("full-%d", i), 1, ""))
		release(t, ctx, c, []*Process{leader}, a.ID)
		acked = append(acked, a.ID)
	}
	poll := func(what string, ok func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := ok()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	poll(f.Name+" not ready", func() error {
		st, err := c.Status(ctx, f)
		if err != nil {
			return err
		}
		if st.Ready || !strings.Contains(st.Reason, "store") {
			return fmt.Errorf("ready=%v reason %q", st.Ready, st.Reason)
		}
		t.Logf("%s not ready: %s", f.Name, st.Reason)
		return nil
	})
	err = c.Get(ctx, f, "/v1/allocations", nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Body.Code != wire.CodeStorageFailed || !ae.Body.Retryable {
		t.Fatalf("local read on %s with a full disk: %v, want a retryable 503 %s", f.Name, err, wire.CodeStorageFailed)
	}
	if err := os.Remove(fault); err != nil {
		t.Fatal(err)
	}
	poll(f.Name+" ready again", func() error {
		st, err := c.Status(ctx, f)
		if err != nil {
			return err
		}
		if !st.Ready {
			return fmt.Errorf("not ready: %s", st.Reason)
		}
		return nil
	})
	for _, id := range acked {
		poll("allocation "+id+" on "+f.Name, func() error {
			var a wire.Allocation
			return c.Get(ctx, f, "/v1/allocations/"+id, &a)
		})
	}
}
