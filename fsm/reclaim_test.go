package fsm

import (
	"bytes"
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"
)

// TestReclaimExample: team-b borrows the idle GPUs beyond its quota of 2;
// team-a, within its quota of 2, asks for one: the most recently started
// of team-b's lowest-priority borrowed allocations is marked preempting
// with a deadline the grace away, ends as preempted at the deadline, and
// team-a's request gets its GPU before a request of the default namespace
// that waited longer.
func TestReclaimExample(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80), gpu("g3", 80), gpu("g4", 80)))
	two := 2
	h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &two}}}})
	h.must(&SetQuota{Quota: Quota{Namespace: "team-b", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &two}},
		Borrow: true, ReclaimGrace: 10 * time.Second}})
	var b []string
	for i, prio := range []int{50, 10, 10, 50} {
		r := h.must(inNamespace(&Allocate{Request: Request{Priority: prio, Claims: []Claim{{Type: GPU, Count: 1}}}}, "team-b"))
		if r.Allocation.Status != Active {
			t.Fatalf("team-b's GPU %d: %s, want active (borrowed past its quota)", i, r.Allocation.Status)
		}
		b = append(b, r.Allocation.ID)
	}
	other := h.must(&Allocate{Request: Request{Timeout: time.Hour, Claims: []Claim{{Type: GPU, Count: 1}}}}).Allocation.ID
	a := h.must(inNamespace(&Allocate{Request: Request{Timeout: time.Hour, Claims: []Claim{{Type: GPU, Count: 1}}}}, "team-a")).Allocation
	if a.Status != Pending {
		t.Fatalf("team-a's request is %s, want pending while team-b's grace runs", a.Status)
	}
	victim, _ := h.s.Allocation(b[2]) // priority 10, started after b[1]
	if victim.Preempting == nil || victim.Preempting.By != a.ID || victim.Preempting.Deadline != h.now+int64(10*time.Second) {
		t.Fatalf("victim %s preempting %+v; want by %s, deadline in 10s", b[2], victim.Preempting, a.ID)
	}
	for _, id := range []string{b[0], b[1], b[3]} {
		if x, _ := h.s.Allocation(id); x.Preempting != nil {
			t.Fatalf("%s (priority %d) is preempting too", id, x.Request.Priority)
		}
	}
	assertRoundTrip(t, h.s)
	h.advance(9 * time.Second)
	if x, _ := h.s.Allocation(b[2]); x.Status != Active {
		t.Fatalf("victim %s is %s within its grace", b[2], x.Status)
	}
	h.advance(time.Second)
	if x, _ := h.s.Allocation(b[2]); x.Status != Preempted || x.PreemptedBy != a.ID || x.Preempting != nil {
		t.Fatalf("victim after its grace: %s by %q, preempting %+v; want preempted by %s", x.Status, x.PreemptedBy, x.Preempting, a.ID)
	}
	if x, _ := h.s.Allocation(a.ID); x.Status != Active || len(x.Preempted) != 1 || x.Preempted[0] != b[2] {
		t.Fatalf("team-a's request: %s, preempted %v; want active, %s", x.Status, x.Preempted, b[2])
	}
	if x, _ := h.s.Allocation(other); x.Status != Pending {
		t.Fatalf("the default namespace's request is %s, want still pending", x.Status)
	}
}

// TestReclaimSpared: a reclaiming request that stops waiting (cancelled)
// spares its victims, which keep their devices.
func TestReclaimSpared(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80)))
	one := 1
	h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &one}}}})
	h.must(&SetQuota{Quota: Quota{Namespace: "team-b", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &one}}, Borrow: true}})
	h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b"))
	borrowed := h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b")).Allocation.ID
	req := gpus(1, "")
	req.Timeout = time.Hour
	a := h.must(inNamespace(&Allocate{Request: req}, "team-a")).Allocation.ID
	if x, _ := h.s.Allocation(borrowed); x.Preempting == nil || x.Preempting.By != a {
		t.Fatalf("borrowed allocation preempting %+v, want by %s", x.Preempting, a)
	}
	h.must(inNamespace(&Cancel{AllocationID: a}, "team-a"))
	h.advance(DefaultReclaimGrace + time.Second)
	if x, _ := h.s.Allocation(borrowed); x.Status != Active || x.Preempting != nil {
		t.Fatalf("after the reclaimer left: %s, preempting %+v; want active, spared", x.Status, x.Preempting)
	}
}

// TestReclaimRandom: three namespaces with GPU quotas that add up to the
// cluster, some borrowing, ask for and release GPUs at random; after
// every command the invariants hold, and:
//   - a namespace goes past a limit only if it borrows;
//   - after a tick, no allocation keeps borrowed devices past its grace;
//   - a waiting one-GPU request whose namespace is within its quota
//     does not wait idle while another namespace holds borrowed GPUs
//     that no reclaim has claimed yet;
//   - a replica that applied the same log writes the same snapshot.
func TestReclaimRandom(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewSource(seed))
		h := newHarness(t)
		replica := newHarness(t)
		both := func(c Command) Result {
			r := h.apply(c)
			replica.idx, replica.now = h.idx-1, h.now-int64(time.Millisecond)
			replica.apply(c)
			return r
		}
		for i := range 3 {
			var devs []DeviceSpec
			for j := range 4 {
				devs = append(devs, gpu(string(rune('a'+i))+string(rune('0'+j)), 80))
			}
			both(host(string(rune('a'+i))+"-host", devs...))
		}
		names := []string{"team-a", "team-b", "team-c"}
		setQuotas := func() {
			left := 12
			for i, ns := range names {
				n := rng.Intn(left + 1)
				if i == len(names)-1 {
					n = left
				}
				left -= n
				q := Quota{Namespace: ns, Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &n}}}
				if rng.Intn(3) > 0 {
					q.Borrow, q.ReclaimGrace = true, time.Duration(rng.Intn(3))*5*time.Second
				}
				if r := both(&SetQuota{Quota: q}); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
		setQuotas()
		reclaims, reclaimed := 0, 0
		prevHolds := map[string]int{}
		for step := range 1000 {
			switch r := rng.Intn(100); {
			case r < 45:
				ns := names[rng.Intn(3)]
				req := Request{Priority: rng.Intn(4) * 10, Claims: []Claim{{Type: GPU, Count: 1 + rng.Intn(2)}}}
				if rng.Intn(4) > 0 {
					req.Timeout = time.Duration(1+rng.Intn(120)) * time.Second
				}
				both(inNamespace(&Allocate{Request: req}, ns))
			case r < 75:
				var active []*Allocation
				for _, a := range h.s.Live() {
					if a.Status == Active {
						active = append(active, a)
					}
				}
				if len(active) > 0 {
					a := active[rng.Intn(len(active))]
					both(inNamespace(&Release{AllocationID: a.ID}, a.Namespace))
				}
			case r < 97:
				h.now += int64(rng.Intn(8000)) * int64(time.Millisecond)
				both(&Tick{})
				for _, a := range h.s.Live() {
					if a.Preempting != nil && a.Preempting.Deadline <= h.now {
						t.Fatalf("seed %d step %d: %s keeps borrowed devices past its grace", seed, step, a.ID)
					}
				}
			default:
				setQuotas()
			}
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			holds := map[string]int{}
			claimed := map[string]int{} // GPUs of each namespace in a reclaim's grace
			for _, a := range h.s.Live() {
				if a.Status == Active {
					holds[a.Namespace] += len(a.Devices)
					if a.Preempting != nil {
						reclaims++
						claimed[a.Namespace] += len(a.Devices)
					}
				}
			}
			spare := map[string]int{} // borrowed GPUs no reclaim has claimed
			for _, ns := range names {
				q, _ := h.s.QuotaOf(ns)
				limit := *q.Limits[0].MaxCount
				if holds[ns] > limit && holds[ns] > prevHolds[ns] && !q.Borrow {
					t.Fatalf("seed %d step %d: %s went to %d GPUs, quota %d, and does not borrow", seed, step, ns, holds[ns], limit)
				}
				if q.Borrow {
					spare[ns] = max(0, holds[ns]-claimed[ns]-limit)
				}
			}
			for _, a := range h.s.Queue() {
				q, _ := h.s.QuotaOf(a.Namespace)
				if a.Request.Claims[0].Count != 1 || holds[a.Namespace]+1 > *q.Limits[0].MaxCount || a.Deadline <= h.now {
					continue
				}
				underWay := len(h.s.reclaims[a.ID]) > 0
				for ns, n := range spare {
					if ns != a.Namespace && n > 0 && !underWay && len(h.s.reclaims) == 0 {
						t.Fatalf("seed %d step %d: %s's one-GPU request %s waits within its quota while %s holds %d borrowed GPUs and no reclaim is under way",
							seed, step, a.Namespace, a.ID, ns, n)
					}
				}
			}
			prevHolds = holds
			if step%100 == 99 {
				if !bytes.Equal(h.s.SnapshotBytes(), replica.s.SnapshotBytes()) {
					t.Fatalf("seed %d step %d: replicas' snapshots differ", seed, step)
				}
				assertRoundTrip(t, h.s)
			}
		}
		for _, a := range h.s.History() {
			if a.Status == Preempted && len(a.Reason) > 9 && a.Reason[:9] == "reclaimed" {
				reclaimed++
			}
		}
		if reclaims == 0 || reclaimed == 0 {
			t.Fatalf("seed %d: %d steps in a grace, %d reclaimed: the log did not exercise reclaim", seed, reclaims, reclaimed)
		}
	}
}

// TestBorrowKeepsAmounts: borrowing passes a max count, not an amount.
func TestBorrowKeepsAmounts(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80), gpu("g3", 80)))
	one := 1
	h.must(&SetQuota{Quota: Quota{Namespace: "team-b", Borrow: true,
		Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &one, MaxAmount: Resources{MemoryGB: 160}}}}})
	h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b"))
	h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b")) // past the count: borrowed
	r := h.apply(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b"))
	if !errors.Is(r.Err, ErrQuotaExceeded) || r.Allocation.WhyNot == nil || !strings.Contains(r.Allocation.WhyNot.Quota, "memory_gb 160 of 160") {
		t.Fatalf("a third 80 GB GPU past 160 GB: %v, why-not %+v; want quota_exceeded on the memory", r.Err, r.Allocation.WhyNot)
	}
}
