package fsm

import (
	"errors"
	"testing"
)

// TestCarriedAllocationID checks that an Allocate uses the ID its entry
// carries, that a retry of the same request ID carrying another ID gets
// the first allocation, that another request carrying a taken ID is a
// conflict, and that a queued request keeps its carried ID when a later
// entry places it.
func TestCarriedAllocationID(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80)))
	const id1 = "0b6c8a52-5a5e-4b36-9b1a-0f5a6f8f7c11"
	first := gpuReq(40)
	first.RequestID, first.AllocationID = "r1", id1
	a := h.must(first).Allocation
	if a.ID != id1 {
		t.Fatalf("allocation id = %s, want the carried %s", a.ID, id1)
	}

	retry := gpuReq(40)
	retry.RequestID, retry.AllocationID = "r1", "7d1f4f0e-2a7c-4a52-8f53-54b1d1c7a0e2"
	if r := h.must(retry); r.Allocation.ID != id1 {
		t.Fatalf("retry answered %s, want the first allocation %s", r.Allocation.ID, id1)
	}

	dup := gpuReq(1)
	dup.RequestID, dup.AllocationID = "r2", id1
	if r := h.apply(dup); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("a taken id: err = %v, want a conflict", r.Err)
	}

	const queuedID = "c3e0f7f5-8d2b-4f7e-a1f4-9d3c2b1a0e55"
	queued := gpuReq(1)
	queued.RequestID, queued.AllocationID = "r3", queuedID
	queued.Request.Timeout = 3600e9
	q := h.must(queued).Allocation
	if q.ID != queuedID || q.Status != Pending {
		t.Fatalf("queued = %s %s, want %s pending", q.ID, q.Status, queuedID)
	}
	h.must(&Release{AllocationID: id1})
	got := h.s.lookup(queuedID)
	if got == nil || got.Status != Active {
		t.Fatalf("queued allocation after release: %+v, want active under its carried id", got)
	}
}
