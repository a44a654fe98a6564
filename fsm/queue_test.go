package fsm

import (
	"errors"
	"testing"
	"time"
)

// A queued request whose deadline has passed is not placed when capacity
// frees before the next tick: its client has given up.
func TestQueuePastDeadlineNotPlaced(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 16)))
	first := h.must(gpuReq(8)).Allocation
	wait := gpuReq(8)
	wait.Request.Timeout = 10 * time.Millisecond
	queued := h.must(wait).Allocation
	if queued.Status != Pending {
		t.Fatalf("status %s, want pending", queued.Status)
	}
	h.now += int64(20 * time.Millisecond)
	h.must(&Release{AllocationID: first.ID})
	if a, _ := h.s.Allocation(queued.ID); a.Status != Pending {
		t.Fatalf("after release past deadline: status %s, want still pending", a.Status)
	}
	h.advance(0)
	if a, _ := h.s.Allocation(queued.ID); a.Status != TimedOut {
		t.Fatalf("after tick: status %s, want timed_out", a.Status)
	}
	if d, _ := h.s.Device("g1"); len(d.Allocations) != 0 {
		t.Fatalf("device still held by %v", d.Allocations)
	}
	// Releasing the timed-out request is refused as not active.
	if r := h.apply(&Release{AllocationID: queued.ID}); !errors.Is(r.Err, ErrNotActive) {
		t.Fatalf("release of timed-out: %v, want ErrNotActive", r.Err)
	}
}

// TestPreemptWaiting: a waiting request that could run by preempting
// lower-priority work gets it when the queue is next examined, with
// SetQueueConfig.PreemptWaiting; without it, only on arrival. The high
// request cannot preempt when it arrives (the holders are within the
// gap); a low one takes a GPU freed meanwhile; the next release lets the
// high one fit by preempting the low one.
func TestPreemptWaiting(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := newHarness(t)
		h.must(host("h1", gpu("g1", 80), gpu("g2", 80)))
		h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: PriorityBased}})
		h.must(&SetQueueConfig{PreemptWaiting: on})
		req := func(prio, count int, timeout time.Duration) *Allocate {
			return &Allocate{Request: Request{Priority: prio, Timeout: timeout, Claims: []Claim{{Type: GPU, Count: count}}}}
		}
		m1 := h.must(req(895, 1, 0)).Allocation.ID
		m2 := h.must(req(895, 1, 0)).Allocation.ID
		high := h.must(req(900, 2, time.Hour)).Allocation
		if high.Status != Pending || len(high.Preempted) > 0 {
			t.Fatalf("on %v: high is %s, preempted %v; want pending, none", on, high.Status, high.Preempted)
		}
		h.must(&Release{AllocationID: m1})
		low := h.must(req(0, 1, 0)).Allocation
		if low.Status != Active {
			t.Fatalf("on %v: low is %s, want active on the freed GPU", on, low.Status)
		}
		h.must(&Release{AllocationID: m2})
		got, _ := h.s.Allocation(high.ID)
		lowNow, _ := h.s.Allocation(low.ID)
		if !on {
			if got.Status != Pending || lowNow.Status != Active {
				t.Fatalf("off: high %s, low %s; want pending, active", got.Status, lowNow.Status)
			}
			continue
		}
		if got.Status != Active || len(got.Preempted) != 1 || got.Preempted[0] != low.ID {
			t.Fatalf("on: high %s preempted %v; want active, preempting %s", got.Status, got.Preempted, low.ID)
		}
		if lowNow.Status != Preempted || lowNow.PreemptedBy != high.ID {
			t.Fatalf("on: low %s by %q; want preempted by %s", lowNow.Status, lowNow.PreemptedBy, high.ID)
		}
		assertRoundTrip(t, h.s)
	}
}
