package fsm

import (
	"errors"
	"math/rand"
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

// TestPreemptWaitingRandom: with preemption for waiting requests on, GPU
// requests of random priorities, sizes and timeouts come and go on two
// 4-GPU hosts under PriorityBased. After every release (which examines
// the queue), no waiting request could run by preempting: on no host do
// its free GPUs and those of allocations at least the gap below it add
// up to what it asks. Every victim is at least the gap below its
// preemptor.
func TestPreemptWaitingRandom(t *testing.T) {
	served := 0
	for seed := int64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewSource(seed))
		h := newHarness(t)
		for _, id := range []string{"h1", "h2"} {
			h.must(host(id, gpu(id+"a", 80), gpu(id+"b", 80), gpu(id+"c", 80), gpu(id+"d", 80)))
		}
		h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: PriorityBased}})
		h.must(&SetQueueConfig{PreemptWaiting: true})
		for step := range 800 {
			switch r := rng.Intn(10); {
			case r < 5:
				req := Request{Priority: 10 * rng.Intn(6), Claims: []Claim{{Type: GPU, Count: 1 + rng.Intn(4)}}}
				if rng.Intn(3) > 0 {
					req.Timeout = time.Duration(1+rng.Intn(60)) * time.Second
				}
				h.apply(&Allocate{Request: req})
			case r < 8:
				var active []*Allocation
				for _, a := range h.s.Live() {
					if a.Status == Active {
						active = append(active, a)
					}
				}
				if len(active) == 0 {
					continue
				}
				before := map[string]bool{}
				for _, a := range h.s.Queue() {
					before[a.ID] = true
				}
				h.must(&Release{AllocationID: active[rng.Intn(len(active))].ID})
				for id := range before {
					if a, _ := h.s.Allocation(id); a.Status == Active && len(a.Preempted) > 0 {
						served++
						for _, v := range a.Preempted {
							if x, _ := h.s.Allocation(v); x.Request.Priority > a.Request.Priority-DefaultPreemptionGap {
								t.Fatalf("seed %d step %d: %s (priority %d) preempted %s (priority %d)", seed, step, id, a.Request.Priority, v, x.Request.Priority)
							}
						}
					}
				}
				for _, a := range h.s.Queue() {
					if a.Deadline <= h.now {
						continue
					}
					for _, hid := range []string{"h1", "h2"} {
						hs, _ := h.s.Host(hid)
						room := 0
						for _, did := range hs.Devices {
							d, _ := h.s.Device(did)
							if len(d.Allocations) == 0 {
								room++
								continue
							}
							if o, _ := h.s.Allocation(d.Allocations[0]); o.Request.Priority <= a.Request.Priority-DefaultPreemptionGap {
								room++
							}
						}
						if room >= a.Request.Claims[0].Count {
							t.Fatalf("seed %d step %d: %s (priority %d, %d GPUs) waits, but host %s has room for it by preemption", seed, step, a.ID, a.Request.Priority, a.Request.Claims[0].Count, hid)
						}
					}
				}
			default:
				h.advance(time.Duration(rng.Intn(5000)) * time.Millisecond)
			}
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
	}
	if served == 0 {
		t.Fatal("no waiting request was ever served by preemption: the log does not exercise it")
	}
}
