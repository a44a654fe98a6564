package client_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
)

// oneGPU registers a host with one GPU on a single node and returns a
// client for it.
func oneGPU(t *testing.T) *client.Client {
	t.Helper()
	lc := localCluster(t, 1)
	c := newClient(t, client.Config{Addresses: lc.Addresses()})
	if _, _, err := c.RegisterHost(ctxT(t), "h1", client.RegisterHostRequest{Devices: []client.DeviceSpec{gpuSpec("g1", 80)}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// Against a real node: waiting allocations are placed when capacity frees
// up, watches see it, and a request that times out explains itself.
func TestWaitAndWatchOnNode(t *testing.T) {
	c := oneGPU(t)
	ctx := ctxT(t)
	first, _, err := c.Allocate(ctx, gpuRequest)
	if err != nil || first.Status != client.Active {
		t.Fatalf("first allocation %+v %v", first, err)
	}

	// A second request waits for the GPU.
	req := gpuRequest
	req.Timeout = client.Duration(30 * time.Second)
	type result struct {
		a   *client.Allocation
		err error
	}
	placed := make(chan result, 1)
	go func() {
		a, _, err := c.Allocate(ctx, req, client.WaitForPlacement())
		placed <- result{a, err}
	}()
	var pending client.Allocation
	waitFor(t, 10*time.Second, "the waiting request", func() error {
		q, _, err := c.Queue(ctx, nil)
		if err != nil {
			return err
		}
		if len(q) != 1 {
			return errors.New("queue is empty")
		}
		pending = q[0]
		return nil
	})

	// A watch on the pending allocation sees it placed.
	seen := make(chan []client.AllocStatus, 1)
	go func() {
		var statuses []client.AllocStatus
		err := c.WatchAllocation(ctx, pending.ID, nil, func(a *client.Allocation) bool {
			statuses = append(statuses, a.Status)
			return a.Status == client.Pending
		})
		if err != nil {
			statuses = append(statuses, client.AllocStatus(err.Error()))
		}
		seen <- statuses
	}()
	if _, _, err := c.Release(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	got := <-placed
	if got.err != nil || got.a.Status != client.Active || got.a.ID != pending.ID {
		t.Fatalf("waited allocation %+v %v", got.a, got.err)
	}
	if st := <-seen; st[len(st)-1] != client.Active {
		t.Fatalf("watch saw %v", st)
	}

	// Nothing frees up now: a short wait ends in ErrNoCapacity.
	req.Timeout = client.Duration(200 * time.Millisecond)
	_, _, err = c.Allocate(ctx, req, client.WaitForPlacement())
	var ae *client.APIError
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrNoCapacity) || ae.WhyNot == nil || ae.AllocationID == "" {
		t.Fatalf("timed-out wait: %v", err)
	}
	timedOut, _, err := c.Allocation(ctx, ae.AllocationID, nil)
	if err != nil || timedOut.Status != client.TimedOut {
		t.Fatalf("refused allocation %+v %v", timedOut, err)
	}

	// Release twice: the second is not active.
	if _, _, err := c.Release(ctx, got.a.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Release(ctx, got.a.ID); !errors.Is(err, client.ErrNotActive) {
		t.Fatalf("second release: %v", err)
	}
	if _, _, err := c.Allocation(ctx, "nope", nil); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown allocation: %v", err)
	}
}

// A lease renewer keeps an allocation past its TTL, and notices when the
// allocation ends behind its back.
func TestLeaseRenewer(t *testing.T) {
	c := oneGPU(t)
	ctx := ctxT(t)
	req := gpuRequest
	// A TTL that leaves a renewal a second to land on a loaded machine.
	const ttl = 1500 * time.Millisecond
	req.LeaseTTL = client.Duration(ttl)
	a, _, err := c.Allocate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.NewLeaseRenewer(ctx, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Past twice the TTL, which the node's 100ms tick would have expired.
	waitFor(t, 20*time.Second, "renewals", func() error {
		select {
		case <-r.Done():
			t.Fatalf("renewer stopped after %d renewals: %v", r.Renewals(), r.Err())
		default:
		}
		if r.Renewals() < 4 || time.Since(start) < 2*ttl {
			return errors.New("not yet")
		}
		return nil
	})
	cur, _, err := c.Allocation(ctx, a.ID, &client.QueryOptions{Consistent: true})
	if err != nil || cur.Status != client.Active {
		t.Fatalf("renewed allocation %+v %v", cur, err)
	}
	rel, err := r.Release(ctx)
	if err != nil || rel.Status != client.Released {
		t.Fatalf("release through the renewer: %+v %v", rel, err)
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("renewer still running after Release")
	}

	// Released behind the renewer's back: it stops with ErrLeaseLost.
	a, _, err = c.Allocate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r, err = c.NewLeaseRenewer(ctx, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Release(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("renewer did not notice the release")
	}
	if err := r.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrNotActive) {
		t.Fatalf("renewer error %v", err)
	}
	// Without a TTL there is nothing to renew.
	if _, err := c.NewLeaseRenewer(ctx, &client.Allocation{ID: "x"}, 0); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("renewer without TTL: %v", err)
	}
}

// Every other call of the SDK against a real node.
func TestSurfaceOnNode(t *testing.T) {
	c := oneGPU(t)
	ctx := ctxT(t)
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("health %+v %v", h, err)
	}
	if st, err := c.Ready(ctx); err != nil || !st.Ready {
		t.Fatalf("ready %+v %v", st, err)
	}
	if self, err := c.AgentSelf(ctx); err != nil || self.Member.ID != "s1" {
		t.Fatalf("agent self %+v %v", self, err)
	}
	if m, err := c.Members(ctx); err != nil || len(m) != 1 {
		t.Fatalf("members %+v %v", m, err)
	}
	if rc, err := c.RaftConfiguration(ctx); err != nil || len(rc.Servers) != 1 {
		t.Fatalf("raft %+v %v", rc, err)
	}
	if _, err := c.RemovePeer(ctx, "ghost"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("remove unknown peer: %v", err)
	}

	d, _, err := c.Drain(ctx, "g1")
	if err != nil || d.Status != client.Draining {
		t.Fatalf("drain %+v %v", d, err)
	}
	_, _, err = c.Allocate(ctx, gpuRequest)
	var ae *client.APIError
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrNoCapacity) || ae.WhyNot == nil {
		t.Fatalf("allocate on a drained GPU: %v", err)
	}
	if d, _, err = c.MarkUnhealthy(ctx, "g1"); err != nil || d.Status != client.Unhealthy {
		t.Fatalf("unhealthy %+v %v", d, err)
	}
	if d, _, err = c.Undrain(ctx, "g1"); err != nil || d.Status != client.Available {
		t.Fatalf("undrain %+v %v", d, err)
	}
	devs, meta, err := c.Devices(ctx, &client.DeviceFilter{Type: client.GPU, Status: client.Available}, nil)
	if err != nil || len(devs) != 1 || meta.Index == 0 || !meta.KnownLeader {
		t.Fatalf("devices %+v %+v %v", devs, meta, err)
	}
	if _, _, err := c.Device(ctx, "nope", nil); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown device: %v", err)
	}
	if hs, _, err := c.Hosts(ctx, nil); err != nil || len(hs) != 1 || hs[0].ID != "h1" {
		t.Fatalf("hosts %+v %v", hs, err)
	}
	if h, _, err := c.Host(ctx, "h1", nil); err != nil || len(h.Devices) != 1 {
		t.Fatalf("host %+v %v", h, err)
	}

	// Pending requests can be cancelled.
	a, _, err := c.Allocate(ctx, gpuRequest)
	if err != nil {
		t.Fatal(err)
	}
	req := gpuRequest
	req.Timeout = client.Duration(time.Hour)
	p, _, err := c.Allocate(ctx, req)
	if err != nil || p.Status != client.Pending {
		t.Fatalf("queued request %+v %v", p, err)
	}
	if _, _, err := c.Cancel(ctx, a.ID); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("cancel an active allocation: %v", err)
	}
	if p, _, err = c.Cancel(ctx, p.ID); err != nil || p.Status != client.Cancelled {
		t.Fatalf("cancel %+v %v", p, err)
	}
	if _, _, err := c.Renew(ctx, a.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	list, _, err := c.Allocations(ctx, &client.AllocationFilter{Statuses: []client.AllocStatus{client.Active}}, nil)
	if err != nil || len(list.Allocations) != 1 {
		t.Fatalf("active allocations %+v %v", list, err)
	}
	hist, _, err := c.History(ctx, &client.AllocationFilter{Limit: 1}, nil)
	if err != nil || len(hist.Allocations) != 1 || hist.Next == "" {
		t.Fatalf("history page %+v %v", hist, err)
	}

	// Policies, pools, retention, statistics, recommendations.
	pol, _, err := c.SetPolicy(ctx, client.GPU, client.PolicyConfig{Policy: client.PriorityBased, PreemptionGap: 20})
	if err != nil || pol.Types[client.GPU].Policy != client.PriorityBased {
		t.Fatalf("set policy %+v %v", pol, err)
	}
	if _, _, err := c.SetPolicy(ctx, client.GPU, client.PolicyConfig{Policy: "Fastest"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("unknown policy: %v", err)
	}
	if pol, _, err = c.SetPoolPolicy(ctx, "big", client.PolicyConfig{Policy: client.WorstFit}); err != nil || pol.Pools["big"].Policy != client.WorstFit {
		t.Fatalf("pool policy %+v %v", pol, err)
	}
	if pol, _, err = c.DeletePoolPolicy(ctx, "big"); err != nil || len(pol.Pools) != 0 {
		t.Fatalf("delete pool policy %+v %v", pol, err)
	}
	if pol, _, err = c.Policies(ctx, nil); err != nil || pol.Types[client.GPU].PreemptionGap != 20 {
		t.Fatalf("policies %+v %v", pol, err)
	}
	if pools, _, err := c.Pools(ctx, nil); err != nil || len(pools) != 1 || pools[0].Name != "default" {
		t.Fatalf("pools %+v %v", pools, err)
	}
	ret, _, err := c.SetRetention(ctx, client.Retention{MaxCount: 500, MaxAge: client.Duration(time.Hour)})
	if err != nil || ret.MaxCount != 500 {
		t.Fatalf("set retention %+v %v", ret, err)
	}
	if ret, _, err = c.Retention(ctx, nil); err != nil || ret.MaxAge.Std() != time.Hour {
		t.Fatalf("retention %+v %v", ret, err)
	}
	stats, _, err := c.Stats(ctx, &client.StatsFilter{Type: client.GPU, Pool: "*"}, nil)
	if err != nil || len(stats) != 1 || stats[0].Counts.Total == 0 {
		t.Fatalf("stats %+v %v", stats, err)
	}
	if _, _, err := c.Recommendations(ctx, client.GPU, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Recommendations(ctx, "QPU", nil); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("recommendations for an unknown type: %v", err)
	}

	// A snapshot round-trip brings back a removed host.
	var snap bytes.Buffer
	if meta, err := c.SnapshotSave(ctx, &snap); err != nil || snap.Len() == 0 || meta.Index == 0 {
		t.Fatalf("snapshot %d bytes, %+v, %v", snap.Len(), meta, err)
	}
	if _, err := c.RemoveHost(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Host(ctx, "h1", &client.QueryOptions{Consistent: true}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("removed host: %v", err)
	}
	if _, err := c.SnapshotRestore(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the restored host", func() error {
		_, _, err := c.Host(ctx, "h1", nil)
		return err
	})
	if _, err := c.SnapshotRestore(ctx, bytes.NewReader([]byte("junk"))); !errors.Is(err, client.ErrBadSnapshot) {
		t.Fatalf("bad snapshot: %v", err)
	}
}
