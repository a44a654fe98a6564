package replay

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// progressLog records a Runner's progress reports.
type progressLog struct {
	mu      sync.Mutex
	calls   int
	overlap atomic.Bool
	inCall  atomic.Bool
	done    []int
	total   int
}

func (p *progressLog) report(done, total int) {
	if !p.inCall.CompareAndSwap(false, true) {
		p.overlap.Store(true)
	}
	defer p.inCall.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.done = append(p.done, done)
	p.total = total
}

// check requires a first report of (0, total), then done never falling
// and never above total, ending at least at last.
func (p *progressLog) check(t *testing.T, total, last int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.overlap.Load() {
		t.Error("progress reports overlapped")
	}
	if p.calls == 0 || p.done[0] != 0 || p.total != total {
		t.Fatalf("progress: %d calls, first %v, total %d; want (0, %d) first", p.calls, p.done[:min(1, len(p.done))], p.total, total)
	}
	for i := 1; i < len(p.done); i++ {
		if p.done[i] < p.done[i-1] || p.done[i] > total {
			t.Fatalf("progress went %d then %d of %d", p.done[i-1], p.done[i], total)
		}
	}
	if end := p.done[len(p.done)-1]; end < last {
		t.Errorf("progress ends at %d, want at least %d", end, last)
	}
}

// smallOpenb is a few openb hosts and tasks: enough to place some and
// refuse some.
func smallOpenb(t *testing.T, hosts, tasks int) ([]trace.Node, []trace.Task) {
	t.Helper()
	nodes, all, err := SampleOpenb()
	if err != nil {
		t.Fatal(err)
	}
	return nodes[:hosts], all[:tasks]
}

// withoutTime is a result with its wall-clock figure removed.
func withoutTime(r *Result) Result {
	c := *r
	c.Elapsed = 0
	return c
}

// TestRunnerProtocolInProcess runs two policies times two seeds, three at
// a time, and requires the results of the package function, in policy
// then seed order, with every run counted.
func TestRunnerProtocolInProcess(t *testing.T) {
	nodes, tasks := smallOpenb(t, 20, 300)
	policies, seeds := []fsm.Policy{fsm.BestFit, fsm.FirstFit}, []int64{42, 43}
	var prog progressLog
	got, err := Runner{Parallel: 3, Progress: prog.report}.Protocol(context.Background(), nodes, tasks, policies, seeds)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d results, want 4", len(got))
	}
	i := 0
	for _, p := range policies {
		for _, s := range seeds {
			want, err := Protocol(nodes, tasks, p, s)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(withoutTime(got[i]), withoutTime(want)) {
				t.Errorf("run %d (%s seed %d): %+v, want %+v", i, p, s, withoutTime(got[i]), withoutTime(want))
			}
			i++
		}
	}
	prog.check(t, 4, 4)
}

// TestRunnerLocal replays the fgd and the timeline protocols through a
// fresh one-server cluster per run and requires the in-process figures.
func TestRunnerLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, tasks := smallOpenb(t, 10, 150)
	local := Runner{Target: Target{Local: 1, LocalMemory: true, Version: "test"}}
	if !local.Target.Live() {
		t.Fatal("a local target is not live")
	}
	var prog progressLog
	local.Progress = prog.report
	got, err := local.Protocol(ctx, nodes, tasks, []fsm.Policy{fsm.FragmentationAware}, []int64{42})
	if err != nil {
		t.Fatal(err)
	}
	want, err := Protocol(nodes, tasks, fsm.FragmentationAware, 42)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(withoutTime(got[0]), withoutTime(want)) {
		t.Fatalf("through a local cluster %+v, in process %+v", got, withoutTime(want))
	}
	// Through a cluster the work is counted in tasks.
	prog.check(t, ProtocolWork(nodes, tasks, 42), 0)

	work := OpenbTimeline(tasks)
	opts := TimelineOptions{Speedup: 1e7, Samples: 5}
	tl, err := local.Timeline(ctx, nodes, work, []fsm.Policy{fsm.BestFit}, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Policy = fsm.BestFit
	wantTL, err := Timeline(nodes, work, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl) != 1 {
		t.Fatalf("%d timeline results, want 1", len(tl))
	}
	sameTimeline(t, tl[0], wantTL)
}

// TestRunnerRefuses checks what a Runner will not run.
func TestRunnerRefuses(t *testing.T) {
	nodes, tasks := smallOpenb(t, 2, 10)
	cl, err := client.New(client.Config{Addresses: []string{"http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	running := Runner{Target: Target{Client: cl}}
	if _, err := running.Protocol(context.Background(), nodes, tasks, []fsm.Policy{fsm.BestFit}, []int64{1, 2}); !errors.Is(err, ErrOneRun) {
		t.Errorf("two seeds on a running cluster: %v, want ErrOneRun", err)
	}
	if _, err := running.Timeline(context.Background(), nodes, OpenbTimeline(tasks), []fsm.Policy{fsm.BestFit, fsm.FirstFit}, TimelineOptions{}); !errors.Is(err, ErrOneRun) {
		t.Errorf("two policies on a running cluster: %v, want ErrOneRun", err)
	}
	tooBig := Runner{Target: Target{Local: 8}}
	if _, err := tooBig.Protocol(context.Background(), nodes, tasks, []fsm.Policy{fsm.BestFit}, []int64{1}); err == nil {
		t.Error("a local cluster of 8 servers was accepted")
	}
}

func TestParallelDo(t *testing.T) {
	var running, most, calls atomic.Int64
	seen := make([]atomic.Bool, 50)
	err := parallelDo(50, 4, func(i int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		calls.Add(1)
		seen[i].Store(true)
		time.Sleep(time.Millisecond)
		return nil
	})
	if err != nil || calls.Load() != 50 || most.Load() > 4 {
		t.Fatalf("err %v, %d calls, %d at once; want nil, 50, at most 4", err, calls.Load(), most.Load())
	}
	for i := range seen {
		if !seen[i].Load() {
			t.Fatalf("fn(%d) was not called", i)
		}
	}
	// After an error no new call starts, and the first error is returned.
	boom := errors.New("boom")
	calls.Store(0)
	err = parallelDo(100, 1, func(i int) error {
		calls.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls.Load() != 4 {
		t.Fatalf("err %v after %d calls, want boom after 4", err, calls.Load())
	}
	if err := parallelDo(3, 0, func(int) error { return nil }); err != nil {
		t.Fatalf("0 workers: %v", err)
	}
}

func TestMeanCurves(t *testing.T) {
	curve := func(v float64) []float64 {
		c := make([]float64, CurveMax+1)
		for i := range c {
			c[i] = v
		}
		return c
	}
	results := []*Result{
		{Policy: fsm.BestFit, Seed: 1, Curve: curve(80), At130: 80, Leftover: &Leftover{Small: 2, Starved: 8, Open: 10, OpenFit: 1}},
		{Policy: fsm.BestFit, Seed: 2, Curve: curve(90), At130: 90, Leftover: &Leftover{Small: 1, Starved: 3, Open: 6, OpenFit: 3}},
		{Policy: fsm.FirstFit, Seed: 1, Curve: curve(70), At130: 70},
	}
	got := MeanCurves([]fsm.Policy{fsm.FirstFit, fsm.WorstFit, fsm.BestFit}, results)
	if len(got) != 2 || got[0].Policy != fsm.FirstFit || got[1].Policy != fsm.BestFit {
		t.Fatalf("means %+v: want FirstFit then BestFit, WorstFit (no runs) left out", got)
	}
	bf := got[1]
	if bf.Runs != 2 || bf.At100 != 85 || bf.At130 != 85 || bf.Min130 != 80 || bf.Max130 != 90 || bf.Paper != PaperFigures[fsm.BestFit] {
		t.Errorf("BestFit mean %+v", bf)
	}
	// Capacities averaged, OpenFit the largest.
	if l := bf.Leftover; l == nil || *l != (Leftover{Small: 1.5, Starved: 5.5, Open: 8, OpenFit: 3}) {
		t.Errorf("BestFit leftover %+v", bf.Leftover)
	}
	if ff := got[0]; ff.Runs != 1 || ff.At130 != 70 || ff.Min130 != 70 || ff.Max130 != 70 || ff.Paper != "" || ff.Leftover != nil {
		t.Errorf("FirstFit mean %+v", ff)
	}
}

func TestLoadOpenb(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "pods.csv")
	in, err := LoadOpenb(filepath.Join(dir, "nodes.csv"), missing, true)
	if err != nil {
		t.Fatal(err)
	}
	nodes, tasks, _ := SampleOpenb()
	if len(in.Nodes) != len(nodes) || len(in.Tasks) != len(tasks) || in.Missing != missing || in.Source == "" {
		t.Errorf("with missing files and the sample allowed: %d nodes, %d tasks, missing %q, source %q",
			len(in.Nodes), len(in.Tasks), in.Missing, in.Source)
	}
	if _, err := LoadOpenb(filepath.Join(dir, "nodes.csv"), missing, false); err == nil {
		t.Error("missing files without the sample: no error")
	}
	if d := TracesDir(); filepath.Base(d) != "traces" || filepath.Base(filepath.Dir(d)) != "shared" {
		t.Errorf("TracesDir = %s, want .../shared/traces", d)
	}
}
