package fsm

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// Table tests for the rules around placement that every policy shares:
// claims on one host, shares, capabilities and labels.

// TestMultiClaimOneHost: every claim lands on one host, at once, or none does.
func TestMultiClaimOneHost(t *testing.T) {
	cpu := func(id string, cores float64) DeviceSpec {
		return DeviceSpec{ID: id, Type: CPU, Shareable: true, Capabilities: Capabilities{Resources: Resources{ComputeUnits: cores}}}
	}
	h := newHarness(t)
	h.must(host("h1", gpu("a1", 80), gpu("a2", 80)))                // GPUs, no CPU
	h.must(host("h2", gpu("b1", 80), cpu("bc", 32)))                // one GPU only
	h.must(host("h3", gpu("c1", 80), gpu("c2", 80), cpu("cc", 32))) // all of it
	req := Request{Claims: []Claim{
		{Type: GPU, Count: 2, Capabilities: Capabilities{Resources: Resources{MemoryGB: 40}}},
		{Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 8}},
	}}
	for _, pol := range []Policy{FirstFit, BestFit, WorstFit, RoundRobin, LoadBalanced, PriorityBased, FragmentationAware} {
		t.Run(string(pol), func(t *testing.T) {
			polSet(h, GPU, pol)
			a := h.must(&Allocate{Request: req}).Allocation
			want := []Assignment{
				{DeviceID: "c1", Claim: 0, Amount: Resources{MemoryGB: 80, ComputeUnits: 100}},
				{DeviceID: "c2", Claim: 0, Amount: Resources{MemoryGB: 80, ComputeUnits: 100}},
				{DeviceID: "cc", Claim: 1, Amount: Resources{ComputeUnits: 8}},
			}
			if a.Host != "h3" || !reflect.DeepEqual(a.Devices, want) {
				t.Fatalf("placed on %s: %+v, want h3: %+v", a.Host, a.Devices, want)
			}
			if d, _ := h.s.Device("cc"); d.Used.ComputeUnits != 8 {
				t.Fatalf("cc uses %v cores, want 8", d.Used.ComputeUnits)
			}
			// No host can take it again: refused, and nothing is taken.
			res := h.apply(&Allocate{Request: req})
			w := polWhyNot(t, res.Err)
			if w.HostsRejected != 0 || len(w.Claims) != 2 {
				t.Fatalf("why-not %+v", w)
			}
			for _, id := range []string{"a1", "a2", "b1", "bc"} {
				if d, _ := h.s.Device(id); len(d.Allocations) != 0 || !d.Used.IsZero() {
					t.Fatalf("refused request left %s with %v", id, d.Allocations)
				}
			}
			if res.Allocation == nil || res.Allocation.Status != Failed {
				t.Fatalf("refused request recorded as %+v, want failed", res.Allocation)
			}
			h.must(&Release{AllocationID: a.ID})
		})
	}
}

// TestShareableCapacity: shares consume capacity; a device takes shares
// until it is full, then requests fail or wait.
func TestShareableCapacity(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", polShared("s1", 80, 1)))
	half := polShare(Resources{ComputeUnits: 0.5})
	a := h.must(&Allocate{Request: half}).Allocation
	b := h.must(&Allocate{Request: half}).Allocation
	if a.Devices[0].DeviceID != "s1" || b.Devices[0].DeviceID != "s1" {
		t.Fatalf("halves on %s and %s, want both on s1", a.Devices[0].DeviceID, b.Devices[0].DeviceID)
	}
	if d, _ := h.s.Device("s1"); d.Used.ComputeUnits != 1 || len(d.Allocations) != 2 {
		t.Fatalf("s1 uses %v with %d allocations, want 1 with 2", d.Used.ComputeUnits, len(d.Allocations))
	}
	res := h.apply(&Allocate{Request: half})
	w := polWhyNot(t, res.Err)
	if !reflect.DeepEqual(w.Claims[0].Removed, []Reason{{Reason: "in use (not enough free capacity)", Count: 1}}) {
		t.Fatalf("why-not %+v", w.Claims[0].Removed)
	}
	// The whole device is not free either while shares hold it.
	whole := polShare(Resources{})
	if res := h.apply(&Allocate{Request: whole}); !errors.Is(res.Err, ErrNoCapacity) {
		t.Fatalf("whole device while shared: %v, want ErrNoCapacity", res.Err)
	}
	wait := half
	wait.Timeout = time.Minute
	c := h.must(&Allocate{Request: wait}).Allocation
	if c.Status != Pending {
		t.Fatalf("third half is %s, want pending", c.Status)
	}
	h.must(&Release{AllocationID: a.ID})
	if st := polStatus(t, h, c.ID); st != Active {
		t.Fatalf("third half is %s after a release, want active", st)
	}
}

// TestCustomCapabilities: a custom value matches exactly, "a|b" either.
func TestCustomCapabilities(t *testing.T) {
	inv := host("h1",
		gpu("x0", 80),
		polWithCustom(gpu("x1", 80), "arch", "ampere"),
		polWithCustom(gpu("x2", 80), "arch", "hopper"),
		polWithCustom(gpu("x3", 80), "arch", "ada"))
	cases := []struct {
		want string
		dev  string
	}{
		{"hopper", "x2"},
		{"ada", "x3"},
		{"ada|hopper", "x2"},
		{"volta|ada", "x3"},
		{"ampere|ada|hopper", "x1"},
		{"amp", ""},
		{"volta", ""},
		{"", ""}, // empty matches only an empty value, which no device has
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			h, _ := polSetup{hosts: []*RegisterHost{inv}, policy: FirstFit}.build(t)
			r := polGPU(1)
			r.Claims[0].Capabilities.Custom = map[string]string{"arch": tc.want}
			res := h.apply(&Allocate{Request: r})
			if tc.dev == "" {
				w := polWhyNot(t, res.Err)
				if !reflect.DeepEqual(w.Claims[0].Removed, []Reason{{Reason: "custom arch does not match", Count: 4}}) {
					t.Fatalf("why-not %+v", w.Claims[0].Removed)
				}
				return
			}
			if res.Err != nil || res.Allocation.Devices[0].DeviceID != tc.dev {
				t.Fatalf("got %+v (%v), want %s", res.Allocation, res.Err, tc.dev)
			}
		})
	}
}

// TestLabels: required labels must match, forbidden ones exclude (the
// value "*" any value), preferred ones rank; host labels apply to devices.
func TestLabels(t *testing.T) {
	rack := host("h2", polWithLabels(gpu("l5", 80), "zone", "b"))
	rack.Host.Labels = map[string]string{"rack": "r2"}
	inv := []*RegisterHost{host("h1",
		polWithLabels(gpu("l1", 80), "zone", "a"),
		polWithLabels(gpu("l2", 80), "zone", "b", "fast", "yes"),
		polWithLabels(gpu("l3", 80), "zone", "b"),
		gpu("l4", 80)), rack}
	sel := func(req, pref, forb map[string]string) LabelSelector {
		return LabelSelector{Required: req, Preferred: pref, Forbidden: forb}
	}
	m := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	cases := []struct {
		name  string
		prior []LabelSelector
		sel   LabelSelector
		dev   string
		why   string
	}{
		{name: "no labels: first device", sel: sel(nil, nil, nil), dev: "l1"},
		{name: "required value", sel: sel(m("zone", "b"), nil, nil), dev: "l2"},
		{name: "all required", sel: sel(m("zone", "b", "fast", "yes"), nil, nil), dev: "l2"},
		{name: "required missing", sel: sel(m("zone", "z"), nil, nil), why: "required label zone missing"},
		{name: "host label", sel: sel(m("rack", "r2"), nil, nil), dev: "l5"},
		{name: "forbidden value", sel: sel(nil, nil, m("zone", "a")), dev: "l2"},
		{name: "forbidden any value", sel: sel(m("zone", "b"), nil, m("fast", "*")), dev: "l3"},
		{name: "forbidden everywhere", sel: sel(nil, nil, m("rack", "*", "zone", "*")), dev: "l4"},
		{name: "preferred ranks first", sel: sel(nil, m("fast", "yes"), nil), dev: "l2"},
		{name: "more preferred labels win", sel: sel(nil, m("zone", "b", "rack", "r2"), nil), dev: "l5"},
		{name: "preferred falls back when busy", prior: []LabelSelector{sel(m("fast", "yes"), nil, nil)}, sel: sel(nil, m("fast", "yes"), nil), dev: "l1"},
		{name: "preferred does not override required", sel: sel(m("zone", "a"), m("fast", "yes"), nil), dev: "l1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := polSetup{hosts: inv, policy: FirstFit}.build(t)
			for _, p := range tc.prior {
				r := polGPU(1)
				r.Labels = p
				h.must(&Allocate{Request: r})
			}
			r := polGPU(1)
			r.Labels = tc.sel
			res := h.apply(&Allocate{Request: r})
			if tc.why != "" {
				w := polWhyNot(t, res.Err)
				if len(w.Claims[0].Removed) != 1 || w.Claims[0].Removed[0].Reason != tc.why {
					t.Fatalf("why-not %+v, want %q", w.Claims[0].Removed, tc.why)
				}
				return
			}
			if res.Err != nil || res.Allocation.Devices[0].DeviceID != tc.dev {
				t.Fatalf("got %+v (%v), want %s", res.Allocation, res.Err, tc.dev)
			}
		})
	}
}

// TestPlacersOnOneHost: each policy's placer places a request on one given
// host (what preemption asks of it) as it places it when that host is the
// only one.
func TestPlacersOnOneHost(t *testing.T) {
	reqs := []Request{
		polGPU(12),
		{Claims: []Claim{{Type: GPU, Count: 2, Capabilities: Capabilities{Resources: Resources{MemoryGB: 12}}}}},
		{Claims: []Claim{{Type: GPU, Count: 1, Amount: Resources{ComputeUnits: 30}}, {Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 4}}}},
	}
	for _, pol := range Policies {
		for i, r := range reqs {
			h := newHarness(t)
			h.must(host("h1", gpu("g1", 80), gpu("g2", 16), polShared("s1", 40, 100), polShared("s2", 80, 100),
				DeviceSpec{ID: "c1", Type: CPU, Shareable: true, Capabilities: Capabilities{Resources: Resources{ComputeUnits: 32}}}))
			h.must(&Allocate{Request: polShare(Resources{ComputeUnits: 50})})
			fits := h.s.fitting(&r)
			q := h.s.newQuery(&r, fits)
			pl := definition(pol).place
			want := pl.place(h.s, q)
			got := pl.onHost(h.s, h.s.hosts["h1"], q, nil)
			if want == nil || !reflect.DeepEqual(got, want.assign) {
				t.Errorf("%s request %d: on the host %v, placed %+v", pol, i, got, want)
			}
		}
	}
}
