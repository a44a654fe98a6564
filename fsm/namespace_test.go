package fsm

import (
	"errors"
	"testing"
	"time"
)

func inNamespace(c Command, ns string) Command {
	SetNamespace(c, ns)
	return c
}

// TestNamespacesKeepAllocationsApart: an allocation belongs to the
// namespace of its request; commands of another namespace do not find it.
func TestNamespacesKeepAllocationsApart(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80)))
	a := h.must(inNamespace(gpuReq(8), "team-a")).Allocation
	if a.Namespace != "team-a" {
		t.Fatalf("namespace %q", a.Namespace)
	}
	if d := h.must(gpuReq(8)).Allocation; d.Namespace != DefaultNamespace {
		t.Fatalf("a request without a namespace is in %q", d.Namespace)
	}
	for _, c := range []Command{&Release{AllocationID: a.ID}, &Renew{AllocationID: a.ID}, &Cancel{AllocationID: a.ID}} {
		for _, ns := range []string{"", "team-b"} {
			if r := h.apply(inNamespace(c, ns)); !errors.Is(r.Err, ErrNotFound) {
				t.Errorf("%T from namespace %q: %v, want not found", c, ns, r.Err)
			}
		}
	}
	h.must(inNamespace(&Release{AllocationID: a.ID}, "team-a"))
	// Ended: still not found elsewhere, not active at home.
	if r := h.apply(inNamespace(&Release{AllocationID: a.ID}, "team-b")); !errors.Is(r.Err, ErrNotFound) {
		t.Errorf("release of an ended allocation from another namespace: %v", r.Err)
	}
	if r := h.apply(inNamespace(&Release{AllocationID: a.ID}, "team-a")); !errors.Is(r.Err, ErrNotActive) {
		t.Errorf("second release at home: %v", r.Err)
	}
	for _, ns := range []string{"a b", "../x", string(make([]byte, 65))} {
		if r := h.apply(inNamespace(gpuReq(8), ns)); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("namespace %q: %v, want invalid", ns, r.Err)
		}
	}
}

// TestRequestIDsPerNamespace: a request ID is scoped by its namespace; a
// retry of the same request gets the first result, another request under
// the same ID is refused and changes nothing.
func TestRequestIDsPerNamespace(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80), gpu("g3", 16)))
	req := func(ns, id string, memGB float64) Command {
		c := gpuReq(memGB)
		c.RequestID, c.Namespace = id, ns
		return c
	}
	first := h.must(req("team-a", "job-42", 16)).Allocation
	// The same ID in another namespace is another request.
	other := h.must(req("team-b", "job-42", 16)).Allocation
	if other.ID == first.ID {
		t.Fatal("team-b got team-a's allocation for the same request ID")
	}
	// A retry: the first result, nothing new.
	if again := h.must(req("team-a", "job-42", 16)).Allocation; again.ID != first.ID {
		t.Fatalf("retry got %s, want %s", again.ID, first.ID)
	}
	// Another body under the same ID, and another command: refused.
	before := string(h.s.SnapshotBytes())
	for _, c := range []Command{req("team-a", "job-42", 80), func() Command {
		c := &Release{AllocationID: first.ID}
		c.RequestID, c.Namespace = "job-42", "team-a"
		return c
	}()} {
		if r := h.apply(c); !errors.Is(r.Err, ErrRequestIDReused) || r.Allocation != nil {
			t.Fatalf("%T under a used request ID: %+v, want request_id_reused", c, r)
		}
	}
	if string(h.s.SnapshotBytes()) != before {
		t.Fatal("a refused reuse changed the state")
	}
	if a, _ := h.s.Allocation(first.ID); a.Status != Active {
		t.Fatalf("the first allocation is %s", a.Status)
	}
}

// TestLeaderDigestIsTheReplicasDigest: the digest the leader stamps on a
// command is the one a replica computes for an entry without it (an entry
// of an older leader), and a replica goes by the entry's digest when it
// has one.
func TestLeaderDigestIsTheReplicasDigest(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80)))
	req := func(memGB float64) *Allocate {
		c := gpuReq(memGB)
		c.RequestID, c.Namespace = "job-7", "team-a"
		return c
	}
	stamped := func(c *Allocate) *Allocate {
		Stamp(c, time.Unix(0, h.now))
		return c
	}
	if c := stamped(gpuReq(16)); c.Digest != "" {
		t.Fatalf("a command without a request ID got digest %q", c.Digest)
	}
	c := stamped(req(16))
	if c.Digest == "" || c.Digest != commandDigest(req(16)) {
		t.Fatalf("stamped digest %q, computed %q", c.Digest, commandDigest(req(16)))
	}
	if restamped := stamped(req(80)); restamped.Digest == c.Digest {
		t.Fatal("another body stamped the same digest")
	}
	first := h.must(c).Allocation
	for _, tc := range []struct {
		name string
		cmd  *Allocate
		want error // nil: the first allocation
	}{
		{"a retry without a digest", req(16), nil},
		{"a retry with the digest", stamped(req(16)), nil},
		{"another body without a digest", req(80), ErrRequestIDReused},
		{"another body with its digest", stamped(req(80)), ErrRequestIDReused},
		{"another body with the first digest", func() *Allocate { b := req(80); b.Digest = c.Digest; return b }(), nil},
	} {
		r := h.apply(tc.cmd)
		switch {
		case tc.want != nil && !errors.Is(r.Err, tc.want):
			t.Errorf("%s: %+v, want %v", tc.name, r, tc.want)
		case tc.want == nil && (r.Err != nil || r.Allocation == nil || r.Allocation.ID != first.ID):
			t.Errorf("%s: %+v, want the first allocation %s", tc.name, r, first.ID)
		}
	}
}

// TestStatsAndAdvicePerNamespace: one namespace's flood of impossible
// requests moves neither another namespace's figures nor its advice.
func TestStatsAndAdvicePerNamespace(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80)))
	for range 10 {
		a := h.must(gpuReq(8)).Allocation
		h.must(&Release{AllocationID: a.ID})
	}
	calm := findStats(t, h.s.Stats(StatsFilter{Type: GPU, Namespaces: []string{DefaultNamespace}}), GPU, AllPools)
	calmAdvice := h.s.Recommend(GPU, DefaultNamespace)
	for range 200 {
		if r := h.apply(inNamespace(gpuReq(500), "flood")); !errors.Is(r.Err, ErrNoCapacity) {
			t.Fatalf("impossible request: %v", r.Err)
		}
	}
	after := findStats(t, h.s.Stats(StatsFilter{Type: GPU, Namespaces: []string{DefaultNamespace}}), GPU, AllPools)
	if after.Counts != calm.Counts || after.SuccessRate != 1 {
		t.Fatalf("default's counts moved from %+v to %+v", calm.Counts, after.Counts)
	}
	if got := h.s.Recommend(GPU, DefaultNamespace); len(got) != len(calmAdvice) || got[0].Kind != calmAdvice[0].Kind {
		t.Fatalf("default's advice moved from %+v to %+v", calmAdvice, got)
	}
	all := findStats(t, h.s.Stats(StatsFilter{Type: GPU}), GPU, AllPools)
	if all.Counts.Failed != 200 {
		t.Fatalf("the whole cluster counts %d failures, want 200", all.Counts.Failed)
	}
}
