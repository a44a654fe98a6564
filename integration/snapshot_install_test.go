package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/inventory"
)

// TestSnapshotInstallUnderLoad: a follower that was down while the leader
// wrote past its trailing logs comes back and needs InstallSnapshot of a
// state of 8,000 devices and some thousands of history records, while a
// client keeps writing to the leader, which takes snapshots of its own
// all along (low threshold). No write acknowledged during the install may
// have taken more than 100 ms: the leader's snapshots hold the state's
// lock only to capture what changes in place, and the follower's restore
// does not touch the leader.
//
// The bound is checked only where it can be measured: with
// DMSC_LATENCY_BOUNDS=1 (a machine with cores to spare for three servers,
// two hosts and the follower's restore: on two shared cores the
// follower's own restore, before it even contacts the leader, already
// delays the leader's writes past 100 ms), not under the race detector,
// and not when the same writes already took longer than the bound before
// the restart (the test then skips, saying so). Otherwise it logs the
// figures and checks the rest: the follower installed the leader's
// snapshot, caught up, and every write was acknowledged.
func TestSnapshotInstallUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of load on a 3-server cluster")
	}
	const (
		devicesPerHost = 4000
		history        = 3000 // records written before the follower stops
		trailing       = 200
		limit          = 100 * time.Millisecond
	)
	bigHost := func(host string) inventory.File {
		f := inventory.File{Host: fsm.HostSpec{ID: host, Labels: map[string]string{"node": host}}}
		for i := range devicesPerHost {
			f.Devices = append(f.Devices, fsm.DeviceSpec{
				ID: fmt.Sprintf("%s-gpu%04d", host, i), Type: fsm.GPU, Name: "A100-SXM4-80GB", Pool: "pool-" + strconv.Itoa(i%8),
				Labels:       map[string]string{"rack": "r" + strconv.Itoa(i/64)},
				Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 80, ComputeUnits: 108}},
			})
		}
		return f
	}
	c := StartCluster(t, Options{Hosts: 2, Devices: bigHost, ServerArgs: []string{
		"-snapshot-threshold", "500", "-snapshot-interval", "250ms", "-trailing-logs", strconv.Itoa(trailing),
	}})
	ctx := testContext(t, 150*time.Second)
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		leader, err := c.Leader(ctx)
		if err != nil {
			return false, err
		}
		ds, err := devices(ctx, c, leader, "&status=available")
		return err == nil && len(ds) == 2*devicesPerHost, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d devices: %v", 2*devicesPerHost, err)
	}

	// cycle allocates one GPU and releases it: two writes, one history
	// record. It returns how long each write took to be acknowledged.
	var seq atomic.Int64
	cycle := func(ctx context.Context, targets []*Process) ([2]time.Duration, error) {
		id := fmt.Sprintf("load-%d", seq.Add(1))
		var a wire.Allocation
		start := time.Now()
		if err := c.Write(ctx, targets, http.MethodPost, "/v1/allocations", id, gpuRequest(id, 1, ""), &a); err != nil {
			return [2]time.Duration{}, err
		}
		mid := time.Now()
		if err := c.Write(ctx, targets, http.MethodPost, "/v1/allocations/"+a.ID+"/release", "release-"+id, nil, &a); err != nil {
			return [2]time.Duration{}, err
		}
		return [2]time.Duration{mid.Sub(start), time.Since(mid)}, nil
	}
	load := func(n, workers int, targets []*Process) {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		var left atomic.Int64
		left.Store(int64(n))
		for range workers {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					if _, err := cycle(ctx, targets); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	load(history, 8, c.Servers)

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	follower := Except(c.Servers, leader)[0]
	st, err := c.Status(ctx, follower)
	if err != nil {
		t.Fatal(err)
	}
	if err := follower.Stop(); err != nil {
		t.Fatal(err)
	}
	// Write on until the leader has a snapshot so far past the follower's
	// last index that its log no longer holds the follower's next entry.
	err = poll(ctx, 10*time.Millisecond, func() (bool, error) {
		if idx := lastSnapshotIndex(t, leader); idx > st.AppliedIndex+2*trailing {
			return true, nil
		}
		load(50, 4, []*Process{leader})
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the leader to snapshot past index %d: %v", st.AppliedIndex+2*trailing, err)
	}

	// One client writes to the leader, one write at a time, while the
	// follower comes back and installs the leader's snapshot.
	type ack struct {
		at   time.Time
		took time.Duration
	}
	var (
		mu   sync.Mutex
		acks []ack
	)
	wctx, stop := context.WithCancel(ctx)
	var writer sync.WaitGroup
	var werr error
	writer.Go(func() {
		for wctx.Err() == nil {
			took, err := cycle(wctx, []*Process{leader})
			if err != nil {
				if wctx.Err() == nil {
					werr = err
				}
				return
			}
			mu.Lock()
			acks = append(acks, ack{time.Now(), took[0]}, ack{time.Now(), took[1]})
			mu.Unlock()
		}
	})
	// The same writes for a while before the restart: what a write costs
	// on this machine without an install.
	baseline := time.Now()
	if err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(acks) >= 300 && time.Since(baseline) >= 3*time.Second, nil
	}); err != nil {
		t.Fatal(err)
	}
	// On one machine the follower's restore and catch-up would take the
	// leader's CPU, which servers on their own machines do not share: it
	// comes back on one core at the lowest priority, so that what is
	// measured is what the install costs the leader itself.
	follower.Env = append(follower.Env, "GOMAXPROCS=1")
	if nice, err := exec.LookPath("nice"); err == nil {
		follower.BeforeStart = func(cmd *exec.Cmd) {
			cmd.Args = append([]string{nice, "-n", "19"}, cmd.Args...)
			cmd.Path = nice
		}
	}
	restarted := time.Now()
	if err := follower.Start(); err != nil {
		t.Fatal(err)
	}
	err = poll(ctx, 20*time.Millisecond, func() (bool, error) {
		if !strings.Contains(logSince(t, follower), "Installed remote snapshot") {
			return false, nil
		}
		ls, err1 := c.Status(ctx, leader)
		fs, err2 := c.Status(ctx, follower)
		return err1 == nil && err2 == nil && fs.AppliedIndex >= ls.CommitIndex, nil
	})
	caughtUp := time.Now()
	stop()
	writer.Wait()
	if err != nil {
		t.Fatalf("waiting for %s to install the leader's snapshot and catch up: %v", follower.Name, err)
	}
	if werr != nil {
		t.Fatalf("writes during the install: %v", werr)
	}
	var before, during []time.Duration
	slows := 0
	for _, a := range acks {
		if a.took > limit && slows < 5 {
			slows++
			t.Logf("a write acknowledged at %s took %v", a.at.UTC().Format("15:04:05.000"), a.took)
		}
		switch {
		case a.at.After(restarted) && !a.at.After(caughtUp):
			during = append(during, a.took)
		case !a.at.After(restarted):
			before = append(before, a.took)
		}
	}
	slices.Sort(before)
	t.Logf("%d writes before the restart: median %v, p99 %v, max %v", len(before),
		before[len(before)/2], before[len(before)*99/100], before[len(before)-1])
	if len(during) < 20 {
		t.Fatalf("only %d writes acknowledged during the %v install: the test measured nothing", len(during), caughtUp.Sub(restarted))
	}
	slices.Sort(during)
	worst := during[len(during)-1]
	t.Logf("%s installed the snapshot and caught up in %v; %d writes meanwhile: median %v, p99 %v, max %v",
		follower.Name, caughtUp.Sub(restarted).Round(time.Millisecond), len(during),
		during[len(during)/2], during[len(during)*99/100], worst)
	switch {
	case worst <= limit:
	case os.Getenv("DMSC_LATENCY_BOUNDS") != "1":
		t.Logf("the %v bound is checked with DMSC_LATENCY_BOUNDS=1", limit)
	case raceEnabled:
		t.Logf("under the race detector the %v bound is not checked", limit)
	case before[len(before)-1] > limit:
		// The same writes took that long with no install going on: the
		// machine is too busy for this test to tell what the install costs.
		t.Skipf("writes before the restart already took up to %v (> %v): too busy a machine to check the bound", before[len(before)-1], limit)
	default:
		t.Fatalf("a write acknowledged during the install took %v, more than %v (at most %v before the restart)", worst, limit, before[len(before)-1])
	}
}

// lastSnapshotIndex is the index of the newest snapshot in a server's
// Raft snapshot store (directories named term-index-time), 0 when none.
func lastSnapshotIndex(t *testing.T, p *Process) uint64 {
	dirs, err := filepath.Glob(filepath.Join(p.DataDir, "raft", "snapshots", "*-*-*"))
	if err != nil {
		t.Fatal(err)
	}
	var best uint64
	for _, d := range dirs {
		parts := strings.Split(filepath.Base(d), "-")
		if idx, err := strconv.ParseUint(parts[1], 10, 64); err == nil && !strings.HasSuffix(d, ".tmp") {
			best = max(best, idx)
		}
	}
	return best
}

// logSince returns what p logged since it was last started.
func logSince(t *testing.T, p *Process) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if i := strings.LastIndex(s, "==== harness: start"); i >= 0 {
		s = s[i:]
	}
	return s
}
