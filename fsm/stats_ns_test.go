package fsm

import (
	"testing"
	"time"
)

// TestNamespaceStats: shares against entitlements, waits and refusals by
// reason, per namespace, checked against what the log did.
func TestNamespaceStats(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80), gpu("g3", 80), gpu("g4", 80)))
	one, three := 1, 3
	h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Weight: 3, Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &three}}}})
	h.must(&SetQuota{Quota: Quota{Namespace: "team-b", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &one}}, Borrow: true}})
	h.must(&SetQueueConfig{FairShare: true, HalfLife: time.Hour})
	h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-a"))
	b1 := h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b")).Allocation.ID
	h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b")) // borrowed
	h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-a"))
	// team-a at 2 of 3: a request for 2 is refused for the quota.
	if r := h.apply(inNamespace(&Allocate{Request: gpus(2, "")}, "team-a")); r.Err == nil {
		t.Fatal("team-a's request past its quota was placed")
	}
	// No capacity left: team-b's is refused, team-a's waits and times out.
	if r := h.apply(inNamespace(&Allocate{Request: gpus(1, "")}, "team-b")); r.Err == nil {
		t.Fatal("team-b's request was placed on a full cluster")
	}
	req := gpus(1, "")
	req.Timeout = time.Minute
	h.must(inNamespace(&Allocate{Request: req}, "team-a")) // reclaims team-b's borrowed GPU
	h.must(inNamespace(&Cancel{AllocationID: h.s.Queue()[0].ID}, "team-a"))
	req.Timeout = time.Second
	h.must(inNamespace(&Allocate{Request: req}, "team-b"))
	h.advance(2 * time.Second)
	h.must(inNamespace(&Release{AllocationID: b1}, "team-b"))

	got := h.s.NamespaceStats(GPU, nil)
	if len(got) != 2 || got[0].Namespace != "team-a" || got[1].Namespace != "team-b" {
		t.Fatalf("namespace stats %+v", got)
	}
	a, b := got[0], got[1]
	if a.Weight != 3 || a.EntitlementPct != 75 || b.EntitlementPct != 25 {
		t.Fatalf("weights %g/%g, entitlements %.1f/%.1f; want 3/1, 75/25", a.Weight, b.Weight, a.EntitlementPct, b.EntitlementPct)
	}
	if a.Held != 2 || b.Held != 1 || int(a.SharePct+0.5) != 67 || int(b.SharePct+0.5) != 33 {
		t.Fatalf("held %d/%d, shares %.1f/%.1f; want 2/1, 67/33", a.Held, b.Held, a.SharePct, b.SharePct)
	}
	if a.RecentSharePct <= 0 || b.RecentSharePct <= 0 || a.RecentSharePct+b.RecentSharePct < 99.99 {
		t.Fatalf("recent shares %.2f/%.2f", a.RecentSharePct, b.RecentSharePct)
	}
	if a.MaxCount == nil || *a.MaxCount != 3 || b.MaxCount == nil || *b.MaxCount != 1 || b.Borrowing != 0 || a.Borrowing != 0 {
		t.Fatalf("max counts / borrowing: %+v %+v", a, b)
	}
	if a.Refusals["quota"] != 1 || a.Refusals["no_capacity"] != 0 || a.Refusals["timed_out"] != 0 || a.Counts.Cancelled != 1 {
		t.Fatalf("team-a's refusals %v, counts %+v", a.Refusals, a.Counts)
	}
	if b.Refusals["quota"] != 0 || b.Refusals["no_capacity"] != 1 || b.Refusals["timed_out"] != 1 || b.Counts.Released != 1 {
		t.Fatalf("team-b's refusals %v, counts %+v", b.Refusals, b.Counts)
	}
	if a.QueueWait.Count != 2 || b.QueueWait.Count != 2 {
		t.Fatalf("queue waits %+v %+v", a.QueueWait, b.QueueWait)
	}
	if only := h.s.NamespaceStats("", []string{"team-b"}); len(only) != 1 || only[0].EntitlementPct != 25 {
		t.Fatalf("team-b alone: %+v", only)
	}
}
