package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/trace"
)

// Live replays through a running cluster's HTTP API instead of a state
// in this process. The run registers the trace's hosts as Name-<host> with
// every device in pool Name, sets pool Name's policy (the cluster's
// policies per device type are left alone), and submits each task with a
// request ID of its own (Name-t<n>) through the SDK, whose retries after a
// leader change are then idempotent. Every request asks for pool Name, so
// the run's tasks land only on its own hosts.
//
// The figures equal the in-process replay's when the cluster's past
// requests do not matter: the fragmentation-aware policy learns its
// typical workload from the cluster's last 1,000 requests, whatever their
// pool, so only a fresh cluster with no other traffic reproduces the
// in-process figures. Use a fresh Name (and ideally a fresh cluster) per
// run.
type Live struct {
	// Client talks to the cluster.
	Client *client.Client
	// Name names the run's hosts, pool and request IDs.
	Name string
	// Cleanup, when set, ends the run by releasing its allocations,
	// cancelling its pending requests, removing its hosts and its pool's
	// policy.
	Cleanup bool
	// OpTimeout bounds one API call, retries included; 0 takes 30s.
	OpTimeout time.Duration
	// Progress, when set, is called every 100 tasks with the tasks
	// submitted so far and the total.
	Progress func(done, total int)
}

// Protocol runs the fgd protocol (see the package function Protocol)
// through the cluster. Elapsed includes registering the hosts, not the
// cleanup.
func (lv Live) Protocol(ctx context.Context, nodes []trace.Node, tasks []trace.Task, pol fsm.Policy, seed int64) (res *Result, err error) {
	lt := lv.target()
	defer func() { err = errors.Join(err, lt.cleanup()) }()
	return protocol(ctx, lt, nodes, tasks, pol, seed, lv.Progress)
}

// Timeline runs the timeline protocol (see the package function
// Timeline) through the cluster in real time: replay time is the wall
// clock from the first arrival, a queue timeout is the cluster's, and a
// task is released its hold time after it was placed. Commands are sent in
// the order the in-process replay applies them; a deadline is awaited
// until the cluster has timed the request out. Without timeouts the
// outcome is the in-process replay's whatever the cluster's speed; with
// them, a run that falls behind its schedule (MaxLag) can see a request
// time out that the in-process replay would have placed.
func (lv Live) Timeline(ctx context.Context, nodes []trace.Node, tasks []TimelineTask, opts TimelineOptions) (res *TimelineResult, err error) {
	lt := lv.target()
	defer func() { err = errors.Join(err, lt.cleanup()) }()
	if opts.Progress == nil && lv.Progress != nil {
		opts.Progress = lv.Progress
	}
	res, err = timeline(ctx, lt, nodes, tasks, opts)
	if res != nil {
		res.MaxLag = lt.maxLag
	}
	return res, err
}

func (lv Live) target() *liveTarget {
	if lv.OpTimeout <= 0 {
		lv.OpTimeout = 30 * time.Second
	}
	return &liveTarget{lv: lv, active: map[string]bool{}, pending: map[string]bool{}}
}

// liveTarget is one run on a live cluster.
type liveTarget struct {
	lv Live
	// hosts are the IDs registered; active and pending the allocations
	// the run holds; policySet says the pool's policy was set.
	hosts     []string
	active    map[string]bool
	pending   map[string]bool
	policySet bool
	// requests counts the allocation requests, for their IDs.
	requests int
	// index is the highest Raft index a write of the run answered: reads
	// wait for it, so a node that lags never answers from before it.
	index uint64
	// base is replay time zero on this machine's clock; maxLag how late
	// a command went out at worst.
	base   time.Time
	maxLag time.Duration
}

func (lt *liveTarget) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, lt.lv.OpTimeout)
}

func (lt *liveTarget) wrote(m *client.WriteMeta) {
	if m != nil && m.Index > lt.index {
		lt.index = m.Index
	}
}

// after reads state no older than the run's last write.
func (lt *liveTarget) after() *client.QueryOptions {
	if lt.index == 0 {
		return nil
	}
	return &client.QueryOptions{WaitIndex: lt.index - 1, WaitTime: lt.lv.OpTimeout}
}

// setup registers the hosts one at a time, in the order of the list (the
// order the in-process replay registers them), then sets the pool's
// policy.
func (lt *liveTarget) setup(ctx context.Context, nodes []trace.Node, pol fsm.Policy) error {
	for _, n := range nodes {
		n.Name = lt.lv.Name + "-" + n.Name
		cmd := HostCommand(n)
		devices := make([]client.DeviceSpec, len(cmd.Devices))
		for i, d := range cmd.Devices {
			devices[i] = api.DeviceSpecToWire(d)
			devices[i].Pool = lt.lv.Name
		}
		octx, cancel := lt.op(ctx)
		_, meta, err := lt.lv.Client.RegisterHost(octx, cmd.Host.ID, client.RegisterHostRequest{
			Devices: devices, RequestID: lt.lv.Name + "-host-" + cmd.Host.ID})
		cancel()
		if err != nil {
			return fmt.Errorf("register host %s: %w", cmd.Host.ID, err)
		}
		lt.hosts = append(lt.hosts, cmd.Host.ID)
		lt.wrote(meta)
	}
	octx, cancel := lt.op(ctx)
	defer cancel()
	_, meta, err := lt.lv.Client.SetPoolPolicy(octx, lt.lv.Name, client.PolicyConfig{Policy: client.Policy(pol)})
	if err != nil {
		return fmt.Errorf("set the policy of pool %s: %w", lt.lv.Name, err)
	}
	lt.policySet = true
	lt.wrote(meta)
	return nil
}

// allocateAPI submits one request in the run's pool.
func (lt *liveTarget) allocateAPI(ctx context.Context, req fsm.Request) (allocOutcome, error) {
	lt.requests++
	wreq := api.RequestToWire(req)
	wreq.Pool = lt.lv.Name
	octx, cancel := lt.op(ctx)
	defer cancel()
	a, meta, err := lt.lv.Client.Allocate(octx, client.AllocateRequest{Request: wreq, RequestID: fmt.Sprintf("%s-t%d", lt.lv.Name, lt.requests)})
	var ae *client.APIError
	switch {
	case err == nil:
		lt.wrote(meta)
		switch a.Status {
		case client.Active:
			lt.active[a.ID] = true
		case client.Pending:
			lt.pending[a.ID] = true
		}
		return allocOutcome{id: a.ID, status: fsm.AllocStatus(a.Status)}, nil
	case errors.Is(err, client.ErrNoCapacity) && errors.As(err, &ae):
		return allocOutcome{id: ae.AllocationID, refused: true, why: api.WhyNotFromWire(ae.WhyNot)}, nil
	default:
		return allocOutcome{}, err
	}
}

func (lt *liveTarget) submit(ctx context.Context, t trace.Task) (bool, error) {
	req := TaskRequest(t)
	if len(req.Claims) == 0 {
		return true, nil // asks for nothing: trivially placed
	}
	out, err := lt.allocateAPI(ctx, req)
	switch {
	case err != nil:
		return false, fmt.Errorf("task %s: %w", t.Name, err)
	case out.refused:
		return false, nil
	case out.status != fsm.Active:
		return false, fmt.Errorf("task %s: allocation %s is %s, want active or refused", t.Name, out.id, out.status)
	}
	return true, nil
}

// begin starts the replay clock.
func (lt *liveTarget) begin() { lt.base = time.Now() }

// at waits until replay time t and records how late it is.
func (lt *liveTarget) at(ctx context.Context, t int64) error {
	due := lt.base.Add(time.Duration(t))
	if d := time.Until(due); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
	lt.maxLag = max(lt.maxLag, time.Since(due))
	return nil
}

func (lt *liveTarget) allocate(ctx context.Context, req fsm.Request, _ string, at int64) (allocOutcome, error) {
	if err := lt.at(ctx, at); err != nil {
		return allocOutcome{}, err
	}
	return lt.allocateAPI(ctx, req)
}

func (lt *liveTarget) release(ctx context.Context, id, _ string, at int64) error {
	if err := lt.at(ctx, at); err != nil {
		return err
	}
	octx, cancel := lt.op(ctx)
	defer cancel()
	_, meta, err := lt.lv.Client.Release(octx, id)
	if err != nil {
		return err
	}
	lt.wrote(meta)
	delete(lt.active, id)
	return nil
}

// nextDeadline is the earliest deadline of the pending tasks, in replay
// time from their scheduled arrival; the cluster's own deadline counts
// from when the request reached it, a little later.
func (lt *liveTarget) nextDeadline(pending map[string]waiting) (int64, bool) {
	first, ok := int64(0), false
	for _, w := range pending {
		if !ok || w.deadline < first {
			first, ok = w.deadline, true
		}
	}
	return first, ok
}

// tick waits until at and then until the cluster has moved every pending
// request due by then out of the queue.
func (lt *liveTarget) tick(ctx context.Context, at int64, pending map[string]waiting) error {
	if err := lt.at(ctx, at); err != nil {
		return err
	}
	ids := make([]string, 0, len(pending))
	for id, w := range pending {
		if w.deadline <= at {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		// The cluster's deadline is at most maxLag after the scheduled one.
		wctx, cancel := context.WithTimeout(ctx, lt.lv.OpTimeout+lt.maxLag)
		var idx uint64
		err := lt.lv.Client.WatchAllocation(wctx, id, &client.WatchOptions{WaitIndex: max(lt.index, 1) - 1}, func(a *client.Allocation) bool {
			idx = a.ModifyIndex
			return a.Status == client.Pending
		})
		cancel()
		if err != nil {
			return fmt.Errorf("wait for the deadline of %s: %w", id, err)
		}
		lt.index = max(lt.index, idx)
	}
	return nil
}

// statuses lists the queue and reads the run's pending allocations that
// have left it.
func (lt *liveTarget) statuses(ctx context.Context, ids []string) (map[string]allocOutcome, error) {
	octx, cancel := lt.op(ctx)
	defer cancel()
	queue, _, err := lt.lv.Client.Queue(octx, lt.after())
	if err != nil {
		return nil, fmt.Errorf("read the queue: %w", err)
	}
	queued := make(map[string]bool, len(queue))
	for _, a := range queue {
		queued[a.ID] = true
	}
	out := map[string]allocOutcome{}
	for _, id := range ids {
		if queued[id] {
			continue
		}
		a, _, err := lt.lv.Client.Allocation(octx, id, lt.after())
		if err != nil {
			return nil, fmt.Errorf("read allocation %s: %w", id, err)
		}
		if a.Status == client.Pending {
			continue
		}
		delete(lt.pending, id)
		if a.Status == client.Active {
			lt.active[id] = true
		}
		out[id] = allocOutcome{id: id, status: fsm.AllocStatus(a.Status), why: api.WhyNotFromWire(a.WhyNot)}
	}
	return out, nil
}

// cleanupParallel bounds the cleanup calls in flight.
const cleanupParallel = 8

// cleanup releases what the run holds, cancels what it waits for,
// removes its hosts and its pool's policy, when the run asked for it. It
// runs on a context of its own so that an interrupted run cleans up too.
func (lt *liveTarget) cleanup() error {
	if !lt.lv.Cleanup {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := lt.lv.Client
	var errs []error
	// each calls fn for the ids, cleanupParallel at a time.
	each := func(ids []string, fn func(context.Context, string) error) {
		var (
			mu  sync.Mutex
			wg  sync.WaitGroup
			sem = make(chan struct{}, cleanupParallel)
		)
		for _, id := range ids {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				octx, ocancel := lt.op(ctx)
				defer ocancel()
				if err := fn(octx, id); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	each(slices.Sorted(maps.Keys(lt.pending)), func(ctx context.Context, id string) error {
		_, _, err := cl.Cancel(ctx, id)
		if errors.Is(err, client.ErrConflict) {
			// Placed since: release it.
			_, _, err = cl.Release(ctx, id)
		}
		if err != nil && !errors.Is(err, client.ErrNotActive) {
			return fmt.Errorf("cancel %s: %w", id, err)
		}
		return nil
	})
	each(slices.Sorted(maps.Keys(lt.active)), func(ctx context.Context, id string) error {
		if _, _, err := cl.Release(ctx, id); err != nil && !errors.Is(err, client.ErrNotActive) {
			return fmt.Errorf("release %s: %w", id, err)
		}
		return nil
	})
	each(slices.Sorted(slices.Values(lt.hosts)), func(ctx context.Context, id string) error {
		if _, err := cl.RemoveHost(ctx, id); err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("remove host %s: %w", id, err)
		}
		return nil
	})
	if lt.policySet {
		octx, ocancel := lt.op(ctx)
		defer ocancel()
		if _, _, err := cl.DeletePoolPolicy(octx, lt.lv.Name); err != nil && !errors.Is(err, client.ErrNotFound) {
			errs = append(errs, fmt.Errorf("remove the policy of pool %s: %w", lt.lv.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("replay: cleaning up run %s: %w", lt.lv.Name, errors.Join(errs...))
	}
	return nil
}

// leftHosts reads the run's devices, no older than its last write.
func (lt *liveTarget) leftHosts(ctx context.Context) ([]leftHost, error) {
	octx, cancel := lt.op(ctx)
	defer cancel()
	list, _, err := lt.lv.Client.Devices(octx, &client.DeviceFilter{Pool: lt.lv.Name}, lt.after())
	if err != nil {
		return nil, fmt.Errorf("list the devices of pool %s: %w", lt.lv.Name, err)
	}
	devs := make([]leftDevice, len(list))
	for i, d := range list {
		caps, used := d.Capabilities.Resources, d.Used
		devs[i] = leftDevice{host: d.Host, typ: fsm.DeviceType(d.Type), model: d.Capabilities.Custom[GPUModelKey],
			free: fsm.Resources{ComputeUnits: caps.ComputeUnits - used.ComputeUnits, MemoryGB: caps.MemoryGB - used.MemoryGB}}
	}
	return hostsOf(devs), nil
}
