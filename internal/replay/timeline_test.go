package replay

import (
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

func gpuTask(name string, gpus int, arrive, hold time.Duration) TimelineTask {
	return TimelineTask{Task: trace.Task{Name: name, NumGPU: gpus, GPUMilli: MilliPerGPU}, Arrive: arrive, Hold: hold}
}

func TestTimelineQueuesReleasesAndTimesOut(t *testing.T) {
	nodes := []trace.Node{{Name: "h1", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 2, Model: "T4"}}
	tasks := []TimelineTask{
		gpuTask("c", 1, 2*time.Second, time.Second),  // waits for a, placed at 10s
		gpuTask("a", 2, 0, 10*time.Second),           // placed at once
		gpuTask("b", 1, time.Second, 5*time.Second),  // waits for a, placed at 10s
		gpuTask("d", 3, 20*time.Second, time.Second), // never fits: times out
	}
	res, err := Timeline(nodes, tasks, TimelineOptions{Policy: fsm.BestFit, Timeout: 20 * time.Second, Samples: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tasks != 4 || res.Placed != 3 || res.Waited != 2 || res.TimedOut != 1 || res.Refused != 0 || res.Unplaced != 0 {
		t.Fatalf("tasks %d placed %d waited %d timed out %d refused %d unplaced %d; want 4 3 2 1 0 0",
			res.Tasks, res.Placed, res.Waited, res.TimedOut, res.Refused, res.Unplaced)
	}
	if res.WaitP50 != 8*time.Second || res.WaitMax != 9*time.Second {
		t.Fatalf("wait p50 %v max %v, want 8s 9s", res.WaitP50, res.WaitMax)
	}
	if got := res.Reasons["GPU: no host has 3 fitting devices"]; got != 1 {
		t.Fatalf("reasons %v, want one for 3 GPUs", res.Reasons)
	}
	// 0..10s: 2 of 2 GPUs; 10..11s: 2; 11..15s: 1 (b); 15..20s: 0.
	want := 100 * (2*11 + 1*4 + 0*5) / 2.0 / 20
	if res.MeanGPU < want-0.01 || res.MeanGPU > want+0.01 {
		t.Fatalf("mean GPU %.3f%%, want %.3f%%", res.MeanGPU, want)
	}
	if len(res.Utilisation) != 5 || res.Utilisation[0].GPU != 100 {
		t.Fatalf("utilisation %+v, want 5 samples starting at 100%%", res.Utilisation)
	}
}

func TestTimelineRefusesAtOnceWithoutTimeout(t *testing.T) {
	nodes := []trace.Node{{Name: "h1", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 1, Model: "T4"}}
	tasks := []TimelineTask{gpuTask("a", 1, 0, 0), gpuTask("b", 1, time.Second, 0)}
	res, err := Timeline(nodes, tasks, TimelineOptions{Policy: fsm.FirstFit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Placed != 1 || res.Refused != 1 || res.Reasons["GPU: in use"] != 1 {
		t.Fatalf("placed %d refused %d reasons %v; want 1, 1, GPU: in use", res.Placed, res.Refused, res.Reasons)
	}
}

func TestTimelineSpeedupScalesWaits(t *testing.T) {
	nodes := []trace.Node{{Name: "h1", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 1, Model: "T4"}}
	tasks := []TimelineTask{gpuTask("a", 1, 0, 100*time.Second), gpuTask("b", 1, 0, time.Second)}
	res, err := Timeline(nodes, tasks, TimelineOptions{Policy: fsm.FirstFit, Speedup: 10, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res.WaitMax != 10*time.Second {
		t.Fatalf("wait max %v, want 10s (100s of trace time at speedup 10)", res.WaitMax)
	}
}

func TestPhillyTimeline(t *testing.T) {
	t0 := time.Date(2017, 10, 9, 7, 0, 0, 0, time.UTC)
	jobs := []trace.PhillyJob{
		{Submitted: t0.Add(time.Minute), Duration: time.Hour, NumGPUs: 8},
		{Submitted: t0, Duration: time.Second, NumGPUs: 0},
		{Submitted: t0.Add(30 * time.Second), Duration: time.Minute, NumGPUs: 1},
	}
	got := PhillyTimeline(jobs)
	if len(got) != 2 {
		t.Fatalf("%d tasks, want 2 (no GPU-less job)", len(got))
	}
	if got[0].Arrive != 0 || got[0].Task.NumGPU != 1 || got[1].Arrive != 30*time.Second || got[1].Hold != time.Hour || got[1].Task.GPUDemand() != 8000 {
		t.Fatalf("tasks %+v", got)
	}
	if hosts := PhillyHosts(3); len(hosts) != 3 || hosts[2].Name != "philly-h0002" || hosts[2].GPUs != 8 {
		t.Fatalf("hosts %+v", hosts)
	}
}

func TestSampleOpenb(t *testing.T) {
	nodes, tasks, err := SampleOpenb()
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1213 || len(tasks) != 1000 {
		t.Fatalf("%d nodes, %d tasks; want 1213, 1000", len(nodes), len(tasks))
	}
}

func TestReasonOfTogether(t *testing.T) {
	w := &fsm.WhyNot{Claims: []fsm.ClaimWhyNot{{Type: fsm.GPU, Count: 1, Fitting: 3, HostsWithEnough: 2}}, HostsRejected: 2}
	if got := ReasonOf(w); got != "claims fit apart, not together" {
		t.Fatalf("ReasonOf = %q", got)
	}
	if got := ReasonOf(nil); got != "unknown" {
		t.Fatalf("ReasonOf(nil) = %q", got)
	}
}

func TestPlotCurvesWritesFiles(t *testing.T) {
	dir := t.TempDir()
	y := make([]float64, CurveMax+1)
	for x := range y {
		y[x] = min(float64(x), 94)
	}
	lines := []CurveLine{{Name: "BestFit", Y: y}}
	for _, name := range []string{"c.png", "c.svg"} {
		if err := PlotCurves("test", lines, PaperPoints, dir+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	if err := PlotCurves("test", lines, nil, dir+"/c.gif"); err == nil {
		t.Fatal("a .gif plot was accepted")
	}
}

// TestTimelineTenantsFairShare: one namespace fills the host and queues
// more; another's request arrives last. By arrival it waits for all of
// the first's; by fair share it gets the first GPU freed, since it holds
// nothing and the other holds everything.
func TestTimelineTenantsFairShare(t *testing.T) {
	nodes := []trace.Node{{Name: "h1", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 2, Model: "T4"}}
	in := func(ns string, tt TimelineTask) TimelineTask { tt.Namespace = ns; return tt }
	tasks := []TimelineTask{
		in("big", gpuTask("b0", 2, 0, 10*time.Second)),
		in("big", gpuTask("b1", 1, time.Second, 10*time.Second)),
		in("big", gpuTask("b2", 1, 2*time.Second, 10*time.Second)),
		in("big", gpuTask("b3", 1, 3*time.Second, 10*time.Second)),
		in("small", gpuTask("s0", 1, 4*time.Second, 10*time.Second)),
	}
	weights := map[string]float64{"big": 1, "small": 3}
	wait := map[bool]time.Duration{}
	for _, fair := range []bool{false, true} {
		res, err := Timeline(nodes, tasks, TimelineOptions{Policy: fsm.BestFit, Timeout: time.Hour,
			Tenants: true, Weights: weights, FairShare: fair, HalfLife: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if res.FairShare != fair || len(res.Tenants) != 2 || res.Placed != 5 {
			t.Fatalf("fair %v: fair share %v, %d tenants, %d placed; want %v, 2, 5", fair, res.FairShare, len(res.Tenants), res.Placed, fair)
		}
		big, small := res.Tenants[0], res.Tenants[1]
		if big.Namespace != "big" || big.Tasks != 4 || big.Placed != 4 || small.Tasks != 1 || small.Placed != 1 {
			t.Fatalf("fair %v: tenants %+v", fair, res.Tenants)
		}
		if big.Entitlement != 25 || small.Entitlement != 75 {
			t.Fatalf("fair %v: entitlements %.1f %.1f, want 25 75", fair, big.Entitlement, small.Entitlement)
		}
		// GPU time: big 2×10 + 3×10, small 10 GPU-seconds.
		if d := big.Share - 100*50/60.0; d < -0.01 || d > 0.01 {
			t.Fatalf("fair %v: big's share %.2f%%, want %.2f%%", fair, big.Share, 100*50/60.0)
		}
		wait[fair] = small.WaitP95
	}
	// FIFO: b1 and b2 take the GPUs freed at 10 s, small waits to 20 s.
	// Fair share: small takes one of them at 10 s.
	if wait[false] != 16*time.Second || wait[true] != 6*time.Second {
		t.Fatalf("small's wait p95 %v FIFO, %v fair share; want 16s, 6s", wait[false], wait[true])
	}
}

// TestTimelineGangs: a job larger than a host is refused on one host and
// runs as a gang once enough hosts free; a waiting gang's reservation
// keeps a later one-GPU job off the host it holds. The sizes table counts
// each.
func TestTimelineGangs(t *testing.T) {
	nodes := []trace.Node{
		{Name: "h1", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 2, Model: "T4"},
		{Name: "h2", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 2, Model: "T4"},
	}
	tasks := []TimelineTask{
		gpuTask("a", 1, 0, 10*time.Second),           // h1 (or h2) until 10s
		gpuTask("big", 4, time.Second, time.Second),  // a gang: waits for a, runs 10s..11s
		gpuTask("c", 1, 2*time.Second, time.Second),  // one GPU is free, but reserved for big: waits
		gpuTask("d", 2, 20*time.Second, time.Second), // after: runs at once
	}
	one, err := Timeline(nodes, tasks, TimelineOptions{Policy: fsm.BestFit, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	gangs, err := Timeline(nodes, Gangs(tasks, 2), TimelineOptions{Policy: fsm.BestFit, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if one.Placed != 3 || one.TimedOut != 1 || gangs.Placed != 4 {
		t.Fatalf("one host: %d placed, %d timed out; gangs: %d placed; want 3, 1, 4", one.Placed, one.TimedOut, gangs.Placed)
	}
	// c waited behind the gang's reservation to 11s, as did the gang to 10s.
	if one.Waited != 0 || gangs.Waited != 2 || gangs.WaitMax != 9*time.Second {
		t.Fatalf("waited %d one host, %d with gangs (max %v); want 0, 2 (9s)", one.Waited, gangs.Waited, gangs.WaitMax)
	}
	want := []SizeResult{
		{MinGPUs: 1, MaxGPUs: 1, Tasks: 2, Placed: 2}, // waits 0 and 9s: p95 of two is the lower
		{MinGPUs: 2, MaxGPUs: 2, Tasks: 1, Placed: 1},
		{MinGPUs: 3, MaxGPUs: 4, Tasks: 1, Placed: 1, WaitP50: 9 * time.Second, WaitP95: 9 * time.Second},
	}
	if len(gangs.Sizes) != len(want) {
		t.Fatalf("sizes %+v", gangs.Sizes)
	}
	for i, w := range want {
		if gangs.Sizes[i] != w {
			t.Errorf("size %s: %+v, want %+v", w.Label(), gangs.Sizes[i], w)
		}
	}
	if l := gangs.Sizes[2].Label(); l != "3-4" {
		t.Errorf("label %q", l)
	}
}
