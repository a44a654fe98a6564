package replay

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// startLive starts a fresh 3-server cluster in this process, as
// `dmsc replay -local 3` does for each run, and returns its client. With
// disk set the servers keep their Raft log on disk, as real servers do,
// else in memory (faster; the order of commands is the same).
func startLive(t *testing.T, ctx context.Context, disk bool) *client.Client {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cfg := cluster.LocalConfig{Servers: 3, InMemory: !disk, HTTP: api.NodeHandler(api.Options{Role: "server"})}
	if disk {
		cfg.Dir = t.TempDir()
	}
	lc, err := cluster.StartLocal(sctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The data are thrown away: a short graceful stop will do.
		cctx, ccancel := context.WithTimeout(context.Background(), closeGrace)
		defer ccancel()
		if err := lc.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	cl, err := client.New(client.Config{Addresses: lc.Addresses(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// quickOpenb is the data of `dmsc replay -quick`: the first 100 openb
// hosts and the first 1000 pods. Under the race detector, which slows a
// cluster in process about tenfold, the first 30 hosts and 300 pods.
func quickOpenb(t *testing.T) ([]trace.Node, []trace.Task) {
	t.Helper()
	nodes, tasks, err := SampleOpenb()
	if err != nil {
		t.Fatal(err)
	}
	if raceEnabled {
		return nodes[:30], tasks[:300]
	}
	return nodes[:100], tasks[:1000]
}

// TestLiveProtocolMatchesInProcess replays the quick fgd data through a
// fresh 3-server cluster per policy and requires exactly the in-process
// replay's outcome: the same tasks placed and the same allocated % curve.
// The state machine is deterministic and the live run sends the same
// commands in the same order (hosts one at a time, in list order), so the
// leader's clock, the log indexes (allocation IDs) and the run's pool and
// host names must not change a decision.
func TestLiveProtocolMatchesInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("replays about 1,500 tasks through a cluster; skipped in -short mode")
	}
	nodes, tasks := quickOpenb(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, pol := range []fsm.Policy{fsm.BestFit, fsm.FragmentationAware} {
		want, err := Protocol(nodes, tasks, pol, 42)
		if err != nil {
			t.Fatal(err)
		}
		// BestFit's cluster keeps its log on disk, FragmentationAware's in
		// memory.
		cl := startLive(t, ctx, pol == fsm.BestFit)
		lv := Live{Client: cl, Name: "replay-test", Cleanup: pol == fsm.FragmentationAware}
		got, err := lv.Protocol(ctx, nodes, tasks, pol, 42)
		if err != nil {
			t.Fatalf("%s: %v", pol, err)
		}
		t.Logf("%s: placed %d/%d, allocated %.2f%% at 100%%, %.2f%% at 130%% (in process: %d/%d, %.2f%%, %.2f%%); live %v, in process %v",
			pol, got.Placed, got.Tasks, got.At100, got.At130, want.Placed, want.Tasks, want.At100, want.At130, got.Elapsed.Round(time.Millisecond), want.Elapsed.Round(time.Millisecond))
		if want.Placed == 0 || want.Placed == want.Tasks {
			t.Fatalf("%s: the in-process replay placed %d of %d tasks: the data does not test refusals", pol, want.Placed, want.Tasks)
		}
		if got.Tasks != want.Tasks || got.Placed != want.Placed || got.GPUs != want.GPUs {
			t.Errorf("%s: live placed %d of %d tasks on %d GPUs, in process %d of %d on %d", pol, got.Placed, got.Tasks, got.GPUs, want.Placed, want.Tasks, want.GPUs)
		}
		if !reflect.DeepEqual(got.Curve, want.Curve) {
			for i := range want.Curve {
				if i >= len(got.Curve) || got.Curve[i] != want.Curve[i] {
					t.Errorf("%s: curves differ first at arrived %d%%: live %v, in process %.4f", pol, i, got.Curve[i:min(i+1, len(got.Curve))], want.Curve[i])
					break
				}
			}
		}
		if lv.Cleanup {
			checkCleanedUp(t, ctx, cl, lv.Name)
		}
	}
}

// checkCleanedUp requires that a run with Cleanup left no host, no live
// allocation and no pool policy.
func checkCleanedUp(t *testing.T, ctx context.Context, cl *client.Client, pool string) {
	t.Helper()
	q := &client.QueryOptions{Consistent: true}
	hosts, _, err := cl.Hosts(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 0 {
		t.Errorf("%d hosts left after the cleanup, first %s", len(hosts), hosts[0].ID)
	}
	live, _, err := cl.Allocations(ctx, &client.AllocationFilter{Statuses: []client.AllocStatus{client.Active, client.Pending}}, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(live.Allocations) != 0 {
		t.Errorf("%d live allocations left after the cleanup", len(live.Allocations))
	}
	pols, _, err := cl.Policies(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pols.Pools[pool]; ok {
		t.Errorf("the policy of pool %s is left after the cleanup", pool)
	}
}

// sameTimeline compares a live and an in-process timeline result, all but
// the wall-clock figures.
func sameTimeline(t *testing.T, got, want *TimelineResult) {
	t.Helper()
	g, w := *got, *want
	g.Elapsed, w.Elapsed, g.MaxLag = 0, 0, 0
	if !reflect.DeepEqual(g, w) {
		t.Errorf("live timeline differs from the in-process one:\nlive       %+v\nin process %+v", g, w)
	}
}

// TestLiveTimelineOpenbMatchesInProcess replays 400 openb pods on 10 hosts
// with their creation and deletion times compressed into about a second,
// refusing at once what does not fit. Without a queue timeout nothing
// depends on the cluster's clock, so every figure must equal the
// in-process replay's, whatever the lag.
func TestLiveTimelineOpenbMatchesInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("replays through a cluster; skipped in -short mode")
	}
	nodes, tasks, err := SampleOpenb()
	if err != nil {
		t.Fatal(err)
	}
	nodes, work := nodes[:10], OpenbTimeline(tasks[:400])
	opts := TimelineOptions{Policy: fsm.FragmentationAware, Speedup: 1e7, Timeout: 0, Samples: 10}
	want, err := Timeline(nodes, work, opts)
	if err != nil {
		t.Fatal(err)
	}
	if want.Refused == 0 || want.Placed == 0 {
		t.Fatalf("in process: placed %d, refused %d: the data does not test both", want.Placed, want.Refused)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := startLive(t, ctx, false)
	lv := Live{Client: cl, Name: "replay-tl", Cleanup: true}
	got, err := lv.Timeline(ctx, nodes, work, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("placed %d, refused %d, mean GPU %.2f%%, span %v; live %v (max lag %v), in process %v",
		got.Placed, got.Refused, got.MeanGPU, got.Span, got.Elapsed.Round(time.Millisecond), got.MaxLag.Round(time.Millisecond), want.Elapsed.Round(time.Millisecond))
	sameTimeline(t, got, want)
	checkCleanedUp(t, ctx, cl, lv.Name)
}

// TestLiveTimelineQueueAndDeadline is TestTimelineQueuesReleasesAndTimesOut
// on a live cluster, 20 times faster: two tasks wait in the cluster's
// queue until a release places them, one waits until the cluster times it
// out. The events are 50 ms or more apart, far more than a command takes,
// so the cluster sees them in the in-process order.
func TestLiveTimelineQueueAndDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("replays through a cluster; skipped in -short mode")
	}
	nodes := []trace.Node{{Name: "h1", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 2, Model: "T4"}}
	tasks := []TimelineTask{
		gpuTask("c", 1, 2*time.Second, time.Second),
		gpuTask("a", 2, 0, 10*time.Second),
		gpuTask("b", 1, time.Second, 5*time.Second),
		gpuTask("d", 3, 20*time.Second, time.Second),
	}
	opts := TimelineOptions{Policy: fsm.BestFit, Speedup: 20, Timeout: time.Second, Samples: 4}
	want, err := Timeline(nodes, tasks, opts)
	if err != nil {
		t.Fatal(err)
	}
	if want.Waited != 2 || want.TimedOut != 1 {
		t.Fatalf("in process: waited %d, timed out %d; want 2, 1", want.Waited, want.TimedOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := startLive(t, ctx, false)
	lv := Live{Client: cl, Name: "replay-q", Cleanup: true}
	got, err := lv.Timeline(ctx, nodes, tasks, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("live %v, max lag %v", got.Elapsed.Round(time.Millisecond), got.MaxLag.Round(time.Millisecond))
	if got.MaxLag > 40*time.Millisecond {
		t.Logf("the replay ran up to %v late: the order of events may differ", got.MaxLag)
	}
	sameTimeline(t, got, want)
	checkCleanedUp(t, ctx, cl, lv.Name)
}
