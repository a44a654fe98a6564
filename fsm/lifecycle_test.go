package fsm

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Table tests for what happens to requests over time: the queue,
// deadlines, leases, host failure, cancel and the why-not of a refusal.

// TestQueuePlacedWhenCapacityFrees: a waiting request is placed by the
// event that makes room, with no polling.
func TestQueuePlacedWhenCapacityFrees(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(h *harness) (holder string)
		trigger func(h *harness, holder string)
		dev     string
	}{
		{
			name:    "release",
			setup:   func(h *harness) string { return h.must(&Allocate{Request: polGPU(1)}).Allocation.ID },
			trigger: func(h *harness, id string) { h.must(&Release{AllocationID: id}) },
			dev:     "g1",
		},
		{
			name: "lease expiry",
			setup: func(h *harness) string {
				r := polGPU(1)
				r.LeaseTTL = 10 * time.Second
				return h.must(&Allocate{Request: r}).Allocation.ID
			},
			trigger: func(h *harness, id string) { h.advance(11 * time.Second) },
			dev:     "g1",
		},
		{
			name:    "new host",
			setup:   func(h *harness) string { return h.must(&Allocate{Request: polGPU(1)}).Allocation.ID },
			trigger: func(h *harness, _ string) { h.must(host("h2", gpu("g2", 80))) },
			dev:     "g2",
		},
		{
			name:    "new device on a known host",
			setup:   func(h *harness) string { return h.must(&Allocate{Request: polGPU(1)}).Allocation.ID },
			trigger: func(h *harness, _ string) { h.must(host("h1", gpu("g1", 80), gpu("g0", 80))) },
			dev:     "g0",
		},
		{
			name:    "recovered host",
			setup:   func(h *harness) string { h.must(&SetHostStatus{HostID: "h1"}); return "" },
			trigger: func(h *harness, _ string) { h.must(&SetHostStatus{HostID: "h1", Up: true}) },
			dev:     "g1",
		},
		{
			name:    "drained device made available",
			setup:   func(h *harness) string { h.must(&SetDeviceStatus{DeviceID: "g1", Status: Draining}); return "" },
			trigger: func(h *harness, _ string) { h.must(&SetDeviceStatus{DeviceID: "g1", Status: Available}) },
			dev:     "g1",
		},
		{
			name:    "unhealthy device made available",
			setup:   func(h *harness) string { h.must(&SetDeviceStatus{DeviceID: "g1", Status: Unhealthy}); return "" },
			trigger: func(h *harness, _ string) { h.must(&SetDeviceStatus{DeviceID: "g1", Status: Available}) },
			dev:     "g1",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.must(host("h1", gpu("g1", 80)))
			holder := tc.setup(h)
			r := polGPU(1)
			r.Timeout = time.Hour
			q := h.must(&Allocate{Request: r}).Allocation
			if q.Status != Pending || q.WhyNot == nil {
				t.Fatalf("request is %s (why-not %v), want pending with a why-not", q.Status, q.WhyNot)
			}
			h.advance(time.Second) // a tick alone places nothing
			if st := polStatus(t, h, q.ID); st != Pending {
				t.Fatalf("before the trigger: %s, want pending", st)
			}
			tc.trigger(h, holder)
			a, _ := h.s.Allocation(q.ID)
			if a.Status != Active || a.Devices[0].DeviceID != tc.dev || a.WhyNot != nil {
				t.Fatalf("after the trigger: %s on %v, want active on %s", a.Status, polDevices(a), tc.dev)
			}
			if len(h.s.Queue()) != 0 {
				t.Fatalf("queue still holds %d", len(h.s.Queue()))
			}
		})
	}
}

// tickAt applies a tick stamped at exactly at.
func tickAt(h *harness, at int64) {
	h.now = at - int64(time.Millisecond)
	h.must(&Tick{})
}

// TestQueueDeadline: a waiting request times out on the first tick past
// its deadline, and not before.
func TestQueueDeadline(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80)))
	holder := h.must(&Allocate{Request: polGPU(1)}).Allocation.ID
	r := polGPU(1)
	r.Timeout = 10 * time.Second
	q := h.must(&Allocate{Request: r}).Allocation
	if q.Deadline != q.RequestedAt+int64(10*time.Second) {
		t.Fatalf("deadline %d, want requested %d + 10s", q.Deadline, q.RequestedAt)
	}
	if at, ok := h.s.NextDeadline(); !ok || at.UnixNano() != q.Deadline {
		t.Fatalf("next deadline %v %t, want %d", at, ok, q.Deadline)
	}
	tickAt(h, q.Deadline-1)
	if st := polStatus(t, h, q.ID); st != Pending {
		t.Fatalf("1ns before the deadline: %s, want pending", st)
	}
	tickAt(h, q.Deadline+int64(time.Millisecond))
	a, _ := h.s.Allocation(q.ID)
	if a.Status != TimedOut || a.EndedAt != q.Deadline+int64(time.Millisecond) {
		t.Fatalf("after the deadline: %s ended %d, want timed_out", a.Status, a.EndedAt)
	}
	if len(h.s.Queue()) != 0 {
		t.Fatalf("queue holds %d after the timeout", len(h.s.Queue()))
	}
	// Capacity freed later does not revive it.
	h.must(&Release{AllocationID: holder})
	if st := polStatus(t, h, q.ID); st != TimedOut {
		t.Fatalf("after a release: %s, want timed_out", st)
	}
	if res := h.apply(&Cancel{AllocationID: q.ID}); !errors.Is(res.Err, ErrNotActive) {
		t.Fatalf("cancel a timed-out request: %v, want ErrNotActive", res.Err)
	}
}

// TestLease: an allocation with a lease TTL expires on the first tick past
// it unless renewed; renewing counts from the renewal.
func TestLease(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80)))
	r := polGPU(1)
	r.LeaseTTL = 30 * time.Second
	a := h.must(&Allocate{Request: r}).Allocation
	if a.LeaseExpiresAt != a.AllocatedAt+int64(30*time.Second) {
		t.Fatalf("lease expires %d, want allocated %d + 30s", a.LeaseExpiresAt, a.AllocatedAt)
	}
	first := a.LeaseExpiresAt
	tickAt(h, first-1)
	if st := polStatus(t, h, a.ID); st != Active {
		t.Fatalf("before expiry: %s", st)
	}
	// Renew with the request's TTL, then with an explicit one.
	renewed := h.must(&Renew{AllocationID: a.ID}).Allocation
	if renewed.LeaseExpiresAt != h.now+int64(30*time.Second) {
		t.Fatalf("renewed to %d, want now %d + 30s", renewed.LeaseExpiresAt, h.now)
	}
	renewed = h.must(&Renew{AllocationID: a.ID, TTL: time.Minute}).Allocation
	if renewed.LeaseExpiresAt != h.now+int64(time.Minute) {
		t.Fatalf("renewed to %d, want now %d + 1m", renewed.LeaseExpiresAt, h.now)
	}
	tickAt(h, first+int64(time.Second))
	if st := polStatus(t, h, a.ID); st != Active {
		t.Fatalf("past the first expiry after renewals: %s, want active", st)
	}
	tickAt(h, renewed.LeaseExpiresAt-1)
	if st := polStatus(t, h, a.ID); st != Active {
		t.Fatalf("before the renewed expiry: %s", st)
	}
	tickAt(h, renewed.LeaseExpiresAt+int64(time.Millisecond))
	if st := polStatus(t, h, a.ID); st != Expired {
		t.Fatalf("past the renewed expiry: %s, want expired", st)
	}
	if d, _ := h.s.Device("g1"); len(d.Allocations) != 0 || !d.Used.IsZero() {
		t.Fatalf("expired lease still holds g1: %v", d.Allocations)
	}
	if res := h.apply(&Renew{AllocationID: a.ID}); !errors.Is(res.Err, ErrNotActive) {
		t.Fatalf("renew an expired allocation: %v, want ErrNotActive", res.Err)
	}
	// Without a lease: renew needs a TTL.
	b := h.must(&Allocate{Request: polGPU(1)}).Allocation
	if b.LeaseExpiresAt != 0 {
		t.Fatalf("no TTL but lease expires at %d", b.LeaseExpiresAt)
	}
	if res := h.apply(&Renew{AllocationID: b.ID}); !errors.Is(res.Err, ErrInvalid) {
		t.Fatalf("renew without a TTL: %v, want ErrInvalid", res.Err)
	}
	h.advance(MaxDuration / 2)
	if st := polStatus(t, h, b.ID); st != Active {
		t.Fatalf("an allocation without a lease ended: %s", st)
	}
}

// TestHostDown: a host going down loses its allocations and its devices
// read offline until it returns.
func TestHostDown(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80)))
	h.must(host("h2", gpu("g2", 16)))
	polSet(h, GPU, FirstFit)
	x := h.must(&Allocate{Request: polGPU(1)}).Allocation
	y := h.must(&Allocate{Request: polGPU(1)}).Allocation
	if x.Host != "h1" || y.Host != "h2" {
		t.Fatalf("placed on %s and %s", x.Host, y.Host)
	}
	h.must(&SetHostStatus{HostID: "h1", Up: false})
	a, _ := h.s.Allocation(x.ID)
	if a.Status != Lost || !strings.Contains(a.Reason, "down") {
		t.Fatalf("allocation on the down host: %s (%q), want lost", a.Status, a.Reason)
	}
	if st := polStatus(t, h, y.ID); st != Active {
		t.Fatalf("allocation on the other host: %s, want active", st)
	}
	d, _ := h.s.Device("g1")
	if d.Status != Offline || len(d.Allocations) != 0 || !d.Used.IsZero() {
		t.Fatalf("g1 reads %s with %v", d.Status, d.Allocations)
	}
	if hs, _ := h.s.Host("h1"); hs.Up {
		t.Fatal("h1 reads up")
	}
	w := polWhyNot(t, h.apply(&Allocate{Request: polGPU(40)}).Err)
	// Static filters run first, in chain order: capability, then host.
	want := []Reason{{Reason: "capability memory_gb too small", Count: 1}, {Reason: "host down (device offline)", Count: 1}}
	if !reflect.DeepEqual(w.Claims[0].Removed, want) {
		t.Fatalf("why-not %+v, want %+v", w.Claims[0].Removed, want)
	}
	h.must(&SetHostStatus{HostID: "h1", Up: true})
	if d, _ := h.s.Device("g1"); d.Status != Available {
		t.Fatalf("g1 reads %s after its host returned", d.Status)
	}
	if b := h.must(&Allocate{Request: polGPU(40)}).Allocation; b.Devices[0].DeviceID != "g1" {
		t.Fatalf("after recovery placed on %v", polDevices(b))
	}
}

// TestCancel: only a pending request can be cancelled.
func TestCancel(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80)))
	x := h.must(&Allocate{Request: polGPU(1)}).Allocation
	r := polGPU(1)
	r.Timeout = time.Hour
	q := h.must(&Allocate{Request: r}).Allocation
	c := h.must(&Cancel{AllocationID: q.ID}).Allocation
	if c.Status != Cancelled || len(h.s.Queue()) != 0 {
		t.Fatalf("cancelled request is %s, queue %d", c.Status, len(h.s.Queue()))
	}
	if _, ok := h.s.NextDeadline(); ok {
		t.Fatal("a cancelled request left its deadline timer")
	}
	h.must(&Release{AllocationID: x.ID})
	if st := polStatus(t, h, q.ID); st != Cancelled {
		t.Fatalf("a cancelled request revived as %s", st)
	}
	for _, tc := range []struct {
		id   string
		want error
	}{
		{q.ID, ErrNotActive},
		{x.ID, ErrNotActive},
		{"6f0d6f9e-0000-4000-8000-000000000000", ErrNotFound},
	} {
		if res := h.apply(&Cancel{AllocationID: tc.id}); !errors.Is(res.Err, tc.want) {
			t.Fatalf("cancel %s: %v, want %v", tc.id, res.Err, tc.want)
		}
	}
	y := h.must(&Allocate{Request: polGPU(1)}).Allocation
	if res := h.apply(&Cancel{AllocationID: y.ID}); !errors.Is(res.Err, ErrConflict) {
		t.Fatalf("cancel an active allocation: %v, want ErrConflict", res.Err)
	}
	if st := polStatus(t, h, y.ID); st != Active {
		t.Fatalf("refused cancel changed the allocation to %s", st)
	}
}

// TestWhyNot: a refusal counts what each filter removed, in filter order.
func TestWhyNot(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("w1", 16), gpu("w2", 80), gpu("w3", 80),
		DeviceSpec{ID: "w6", Type: CPU, Capabilities: Capabilities{Resources: Resources{ComputeUnits: 64}}},
		polWithPool(gpu("w5", 80), "other")))
	h.must(host("h2", gpu("w4", 80)))
	if a := h.must(&Allocate{Request: polGPU(40)}).Allocation; a.Devices[0].DeviceID != "w2" {
		t.Fatalf("setup placed on %v, want w2", polDevices(a))
	}
	h.must(&SetDeviceStatus{DeviceID: "w3", Status: Draining})
	h.must(&SetHostStatus{HostID: "h2", Up: false})

	r := polGPU(40)
	r.Pool = DefaultPool
	res := h.apply(&Allocate{Request: r})
	w := polWhyNot(t, res.Err)
	want := []Reason{
		{Reason: "type", Count: 1},
		{Reason: "pool", Count: 1},
		{Reason: "capability memory_gb too small", Count: 1},
		{Reason: "host down (device offline)", Count: 1},
		{Reason: "status draining", Count: 1},
		{Reason: "in use (not enough free capacity)", Count: 1},
	}
	c := w.Claims[0]
	if !reflect.DeepEqual(c.Removed, want) || c.Fitting != 0 || w.Devices != 6 || w.Hosts != 2 {
		t.Fatalf("why-not %+v\nwant removed %+v", w, want)
	}
	if res.Allocation == nil || res.Allocation.Status != Failed || res.Allocation.WhyNot == nil {
		t.Fatalf("refusal recorded as %+v", res.Allocation)
	}
	if !strings.Contains(w.Summary, "1 capability memory_gb too small") || !strings.Contains(w.Summary, "0 of 6 devices fit") {
		t.Fatalf("summary %q", w.Summary)
	}

	// Enough devices, but not on one host.
	h2 := newHarness(t)
	h2.must(host("n1", gpu("n1a", 80)))
	h2.must(host("n2", gpu("n2a", 80)))
	two := polGPU(1)
	two.Claims[0].Count = 2
	w = polWhyNot(t, h2.apply(&Allocate{Request: two}).Err)
	c = w.Claims[0]
	if c.Fitting != 2 || c.HostsWithSome != 2 || c.HostsWithEnough != 0 || len(c.Removed) != 0 {
		t.Fatalf("why-not %+v", c)
	}
	if !strings.Contains(w.Summary, "no host has 2 fitting devices") {
		t.Fatalf("summary %q", w.Summary)
	}

	// A waiting request carries its why-not too.
	two.Timeout = time.Minute
	q := h2.must(&Allocate{Request: two}).Allocation
	if q.Status != Pending || q.WhyNot == nil || q.WhyNot.Claims[0].HostsWithEnough != 0 {
		t.Fatalf("pending request %s with why-not %+v", q.Status, q.WhyNot)
	}
}
