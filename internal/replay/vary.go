package replay

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"

	"github.com/dmsc/dmsc/internal/trace"
)

// ErrVariation is a -vary that cannot be applied to the pod list.
var ErrVariation = errors.New("variation")

// Variation says how to derive a pod list from another, as the openb
// variants were derived from the default list, to test a policy on a
// sampling of the trace it was never tuned on.
type Variation struct {
	// Kind is one of:
	//   - "gpushare": tasks with a share of one GPU carry Percent % of
	//     the GPU request (gpushare40: 40.1 %; default: 28.5 %);
	//   - "multigpu": tasks of two GPUs or more carry Percent % of the GPU
	//     request (multigpu20: 20.4 %; default: 7.3 %);
	//   - "gpuspec": Percent % of the GPU tasks are bound to GPU models
	//     (gpuspec10: 10.4 %; default: none);
	//   - "cpu": CPU-only tasks are Percent % of the tasks (cpu050:
	//     5.0 %; default: 13.3 %).
	Kind    string
	Percent float64
}

func (v Variation) String() string {
	return v.Kind + "=" + strconv.FormatFloat(v.Percent, 'f', -1, 64)
}

// ParseVariation reads "kind=percent", e.g. "gpushare=60".
func ParseVariation(s string) (Variation, error) {
	kind, pct, ok := strings.Cut(s, "=")
	if !ok {
		return Variation{}, fmt.Errorf("%w: %q: want kind=percent, e.g. gpushare=60", ErrVariation, s)
	}
	p, err := strconv.ParseFloat(pct, 64)
	if err != nil || p <= 0 || p >= 100 {
		return Variation{}, fmt.Errorf("%w: %q: the percent must be a number above 0 and below 100", ErrVariation, s)
	}
	if varyBy[kind] == nil {
		return Variation{}, fmt.Errorf("%w: kind %q: want gpushare, multigpu, gpuspec or cpu", ErrVariation, kind)
	}
	return Variation{Kind: kind, Percent: p}, nil
}

// Vary derives a pod list from tasks by v, drawing with a generator
// seeded by seed, so that the same inputs give the same list:
//
//   - gpushare and multigpu keep the CPU-only tasks and draw as many GPU
//     tasks as tasks has, with replacement, each from the tasks of the
//     kind (sharing, or multi-GPU) or from the other GPU tasks, with the
//     odds that make the kind carry Percent % of the expected GPU
//     request;
//   - gpuspec binds more GPU tasks, picked at random, to GPU models until
//     Percent % are bound, each to a constraint drawn from those of the
//     list (as often as they occur there): it needs a list that has some,
//     such as gpuspec10;
//   - cpu keeps the GPU tasks and draws CPU-only tasks from those of the
//     list, with replacement, until they are Percent % of the tasks; it
//     can lower their part too.
//
// The tasks are renamed vary-0000, vary-0001, ... in their new order.
func Vary(tasks []trace.Task, v Variation, seed int64) ([]trace.Task, error) {
	vary := varyBy[v.Kind]
	if vary == nil {
		return nil, fmt.Errorf("%w: kind %q", ErrVariation, v.Kind)
	}
	out, err := vary(tasks, v, rand.New(rand.NewSource(seed)))
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Name = fmt.Sprintf("vary-%04d", i)
	}
	return out, nil
}

// varyBy derives a list by each kind of Variation.
var varyBy = map[string]func([]trace.Task, Variation, *rand.Rand) ([]trace.Task, error){
	"gpushare": func(ts []trace.Task, v Variation, rng *rand.Rand) ([]trace.Task, error) {
		return drawGPU(ts, v, rng, func(t trace.Task) bool { return t.NumGPU == 1 && t.GPUMilli < MilliPerGPU })
	},
	"multigpu": func(ts []trace.Task, v Variation, rng *rand.Rand) ([]trace.Task, error) {
		return drawGPU(ts, v, rng, func(t trace.Task) bool { return t.NumGPU > 1 })
	},
	"gpuspec": bindModels,
	"cpu":     drawCPUOnly,
}

// drawGPU keeps the CPU-only tasks in place and redraws each GPU task
// from the tasks that are of the kind (with probability q) or from the
// other GPU tasks, q chosen so that the kind's expected part of the GPU
// request is v.Percent: q·a / (q·a + (1−q)·b) = p for mean requests a
// and b.
func drawGPU(tasks []trace.Task, v Variation, rng *rand.Rand, kind func(trace.Task) bool) ([]trace.Task, error) {
	var in, other []trace.Task
	for _, t := range tasks {
		switch {
		case t.NumGPU == 0:
		case kind(t):
			in = append(in, t)
		default:
			other = append(other, t)
		}
	}
	if len(in) == 0 || len(other) == 0 {
		return nil, fmt.Errorf("%w: %s needs GPU tasks of the kind and others: the list has %d and %d", ErrVariation, v, len(in), len(other))
	}
	a, b := meanDemand(in), meanDemand(other)
	p := v.Percent / 100
	q := p * b / (p*b + (1-p)*a)
	out := make([]trace.Task, len(tasks))
	for i, t := range tasks {
		switch {
		case t.NumGPU == 0:
			out[i] = t
		case rng.Float64() < q:
			out[i] = in[rng.Intn(len(in))]
		default:
			out[i] = other[rng.Intn(len(other))]
		}
	}
	return out, nil
}

func meanDemand(ts []trace.Task) float64 {
	var sum int64
	for _, t := range ts {
		sum += t.GPUDemand()
	}
	return float64(sum) / float64(len(ts))
}

// bindModels gives more GPU tasks a model constraint drawn from those
// the list has, until v.Percent % of its GPU tasks have one.
func bindModels(tasks []trace.Task, v Variation, rng *rand.Rand) ([]trace.Task, error) {
	out := append([]trace.Task(nil), tasks...)
	var specs []string // one entry per bound task: drawn as often as it occurs
	var free []int     // GPU tasks without a constraint
	gpu := 0
	for i, t := range out {
		if t.NumGPU == 0 {
			continue
		}
		gpu++
		if t.GPUSpec != "" {
			specs = append(specs, t.GPUSpec)
		} else {
			free = append(free, i)
		}
	}
	want := int(float64(gpu)*v.Percent/100 + 0.5)
	switch {
	case len(specs) == 0:
		return nil, fmt.Errorf("%w: %s draws the constraints from the list's own, and it has none: use a list that has some, such as openb_pod_list_gpuspec10.csv", ErrVariation, v)
	case want < len(specs):
		return nil, fmt.Errorf("%w: %s: %d of the %d GPU tasks are bound already (%.1f %%)", ErrVariation, v, len(specs), gpu, 100*float64(len(specs))/float64(gpu))
	}
	sort.Strings(specs) // the draw must not hang on the list's order
	rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, i := range free[:want-len(specs)] {
		out[i].GPUSpec = specs[rng.Intn(len(specs))]
	}
	return out, nil
}

// drawCPUOnly keeps the GPU tasks and draws CPU-only tasks from the
// list's own until they are v.Percent % of the tasks, after the GPU
// tasks (the fgd protocol shuffles the list).
func drawCPUOnly(tasks []trace.Task, v Variation, rng *rand.Rand) ([]trace.Task, error) {
	var gpu, cpu []trace.Task
	for _, t := range tasks {
		if t.NumGPU == 0 {
			cpu = append(cpu, t)
		} else {
			gpu = append(gpu, t)
		}
	}
	if len(cpu) == 0 || len(gpu) == 0 {
		return nil, fmt.Errorf("%w: %s needs CPU-only and GPU tasks: the list has %d and %d", ErrVariation, v, len(cpu), len(gpu))
	}
	p := v.Percent / 100
	n := int(float64(len(gpu))*p/(1-p) + 0.5)
	out := append([]trace.Task(nil), gpu...)
	for i := 0; i < n; i++ {
		out = append(out, cpu[rng.Intn(len(cpu))])
	}
	return out, nil
}
