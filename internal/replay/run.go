package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// Target says where the runs of a Runner replay: in this process (the
// zero Target), through a fresh cluster started in this process for each
// run (Local), or through a running cluster (Client).
type Target struct {
	// Local, when above 0, starts a cluster of Local servers (1 to 7) in
	// this process for each run and stops it after the run, so that every
	// run starts from an empty cluster as the in-process replay does.
	Local int
	// LocalMemory keeps the local servers' Raft log in memory.
	LocalMemory bool
	// Version is reported by the local servers.
	Version string
	// Client, without Local, replays through the cluster it reaches: one
	// run, named Name (a fresh RunName when empty), which cleans up after
	// itself.
	Client *client.Client
	Name   string
}

// Live reports whether the runs go through a cluster.
func (t Target) Live() bool { return t.Local > 0 || t.Client != nil }

// ErrOneRun: a running cluster (Target.Client) replays one run, since
// every run must start from an empty cluster.
var ErrOneRun = errors.New("replay: a running cluster replays one run (one policy and, for the fgd protocol, one seed)")

// localStart bounds the start of a run's local cluster; closeGrace the
// graceful part of stopping it: its data are thrown away.
const (
	localStart = time.Minute
	closeGrace = 250 * time.Millisecond
)

// with calls fn with a Live for one run on the target: a fresh local
// cluster, stopped afterwards, or the running cluster, which the run
// cleans up after itself.
func (t Target) with(ctx context.Context, fn func(Live) error) (err error) {
	cl, name := t.Client, t.Name
	if t.Local > 0 {
		sctx, cancel := context.WithTimeout(ctx, localStart)
		lc, serr := cluster.StartLocal(sctx, cluster.LocalConfig{
			Servers: t.Local, InMemory: t.LocalMemory, Version: t.Version,
			HTTP: api.NodeHandler(api.Options{Version: t.Version, Role: "server"}),
		})
		cancel()
		if serr != nil {
			return fmt.Errorf("local cluster: %w", serr)
		}
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), closeGrace)
			defer ccancel()
			if cerr := lc.Close(cctx); cerr != nil {
				err = errors.Join(err, fmt.Errorf("stopping the local cluster: %w", cerr))
			}
		}()
		if cl, err = client.New(client.Config{Addresses: lc.Addresses(), Timeout: 10 * time.Second}); err != nil {
			return err
		}
	}
	if t.Local > 0 || name == "" {
		name = RunName()
	}
	return fn(Live{Client: cl, Name: name, Cleanup: t.Local == 0})
}

// RunName is a fresh name for a run on a cluster: replay-<8 hex digits>.
func RunName() string {
	return "replay-" + strings.ReplaceAll(client.NewRequestID(), "-", "")[:8]
}

// NotFresh says what shows that the cluster has been used ("" if
// nothing): registered hosts, live or ended allocations. A run there may
// then place otherwise than in process (see Live).
func NotFresh(ctx context.Context, cl *client.Client) (string, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hosts, _, err := cl.Hosts(octx, nil)
	if err != nil {
		return "", err
	}
	allocs, _, err := cl.Allocations(octx, &client.AllocationFilter{History: true, Limit: 1}, nil)
	if err != nil {
		return "", err
	}
	switch {
	case len(hosts) > 0:
		return fmt.Sprintf("the cluster already has %d host(s)", len(hosts)), nil
	case len(allocs.Allocations) > 0:
		return "the cluster has served allocation requests before", nil
	}
	return "", nil
}

// Runner runs replays on its Target, Parallel at a time, and collects
// their results.
type Runner struct {
	Target Target
	// Parallel is how many runs go at once; below 1 means 1.
	Parallel int
	// Progress, when set, is told the work done so far and the total:
	// first (0, total) before any run starts, then as the runs go. The
	// work is runs for the fgd protocol in process, else tasks
	// submitted. Calls do not overlap.
	Progress func(done, total int)
}

// Protocol runs the fgd protocol (see the package function Protocol) for
// every policy and seed and returns the results in that order: the
// seeds of the first policy, then of the next.
func (r Runner) Protocol(ctx context.Context, nodes []trace.Node, tasks []trace.Task, policies []fsm.Policy, seeds []int64) ([]*Result, error) {
	type run struct {
		policy fsm.Policy
		seed   int64
	}
	var runs []run
	for _, p := range policies {
		for _, s := range seeds {
			runs = append(runs, run{p, s})
		}
	}
	if err := r.check(len(runs)); err != nil {
		return nil, err
	}
	if r.Target.Live() && slices.ContainsFunc(policies, IsPaperPolicy) {
		return nil, fmt.Errorf("replay: %s and %s are the paper's simulator, replayed in process only", PaperFGD, PaperBestFit)
	}
	total := len(runs)
	if r.Target.Live() {
		// Through a cluster a run takes seconds: count tasks.
		total = 0
		for _, rn := range runs {
			total += ProtocolWork(nodes, tasks, rn.seed)
		}
	}
	prog := r.progress(total)
	results := make([]*Result, len(runs))
	err := parallelDo(len(runs), r.Parallel, func(i int) error {
		var res *Result
		var err error
		if r.Target.Live() {
			err = r.Target.with(ctx, func(l Live) error {
				l.Progress = prog.run()
				res, err = l.Protocol(ctx, nodes, tasks, runs[i].policy, runs[i].seed)
				return err
			})
		} else {
			res, err = Protocol(nodes, tasks, runs[i].policy, runs[i].seed)
			prog.add(1)
		}
		if err != nil {
			return fmt.Errorf("%s seed %d: %w", runs[i].policy, runs[i].seed, err)
		}
		results[i] = res
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// Timeline runs the timeline protocol (see the package function
// Timeline) with opts for each policy (opts.Policy and opts.Progress are
// set per run) and returns the results in the order of the policies.
func (r Runner) Timeline(ctx context.Context, nodes []trace.Node, tasks []TimelineTask, policies []fsm.Policy, opts TimelineOptions) ([]*TimelineResult, error) {
	if err := r.check(len(policies)); err != nil {
		return nil, err
	}
	prog := r.progress(len(tasks) * len(policies))
	results := make([]*TimelineResult, len(policies))
	err := parallelDo(len(policies), r.Parallel, func(i int) error {
		o := opts
		o.Policy = policies[i]
		o.Progress = prog.run()
		var res *TimelineResult
		var err error
		if r.Target.Live() {
			err = r.Target.with(ctx, func(l Live) error {
				res, err = l.Timeline(ctx, nodes, tasks, o)
				return err
			})
		} else {
			res, err = Timeline(nodes, tasks, o)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", policies[i], err)
		}
		results[i] = res
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// check refuses what the target cannot run.
func (r Runner) check(runs int) error {
	switch {
	case r.Target.Local < 0 || r.Target.Local > 7:
		return fmt.Errorf("replay: a local cluster has 1 to 7 servers, not %d", r.Target.Local)
	case r.Target.Local == 0 && r.Target.Client != nil && runs > 1:
		return fmt.Errorf("%w: got %d runs", ErrOneRun, runs)
	}
	return nil
}

// progress sums the work of the runs for Runner.Progress.
type progress struct {
	mu          sync.Mutex
	done, total int
	report      func(done, total int)
}

// progress returns the progress of work of total, reported as (0, total).
func (r Runner) progress(total int) *progress {
	p := &progress{total: total, report: r.Progress}
	p.add(0)
	return p
}

func (p *progress) add(k int) {
	if p.report == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += k
	p.report(p.done, p.total)
}

// run returns the progress callback of one run, which reports its own
// work done so far.
func (p *progress) run() func(done, total int) {
	last := 0
	return func(done, _ int) {
		p.add(done - last)
		last = done
	}
}

// parallelDo runs fn(0..n-1) on at most workers goroutines (at least
// one) and returns the first error; after an error no new call starts.
func parallelDo(n, workers int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		failed   atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := 0; w < min(max(workers, 1), n); w++ {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// MeanCurve is a policy's fgd curve averaged over seeds.
type MeanCurve struct {
	Policy fsm.Policy `json:"policy"`
	Runs   int        `json:"runs"`
	At100  float64    `json:"at100"`
	At130  float64    `json:"at130"`
	Min130 float64    `json:"min130"`
	Max130 float64    `json:"max130"`
	// Paper is the paper's figure for the matching policy, "" if none.
	Paper string    `json:"paper_at130,omitempty"`
	Curve []float64 `json:"curve"`
	// Leftover is the runs' mean (OpenFit: the largest); nil when a run
	// has none.
	Leftover *Leftover `json:"leftover,omitempty"`
}

// PaperFigures are the FGD paper's allocated % at 130 % arrived, on the
// whole default openb pod list, for the dmsc policies that correspond to
// the paper's.
var PaperFigures = map[fsm.Policy]string{fsm.BestFit: "93.11", fsm.FragmentationAware: "95.40 (FGD)"}

// MeanCurves averages the results of each policy over its seeds, in the
// order of policies; a policy without results is left out.
func MeanCurves(policies []fsm.Policy, results []*Result) []MeanCurve {
	var out []MeanCurve
	for _, p := range policies {
		m := MeanCurve{Policy: p, Paper: PaperFigures[p], Min130: 101}
		var left Leftover
		leftAll := true
		for _, r := range results {
			if r.Policy != p {
				continue
			}
			if m.Curve == nil {
				m.Curve = make([]float64, len(r.Curve))
			}
			for i, v := range r.Curve {
				m.Curve[i] += v
			}
			m.Runs++
			m.Min130 = min(m.Min130, r.At130)
			m.Max130 = max(m.Max130, r.At130)
			if r.Leftover == nil {
				leftAll = false
			} else {
				left.add(*r.Leftover, 1)
			}
		}
		if m.Runs == 0 {
			continue
		}
		for i := range m.Curve {
			m.Curve[i] /= float64(m.Runs)
		}
		m.At100, m.At130 = m.Curve[100], m.Curve[CurveMax]
		if leftAll {
			m.Leftover = &Leftover{}
			m.Leftover.add(left, 1/float64(m.Runs))
		}
		out = append(out, m)
	}
	return out
}
