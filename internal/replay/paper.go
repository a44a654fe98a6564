package replay

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"strings"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// The FGD paper's own scheduler, reimplemented as a replay baseline: the
// FGD and BestFit score plugins of the paper's simulator (its artifact,
// kubernetes-scheduler-simulator) with their filters, device choice and
// tie-break, run on dmsc's fgd protocol (the same task order and the
// same curve) so that dmsc's policies and the paper's are compared on one
// yardstick. Replay only: they are not policies of the product.
//
// What the paper's simulator does, and this code with it:
//   - a host is its free CPU milli, free memory, its GPUs' free milli (in
//     index order) and its GPU model; a task fits when its CPU and memory
//     fit, its model is one of its gpu_spec (exact names, "a|b"), and for
//     one GPU share some GPU has gpu_milli free, for n whole GPUs n GPUs
//     are wholly free;
//   - FGD: the typical tasks are the shapes (cpu, gpu_milli, num_gpu,
//     gpu_spec) of the trace's own tasks (CPU-only ones too), most common
//     first, up to the one that reaches 95 % of them, their frequencies
//     renormalised. A host's fragmentation is, summed over the typical
//     tasks by frequency, its idle GPU milli that the task could not use:
//     the GPUs with less than its gpu_milli free when the host can take
//     the task whole (CPU and enough GPUs), else all its idle GPU milli
//     (a CPU-only typical task counts all of it). A host's score for a
//     task is int(100·sigmoid((before − after)/1000)), after being the
//     fragmentation with the task placed (its CPU taken; a share on each
//     GPU in turn, the best truncated score, the lowest GPU on ties;
//     whole GPUs the lowest wholly free);
//   - BestFit: int(100·(1 − ½·(free CPU − cpu)/128000 − ½·(free GPU milli
//     − gpu milli)/8000)) over the host's totals, a share going to the
//     GPU with the least free milli that fits;
//   - the highest score wins; ties go to the host first in a random
//     ranking fixed for the run (the simulator prefixes host names with a
//     seeded random number and takes the smallest name).
//
// Where it departs, knowingly: the task order is dmsc's (Workload: the
// same seed does not give the simulator's Go rand sequence), and so is
// the host ranking of ties (rand.Perm from the seed); the curve is dmsc's
// (allocated % as arrived % reaches each integer, not the mean over the
// events rounded to it). BENCHMARKS.md lists what dmsc's policies do
// differently.

// The paper's policies, as the replay names them.
const (
	PaperFGD     fsm.Policy = "FGD"
	PaperBestFit fsm.Policy = "PaperBestFit"
)

// PaperPolicies are the replay-only baselines.
var PaperPolicies = []fsm.Policy{PaperFGD, PaperBestFit}

// IsPaperPolicy reports whether p is one of the paper's baselines.
func IsPaperPolicy(p fsm.Policy) bool { return slices.Contains(PaperPolicies, p) }

// Paper simulator constants (its MaxSpecCpu and MaxSpecGpu, and the
// typical tasks' coverage).
const (
	paperMaxCPU      = 128000
	paperMaxGPU      = 8000
	paperTypicalPct  = 95
	paperFullGPUMill = MilliPerGPU
)

// paperHost is a host as the paper's simulator sees it.
type paperHost struct {
	rank    int // the tie-break ranking: lower wins
	cpu     int64
	mem     int64
	model   string
	left    []int64 // free milli per GPU, by index
	fragVal float64 // fragmentation now (FGD), valid when fragOK
	fragOK  bool
}

// paperShape is a typical task and its frequency.
type paperShape struct {
	cpu, milli int64
	num        int
	spec       string
	p          float64
}

// paperTarget drives the paper's scheduler for the fgd protocol.
type paperTarget struct {
	policy  fsm.Policy
	seed    int64
	tasks   []trace.Task // the trace's own tasks, for the typical ones
	hosts   []*paperHost
	typical []paperShape
	memo    map[string]float64
}

func (p *paperTarget) setup(_ context.Context, nodes []trace.Node, _ fsm.Policy) error {
	perm := rand.New(rand.NewSource(p.seed)).Perm(len(nodes))
	p.hosts = make([]*paperHost, len(nodes))
	for i, n := range nodes {
		h := &paperHost{rank: perm[i], cpu: n.CPUMilli, mem: n.MemoryMiB, model: n.Model, left: make([]int64, n.GPUs)}
		for g := range h.left {
			h.left[g] = paperFullGPUMill
		}
		p.hosts[i] = h
	}
	p.typical = paperTypical(p.tasks)
	p.memo = map[string]float64{}
	return nil
}

// paperTypical is the typical tasks of the FGD paper.
func paperTypical(tasks []trace.Task) []paperShape {
	count := map[paperShape]float64{}
	total := 0.0
	for _, t := range tasks {
		s := paperShape{cpu: t.CPUMilli, milli: min(t.GPUMilli, paperFullGPUMill), num: t.NumGPU, spec: t.GPUSpec}
		if t.NumGPU == 0 {
			s.milli = 0
		}
		count[s]++
		total++
	}
	list := make([]paperShape, 0, len(count))
	for s, n := range count {
		s.p = n
		list = append(list, s)
	}
	// Most common first; among equals the larger shape (the simulator's
	// reverse PodResource order), so the order is total.
	slices.SortFunc(list, func(a, b paperShape) int {
		switch {
		case a.p != b.p:
			return -cmpFloat(a.p, b.p)
		case a.cpu != b.cpu:
			return -cmpInt(a.cpu, b.cpu)
		case a.milli != b.milli:
			return -cmpInt(a.milli, b.milli)
		case a.num != b.num:
			return -cmpInt(int64(a.num), int64(b.num))
		}
		return -strings.Compare(a.spec, b.spec)
	})
	cum, keep := 0.0, 0
	for keep < len(list) && cum < paperTypicalPct*total/100 {
		cum += list[keep].p
		keep++
	}
	list = list[:keep]
	for i := range list {
		list[i].p /= cum
	}
	return list
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpInt(a, b int64) int { return cmpFloat(float64(a), float64(b)) }

// modelOK reports whether a host of model serves gpu_spec spec.
func modelOK(model, spec string) bool {
	if spec == "" {
		return true
	}
	if model == "" {
		return false
	}
	named := false
	for _, m := range strings.Split(spec, "|") {
		if m == "" {
			continue
		}
		named = true
		if m == model {
			return true
		}
	}
	return !named
}

// fits is the simulator's filter for task t on h.
func (h *paperHost) fits(t trace.Task) bool {
	if h.cpu < t.CPUMilli || h.mem < t.MemoryMiB {
		return false
	}
	if t.NumGPU == 0 {
		return true
	}
	if len(h.left) == 0 || !modelOK(h.model, t.GPUSpec) {
		return false
	}
	return h.gpusFor(min(t.GPUMilli, paperFullGPUMill), t.NumGPU) != nil
}

// gpusFor is where n GPUs of milli each go on h: a share the GPU chosen
// by the caller, whole GPUs the lowest-index wholly free ones; nil when
// there are not enough.
func (h *paperHost) gpusFor(milli int64, n int) []int {
	var out []int
	for g, l := range h.left {
		if l >= milli && (n == 1 || l == paperFullGPUMill) {
			out = append(out, g)
			if len(out) == n {
				return out
			}
		}
	}
	return nil
}

// frag is FGD's fragmentation of a host state: model, free CPU, free
// milli per GPU.
func (p *paperTarget) frag(model string, cpu int64, left []int64) float64 {
	key := model + "|" + strconv.FormatInt(cpu, 10)
	sorted := slices.Clone(left)
	slices.Sort(sorted) // fragmentation reads the multiset of GPUs
	for _, l := range sorted {
		key += "," + strconv.FormatInt(l, 10)
	}
	if v, ok := p.memo[key]; ok {
		return v
	}
	idle := int64(0)
	for _, l := range left {
		idle += l
	}
	f := 0.0
	for _, s := range p.typical {
		if s.milli == 0 { // a CPU-only typical task: all idle GPU is fragment
			f += s.p * float64(idle)
			continue
		}
		if !modelOK(model, s.spec) || cpu < s.cpu {
			f += s.p * float64(idle)
			continue
		}
		n, small := 0, int64(0)
		for _, l := range left {
			if l >= s.milli {
				n++
			} else {
				small += l
			}
		}
		if n < s.num {
			f += s.p * float64(idle)
			continue
		}
		f += s.p * float64(small)
	}
	p.memo[key] = f
	return f
}

func (p *paperTarget) fragOf(h *paperHost) float64 {
	if !h.fragOK {
		h.fragVal, h.fragOK = p.frag(h.model, h.cpu, h.left), true
	}
	return h.fragVal
}

func sigmoidScore(before, after float64) int64 {
	return int64(100 / (1 + math.Exp(-(before-after)/1000)))
}

// score is the policy's score for t on h and the GPUs it would take.
func (p *paperTarget) score(h *paperHost, t trace.Task) (int64, []int) {
	milli := min(t.GPUMilli, paperFullGPUMill)
	if t.NumGPU == 0 {
		milli = 0
	}
	switch p.policy {
	case PaperBestFit:
		free := int64(0)
		for _, l := range h.left {
			free += l
		}
		s := 0.5*float64(h.cpu-t.CPUMilli)/paperMaxCPU + 0.5*float64(free-milli*int64(t.NumGPU))/paperMaxGPU
		var gpus []int
		if t.NumGPU == 1 && milli < paperFullGPUMill {
			best := -1
			for g, l := range h.left {
				if l >= milli && (best < 0 || l < h.left[best]) {
					best = g
				}
			}
			gpus = []int{best}
		} else if t.NumGPU > 0 {
			gpus = h.gpusFor(milli, t.NumGPU)
		}
		return int64((1 - s) * 100), gpus
	default: // FGD
		before := p.fragOf(h)
		left := slices.Clone(h.left)
		if t.NumGPU == 1 && milli < paperFullGPUMill {
			best, bestG := int64(-1), -1
			for g, l := range h.left {
				if l < milli {
					continue
				}
				left[g] -= milli
				s := sigmoidScore(before, p.frag(h.model, h.cpu-t.CPUMilli, left))
				left[g] += milli
				if s > best {
					best, bestG = s, g
				}
			}
			return best, []int{bestG}
		}
		var gpus []int
		if t.NumGPU > 0 {
			gpus = h.gpusFor(milli, t.NumGPU)
			for _, g := range gpus {
				left[g] -= milli
			}
		}
		return sigmoidScore(before, p.frag(h.model, h.cpu-t.CPUMilli, left)), gpus
	}
}

func (p *paperTarget) submit(_ context.Context, t trace.Task) (bool, error) {
	var best *paperHost
	var bestScore int64
	var bestGPUs []int
	for _, h := range p.hosts {
		if !h.fits(t) {
			continue
		}
		s, gpus := p.score(h, t)
		if best == nil || s > bestScore || s == bestScore && h.rank < best.rank {
			best, bestScore, bestGPUs = h, s, gpus
		}
	}
	if best == nil {
		return false, nil
	}
	milli := min(t.GPUMilli, paperFullGPUMill)
	for _, g := range bestGPUs {
		if g < 0 || best.left[g] < milli {
			return false, fmt.Errorf("replay: %s chose GPU %d of a host that cannot take %d milli", p.policy, g, milli)
		}
		best.left[g] -= milli
	}
	best.cpu -= t.CPUMilli
	best.mem -= t.MemoryMiB
	best.fragOK = false
	return true, nil
}
