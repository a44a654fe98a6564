package replay

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/dmsc/dmsc/internal/trace"
)

func TestParseVariation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Variation
		ok   bool
	}{
		{"gpushare=60", Variation{"gpushare", 60}, true},
		{"multigpu=30.5", Variation{"multigpu", 30.5}, true},
		{"gpuspec=20", Variation{"gpuspec", 20}, true},
		{"cpu=5", Variation{"cpu", 5}, true},
		{"gpushare", Variation{}, false},
		{"gpushare=0", Variation{}, false},
		{"gpushare=100", Variation{}, false},
		{"gpushare=-3", Variation{}, false},
		{"gpushare=x", Variation{}, false},
		{"memory=20", Variation{}, false},
	} {
		got, err := ParseVariation(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseVariation(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrVariation) {
			t.Errorf("ParseVariation(%q): %v is not ErrVariation", tc.in, err)
		}
	}
}

// part is the percentage of the GPU request that the tasks of kind carry.
func part(ts []trace.Task, kind func(trace.Task) bool) float64 {
	var in, all int64
	for _, t := range ts {
		all += t.GPUDemand()
		if t.NumGPU > 0 && kind(t) {
			in += t.GPUDemand()
		}
	}
	return 100 * float64(in) / float64(all)
}

func TestVaryRequestParts(t *testing.T) {
	_, tasks, err := SampleOpenb()
	if err != nil {
		t.Fatal(err)
	}
	sharing := func(t trace.Task) bool { return t.NumGPU == 1 && t.GPUMilli < MilliPerGPU }
	multi := func(t trace.Task) bool { return t.NumGPU > 1 }
	for _, tc := range []struct {
		v    Variation
		kind func(trace.Task) bool
	}{
		{Variation{"gpushare", 60}, sharing},
		{Variation{"gpushare", 10}, sharing},
		{Variation{"multigpu", 30}, multi},
		{Variation{"multigpu", 50}, multi},
	} {
		out, err := Vary(tasks, tc.v, 1)
		if err != nil {
			t.Fatalf("%v: %v", tc.v, err)
		}
		if len(out) != len(tasks) {
			t.Fatalf("%v: %d tasks, want %d", tc.v, len(out), len(tasks))
		}
		// The draw aims at the expected part; 1,000 tasks land within a few points.
		if got := part(out, tc.kind); math.Abs(got-tc.v.Percent) > 4 {
			t.Errorf("%v: the kind carries %.1f %% of the GPU request", tc.v, got)
		}
		for i := range tasks {
			if (tasks[i].NumGPU == 0) != (out[i].NumGPU == 0) || tasks[i].NumGPU == 0 && out[i].CPUMilli != tasks[i].CPUMilli {
				t.Fatalf("%v: task %d: a CPU-only task moved or changed: %+v became %+v", tc.v, i, tasks[i], out[i])
			}
		}
	}
	if p := part(tasks, sharing); p > 45 {
		t.Fatalf("the sample's sharing part is %.1f %%: the gpushare=60 case would test nothing", p)
	}
}

func TestVaryCPUOnly(t *testing.T) {
	_, tasks, err := SampleOpenb()
	if err != nil {
		t.Fatal(err)
	}
	gpu := 0
	for _, t := range tasks {
		if t.NumGPU > 0 {
			gpu++
		}
	}
	for _, pct := range []float64{5, 25} {
		out, err := Vary(tasks, Variation{"cpu", pct}, 1)
		if err != nil {
			t.Fatal(err)
		}
		cpu := len(out) - gpu
		if got := 100 * float64(cpu) / float64(len(out)); math.Abs(got-pct) > 0.2 {
			t.Errorf("cpu=%v: %d of %d tasks CPU-only (%.2f %%)", pct, cpu, len(out), got)
		}
	}
}

func TestVaryModels(t *testing.T) {
	var tasks []trace.Task
	for i := 0; i < 20; i++ {
		tasks = append(tasks, trace.Task{NumGPU: 1, GPUMilli: 1000, CPUMilli: int64(i)})
	}
	tasks = append(tasks, trace.Task{CPUMilli: 4000})
	if _, err := Vary(tasks, Variation{"gpuspec", 50}, 1); !errors.Is(err, ErrVariation) {
		t.Fatalf("a list without constraints: %v, want ErrVariation", err)
	}
	tasks[3].GPUSpec, tasks[7].GPUSpec = "T4", "V100M16|V100M32"
	if _, err := Vary(tasks, Variation{"gpuspec", 5}, 1); !errors.Is(err, ErrVariation) {
		t.Fatalf("fewer than the list has bound: %v, want ErrVariation", err)
	}
	out, err := Vary(tasks, Variation{"gpuspec", 50}, 1)
	if err != nil {
		t.Fatal(err)
	}
	bound := 0
	for i, o := range out {
		switch {
		case o.GPUSpec == "":
		case o.GPUSpec != "T4" && o.GPUSpec != "V100M16|V100M32":
			t.Errorf("task %d bound to %q, not one of the list's constraints", i, o.GPUSpec)
		case o.NumGPU == 0:
			t.Errorf("CPU-only task %d bound to a GPU model", i)
		default:
			bound++
		}
		if tasks[i].GPUSpec != "" && o.GPUSpec != tasks[i].GPUSpec {
			t.Errorf("task %d lost its constraint %q", i, tasks[i].GPUSpec)
		}
	}
	if bound != 10 {
		t.Errorf("%d of 20 GPU tasks bound, want 10", bound)
	}
}

func TestVaryIsSeeded(t *testing.T) {
	_, tasks, err := SampleOpenb()
	if err != nil {
		t.Fatal(err)
	}
	v := Variation{"gpushare", 60}
	a, _ := Vary(tasks, v, 7)
	b, _ := Vary(tasks, v, 7)
	c, _ := Vary(tasks, v, 8)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave two lists")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("two seeds gave the same list")
	}
}
