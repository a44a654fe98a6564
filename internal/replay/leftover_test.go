package replay

import (
	"math"
	"testing"

	"github.com/dmsc/dmsc/internal/trace"
)

// TestLeftoverOf classifies hand-made hosts: each GPU's free capacity in
// one class, and OpenFit counting tasks, not shapes.
func TestLeftoverOf(t *testing.T) {
	tasks := []trace.Task{
		{Name: "whole", CPUMilli: 8000, MemoryMiB: 4096, NumGPU: 1, GPUMilli: 1000},
		{Name: "small", CPUMilli: 2000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 160},
		{Name: "small-again", CPUMilli: 2000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 160},
		{Name: "pair", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 2, GPUMilli: 1000},
		{Name: "v100", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 500, GPUSpec: "V100"},
		{Name: "cpu", CPUMilli: 1000, MemoryMiB: 1024},
	}
	hosts := []leftHost{
		// 1000: "whole" and "small" ask for it, the CPU backs neither,
		// "pair" needs two whole GPUs: starved. 190: "small" fits the
		// GPU, not the CPU: starved. 100: nothing asks so little: small.
		{cpu: 1000, mem: 8192, model: "T4", gpus: []int64{1000, 190, 100, 0}},
		// Two whole GPUs, room for whole, small (twice) and pair: open,
		// 4 of the 6 tasks fit on either.
		{cpu: 16000, mem: 65536, model: "T4", gpus: []int64{1000, 1000}},
		// "v100" fits the GPU, not the memory; "small" fits the GPU,
		// not the CPU: starved.
		{cpu: 1500, mem: 512, model: "V100", gpus: []int64{500}},
	}
	got := leftoverOf(hosts, tasks, 7000)
	want := Leftover{
		Small:   100 * 100.0 / 7000,
		Starved: 100 * (1000 + 190 + 500) / 7000.0,
		Open:    100 * 2000 / 7000.0,
		OpenFit: 100 * 4 / 6.0,
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(got.Small, want.Small) || !near(got.Starved, want.Starved) || !near(got.Open, want.Open) || !near(got.OpenFit, want.OpenFit) {
		t.Errorf("leftover %+v, want %+v", got, want)
	}
	if empty := leftoverOf(nil, nil, 1000); empty != (Leftover{}) {
		t.Errorf("no hosts, no tasks: %+v", empty)
	}
}
