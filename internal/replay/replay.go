// Package replay replays traces through fsm.State: it turns trace hosts
// and tasks into fsm commands, applies them in log order, and measures
// what a placement policy achieves. Live sends the same commands, in the
// same order, through a running cluster's HTTP API instead. Protocol runs
// the protocol of the FGD paper (Weng et al., "Beware of Fragmentation:
// Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
// USENIX ATC'23) on the Alibaba openb trace; Timeline replays tasks as
// they arrive and leave, with the queue, and reports utilisation, waits,
// timeouts and refusals over time. Runner runs the replays of
// `dmsc replay`: every policy (and seed), several at a time, in process,
// on a fresh cluster started in this process for each run, or on a
// running cluster, and MeanCurves averages them.
package replay

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// GPUModelKey is the custom capability that holds a GPU's model.
const GPUModelKey = "model"

// MilliPerGPU is the capacity of one GPU in the openb trace's unit.
const MilliPerGPU = 1000

// HostCommand models an openb host: one shareable CPU device whose
// compute_units are the host's CPU milli, one shareable Memory device
// whose memory_gb is its memory in GiB, and one shareable GPU device per
// GPU with 1000 compute_units and the model as custom capability.
func HostCommand(n trace.Node) *fsm.RegisterHost {
	devs := make([]fsm.DeviceSpec, 0, 2+n.GPUs)
	devs = append(devs,
		fsm.DeviceSpec{ID: n.Name + ".cpu", Type: fsm.CPU, Shareable: true,
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: float64(n.CPUMilli)}}},
		fsm.DeviceSpec{ID: n.Name + ".mem", Type: fsm.Memory, Shareable: true,
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: mibToGiB(n.MemoryMiB)}}},
	)
	for i := 0; i < n.GPUs; i++ {
		devs = append(devs, fsm.DeviceSpec{
			ID: fmt.Sprintf("%s.gpu%02d", n.Name, i), Type: fsm.GPU, Name: n.Model, Shareable: true,
			Capabilities: fsm.Capabilities{
				Resources: fsm.Resources{ComputeUnits: MilliPerGPU},
				Custom:    map[string]string{GPUModelKey: n.Model},
			},
		})
	}
	return &fsm.RegisterHost{Host: fsm.HostSpec{ID: n.Name}, Devices: devs}
}

// mibToGiB is exact: MiB counts are integers, so the quotient is a binary
// fraction and sums of them do not round.
func mibToGiB(mib int64) float64 { return float64(mib) / 1024 }

// TaskRequest models an openb task as one request whose claims must all
// land on one host: GPUs first (num_gpu devices, each giving gpu_milli;
// a share of one GPU when gpu_milli < 1000, whole free GPUs otherwise,
// restricted to the models of gpu_spec), then the CPU milli, then the
// memory. A zero amount makes no claim (a zero-amount claim would take a
// whole device). Timeout 0: a task that fits nowhere fails at once.
//
// The claims give exactly the trace's fit rule: CPU and memory fit the
// host's free CPU and memory; for num_gpu = 1, one GPU has free milli >=
// gpu_milli; for num_gpu = k > 1, k GPUs have all 1000 milli free; the
// GPU model is in gpu_spec when it is set.
func TaskRequest(t trace.Task) fsm.Request {
	var claims []fsm.Claim
	if t.NumGPU > 0 {
		c := fsm.Claim{Type: fsm.GPU, Count: t.NumGPU, Amount: fsm.Resources{ComputeUnits: float64(t.GPUMilli)}}
		if t.GPUSpec != "" {
			c.Capabilities.Custom = map[string]string{GPUModelKey: t.GPUSpec}
		}
		claims = append(claims, c)
	}
	if t.CPUMilli > 0 {
		claims = append(claims, fsm.Claim{Type: fsm.CPU, Count: 1, Amount: fsm.Resources{ComputeUnits: float64(t.CPUMilli)}})
	}
	if t.MemoryMiB > 0 {
		claims = append(claims, fsm.Claim{Type: fsm.Memory, Count: 1, Amount: fsm.Resources{MemoryGB: mibToGiB(t.MemoryMiB)}})
	}
	return fsm.Request{Claims: claims}
}

// Workload is the paper's task order for a seed: every task of the trace
// in a uniformly shuffled order, then tasks drawn uniformly with
// replacement until the total GPU demand (failed tasks included) reaches
// ratio times the capacity (in milli).
func Workload(tasks []trace.Task, capacityMilli int64, ratio float64, seed int64) []trace.Task {
	rng := rand.New(rand.NewSource(seed))
	out := make([]trace.Task, len(tasks), len(tasks)+len(tasks)/2)
	copy(out, tasks)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	target := ratio * float64(capacityMilli)
	var demand int64
	for _, t := range out {
		demand += t.GPUDemand()
	}
	for len(tasks) > 0 && float64(demand) < target {
		t := tasks[rng.Intn(len(tasks))]
		out = append(out, t)
		demand += t.GPUDemand()
	}
	return out
}

// CurveMax is the last arrived percentage a curve reports.
const CurveMax = 130

// Result is what one replay achieved.
type Result struct {
	Policy fsm.Policy
	Seed   int64
	// Curve[p] is the allocated GPU capacity, in percent of the cluster's,
	// right after the arrived GPU demand first reached p percent of it
	// (p = 0..CurveMax).
	Curve []float64
	// At100 and At130 are Curve[100] and Curve[130].
	At100, At130 float64
	// Tasks is how many tasks were submitted, Placed how many got devices.
	Tasks, Placed int
	// GPUs is the cluster's GPU count.
	GPUs int
	// Leftover says what could still use the GPU capacity left free when
	// the arrived demand reached 130 % (or at the end, if it never did).
	Leftover *Leftover
	// Elapsed is the wall time of the replay (loading the hosts included,
	// reading the files not).
	Elapsed time.Duration
}

// Replayer applies commands to a fresh state with increasing log indexes
// and times one millisecond apart.
type Replayer struct {
	State *fsm.State
	idx   uint64
	now   int64
}

// epoch is the leader time a replay starts from.
var epoch = time.Date(2023, 7, 10, 0, 0, 0, 0, time.UTC).UnixNano()

// NewReplayer returns a replayer over an empty state.
func NewReplayer() *Replayer { return &Replayer{State: fsm.New(), now: epoch} }

// Apply stamps and applies one command.
func (r *Replayer) Apply(c fsm.Command) fsm.Result {
	r.idx++
	r.now += int64(time.Millisecond)
	stampTime(c, r.now)
	return r.State.Apply(r.idx, c)
}

// stampTime sets the leader time of a command.
func stampTime(c fsm.Command, t int64) { fsm.Stamp(c, time.Unix(0, t)) }

// PolicyTypes are the device types a replay sets its policy for: every
// type a task claims, so CPU-only tasks are placed by the policy too.
var PolicyTypes = []fsm.DeviceType{fsm.GPU, fsm.CPU, fsm.Memory}

// Cluster registers the hosts and sets the policy for PolicyTypes.
func (r *Replayer) Cluster(nodes []trace.Node, pol fsm.Policy) error {
	for _, n := range nodes {
		if res := r.Apply(HostCommand(n)); res.Err != nil {
			return fmt.Errorf("register %s: %w", n.Name, res.Err)
		}
	}
	for _, t := range PolicyTypes {
		if res := r.Apply(&fsm.SetPolicy{DeviceType: t, Config: fsm.PolicyConfig{Policy: pol}}); res.Err != nil {
			return fmt.Errorf("set policy: %w", res.Err)
		}
	}
	return nil
}

// Submit applies one task and reports whether it was placed. A refusal
// for lack of capacity is not an error.
func (r *Replayer) Submit(t trace.Task) (bool, error) {
	req := TaskRequest(t)
	if len(req.Claims) == 0 {
		return true, nil // asks for nothing: trivially placed
	}
	res := r.Apply(&fsm.Allocate{Request: req})
	switch {
	case res.Err == nil:
		return true, nil
	case errors.Is(res.Err, fsm.ErrNoCapacity):
		return false, nil
	default:
		return false, fmt.Errorf("task %s: %w", t.Name, res.Err)
	}
}

// Protocol replays the FGD paper's protocol for one policy and seed: the
// cluster is the given hosts, tasks arrive in Workload's order until the
// demand reaches 130% of the GPUs, are never released, and a task that
// fits nowhere is dropped.
func Protocol(nodes []trace.Node, tasks []trace.Task, pol fsm.Policy, seed int64) (*Result, error) {
	var tg protocolTarget = &inProcess{}
	if IsPaperPolicy(pol) {
		tg = &paperTarget{policy: pol, seed: seed, tasks: tasks}
	}
	return protocol(context.Background(), tg, nodes, tasks, pol, seed, nil)
}

// ProtocolWork is the number of tasks Protocol submits for a seed.
func ProtocolWork(nodes []trace.Node, tasks []trace.Task, seed int64) int {
	return len(Workload(tasks, capacityOf(nodes), float64(CurveMax)/100, seed))
}

// capacityOf is the hosts' GPU capacity in milli.
func capacityOf(nodes []trace.Node) int64 {
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	return int64(gpus) * MilliPerGPU
}

// protocolTarget is what the fgd protocol drives: the state machine in
// this process or a live cluster.
type protocolTarget interface {
	// setup registers the hosts and sets the policy.
	setup(ctx context.Context, nodes []trace.Node, pol fsm.Policy) error
	// submit asks for one task's devices and says whether it got them.
	submit(ctx context.Context, t trace.Task) (bool, error)
}

// inProcess drives a Replayer.
type inProcess struct{ r *Replayer }

func (p *inProcess) setup(_ context.Context, nodes []trace.Node, pol fsm.Policy) error {
	p.r = NewReplayer()
	return p.r.Cluster(nodes, pol)
}

func (p *inProcess) submit(_ context.Context, t trace.Task) (bool, error) { return p.r.Submit(t) }

// protocol runs the fgd protocol on tg; progress, when set, is called
// every 100 tasks and at the end.
func protocol(ctx context.Context, tg protocolTarget, nodes []trace.Node, tasks []trace.Task, pol fsm.Policy, seed int64,
	progress func(done, total int)) (*Result, error) {
	capacity := capacityOf(nodes)
	if capacity == 0 {
		return nil, errors.New("replay: the cluster has no GPUs")
	}
	work := Workload(tasks, capacity, float64(CurveMax)/100, seed)
	start := time.Now()
	if err := tg.setup(ctx, nodes, pol); err != nil {
		return nil, err
	}
	res := &Result{Policy: pol, Seed: seed, GPUs: int(capacity / MilliPerGPU), Curve: make([]float64, 0, CurveMax+1)}
	var arrived, allocated int64
	pct := func(x int64) float64 { return 100 * float64(x) / float64(capacity) }
	// takeLeftover reads the leftover once, when the curve reaches 130 %.
	takeLeftover := func() (err error) {
		if len(res.Curve) > CurveMax && res.Leftover == nil {
			res.Leftover, err = leftoverNow(ctx, tg, tasks, capacity)
		}
		return err
	}
	for i, t := range work {
		if progress != nil && i%100 == 0 {
			progress(i, len(work))
		}
		arrived += t.GPUDemand()
		ok, err := tg.submit(ctx, t)
		if err != nil {
			return nil, err
		}
		res.Tasks++
		if ok {
			res.Placed++
			allocated += t.GPUDemand()
		}
		// Fill the curve up to the percentage arrived now reached.
		for len(res.Curve) <= CurveMax && 100*arrived >= int64(len(res.Curve))*capacity {
			res.Curve = append(res.Curve, pct(allocated))
		}
		if err := takeLeftover(); err != nil {
			return nil, err
		}
	}
	if progress != nil {
		progress(len(work), len(work))
	}
	for len(res.Curve) <= CurveMax {
		res.Curve = append(res.Curve, pct(allocated))
	}
	if err := takeLeftover(); err != nil {
		return nil, err
	}
	res.At100, res.At130 = res.Curve[100], res.Curve[CurveMax]
	res.Elapsed = time.Since(start)
	return res, nil
}
