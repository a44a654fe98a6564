package integration

// The workload of the fault-injection test: clients that allocate,
// release, renew and read, each operation recorded with the times it was
// called and returned.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// historyOp is one recorded operation. Times are nanoseconds since the
// run started; Return is -1 while the outcome is unknown.
type historyOp struct {
	Client int      `json:"client"`
	Input  opInput  `json:"input"`
	Output opOutput `json:"output"`
	Call   int64    `json:"call_ns"`
	Return int64    `json:"return_ns"`
}

// workload runs the clients against a cluster and records what they do.
type workload struct {
	c     *Cluster
	model *allocModel
	start time.Time
	// opTimeout bounds one operation, all its retries included; after it
	// the outcome is unknown.
	opTimeout time.Duration
	// leaseTTL is long enough that no allocation expires during a run.
	leaseTTL time.Duration

	mu  sync.Mutex
	ops []historyOp
}

func (w *workload) now() int64 { return time.Since(w.start).Nanoseconds() }

func (w *workload) record(op historyOp) {
	w.mu.Lock()
	w.ops = append(w.ops, op)
	w.mu.Unlock()
}

// history returns the recorded operations in call order.
func (w *workload) history() []historyOp {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]historyOp(nil), w.ops...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// worker is one sequential client: it holds up to two allocations at once
// and remembers the ones it released, to read them again.
type worker struct {
	id       int
	w        *workload
	rng      *rand.Rand
	seq      int
	live     []string
	released []string
}

// run issues operations until stop is closed; the operation in flight
// when it closes is finished (it has a deadline of its own).
func (cl *worker) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		cl.step()
		// A short pause keeps the history at a size the checker handles
		// quickly while every client stays busy.
		time.Sleep(time.Duration(5+cl.rng.IntN(30)) * time.Millisecond)
	}
}

func (cl *worker) step() {
	r := cl.rng.IntN(100)
	switch {
	case len(cl.live) == 0 || (len(cl.live) < 2 && r < 35):
		cl.allocate()
	case r < 65:
		cl.release()
	case r < 75:
		cl.renew()
	case r < 88:
		cl.readAllocation()
	default:
		cl.readDevices()
	}
}

func (cl *worker) requestID(kind string) string {
	cl.seq++
	return fmt.Sprintf("%s-c%d-%d-%05d", kind, cl.id, cl.seq, cl.rng.IntN(100000))
}

// targets is every process of the cluster (hosts forward writes) in a
// random order.
func (cl *worker) targets(servers bool) []*Process {
	ps := cl.w.c.All()
	if servers {
		ps = append([]*Process(nil), cl.w.c.Servers...)
	}
	cl.rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return ps
}

// heldOf converts an allocation's assignments for the model.
func (w *workload) heldOf(as []wire.Assignment) []held {
	var out []held
	for _, a := range as {
		out = append(out, w.held(a.DeviceID, a.Amount.ComputeUnits))
	}
	return out
}

// held is a device an allocation holds, as the model counts it: units
// only on a shareable device.
func (w *workload) held(device string, units float64) held {
	h := held{Device: device}
	if i, ok := w.model.byID[device]; ok && w.model.devices[i].Shareable {
		h.Units = units
	}
	return h
}

// classify turns a write's error into an outcome; outUnknown when no
// definite answer came.
func classify(err error) outcome {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Body.Retryable {
		return outUnknown
	}
	switch apiErr.Body.Code {
	case wire.CodeNoCapacity:
		return outRefused
	case wire.CodeNotActive:
		return outNotActive
	case wire.CodeNotFound:
		return outNotFound
	}
	return outUnknown
}

func (cl *worker) allocate() {
	w := cl.w
	in := opInput{Kind: opAllocate, RequestID: cl.requestID("alloc"), Type: wire.GPU, Count: 1}
	switch r := cl.rng.IntN(100); {
	case r < 20:
		in.Count = 2
	case r < 30:
		in.Host = w.model.hosts[cl.rng.IntN(len(w.model.hosts))]
	case r < 50:
		in.Type = wire.CPU
		in.Units = float64(4 * (1 + cl.rng.IntN(3)))
	}
	req := wire.AllocateRequest{RequestID: in.RequestID}
	req.LeaseTTL = wire.Duration(w.leaseTTL)
	claim := wire.Claim{Type: in.Type, Count: in.Count}
	if in.Units != 0 {
		claim.Amount = wire.Resources{ComputeUnits: in.Units}
	}
	req.Claims = []wire.Claim{claim}
	if in.Host != "" {
		req.Labels.Required = map[string]string{"node": in.Host}
	}
	timeout := cl.deadline()
	op := historyOp{Client: cl.id, Input: in, Call: w.now()}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	var a wire.Allocation
	err := w.c.Write(ctx, cl.targets(false), http.MethodPost, "/v1/allocations", in.RequestID, req, &a)
	cancel()
	op.Return = w.now()
	switch {
	case err == nil && a.Status == wire.Active:
		op.Output = opOutput{Outcome: outOK, AllocID: a.ID, Host: a.Host, Held: w.heldOf(a.Devices)}
		cl.live = append(cl.live, a.ID)
	case err == nil && a.Status == wire.Failed:
		op.Output = opOutput{Outcome: outRefused, AllocID: a.ID}
	case err == nil:
		op.Output = opOutput{Outcome: outUnknown, Error: "answered with status " + string(a.Status)}
	default:
		op.Output = opOutput{Outcome: classify(err), Error: err.Error()}
		if op.Output.Outcome != outRefused {
			op.Output.Outcome = outUnknown
		}
	}
	if op.Output.Outcome == outUnknown {
		op.Return = -1
	}
	w.record(op)
	if op.Output.Outcome == outUnknown {
		cl.adopt(in.RequestID)
	}
}

// deadline is the bound of one write: usually the workload's, but a few
// writes give up quickly, so that some outcomes stay unknown while a fault
// is in force (and the check has unknown outcomes to resolve).
func (cl *worker) deadline() time.Duration {
	if cl.rng.IntN(100) < shortOpPercent {
		return shortOpTimeout
	}
	return cl.w.opTimeout
}

// shortOpPercent of the writes give up after shortOpTimeout.
const (
	shortOpPercent = 15
	shortOpTimeout = time.Second
)

// adopt looks for the allocation of an allocate whose outcome is unknown
// (a lookup the history does not record: it only decides what the client
// does next); if the allocate took effect, the client holds it from now
// on and releases it in time.
func (cl *worker) adopt(requestID string) {
	var list wire.AllocationList
	if _, err := cl.read("/v1/allocations?consistent&limit=1000", &list); err != nil {
		return
	}
	for _, a := range list.Allocations {
		if a.RequestID == requestID && a.Status == wire.Active {
			cl.live = append(cl.live, a.ID)
		}
	}
}

// pick removes and returns a random element of *list.
func (cl *worker) pick(list *[]string) string {
	i := cl.rng.IntN(len(*list))
	id := (*list)[i]
	*list = append((*list)[:i], (*list)[i+1:]...)
	return id
}

func (cl *worker) release() {
	id := cl.pick(&cl.live)
	rid := cl.requestID("release")
	if cl.lifecycle(opRelease, id, rid, "release", wire.WriteRequest{RequestID: rid}, wire.Released) {
		cl.released = append(cl.released, id)
	}
}

func (cl *worker) renew() {
	id := cl.live[cl.rng.IntN(len(cl.live))]
	rid := cl.requestID("renew")
	cl.lifecycle(opRenew, id, rid, "renew", wire.RenewRequest{RequestID: rid}, wire.Active)
}

// lifecycle posts a release or renew of allocation id, records the
// operation, and reports whether the answer was the status that means
// success.
func (cl *worker) lifecycle(kind opKind, id, rid, action string, body any, want wire.AllocStatus) bool {
	w := cl.w
	in := opInput{Kind: kind, RequestID: rid, AllocID: id}
	op := historyOp{Client: cl.id, Input: in, Call: w.now()}
	ctx, cancel := context.WithTimeout(context.Background(), cl.deadline())
	var a wire.Allocation
	err := w.c.Write(ctx, cl.targets(false), http.MethodPost, "/v1/allocations/"+url.PathEscape(id)+"/"+action,
		rid, body, &a)
	cancel()
	op.Return = w.now()
	switch {
	case err == nil && a.Status == want:
		op.Output = opOutput{Outcome: outOK}
	case err == nil:
		op.Output = opOutput{Outcome: outUnknown, Error: "answered with status " + string(a.Status)}
	default:
		op.Output = opOutput{Outcome: classify(err), Error: err.Error()}
	}
	if op.Output.Outcome == outUnknown {
		op.Return = -1
	}
	w.record(op)
	return op.Output.Outcome == outOK
}

// read sends a consistent read to random servers, retrying retryable
// failures until the operation's deadline, and says which server
// answered and at which state index (X-Dmsc-Index), for the record.
func (cl *worker) read(path string, out any) (readFrom, error) {
	w := cl.w
	ctx, cancel := context.WithTimeout(context.Background(), w.opTimeout)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		for _, p := range cl.targets(true) {
			actx, acancel := context.WithTimeout(ctx, w.c.AttemptTimeout)
			h, err := w.c.Do(actx, p, http.MethodGet, path, nil, out)
			acancel()
			if err == nil {
				idx, _ := strconv.ParseUint(h.Get(wire.HeaderIndex), 10, 64)
				return readFrom{Server: p.Name, Index: idx}, nil
			}
			if !Retryable(err) || ctx.Err() != nil {
				return readFrom{}, err
			}
			select {
			case <-ctx.Done():
				return readFrom{}, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 200*time.Millisecond)
		}
	}
}

func (cl *worker) readAllocation() {
	w := cl.w
	var id string
	if len(cl.released) > 0 && cl.rng.IntN(3) == 0 {
		id = cl.released[cl.rng.IntN(len(cl.released))]
	} else {
		id = cl.live[cl.rng.IntN(len(cl.live))]
	}
	in := opInput{Kind: opReadAlloc, AllocID: id}
	op := historyOp{Client: cl.id, Input: in, Call: w.now()}
	var a wire.Allocation
	from, err := cl.read("/v1/allocations/"+url.PathEscape(id)+"?consistent", &a)
	op.Return = w.now()
	if err == nil {
		op.Output = opOutput{Outcome: outOK, Status: a.Status, Held: w.heldOf(a.Devices), From: from}
	} else {
		op.Output = opOutput{Outcome: classify(err), Error: err.Error()}
		if op.Output.Outcome != outNotFound {
			op.Output.Outcome = outUnknown
		}
	}
	if op.Output.Outcome == outUnknown {
		op.Return = -1
	}
	w.record(op)
}

func (cl *worker) readDevices() {
	w := cl.w
	op := historyOp{Client: cl.id, Input: opInput{Kind: opReadDevices}, Call: w.now()}
	var ds []wire.Device
	from, err := cl.read("/v1/devices?consistent", &ds)
	op.Return = w.now()
	if err == nil {
		op.Output = opOutput{Outcome: outOK, From: from}
		for _, d := range ds {
			v := deviceView{ID: d.ID, Allocations: d.Allocations}
			if d.Shareable {
				v.Units = d.Used.ComputeUnits
			}
			op.Output.Devices = append(op.Output.Devices, v)
		}
	} else {
		op.Output = opOutput{Outcome: outUnknown, Error: err.Error()}
		op.Return = -1
	}
	w.record(op)
}
