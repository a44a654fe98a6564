package replay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// TimelineTask is one task of a timeline replay: what it asks for, when it
// arrives and how long it holds its devices once placed.
type TimelineTask struct {
	Task trace.Task
	// Arrive is the arrival, in trace time from the start of the trace.
	Arrive time.Duration
	// Hold is how long the task keeps its devices, in trace time; 0 keeps
	// them to the end of the replay.
	Hold time.Duration
	// Namespace is the tenant the task belongs to (TimelineOptions.Tenants).
	Namespace string
	// MaxHosts above 1 submits the task as a gang over up to that many
	// hosts (Gangs).
	MaxHosts int
}

// Gangs makes every task that asks for more GPUs than a host of perHost
// has a gang over as few hosts as could hold it; the others stay on one
// host.
func Gangs(tasks []TimelineTask, perHost int) []TimelineTask {
	out := slices.Clone(tasks)
	for i := range out {
		if n := out[i].Task.NumGPU; perHost > 0 && n > perHost {
			out[i].MaxHosts = (n + perHost - 1) / perHost
		}
	}
	return out
}

// OpenbTimeline turns openb pods into timeline tasks: each arrives at its
// creation_time and leaves at its deletion_time (a task without a later
// deletion_time never leaves).
func OpenbTimeline(tasks []trace.Task) []TimelineTask {
	out := make([]TimelineTask, 0, len(tasks))
	for _, t := range tasks {
		tt := TimelineTask{Task: t, Arrive: time.Duration(t.Creation) * time.Second}
		if t.Deletion > t.Creation {
			tt.Hold = time.Duration(t.Deletion-t.Creation) * time.Second
		}
		out = append(out, tt)
	}
	return out
}

// TimelineOptions configure a timeline replay.
type TimelineOptions struct {
	Policy fsm.Policy
	// Speedup divides trace time: a task that arrives at trace second s
	// arrives at replay second s/Speedup, and holds its devices Hold/Speedup.
	// Values below 1 are read as 1.
	Speedup float64
	// Timeout is how long, in replay time, a task that does not fit waits
	// in the queue before it times out; 0 refuses it at once.
	Timeout time.Duration
	// Samples is how many evenly spaced utilisation samples to report
	// (default 100).
	Samples int
	// Progress, when set, is called now and then with the tasks arrived
	// so far and the total.
	Progress func(done, total int)
	// Tenants submits each task in its namespace (TimelineTask.Namespace),
	// with a fair-share weight per namespace (Weights; 1 when absent), and
	// reports per namespace. With FairShare the queue serves by share
	// (usage half-life HalfLife, 0 for fsm.DefaultHalfLife); without, by
	// priority and arrival. In-process only.
	Tenants   bool
	Weights   map[string]float64
	FairShare bool
	HalfLife  time.Duration
}

// TenantResult is one namespace's figures in a timeline replay with
// tenants.
type TenantResult struct {
	Namespace string  `json:"namespace"`
	Weight    float64 `json:"weight"`
	// Entitlement is the namespace's weight as a percentage of all the
	// weights; Share its percentage of the GPU time the placed tasks held.
	Entitlement float64       `json:"entitlement_pct"`
	Share       float64       `json:"share_pct"`
	Tasks       int           `json:"tasks"`
	Placed      int           `json:"placed"`
	TimedOut    int           `json:"timed_out"`
	Refused     int           `json:"refused"`
	WaitP50     time.Duration `json:"wait_p50_ns"`
	WaitP95     time.Duration `json:"wait_p95_ns"`
}

// UtilSample is the cluster's state at one moment of a timeline replay.
type UtilSample struct {
	// At is replay time from the first arrival.
	At time.Duration `json:"at_ns"`
	// GPU is the allocated GPU capacity in percent of the cluster's.
	GPU float64 `json:"gpu_pct"`
	// Queue is how many tasks were waiting.
	Queue int `json:"queue"`
}

// TimelineResult is what a timeline replay measured.
type TimelineResult struct {
	Policy fsm.Policy `json:"policy"`
	GPUs   int        `json:"gpus"`
	// Tasks arrived; Placed got devices (at once or after waiting);
	// Waited is how many of those waited in the queue; TimedOut waited
	// past the timeout; Refused were refused at once (Timeout 0); Empty
	// asked for nothing and are counted placed.
	Tasks    int `json:"tasks"`
	Placed   int `json:"placed"`
	Waited   int `json:"waited"`
	TimedOut int `json:"timed_out"`
	Refused  int `json:"refused"`
	Empty    int `json:"empty"`
	// Unplaced are still waiting when the replay ends (none when every
	// wait is bounded by a timeout).
	Unplaced int `json:"unplaced"`
	// Wait percentiles are over placed tasks, in replay time.
	WaitP50 time.Duration `json:"wait_p50_ns"`
	WaitP95 time.Duration `json:"wait_p95_ns"`
	WaitMax time.Duration `json:"wait_max_ns"`
	// Reasons counts refused and timed-out tasks by why-not reason: the
	// device type of the first claim that could not be met and the
	// filter that removed most devices for it.
	Reasons map[string]int `json:"reasons"`
	// MeanGPU is the time-weighted mean allocated GPU percentage from the
	// first to the last arrival.
	MeanGPU float64 `json:"mean_gpu_pct"`
	// Span is the replay time from the first arrival to the last event.
	Span        time.Duration `json:"span_ns"`
	Utilisation []UtilSample  `json:"utilisation"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	// MaxLag is, for a replay through a live cluster, how late the most
	// delayed command went out after its replay time.
	MaxLag time.Duration `json:"max_lag_ns,omitempty"`
	// FairShare and Tenants: the queue order and the per-namespace
	// figures, with TimelineOptions.Tenants.
	FairShare bool           `json:"fair_share,omitempty"`
	Tenants   []TenantResult `json:"tenants,omitempty"`
	// Sizes are the tasks' figures by how many GPUs they ask for.
	Sizes []SizeResult `json:"sizes,omitempty"`
}

// SizeResult is the figures of the tasks of one size range: those that
// ask for MinGPUs to MaxGPUs GPUs.
type SizeResult struct {
	MinGPUs  int           `json:"min_gpus"`
	MaxGPUs  int           `json:"max_gpus"`
	Tasks    int           `json:"tasks"`
	Placed   int           `json:"placed"`
	TimedOut int           `json:"timed_out"`
	Refused  int           `json:"refused"`
	WaitP50  time.Duration `json:"wait_p50_ns"`
	WaitP95  time.Duration `json:"wait_p95_ns"`
}

// Label names the size range: "1", "3-4", "65-128".
func (r SizeResult) Label() string {
	if r.MinGPUs == r.MaxGPUs {
		return strconv.Itoa(r.MinGPUs)
	}
	return fmt.Sprintf("%d-%d", r.MinGPUs, r.MaxGPUs)
}

// sizeRange is the range of GPU counts n falls in: 1, 2, then powers of
// two (3-4, 5-8, 9-16, ...).
func sizeRange(n int) (lo, hi int) {
	if n <= 2 {
		return n, n
	}
	hi = 4
	for hi < n {
		hi *= 2
	}
	return hi/2 + 1, hi
}

// sizeTally gathers the figures by size range.
type sizeTally struct {
	by    map[int]*SizeResult // by the range's MaxGPUs
	waits map[int][]time.Duration
}

func newSizeTally() *sizeTally {
	return &sizeTally{by: map[int]*SizeResult{}, waits: map[int][]time.Duration{}}
}

func (t *sizeTally) of(gpus int) *SizeResult {
	lo, hi := sizeRange(gpus)
	r := t.by[hi]
	if r == nil {
		r = &SizeResult{MinGPUs: lo, MaxGPUs: hi}
		t.by[hi] = r
	}
	return r
}

func (t *sizeTally) placed(w waiting, at int64) {
	r := t.of(w.gpus)
	r.Placed++
	t.waits[r.MaxGPUs] = append(t.waits[r.MaxGPUs], time.Duration(at-w.arrive))
}

// results are the size ranges' figures, smallest first.
func (t *sizeTally) results() []SizeResult {
	out := make([]SizeResult, 0, len(t.by))
	for _, hi := range slices.Sorted(maps.Keys(t.by)) {
		r := *t.by[hi]
		r.WaitP50, r.WaitP95 = percentiles(t.waits[hi])
		out = append(out, r)
	}
	return out
}

// percentiles are the p50 and p95 of waits (sorted here).
func percentiles(w []time.Duration) (p50, p95 time.Duration) {
	slices.Sort(w)
	if n := len(w); n > 0 {
		return w[(n-1)*50/100], w[(n-1)*95/100]
	}
	return 0, 0
}

// release is a scheduled end of an allocation.
type release struct {
	at     int64
	seq    uint64
	id, ns string
	demand int64
}

type releaseHeap []release

func (h releaseHeap) Len() int { return len(h) }
func (h releaseHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h releaseHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *releaseHeap) Push(x any)   { *h = append(*h, x.(release)) }
func (h *releaseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// waiting is a task in the fsm queue.
type waiting struct {
	arrive   int64
	hold     int64 // replay nanoseconds; 0 never leaves
	demand   int64
	deadline int64 // when it times out
	ns       string
	gpus     int
}

// ReasonOf names why a request could not be placed, from its why-not: the
// device type of the first claim no host can meet, and the filter other
// than the type filter that removed most devices for it ("GPU: in use"), or "claims fit apart, not
// together" when each claim fits some host but no host fits all.
func ReasonOf(w *fsm.WhyNot) string {
	if w == nil {
		return "unknown"
	}
	for _, c := range w.Claims {
		if c.HostsWithEnough > 0 {
			continue
		}
		if c.Fitting > 0 {
			return fmt.Sprintf("%s: no host has %d fitting devices", c.Type, c.Count)
		}
		// Devices of other types are always removed; name what stopped
		// the devices of the claimed type.
		best := fsm.Reason{}
		for _, r := range c.Removed {
			if r.Count > best.Count && !strings.HasPrefix(r.Reason, "type") {
				best = r
			}
		}
		name := best.Reason
		if i := strings.IndexAny(name, "(:"); i > 0 {
			name = strings.TrimSpace(name[:i])
		}
		if name == "" {
			name = "no device"
		}
		return fmt.Sprintf("%s: %s", c.Type, name)
	}
	return "claims fit apart, not together"
}

// Timeline replays tasks in arrival order against the hosts: each task is
// submitted when it arrives, waits in the scheduler's queue up to
// opts.Timeout when nothing fits, and is released Hold after it was
// placed. It reports utilisation over time, queue waits, timeouts and
// refusals by reason.
func Timeline(nodes []trace.Node, tasks []TimelineTask, opts TimelineOptions) (*TimelineResult, error) {
	return timeline(context.Background(), &inProcessTimeline{}, nodes, tasks, opts)
}

// allocOutcome is the answer to a timeline task's allocation: active or
// pending with its ID, or refused with its why-not.
type allocOutcome struct {
	id      string
	status  fsm.AllocStatus
	refused bool
	why     *fsm.WhyNot
}

// timelineTarget is what the timeline protocol drives. Times are replay
// nanoseconds from the first arrival; the target maps them to its clock.
type timelineTarget interface {
	// setup registers the hosts and sets the policy; begin then fixes
	// replay time zero.
	setup(ctx context.Context, nodes []trace.Node, pol fsm.Policy) error
	begin()
	// allocate submits a task of namespace ns ("": the default) at time at.
	allocate(ctx context.Context, req fsm.Request, ns string, at int64) (allocOutcome, error)
	// release ends an active allocation of namespace ns at time at.
	release(ctx context.Context, id, ns string, at int64) error
	// nextDeadline is when the first of the pending tasks times out.
	nextDeadline(pending map[string]waiting) (int64, bool)
	// tick lets the deadlines due by at pass.
	tick(ctx context.Context, at int64, pending map[string]waiting) error
	// statuses reads the allocations of the ids (sorted) that left the
	// pending state: active, or ended with their why-not.
	statuses(ctx context.Context, ids []string) (map[string]allocOutcome, error)
}

// inProcessTimeline drives a Replayer; replay time zero is base.
type inProcessTimeline struct {
	r    *Replayer
	base int64
}

func (p *inProcessTimeline) setup(_ context.Context, nodes []trace.Node, pol fsm.Policy) error {
	p.r = NewReplayer()
	return p.r.Cluster(nodes, pol)
}

func (p *inProcessTimeline) begin() { p.base = p.r.now + int64(time.Millisecond) }

// applyAt stamps a command with replay time at (never earlier than the
// last one) and applies it.
func (p *inProcessTimeline) applyAt(c fsm.Command, at int64) fsm.Result {
	t := p.base + at
	if t < p.r.now {
		t = p.r.now
	}
	p.r.now = t
	p.r.idx++
	stampTime(c, t)
	return p.r.State.Apply(p.r.idx, c)
}

func (p *inProcessTimeline) allocate(_ context.Context, req fsm.Request, ns string, at int64) (allocOutcome, error) {
	c := &fsm.Allocate{Request: req}
	fsm.SetNamespace(c, ns)
	out := p.applyAt(c, at)
	switch {
	case out.Err == nil && out.Allocation != nil:
		return allocOutcome{id: out.Allocation.ID, status: out.Allocation.Status}, nil
	case errors.Is(out.Err, fsm.ErrNoCapacity), errors.Is(out.Err, fsm.ErrQuotaExceeded):
		o := allocOutcome{refused: true}
		if out.Allocation != nil {
			o.why = out.Allocation.WhyNot
		}
		return o, nil
	default:
		return allocOutcome{}, out.Err
	}
}

func (p *inProcessTimeline) release(_ context.Context, id, ns string, at int64) error {
	c := &fsm.Release{AllocationID: id}
	fsm.SetNamespace(c, ns)
	return p.applyAt(c, at).Err
}

// tenants sets each namespace's weight and the queue's order.
func (p *inProcessTimeline) tenants(weights map[string]float64, fair bool, halfLife time.Duration) error {
	for _, ns := range sortedNames(weights) {
		if err := p.applyAt(&fsm.SetQuota{Quota: fsm.Quota{Namespace: ns, Weight: weights[ns]}}, 0).Err; err != nil {
			return fmt.Errorf("weight of %s: %w", ns, err)
		}
	}
	if fair {
		return p.applyAt(&fsm.SetQueueConfig{FairShare: true, HalfLife: halfLife}, 0).Err
	}
	return nil
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func (p *inProcessTimeline) nextDeadline(map[string]waiting) (int64, bool) {
	d, ok := p.r.State.NextDeadline()
	return d.UnixNano() - p.base, ok
}

func (p *inProcessTimeline) tick(_ context.Context, at int64, _ map[string]waiting) error {
	p.applyAt(&fsm.Tick{}, at)
	return nil
}

func (p *inProcessTimeline) statuses(_ context.Context, ids []string) (map[string]allocOutcome, error) {
	out := map[string]allocOutcome{}
	for _, id := range ids {
		if a, ok := p.r.State.Allocation(id); ok && a.Status != fsm.Pending {
			out[id] = allocOutcome{id: id, status: a.Status, why: a.WhyNot}
		}
	}
	return out, nil
}

// step is the allocated milli and queue length after a change.
type step struct {
	at        int64
	allocated int64
	queue     int
}

// timeline runs the timeline protocol on tg.
func timeline(ctx context.Context, tg timelineTarget, nodes []trace.Node, tasks []TimelineTask, opts TimelineOptions) (*TimelineResult, error) {
	capacity := capacityOf(nodes)
	if capacity == 0 {
		return nil, errors.New("replay: the cluster has no GPUs")
	}
	speedup := opts.Speedup
	if speedup < 1 {
		speedup = 1
	}
	order := make([]TimelineTask, len(tasks))
	copy(order, tasks)
	sort.SliceStable(order, func(i, j int) bool { return order[i].Arrive < order[j].Arrive })

	begin := time.Now()
	if err := tg.setup(ctx, nodes, opts.Policy); err != nil {
		return nil, err
	}
	if opts.Tenants {
		ip, ok := tg.(*inProcessTimeline)
		if !ok {
			return nil, errors.New("replay: tenants need the in-process replay")
		}
		if err := ip.tenants(opts.Weights, opts.FairShare, opts.HalfLife); err != nil {
			return nil, err
		}
	}
	tenants, sizes := newTenantTally(opts), newSizeTally()
	tg.begin()
	res := &TimelineResult{Policy: opts.Policy, GPUs: int(capacity / MilliPerGPU), Reasons: map[string]int{}}
	var first time.Duration
	if len(order) > 0 {
		first = order[0].Arrive
	}
	replayTime := func(d time.Duration) int64 { return int64(float64(d-first) / speedup) }

	var (
		releases  releaseHeap
		seq       uint64
		pending   = map[string]waiting{}
		allocated int64
		waits     []time.Duration
		steps     []step
		now       int64 // the time of the last command
	)
	record := func() { steps = append(steps, step{now, allocated, len(pending)}) }
	placed := func(id string, at int64, w waiting) {
		res.Placed++
		allocated += w.demand
		waits = append(waits, time.Duration(at-w.arrive))
		tenants.placed(w, at)
		sizes.placed(w, at)
		if w.hold > 0 {
			seq++
			heap.Push(&releases, release{at: at + w.hold, seq: seq, id: id, ns: w.ns, demand: w.demand})
		}
	}
	// settle looks at the waiting tasks after capacity was freed or
	// deadlines passed: one placed now was placed by the last command.
	settle := func() error {
		if len(pending) == 0 {
			return nil
		}
		ids := make([]string, 0, len(pending))
		for id := range pending {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		st, err := tg.statuses(ctx, ids)
		if err != nil {
			return err
		}
		for _, id := range ids {
			a, ok := st[id]
			if !ok {
				continue
			}
			w := pending[id]
			delete(pending, id)
			if a.status == fsm.Active {
				res.Waited++
				placed(id, now, w)
			} else {
				res.TimedOut++
				tenants.of(w.ns).TimedOut++
				sizes.of(w.gpus).TimedOut++
				res.Reasons[ReasonOf(a.why)]++
			}
		}
		return nil
	}
	// advance applies every release and deadline due by t.
	advance := func(t int64) error {
		for {
			next := int64(-1)
			isRelease := false
			if len(releases) > 0 {
				next, isRelease = releases[0].at, true
			}
			if len(pending) > 0 {
				if d, ok := tg.nextDeadline(pending); ok && (next < 0 || d < next) {
					next, isRelease = d, false
				}
			}
			if next < 0 || next > t {
				return nil
			}
			now = max(now, next)
			if isRelease {
				rel := heap.Pop(&releases).(release)
				if err := tg.release(ctx, rel.id, rel.ns, now); err != nil {
					return fmt.Errorf("release %s: %w", rel.id, err)
				}
				allocated -= rel.demand
			} else if err := tg.tick(ctx, now, pending); err != nil {
				return err
			}
			if err := settle(); err != nil {
				return err
			}
			record()
		}
	}

	for i, tt := range order {
		if opts.Progress != nil && i%100 == 0 {
			opts.Progress(i, len(order))
		}
		at := replayTime(tt.Arrive)
		if err := advance(at); err != nil {
			return nil, err
		}
		res.Tasks++
		req := TaskRequest(tt.Task)
		if len(req.Claims) == 0 {
			res.Empty++
			res.Placed++
			continue
		}
		req.Timeout = opts.Timeout
		if tt.MaxHosts > 1 {
			req.MaxHosts = tt.MaxHosts
		}
		now = max(now, at)
		w := waiting{arrive: now, hold: int64(float64(tt.Hold) / speedup), demand: tt.Task.GPUDemand(), deadline: now + int64(opts.Timeout),
			gpus: tt.Task.NumGPU}
		if opts.Tenants {
			w.ns = tt.Namespace
		}
		if tt.Hold > 0 && w.hold == 0 {
			w.hold = 1
		}
		tenants.of(w.ns).Tasks++
		sizes.of(w.gpus).Tasks++
		out, err := tg.allocate(ctx, req, w.ns, now)
		switch {
		case err != nil:
			return nil, fmt.Errorf("task %s: %w", tt.Task.Name, err)
		case out.refused:
			res.Refused++
			tenants.of(w.ns).Refused++
			sizes.of(w.gpus).Refused++
			res.Reasons[ReasonOf(out.why)]++
		case out.status == fsm.Active:
			placed(out.id, now, w)
		case out.status == fsm.Pending:
			pending[out.id] = w
		default:
			return nil, fmt.Errorf("task %s: allocation %s is %s", tt.Task.Name, out.id, out.status)
		}
		record()
	}
	lastArrival := now
	// Drain: every release and deadline still due.
	if err := advance(1<<62 - 1); err != nil {
		return nil, err
	}
	res.Unplaced = len(pending)
	if opts.Progress != nil {
		opts.Progress(len(order), len(order))
	}
	summarize(res, waits, steps, lastArrival, now, float64(capacity), opts.Samples)
	res.FairShare = opts.Tenants && opts.FairShare
	res.Tenants = tenants.results()
	res.Sizes = sizes.results()
	res.Elapsed = time.Since(begin)
	return res, nil
}

// summarize fills the wait percentiles, the mean utilisation from replay
// time 0 to lastArrival and the utilisation samples from 0 to end.
func summarize(res *TimelineResult, waits []time.Duration, steps []step, lastArrival, end int64, capacity float64, samples int) {
	if samples <= 0 {
		samples = 100
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	if n := len(waits); n > 0 {
		res.WaitP50 = waits[(n-1)*50/100]
		res.WaitP95 = waits[(n-1)*95/100]
		res.WaitMax = waits[n-1]
	}
	res.Span = time.Duration(end)
	pct := func(m int64) float64 { return 100 * float64(m) / capacity }
	// Time-weighted mean from the first to the last arrival.
	var area float64
	for i, s := range steps {
		if s.at >= lastArrival {
			break
		}
		next := lastArrival
		if i+1 < len(steps) && steps[i+1].at < next {
			next = steps[i+1].at
		}
		if s.at < 0 {
			continue
		}
		area += pct(s.allocated) * float64(next-s.at)
	}
	if lastArrival > 0 {
		res.MeanGPU = area / float64(lastArrival)
	}
	// Evenly spaced samples of the step function.
	j := -1
	for k := 0; k <= samples; k++ {
		t := int64(float64(end) * float64(k) / float64(samples))
		for j+1 < len(steps) && steps[j+1].at <= t {
			j++
		}
		s := UtilSample{At: time.Duration(t)}
		if j >= 0 {
			s.GPU, s.Queue = pct(steps[j].allocated), steps[j].queue
		}
		res.Utilisation = append(res.Utilisation, s)
	}
}

// tenantTally gathers the per-namespace figures of a replay with tenants.
type tenantTally struct {
	on      bool
	weights map[string]float64
	by      map[string]*TenantResult
	waits   map[string][]time.Duration
	// gpuTime is the GPU-milli-nanoseconds each namespace's placed tasks
	// held, each to its end.
	gpuTime map[string]float64
}

func newTenantTally(opts TimelineOptions) *tenantTally {
	return &tenantTally{on: opts.Tenants, weights: opts.Weights, by: map[string]*TenantResult{},
		waits: map[string][]time.Duration{}, gpuTime: map[string]float64{}}
}

func (t *tenantTally) of(ns string) *TenantResult {
	r := t.by[ns]
	if r == nil {
		r = &TenantResult{Namespace: ns}
		t.by[ns] = r
	}
	return r
}

// placed counts a task placed at time at, and the GPU time it holds.
func (t *tenantTally) placed(w waiting, at int64) {
	r := t.of(w.ns)
	r.Placed++
	t.waits[w.ns] = append(t.waits[w.ns], time.Duration(at-w.arrive))
	hold := w.hold
	if hold == 0 {
		hold = 1 << 62
	}
	t.gpuTime[w.ns] += float64(w.demand) * float64(hold)
}

// results are the namespaces' figures by namespace (none without
// tenants). The GPU time of a task counts whole, to its end.
func (t *tenantTally) results() []TenantResult {
	if !t.on {
		return nil
	}
	var totalW, totalT float64
	for _, ns := range sortedNames(t.by) {
		totalW += t.weight(ns)
		totalT += t.gpuTime[ns]
	}
	out := make([]TenantResult, 0, len(t.by))
	for _, ns := range sortedNames(t.by) {
		r := *t.by[ns]
		r.Weight = t.weight(ns)
		r.Entitlement = 100 * r.Weight / totalW
		if totalT > 0 {
			r.Share = 100 * t.gpuTime[ns] / totalT
		}
		r.WaitP50, r.WaitP95 = percentiles(t.waits[ns])
		out = append(out, r)
	}
	return out
}

func (t *tenantTally) weight(ns string) float64 {
	if w, ok := t.weights[ns]; ok && w > 0 {
		return w
	}
	return 1
}
