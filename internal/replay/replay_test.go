package replay

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// tracesDir holds the shared copies of the public traces.
const tracesDir = "../../../shared/traces"

// TestTaskRequestFitRule applies random tasks (and releases) to one random
// host and checks that the state accepts a task exactly when the trace's
// fit rule says it fits: CPU and memory fit what is free; one GPU with
// enough free milli for num_gpu = 1; num_gpu wholly free GPUs otherwise;
// the model in gpu_spec when set.
func TestTaskRequestFitRule(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	models := []string{"T4", "V100M16", "G2"}
	specs := []string{"", "", "", "T4", "V100M16|V100M32", "G2|T4"}
	shares := []int64{1000, 1000, 810, 500, 470, 230, 110}
	checked, refused := 0, 0
	for round := 0; round < 40; round++ {
		n := trace.Node{Name: fmt.Sprintf("n%d", round), CPUMilli: 8000 * (1 + rng.Int63n(8)), MemoryMiB: 16384 * (1 + rng.Int63n(8)),
			GPUs: 1 + rng.Intn(8), Model: models[rng.Intn(len(models))]}
		r := NewReplayer()
		if err := r.Cluster([]trace.Node{n}, fsm.FirstFit); err != nil {
			t.Fatal(err)
		}
		// The reference: what the trace's rule tracks of the host.
		cpu, mem := n.CPUMilli, n.MemoryMiB
		gpu := make([]int64, n.GPUs)
		for i := range gpu {
			gpu[i] = MilliPerGPU
		}
		type held struct {
			id       string
			cpu, mem int64
			gpu      map[int]int64
		}
		var live []held
		for step := 0; step < 60; step++ {
			if len(live) > 0 && rng.Intn(3) == 0 {
				i := rng.Intn(len(live))
				a := live[i]
				live = append(live[:i], live[i+1:]...)
				if res := r.Apply(&fsm.Release{AllocationID: a.id}); res.Err != nil {
					t.Fatal(res.Err)
				}
				cpu += a.cpu
				mem += a.mem
				for g, m := range a.gpu {
					gpu[g] += m
				}
				continue
			}
			k := trace.Task{Name: fmt.Sprintf("t%d", step), CPUMilli: 1000 * rng.Int63n(12), MemoryMiB: 1024 * rng.Int63n(40), GPUSpec: specs[rng.Intn(len(specs))]}
			switch g := rng.Intn(10); {
			case g < 2:
			case g < 8:
				k.NumGPU, k.GPUMilli = 1, shares[rng.Intn(len(shares))]
			default:
				k.NumGPU, k.GPUMilli = 2+rng.Intn(3), 1000
			}
			if k.NumGPU == 0 {
				k.GPUSpec = ""
			}
			want := k.CPUMilli <= cpu && k.MemoryMiB <= mem && specAllows(k.GPUSpec, n.Model)
			if k.NumGPU == 1 {
				ok := false
				for _, f := range gpu {
					ok = ok || f >= k.GPUMilli
				}
				want = want && ok
			} else if k.NumGPU > 1 {
				free := 0
				for _, f := range gpu {
					if f == MilliPerGPU {
						free++
					}
				}
				want = want && free >= k.NumGPU
			}
			req := TaskRequest(k)
			if len(req.Claims) == 0 {
				continue // asks for nothing
			}
			res := r.Apply(&fsm.Allocate{Request: req})
			if got := res.Err == nil; got != want {
				t.Fatalf("round %d step %d: task %+v on %+v (cpu %d mem %d gpus %v): placed=%v, rule says %v (%v)",
					round, step, k, n, cpu, mem, gpu, got, want, res.Err)
			}
			checked++
			if res.Err != nil {
				if !errors.Is(res.Err, fsm.ErrNoCapacity) {
					t.Fatalf("refused with %v, want ErrNoCapacity", res.Err)
				}
				refused++
				continue
			}
			a := held{id: res.Allocation.ID, cpu: k.CPUMilli, mem: k.MemoryMiB, gpu: map[int]int64{}}
			cpu -= k.CPUMilli
			mem -= k.MemoryMiB
			for _, as := range res.Allocation.Devices {
				var i int
				if _, err := fmt.Sscanf(as.DeviceID, n.Name+".gpu%d", &i); err == nil {
					gpu[i] -= int64(as.Amount.ComputeUnits)
					a.gpu[i] += int64(as.Amount.ComputeUnits)
				}
			}
			live = append(live, a)
		}
	}
	if refused < checked/10 || refused > checked*9/10 {
		t.Fatalf("%d of %d tasks refused: the cases do not exercise both outcomes", refused, checked)
	}
}

func specAllows(spec, model string) bool {
	if spec == "" {
		return true
	}
	for _, m := range strings.Split(spec, "|") {
		if m == model {
			return true
		}
	}
	return false
}

// TestWorkload: every task once, shuffled by the seed, then draws until
// the demand reaches the ratio, and no further.
func TestWorkload(t *testing.T) {
	var tasks []trace.Task
	for i := 0; i < 50; i++ {
		tasks = append(tasks, trace.Task{Name: fmt.Sprint(i), NumGPU: 1, GPUMilli: int64(100 * (1 + i%10))})
	}
	const capacity = 40000 // the trace alone is 27,500: draws are needed
	a := Workload(tasks, capacity, 1.3, 42)
	if b := Workload(tasks, capacity, 1.3, 42); !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two workloads")
	}
	if c := Workload(tasks, capacity, 1.3, 43); reflect.DeepEqual(a[:len(tasks)], c[:len(tasks)]) {
		t.Fatal("two seeds gave the same order")
	}
	names := func(ts []trace.Task) []string {
		var out []string
		for _, k := range ts {
			out = append(out, k.Name)
		}
		sort.Strings(out)
		return out
	}
	if !reflect.DeepEqual(names(a[:len(tasks)]), names(tasks)) {
		t.Fatal("the first part is not a permutation of the trace")
	}
	if reflect.DeepEqual(a[:len(tasks)], tasks) {
		t.Fatal("the trace was not shuffled")
	}
	var demand int64
	for _, k := range a[:len(a)-1] {
		demand += k.GPUDemand()
	}
	if float64(demand) >= 1.3*capacity || float64(demand+a[len(a)-1].GPUDemand()) < 1.3*capacity {
		t.Fatalf("demand %d before the last task: want just under 130%% of %d", demand, capacity)
	}
}

// TestProtocolCurve replays a small synthetic cluster and checks the
// curve's bookkeeping.
func TestProtocolCurve(t *testing.T) {
	nodes := []trace.Node{{Name: "a", CPUMilli: 16000, MemoryMiB: 65536, GPUs: 2, Model: "T4"}, {Name: "b", CPUMilli: 32000, MemoryMiB: 65536, GPUs: 4, Model: "V100M16"}}
	tasks := []trace.Task{
		{Name: "share", CPUMilli: 2000, MemoryMiB: 4096, NumGPU: 1, GPUMilli: 500},
		{Name: "whole", CPUMilli: 4000, MemoryMiB: 8192, NumGPU: 1, GPUMilli: 1000},
		{Name: "pair", CPUMilli: 8000, MemoryMiB: 16384, NumGPU: 2, GPUMilli: 1000},
		{Name: "cpu", CPUMilli: 6000, MemoryMiB: 8192},
		{Name: "t4", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 250, GPUSpec: "T4"},
	}
	for _, pol := range []fsm.Policy{fsm.FirstFit, fsm.BestFit, fsm.FragmentationAware, PaperFGD} {
		res, err := Protocol(nodes, tasks, pol, 7)
		if err != nil {
			t.Fatal(err)
		}
		// What is left free is what was not allocated, in one class or
		// another.
		if l := res.Leftover; l == nil || math.Abs(l.Small+l.Starved+l.Open-(100-res.At130)) > 1e-9 || l.Open > 0 && l.OpenFit <= 0 {
			t.Fatalf("%s: leftover %+v with %.2f%% allocated", pol, res.Leftover, res.At130)
		}
		if len(res.Curve) != CurveMax+1 || res.At100 != res.Curve[100] || res.At130 != res.Curve[CurveMax] || res.GPUs != 6 {
			t.Fatalf("%s: result %+v", pol, res)
		}
		for p := 1; p < len(res.Curve); p++ {
			if res.Curve[p] < res.Curve[p-1] || res.Curve[p] > float64(p)+100*2000/6000.0 {
				t.Fatalf("%s: curve[%d] = %v after %v: not monotone or above what arrived", pol, p, res.Curve[p], res.Curve[p-1])
			}
		}
		if res.Placed >= res.Tasks || res.At130 <= 50 || res.At130 > 100 {
			t.Fatalf("%s: %d of %d placed, %.2f%% allocated: the cluster should fill and refuse", pol, res.Placed, res.Tasks, res.At130)
		}
		again, _ := Protocol(nodes, tasks, pol, 7)
		if !reflect.DeepEqual(again.Curve, res.Curve) {
			t.Fatalf("%s: two replays of seed 7 differ", pol)
		}
	}
}

// The paper's figures for openb_pod_list_default.csv: GPU allocation (%)
// at 130% arrived, mean of seeds 42-51.
const (
	paperBestFit = 93.11
	paperFGD     = 95.40
)

// TestProtocolOpenb replays seed 42 of the paper's protocol on the openb
// trace. One seed varies by about 0.2 points around the ten-seed mean, so
// FragmentationAware is held to a slightly looser bound than the paper's
// FGD figure.
func TestProtocolOpenb(t *testing.T) {
	if testing.Short() {
		t.Skip("replays about 11,000 tasks per policy; skipped in -short mode")
	}
	if raceEnabled {
		t.Skip("replays about 11,000 tasks per policy: minutes under -race; .ci/run runs it without -race")
	}
	dir := filepath.Join(tracesDir, "openb")
	nodesFile := filepath.Join(dir, "openb_node_list_gpu_node.csv")
	tasksFile := filepath.Join(dir, "openb_pod_list_default.csv")
	for _, f := range []string{nodesFile, tasksFile} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("openb trace not found (%v): the test reads the shared copy at %s", err, dir)
		}
	}
	nodes, err := trace.ReadNodesFile(nodesFile)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := trace.ReadTasksFile(tasksFile)
	if err != nil {
		t.Fatal(err)
	}
	at := map[fsm.Policy]float64{}
	for _, pol := range []fsm.Policy{fsm.BestFit, fsm.FragmentationAware} {
		res, err := Protocol(nodes, tasks, pol, 42)
		if err != nil {
			t.Fatal(err)
		}
		at[pol] = res.At130
		t.Logf("%s seed 42: %.2f%% allocated at 100%% arrived, %.2f%% at 130%% (%d of %d tasks placed, %v)",
			pol, res.At100, res.At130, res.Placed, res.Tasks, res.Elapsed.Round(1e7))
	}
	if fa := at[fsm.FragmentationAware]; fa < paperFGD-0.4 {
		t.Errorf("FragmentationAware: %.2f%% at 130%% arrived, want at least %.2f (the paper's FGD: %.2f)", fa, paperFGD-0.4, paperFGD)
	}
	if at[fsm.FragmentationAware] <= at[fsm.BestFit] {
		t.Errorf("FragmentationAware (%.2f%%) does not beat BestFit (%.2f%%)", at[fsm.FragmentationAware], at[fsm.BestFit])
	}
	// The protocol is faithful when BestFit lands near the paper's.
	if bf := at[fsm.BestFit]; bf < paperBestFit-1.5 || bf > paperBestFit+1.5 {
		t.Errorf("BestFit: %.2f%% at 130%% arrived, want within 1.5 of the paper's %.2f", bf, paperBestFit)
	}
}

// BenchmarkProtocol replays one seed of the paper's protocol on the openb
// trace per operation.
//
//	go test -run '^$' -bench Protocol -benchtime 1x ./internal/replay/
func BenchmarkProtocol(b *testing.B) {
	dir := filepath.Join(tracesDir, "openb")
	nodes, err := trace.ReadNodesFile(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		b.Skipf("openb trace not found: %v", err)
	}
	tasks, err := trace.ReadTasksFile(filepath.Join(dir, "openb_pod_list_default.csv"))
	if err != nil {
		b.Skipf("openb trace not found: %v", err)
	}
	for _, pol := range []fsm.Policy{fsm.FragmentationAware, fsm.BestFit} {
		b.Run(string(pol), func(b *testing.B) {
			for b.Loop() {
				if _, err := Protocol(nodes, tasks, pol, 42); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
