package replay

import (
	"context"
	"math"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// Leftover is the GPU capacity that no task holds in an fgd run when the
// arrived demand reaches 130 % of the GPUs, in percent of the cluster's
// GPUs, by what of the trace could still use it. Each GPU's free capacity
// counts in one class:
//   - Small: no task of the trace asks for so little of a GPU of its
//     model (a multi-GPU task needs whole free GPUs, as many as it asks,
//     on one host);
//   - Starved: some task's GPU claim fits, but the host lacks the CPU or
//     the memory of every such task;
//   - Open: some task of the trace fits there as it is, but none came in
//     time. OpenFit is the largest share of the trace's tasks, in
//     percent, that fits on one GPU of this class: how rare the tasks
//     are that could still use it.
//
// Small and Starved are what placement left unusable; Open is what the
// draws left unused.
type Leftover struct {
	Small   float64 `json:"small"`
	Starved float64 `json:"starved"`
	Open    float64 `json:"open"`
	OpenFit float64 `json:"open_fit"`
}

// add adds o's capacities to l, scaled by k, and keeps the larger
// OpenFit.
func (l *Leftover) add(o Leftover, k float64) {
	l.Small += k * o.Small
	l.Starved += k * o.Starved
	l.Open += k * o.Open
	l.OpenFit = max(l.OpenFit, o.OpenFit)
}

// leftHost is a host as Leftover reads it.
type leftHost struct {
	// cpu and mem are the free CPU (milli) and memory (MiB).
	cpu, mem int64
	model    string
	// gpus holds each GPU's free capacity, in milli.
	gpus []int64
}

// leftHoster is a protocol target that can show its hosts as they stand.
type leftHoster interface {
	leftHosts(ctx context.Context) ([]leftHost, error)
}

// leftoverNow is the leftover of the target as it stands, or nil when it
// cannot show its hosts.
func leftoverNow(ctx context.Context, tg protocolTarget, tasks []trace.Task, capacity int64) (*Leftover, error) {
	lh, ok := tg.(leftHoster)
	if !ok {
		return nil, nil
	}
	hosts, err := lh.leftHosts(ctx)
	if err != nil {
		return nil, err
	}
	l := leftoverOf(hosts, tasks, capacity)
	return &l, nil
}

// leftoverOf classifies the free GPU capacity of hosts against the
// distinct shapes of tasks; capacity is the cluster's, in milli.
func leftoverOf(hosts []leftHost, tasks []trace.Task, capacity int64) Leftover {
	type shape struct {
		cpu, mem, milli int64
		num             int
		spec            string
	}
	count := map[shape]int{}
	var shapes []shape
	for _, t := range tasks {
		s := shape{t.CPUMilli, t.MemoryMiB, t.GPUMilli, t.NumGPU, t.GPUSpec}
		if t.NumGPU > 0 {
			if count[s] == 0 {
				shapes = append(shapes, s)
			}
			count[s]++
		}
	}
	var small, starved, open int64
	openFit := 0
	for _, h := range hosts {
		whole := 0
		for _, f := range h.gpus {
			if f >= MilliPerGPU {
				whole++
			}
		}
		for _, f := range h.gpus {
			if f <= 0 {
				continue
			}
			claimFits, fits := false, 0
			for _, s := range shapes {
				if !modelOK(h.model, s.spec) {
					continue
				}
				if s.num == 1 && s.milli > f || s.num > 1 && (f < MilliPerGPU || whole < s.num) {
					continue
				}
				claimFits = true
				if s.cpu <= h.cpu && s.mem <= h.mem {
					fits += count[s]
				}
			}
			switch {
			case fits > 0:
				open += f
				openFit = max(openFit, fits)
			case claimFits:
				starved += f
			default:
				small += f
			}
		}
	}
	pct := func(x int64) float64 { return 100 * float64(x) / float64(capacity) }
	l := Leftover{Small: pct(small), Starved: pct(starved), Open: pct(open)}
	if len(tasks) > 0 {
		l.OpenFit = 100 * float64(openFit) / float64(len(tasks))
	}
	return l
}

// leftDevice is a device as leftHosts reads it.
type leftDevice struct {
	host  string
	typ   fsm.DeviceType
	free  fsm.Resources
	model string
}

// hostsOf gathers devices into hosts, in the order hosts first appear.
func hostsOf(devs []leftDevice) []leftHost {
	at := map[string]int{}
	var hosts []leftHost
	for _, d := range devs {
		i, ok := at[d.host]
		if !ok {
			i = len(hosts)
			at[d.host] = i
			hosts = append(hosts, leftHost{})
		}
		h := &hosts[i]
		switch d.typ {
		case fsm.CPU:
			h.cpu += int64(math.Round(d.free.ComputeUnits))
		case fsm.Memory:
			h.mem += int64(math.Round(d.free.MemoryGB * 1024))
		case fsm.GPU:
			h.model = d.model
			h.gpus = append(h.gpus, int64(math.Round(d.free.ComputeUnits)))
		}
	}
	return hosts
}

// leftHosts reads the hosts of the state machine.
func (p *inProcess) leftHosts(context.Context) ([]leftHost, error) {
	var devs []leftDevice
	for _, d := range p.r.State.Devices() {
		devs = append(devs, leftDevice{host: d.Host, typ: d.Type, free: d.Free(), model: d.Capabilities.Custom[GPUModelKey]})
	}
	return hostsOf(devs), nil
}

// leftHosts reads the simulator's hosts.
func (p *paperTarget) leftHosts(context.Context) ([]leftHost, error) {
	hosts := make([]leftHost, len(p.hosts))
	for i, h := range p.hosts {
		hosts[i] = leftHost{cpu: h.cpu, mem: h.mem, model: h.model, gpus: h.left}
	}
	return hosts, nil
}
