package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func maxCount(n int) *int { return &n }

func gpus(n int, pool string) Request {
	return Request{Claims: []Claim{{Type: GPU, Count: n, Pool: pool}}}
}

// quotaCluster: two hosts of four 80 GB GPUs in pool "big", one host of
// four shareable 40 GB GPUs in pool "small".
func quotaCluster(t *testing.T) *harness {
	h := newHarness(t)
	var big1, big2, small []DeviceSpec
	for _, id := range []string{"0", "1", "2", "3"} {
		d := gpu("b1-"+id, 80)
		d.Pool = "big"
		big1 = append(big1, d)
		d = gpu("b2-"+id, 80)
		d.Pool = "big"
		big2 = append(big2, d)
		d = gpu("s1-"+id, 40)
		d.Pool, d.Shareable = "small", true
		small = append(small, d)
	}
	h.must(host("b1", big1...))
	h.must(host("b2", big2...))
	h.must(host("s1", small...))
	return h
}

// TestQuotaLimits: each kind of limit lets a namespace take up to it and
// refuses the request that would pass it, naming the limit, while
// another namespace is not bound by it.
func TestQuotaLimits(t *testing.T) {
	cases := []struct {
		name    string
		limit   QuotaLimit
		fits    []Request // placed in turn
		refused Request
		why     string
	}{
		{
			name:    "count over every pool",
			limit:   QuotaLimit{DeviceType: GPU, MaxCount: maxCount(3)},
			fits:    []Request{gpus(2, "big"), gpus(1, "")},
			refused: gpus(1, ""),
			why:     "namespace team-a is at its quota: GPU, 3 of 3 devices held, 1 more asked",
		},
		{
			name:    "count in a pool the claim names",
			limit:   QuotaLimit{DeviceType: GPU, Pool: "big", MaxCount: maxCount(2)},
			fits:    []Request{gpus(2, "big"), gpus(3, "small")},
			refused: gpus(1, "big"),
			why:     "GPU in pool big, 2 of 2 devices held, 1 more asked",
		},
		{
			name:    "count in a pool the placement chose",
			limit:   QuotaLimit{DeviceType: GPU, Pool: "big", MaxCount: maxCount(4)},
			fits:    []Request{gpus(4, "big")},
			refused: Request{Claims: []Claim{{Type: GPU, Count: 4, Capabilities: Capabilities{Resources: Resources{MemoryGB: 80}}}}}, // only b2 has them
			why:     "GPU in pool big, 4 of 4 devices held, 4 more asked",
		},
		{
			name:  "memory of shares",
			limit: QuotaLimit{DeviceType: GPU, Pool: "small", MaxAmount: Resources{MemoryGB: 50}},
			fits: []Request{
				{Claims: []Claim{{Type: GPU, Count: 1, Pool: "small", Amount: Resources{MemoryGB: 20}}}},
				{Claims: []Claim{{Type: GPU, Count: 1, Pool: "small", Amount: Resources{MemoryGB: 30}}}},
			},
			refused: Request{Claims: []Claim{{Type: GPU, Count: 1, Pool: "small", Amount: Resources{MemoryGB: 0.5}}}},
			why:     "GPU in pool small, memory_gb 50 of 50 held, 0.5 more asked",
		},
		{
			name:    "memory of whole devices",
			limit:   QuotaLimit{DeviceType: GPU, MaxAmount: Resources{MemoryGB: 200}},
			fits:    []Request{gpus(2, "big")},
			refused: gpus(1, "big"),
			why:     "GPU, memory_gb 160 of 200 held, 80 more asked",
		},
		{
			name:    "none at all",
			limit:   QuotaLimit{DeviceType: GPU, MaxCount: maxCount(0)},
			refused: gpus(1, ""),
			why:     "GPU, 0 of 0 devices held, 1 more asked",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := quotaCluster(t)
			h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Limits: []QuotaLimit{tc.limit}}})
			for i, r := range tc.fits {
				if a := h.must(inNamespace(&Allocate{Request: r}, "team-a")).Allocation; a.Status != Active {
					t.Fatalf("request %d: %s", i, a.Status)
				}
			}
			res := h.apply(inNamespace(&Allocate{Request: tc.refused}, "team-a"))
			if !errors.Is(res.Err, ErrQuotaExceeded) {
				t.Fatalf("over the quota: %v", res.Err)
			}
			a := res.Allocation
			if a == nil || a.Status != Failed || a.Reason != "quota exceeded" || a.WhyNot == nil || !strings.Contains(a.WhyNot.Quota, tc.why) || a.WhyNot.Summary != a.WhyNot.Quota {
				t.Fatalf("refusal %+v, why-not %+v; want %q", a, a.WhyNot, tc.why)
			}
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			// Another namespace is not bound by team-a's quota.
			if b := h.must(inNamespace(&Allocate{Request: tc.refused}, "team-b")).Allocation; b.Status != Active {
				t.Fatalf("team-b: %s", b.Status)
			}
			assertRoundTrip(t, h.s)
		})
	}
}

// TestQuotaQueue: a request over its quota with a timeout waits; it is
// placed when the namespace releases, or when its quota is raised or
// removed, and never while it would pass the quota.
func TestQuotaQueue(t *testing.T) {
	h := quotaCluster(t)
	h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: maxCount(2)}}}})
	first := h.must(inNamespace(&Allocate{Request: gpus(2, "big")}, "team-a")).Allocation
	wait := gpus(2, "big")
	wait.Timeout = time.Hour
	q1 := h.must(inNamespace(&Allocate{Request: wait}, "team-a")).Allocation
	q2 := h.must(inNamespace(&Allocate{Request: wait}, "team-a")).Allocation
	if q1.Status != Pending || q1.WhyNot == nil || q1.WhyNot.Quota == "" {
		t.Fatalf("queued over the quota: %+v", q1)
	}
	// Capacity frees elsewhere: still over the quota.
	other := h.must(inNamespace(&Allocate{Request: gpus(1, "big")}, "team-b")).Allocation
	h.must(inNamespace(&Release{AllocationID: other.ID}, "team-b"))
	if got, _ := h.s.Allocation(q1.ID); got.Status != Pending {
		t.Fatalf("placed over the quota: %s", got.Status)
	}
	// team-a releases: the first waiting request takes its place.
	h.must(inNamespace(&Release{AllocationID: first.ID}, "team-a"))
	if got, _ := h.s.Allocation(q1.ID); got.Status != Active {
		t.Fatalf("after the release: %s", got.Status)
	}
	if got, _ := h.s.Allocation(q2.ID); got.Status != Pending {
		t.Fatalf("the second waiting request: %s", got.Status)
	}
	// Raising the limit serves the second at once.
	h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: maxCount(4)}}}})
	if got, _ := h.s.Allocation(q2.ID); got.Status != Active {
		t.Fatalf("after raising the quota: %s", got.Status)
	}
	use, ok := h.s.QuotaStatus("team-a")
	if !ok || len(use) != 1 || use[0].Count != 4 || use[0].Amount.MemoryGB != 320 {
		t.Fatalf("quota status %+v", use)
	}
	// Lowering it below the use ends nothing; deleting it lifts it.
	h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: maxCount(1)}}}})
	if got, _ := h.s.Allocation(q2.ID); got.Status != Active {
		t.Fatalf("after lowering the quota: %s", got.Status)
	}
	if res := h.apply(inNamespace(&Allocate{Request: gpus(1, "")}, "team-a")); !errors.Is(res.Err, ErrQuotaExceeded) {
		t.Fatalf("under a lowered quota: %v", res.Err)
	}
	h.must(&SetQuota{Quota: Quota{Namespace: "team-a"}, Delete: true})
	if _, ok := h.s.QuotaOf("team-a"); ok {
		t.Fatal("quota kept after its deletion")
	}
	h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-a"))
	assertRoundTrip(t, h.s)
}

func TestQuotaRefusals(t *testing.T) {
	lim := func(l QuotaLimit) *SetQuota { return &SetQuota{Quota: Quota{Namespace: "a", Limits: []QuotaLimit{l}}} }
	for name, c := range map[string]*SetQuota{
		"bad namespace":   {Quota: Quota{Namespace: "a/b", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: maxCount(1)}}}},
		"no limits":       {Quota: Quota{Namespace: "a"}},
		"unknown type":    lim(QuotaLimit{DeviceType: "TPU", MaxCount: maxCount(1)}),
		"bad pool":        lim(QuotaLimit{DeviceType: GPU, Pool: "a b", MaxCount: maxCount(1)}),
		"negative count":  lim(QuotaLimit{DeviceType: GPU, MaxCount: maxCount(-1)}),
		"huge count":      lim(QuotaLimit{DeviceType: GPU, MaxCount: maxCount(MaxQuotaCount + 1)}),
		"negative amount": lim(QuotaLimit{DeviceType: GPU, MaxAmount: Resources{MemoryGB: -1}}),
		"bounds nothing":  lim(QuotaLimit{DeviceType: GPU}),
		"repeated": {Quota: Quota{Namespace: "a", Limits: []QuotaLimit{
			{DeviceType: GPU, MaxCount: maxCount(1)}, {DeviceType: GPU, MaxCount: maxCount(2)}}}},
		"delete of none": {Quota: Quota{Namespace: "a"}, Delete: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			var before bytes.Buffer
			_ = h.s.Snapshot(&before)
			res := h.apply(c)
			if res.Err == nil {
				t.Fatal("accepted")
			}
			if name != "delete of none" {
				if err := Precheck(c); !errors.Is(err, ErrInvalid) {
					t.Fatalf("precheck: %v", err)
				}
			}
			var after bytes.Buffer
			_ = h.s.Snapshot(&after)
			if !bytes.Equal(before.Bytes(), after.Bytes()) {
				t.Fatal("a refused quota changed the state")
			}
		})
	}
}

// assertRoundTrip checks that s restores to a state that writes the
// same snapshot and holds its invariants.
func assertRoundTrip(t *testing.T, s *State) {
	t.Helper()
	var b1, b2 bytes.Buffer
	if err := s.Snapshot(&b1); err != nil {
		t.Fatal(err)
	}
	r, err := Restore(bytes.NewReader(b1.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot(&b2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Fatal("the restored state writes another snapshot")
	}
	if err := r.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
