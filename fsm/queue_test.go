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
