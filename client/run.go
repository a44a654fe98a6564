package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultRunLeaseTTL is the lease Run keeps on the devices while the work
// runs: a process that dies without releasing them frees them within it.
const DefaultRunLeaseTTL = 15 * time.Second

// RunOptions configure Run.
type RunOptions struct {
	// LeaseTTL is the allocation's lease while the work runs, renewed
	// every third of it (DefaultRunLeaseTTL when 0).
	LeaseTTL time.Duration
	// Waiting, when set, hears where a request that waits in the queue
	// stands each time that changes.
	Waiting func(RunWait)
}

// RunWait is where a waiting request stands: its place in the queue (1
// is next) and, for a waiting gang with a reservation, when it is
// expected to start (zero when unknown).
type RunWait struct {
	Allocation    *Allocation
	Position      int
	ExpectedStart time.Time
}

// Run allocates req's devices, waiting in the queue for up to
// req.Timeout, runs work with the allocation while it renews the lease,
// and releases the allocation when work returns, whatever it returns.
// work's context ends when ctx does or when the lease is lost (the
// devices may then go to others; work should stop). A request that fits
// nowhere, or waited past its timeout, is an *APIError matching
// ErrNoCapacity with the why-not, and work does not run. Run returns the
// allocation as it was placed and work's error (or the release's, when
// it failed).
func (c *Client) Run(ctx context.Context, req AllocateRequest, opts RunOptions, work func(ctx context.Context, a *Allocation) error) (*Allocation, error) {
	ttl := opts.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultRunLeaseTTL
	}
	req.LeaseTTL = Duration(ttl)
	req.Wait = false
	a, meta, err := c.Allocate(ctx, req)
	if err != nil {
		return nil, err
	}
	if a.Status == Pending {
		pending := a
		if a, err = c.waitRunning(ctx, a, meta.Index, opts.Waiting); err != nil {
			if ctx.Err() != nil {
				// Given up: take the request out of the queue.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				c.Cancel(cctx, pending.ID) //nolint:errcheck // best effort: it times out anyway
				cancel()
			}
			return nil, err
		}
		if a.Status != Active {
			return a, &APIError{Code: ErrNotActive.Code, Message: "allocation " + a.ID + " is " + string(a.Status) + ", not placed", AllocationID: a.ID}
		}
	}
	renewer, err := c.NewLeaseRenewer(ctx, a, ttl)
	if err != nil {
		return a, err
	}
	wctx, stop := context.WithCancel(ctx)
	go func() {
		select {
		case <-renewer.Done():
			stop()
		case <-wctx.Done():
		}
	}()
	werr := work(wctx, a)
	stop()
	lost := renewer.Stop()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, _, rerr := c.Release(rctx, a.ID); rerr != nil && !errors.Is(rerr, ErrNotActive) && !errors.Is(rerr, ErrNotFound) {
		return a, errors.Join(werr, fmt.Errorf("releasing %s: %w", a.ID, rerr))
	}
	if werr == nil && lost != nil {
		werr = lost
	}
	return a, werr
}

// waitRunning watches a pending allocation until it is placed, telling
// waiting where it stands as that changes.
func (c *Client) waitRunning(ctx context.Context, a *Allocation, index uint64, waiting func(RunWait)) (*Allocation, error) {
	last := RunWait{Position: -1}
	return c.waitPlaced(ctx, a, index, func(cur *Allocation) {
		if waiting == nil || cur.Status != Pending {
			return
		}
		w := RunWait{Allocation: cur, ExpectedStart: cur.ExpectedStart}
		if q, _, err := c.Queue(ctx, nil); err == nil {
			w.Position = slices.IndexFunc(q, func(x Allocation) bool { return x.ID == cur.ID }) + 1
		}
		if w.Position != last.Position || !w.ExpectedStart.Equal(last.ExpectedStart) {
			last = w
			waiting(w)
		}
	})
}

// RunEnv is the environment that hands an allocation's devices to a
// process: DMSC_ALLOCATION_ID, DMSC_DEVICES (every device ID, comma
// separated), DMSC_HOSTS (its hosts), and CUDA_VISIBLE_DEVICES and
// NVIDIA_VISIBLE_DEVICES: the GPUs it holds on host local, or on its
// first host when local is not one of them (GPU IDs are the GPUs' UUIDs
// when discovery named them). hostOf gives each device's host; it may be
// nil for an allocation on one host. For an allocation over several
// hosts hostfile is an MPI hostfile, a line "<host> slots=<GPUs>" per
// host, which mpirun and DeepSpeed read ("" for one host).
func RunEnv(a *Allocation, hostOf map[string]string, local string) (env []string, hostfile string) {
	hosts := a.Hosts
	if len(hosts) == 0 && a.Host != "" {
		hosts = []string{a.Host}
	}
	if !slices.Contains(hosts, local) && len(hosts) > 0 {
		local = hosts[0]
	}
	host := func(id string) string {
		if h, ok := hostOf[id]; ok {
			return h
		}
		return a.Host
	}
	var all, gpus []string
	slots := map[string]int{}
	for _, as := range a.Devices {
		all = append(all, as.DeviceID)
		if as.Claim < len(a.Request.Claims) && a.Request.Claims[as.Claim].Type == GPU {
			h := host(as.DeviceID)
			slots[h]++
			if h == local {
				gpus = append(gpus, as.DeviceID)
			}
		}
	}
	env = []string{
		"DMSC_ALLOCATION_ID=" + a.ID,
		"DMSC_DEVICES=" + strings.Join(all, ","),
		"DMSC_HOSTS=" + strings.Join(hosts, ","),
		"CUDA_VISIBLE_DEVICES=" + strings.Join(gpus, ","),
		"NVIDIA_VISIBLE_DEVICES=" + strings.Join(gpus, ","),
	}
	if len(hosts) > 1 {
		var b strings.Builder
		for _, h := range hosts {
			b.WriteString(h + " slots=" + strconv.Itoa(slots[h]) + "\n")
		}
		hostfile = b.String()
	}
	return env, hostfile
}
