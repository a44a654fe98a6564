package replay

import (
	"fmt"
	"sort"

	"github.com/dmsc/dmsc/internal/trace"
)

// PhillyHost is the synthetic host of a Philly replay: 8 GPUs, with CPU
// and memory the jobs do not claim.
var PhillyHost = trace.Node{CPUMilli: 64000, MemoryMiB: 512 * 1024, GPUs: 8, Model: "P100"}

// PhillyHosts is an inventory of n PhillyHost hosts named philly-h0000, ...
func PhillyHosts(n int) []trace.Node {
	out := make([]trace.Node, n)
	for i := range out {
		out[i] = PhillyHost
		out[i].Name = fmt.Sprintf("philly-h%04d", i)
	}
	return out
}

// PhillyTimeline turns Philly jobs into timeline tasks: each asks for
// num_gpus whole GPUs on one host, arrives at its submission time
// (relative to the earliest) and holds its GPUs for its duration. Jobs
// without GPUs are left out.
func PhillyTimeline(jobs []trace.PhillyJob) []TimelineTask {
	sorted := make([]trace.PhillyJob, 0, len(jobs))
	for _, j := range jobs {
		if j.NumGPUs > 0 {
			sorted = append(sorted, j)
		}
	}
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].Submitted.Before(sorted[b].Submitted) })
	out := make([]TimelineTask, 0, len(sorted))
	for i, j := range sorted {
		out = append(out, TimelineTask{
			Task:      trace.Task{Name: fmt.Sprintf("philly-%05d", i), NumGPU: j.NumGPUs, GPUMilli: MilliPerGPU},
			Arrive:    j.Submitted.Sub(sorted[0].Submitted),
			Hold:      j.Duration,
			Namespace: "vc-" + j.Cluster,
		})
	}
	return out
}

// TenantWeights are fair-share weights for the tasks' namespaces,
// proportional to the GPU time each namespace's tasks ask for (GPUs ×
// hold), the largest 100.
func TenantWeights(tasks []TimelineTask) map[string]float64 {
	gpuTime := map[string]float64{}
	top := 0.0
	for _, t := range tasks {
		gpuTime[t.Namespace] += float64(t.Task.NumGPU) * t.Hold.Seconds()
		top = max(top, gpuTime[t.Namespace])
	}
	out := map[string]float64{}
	for ns, g := range gpuTime {
		out[ns] = max(100*g/top, 0.001) // a namespace that asks for nothing still has a weight
	}
	return out
}
