package fsm

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Table tests for the defining behaviour of each policy and of the rules
// around placement: claims, shares, capabilities, labels, the queue,
// leases, host failure, cancel and the why-not of a refusal.

// polSetup builds a state: hosts, then a policy for GPUs (if any), then
// allocations made in order.
type polSetup struct {
	hosts  []*RegisterHost
	policy Policy
	prior  []Request
}

func (p polSetup) build(t *testing.T) (*harness, []string) {
	t.Helper()
	h := newHarness(t)
	for _, c := range p.hosts {
		h.must(c)
	}
	if p.policy != "" {
		polSet(h, GPU, p.policy)
	}
	var ids []string
	for _, r := range p.prior {
		ids = append(ids, h.must(&Allocate{Request: r}).Allocation.ID)
	}
	return h, ids
}

func polSet(h *harness, t DeviceType, p Policy) {
	h.t.Helper()
	h.must(&SetPolicy{DeviceType: t, Config: PolicyConfig{Policy: p}})
}

// polGPU asks for one GPU with at least memGB of memory.
func polGPU(memGB float64) Request {
	return Request{Claims: []Claim{{Type: GPU, Count: 1, Capabilities: Capabilities{Resources: Resources{MemoryGB: memGB}}}}}
}

// polShare asks for a share of one GPU.
func polShare(amt Resources) Request {
	return Request{Claims: []Claim{{Type: GPU, Count: 1, Amount: amt}}}
}

func polShared(id string, memGB, cu float64) DeviceSpec {
	d := gpu(id, memGB)
	d.Capabilities.ComputeUnits = cu
	d.Shareable = true
	return d
}

func polWithLabels(d DeviceSpec, kv ...string) DeviceSpec {
	d.Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Labels[kv[i]] = kv[i+1]
	}
	return d
}

func polWithPool(d DeviceSpec, pool string) DeviceSpec {
	d.Pool = pool
	return d
}

func polWithCustom(d DeviceSpec, k, v string) DeviceSpec {
	d.Capabilities.Custom = map[string]string{k: v}
	return d
}

// polDevices lists the devices of an allocation in assignment order.
func polDevices(a *Allocation) []string {
	var out []string
	for _, as := range a.Devices {
		out = append(out, as.DeviceID)
	}
	return out
}

// polStatus is the status of a live or historic allocation.
func polStatus(t *testing.T, h *harness, id string) AllocStatus {
	t.Helper()
	a, ok := h.s.Allocation(id)
	if !ok {
		t.Fatalf("allocation %s unknown", id)
	}
	return a.Status
}

func polWhyNot(t *testing.T, err error) *WhyNot {
	t.Helper()
	if !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("error %v, want ErrNoCapacity", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.WhyNot == nil {
		t.Fatalf("refusal %v carries no why-not", err)
	}
	return e.WhyNot
}

// TestPolicyPicks checks, per policy, which devices successive requests
// get. Between requests the previous allocation is released when release
// is set, so only the policy (and its cursor) decides.
func TestPolicyPicks(t *testing.T) {
	cases := []struct {
		name    string
		setup   polSetup // prior allocations are placed under setup.policy
		policy  Policy
		reqs    []Request
		release bool
		want    []string
	}{
		{
			name:   "BestFit takes the 16 GB GPU over the 80 GB one for 12 GB",
			policy: BestFit,
			setup:  polSetup{hosts: []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 16))}, policy: BestFit},
			reqs:   []Request{polGPU(12)}, want: []string{"g2"},
		},
		{
			name:   "BestFit skips a GPU too small for the request",
			policy: BestFit,
			setup:  polSetup{hosts: []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 8), gpu("g3", 16))}, policy: BestFit},
			reqs:   []Request{polGPU(12), polGPU(12), polGPU(12)}, want: []string{"g3", "g1", ""},
		},
		{
			name:   "WorstFit takes the 80 GB GPU over the 16 GB one for 12 GB",
			policy: WorstFit,
			setup:  polSetup{hosts: []*RegisterHost{host("h1", gpu("g1", 16), gpu("g2", 80))}, policy: WorstFit},
			reqs:   []Request{polGPU(12)}, want: []string{"g2"},
		},
		{
			name:   "BestFit packs shares onto the fuller GPU",
			policy: BestFit,
			setup: polSetup{
				hosts:  []*RegisterHost{host("h1", polShared("s1", 80, 100), polShared("s2", 80, 100))},
				policy: FirstFit,
				prior:  []Request{polShare(Resources{ComputeUnits: 10}), polShare(Resources{ComputeUnits: 95}), polShare(Resources{ComputeUnits: 50})},
			},
			// s1 holds 10+50, s2 holds 95: a 5 share fits both and leaves
			// s2 with less.
			reqs: []Request{{Claims: []Claim{{Type: GPU, Count: 1, Amount: Resources{ComputeUnits: 5}}}}},
			want: []string{"s2"},
		},
		{
			name:   "WorstFit spreads shares onto the emptier GPU",
			policy: WorstFit,
			setup: polSetup{
				hosts:  []*RegisterHost{host("h1", polShared("s1", 80, 100), polShared("s2", 80, 100))},
				policy: FirstFit,
				prior:  []Request{polShare(Resources{ComputeUnits: 30})},
			},
			// s1 has 70 free, s2 100, 90, 80, then 70: equal, the lower ID.
			reqs: []Request{polShare(Resources{ComputeUnits: 10}), polShare(Resources{ComputeUnits: 10}), polShare(Resources{ComputeUnits: 10}), polShare(Resources{ComputeUnits: 10})},
			want: []string{"s2", "s2", "s2", "s1"},
		},
		{
			name:   "FirstFit takes the first fitting device in ID order, not host order",
			policy: FirstFit,
			setup:  polSetup{hosts: []*RegisterHost{host("h1", gpu("g3", 80), gpu("g1", 8)), host("h2", gpu("g2", 80), gpu("g4", 16))}, policy: FirstFit},
			reqs:   []Request{polGPU(12), polGPU(12), polGPU(12), polGPU(12)}, want: []string{"g2", "g3", "g4", ""},
		},
		{
			name:    "FirstFit returns to the first device once it is free",
			policy:  FirstFit,
			setup:   polSetup{hosts: []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 80), gpu("g3", 80))}, policy: FirstFit},
			reqs:    []Request{polGPU(12), polGPU(12), polGPU(12)},
			release: true, want: []string{"g1", "g1", "g1"},
		},
		{
			name:    "RoundRobin walks the device order and wraps",
			policy:  RoundRobin,
			setup:   polSetup{hosts: []*RegisterHost{host("h1", gpu("g1", 80), gpu("g3", 80)), host("h2", gpu("g2", 80))}, policy: RoundRobin},
			reqs:    []Request{polGPU(12), polGPU(12), polGPU(12), polGPU(12), polGPU(12)},
			release: true, want: []string{"g1", "g2", "g3", "g1", "g2"},
		},
		{
			name:    "RoundRobin skips devices that do not fit",
			policy:  RoundRobin,
			setup:   polSetup{hosts: []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 8), gpu("g3", 40))}, policy: RoundRobin},
			reqs:    []Request{polGPU(12), polGPU(12), polGPU(12), polGPU(4)},
			release: true, want: []string{"g1", "g3", "g1", "g2"},
		},
		{
			name:   "LoadBalanced alternates hosts",
			policy: LoadBalanced,
			setup:  polSetup{hosts: []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 80)), host("h2", gpu("g3", 80), gpu("g4", 80))}, policy: LoadBalanced},
			reqs:   []Request{polGPU(12), polGPU(12), polGPU(12), polGPU(12)}, want: []string{"g1", "g3", "g2", "g4"},
		},
		{
			name:   "LoadBalanced prefers the least utilised host over a lower ID",
			policy: LoadBalanced,
			setup: polSetup{
				hosts:  []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 80), gpu("g3", 80)), host("h2", gpu("g4", 80), gpu("g5", 80))},
				policy: FirstFit,
				prior:  []Request{polGPU(1), polGPU(1)}, // h1 2/3 used, h2 none
			},
			reqs: []Request{polGPU(1)}, want: []string{"g4"},
		},
		{
			name:   "LoadBalanced takes the least used device on the host",
			policy: LoadBalanced,
			setup: polSetup{
				hosts:  []*RegisterHost{host("h1", polShared("s1", 80, 100), polShared("s2", 80, 100))},
				policy: FirstFit,
				prior:  []Request{polShare(Resources{ComputeUnits: 60}), polShare(Resources{ComputeUnits: 50})}, // s1 60%, s2 50%
			},
			reqs: []Request{polShare(Resources{ComputeUnits: 10})}, want: []string{"s2"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := tc.setup.build(t)
			polSet(h, GPU, tc.policy)
			var got []string
			for _, r := range tc.reqs {
				res := h.apply(&Allocate{Request: r})
				if res.Err != nil {
					if !errors.Is(res.Err, ErrNoCapacity) {
						t.Fatalf("allocate: %v", res.Err)
					}
					got = append(got, "")
					continue
				}
				got = append(got, res.Allocation.Devices[0].DeviceID)
				if tc.release {
					h.must(&Release{AllocationID: res.Allocation.ID})
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("devices %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMultiDevicePicks: a claim for several devices is ranked by the
// policy on a host, and hosts are ranked for the whole request.
func TestMultiDevicePicks(t *testing.T) {
	two := polGPU(12)
	two.Claims[0].Count = 2
	oneHost := []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 16), gpu("g3", 16), gpu("g4", 40))}
	bigFirst := []*RegisterHost{host("h1", gpu("a1", 80), gpu("a2", 80)), host("h2", gpu("b1", 16), gpu("b2", 16))}
	smallFirst := []*RegisterHost{host("h1", gpu("a1", 16), gpu("a2", 16)), host("h2", gpu("b1", 80), gpu("b2", 80))}
	cases := []struct {
		name   string
		hosts  []*RegisterHost
		policy Policy
		want   []string
	}{
		{"BestFit takes the smallest devices that fit", oneHost, BestFit, []string{"g2", "g3"}},
		{"WorstFit takes the largest devices", oneHost, WorstFit, []string{"g1", "g4"}},
		{"FirstFit takes devices in ID order", oneHost, FirstFit, []string{"g1", "g2"}},
		// Both hosts are left with nothing free; the 80 GB GPUs would
		// strand more of what they hold.
		{"BestFit keeps big GPUs on another host free", bigFirst, BestFit, []string{"b1", "b2"}},
		{"WorstFit takes big GPUs on another host", smallFirst, WorstFit, []string{"b1", "b2"}},
		{"FirstFit takes the first host", bigFirst, FirstFit, []string{"a1", "a2"}},
		{"FirstFit takes the first host, small or not", smallFirst, FirstFit, []string{"a1", "a2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := polSetup{hosts: tc.hosts, policy: tc.policy}.build(t)
			a := h.must(&Allocate{Request: two}).Allocation
			if got := polDevices(a); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("devices %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPriorityQueueOrder: when capacity frees, priority 900 is served
// before 100, and requests of one priority in arrival order.
func TestPriorityQueueOrder(t *testing.T) {
	h, ids := polSetup{
		hosts:  []*RegisterHost{host("h1", gpu("g1", 80))},
		policy: PriorityBased,
		prior:  []Request{{Claims: polGPU(1).Claims, Priority: MaxPriority}}, // cannot be preempted
	}.build(t)
	holder := ids[0]
	queued := func(prio int) string {
		r := Request{Claims: polGPU(1).Claims, Priority: prio, Timeout: time.Hour}
		a := h.must(&Allocate{Request: r}).Allocation
		if a.Status != Pending {
			t.Fatalf("priority %d: status %s, want pending", prio, a.Status)
		}
		return a.ID
	}
	low1 := queued(100)
	high1 := queued(900)
	high2 := queued(900)
	low2 := queued(100)
	var order []string
	for _, a := range h.s.Queue() {
		order = append(order, a.ID)
	}
	if want := []string{high1, high2, low1, low2}; !reflect.DeepEqual(order, want) {
		t.Fatalf("queue order %v, want %v", order, want)
	}
	for _, next := range []string{high1, high2, low1, low2} {
		h.must(&Release{AllocationID: holder})
		if st := polStatus(t, h, next); st != Active {
			t.Fatalf("after release: %s is %s, want active (served out of order)", next, st)
		}
		holder = next
	}
}

// TestPreemption: under PriorityBased a request that fits nowhere takes
// the devices of allocations at least the gap lower in priority.
func TestPreemption(t *testing.T) {
	cases := []struct {
		name       string
		policy     Policy
		gap        int
		victimPrio int
		reqPrio    int
		preempt    bool
	}{
		{"900 preempts 50", PriorityBased, 0, 50, 900, true},
		{"900 does not preempt 895 with gap 10", PriorityBased, 0, 895, 900, false},
		{"900 does not preempt 891 with gap 10", PriorityBased, 0, 891, 900, false},
		{"900 preempts 890: the gap is inclusive", PriorityBased, 0, 890, 900, true},
		{"900 does not preempt 850 with gap 100", PriorityBased, 100, 850, 900, false},
		{"900 preempts 800 with gap 100", PriorityBased, 100, 800, 900, true},
		{"equal priority never preempts", PriorityBased, 0, 900, 900, false},
		{"BestFit never preempts", BestFit, 0, 50, 900, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.must(host("h1", gpu("g1", 80)))
			h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: tc.policy, PreemptionGap: tc.gap}})
			victim := h.must(&Allocate{Request: Request{Claims: polGPU(1).Claims, Priority: tc.victimPrio}}).Allocation.ID
			res := h.apply(&Allocate{Request: Request{Claims: polGPU(1).Claims, Priority: tc.reqPrio}})
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			v, _ := h.s.Allocation(victim)
			if !tc.preempt {
				polWhyNot(t, res.Err)
				if v.Status != Active || v.PreemptedBy != "" {
					t.Fatalf("victim %s preempted by %q; want untouched", v.Status, v.PreemptedBy)
				}
				return
			}
			if res.Err != nil {
				t.Fatalf("allocate: %v", res.Err)
			}
			a := res.Allocation
			if a.Status != Active || !reflect.DeepEqual(polDevices(a), []string{"g1"}) {
				t.Fatalf("preemptor %s on %v, want active on g1", a.Status, polDevices(a))
			}
			if !reflect.DeepEqual(a.Preempted, []string{victim}) {
				t.Fatalf("preemptor records %v, want [%s]", a.Preempted, victim)
			}
			if v.Status != Preempted || v.PreemptedBy != a.ID || v.EndedAt == 0 {
				t.Fatalf("victim status %s by %q ended %d; want preempted by %s", v.Status, v.PreemptedBy, v.EndedAt, a.ID)
			}
			if d, _ := h.s.Device("g1"); !reflect.DeepEqual(d.Allocations, []string{a.ID}) {
				t.Fatalf("g1 holds %v, want only %s", d.Allocations, a.ID)
			}
		})
	}
}

// TestPreemptionChoosesVictims: the fewest victims first, then the lowest
// priorities.
func TestPreemptionChoosesVictims(t *testing.T) {
	prio := func(p, count int) Request {
		return Request{Claims: []Claim{{Type: GPU, Count: count, Capabilities: Capabilities{Resources: Resources{MemoryGB: 1}}}}, Priority: p}
	}
	cases := []struct {
		name    string
		hosts   []*RegisterHost
		prior   []Request // placed BestFit among equal GPUs: in ID order
		req     Request
		victims []int // indexes into prior
		host    string
	}{
		{
			name:    "lowest priority victim, even on a later host",
			hosts:   []*RegisterHost{host("h1", gpu("g1", 80)), host("h2", gpu("g2", 80))},
			prior:   []Request{prio(40, 1), prio(20, 1)},
			req:     prio(900, 1),
			victims: []int{1}, host: "h2",
		},
		{
			name:    "one victim of 30 rather than two of 10",
			hosts:   []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 80)), host("h2", gpu("g3", 80), gpu("g4", 80))},
			prior:   []Request{prio(10, 1), prio(10, 1), prio(30, 1)}, // g4 stays free
			req:     prio(900, 2),
			victims: []int{2}, host: "h2",
		},
		{
			name:    "both victims when the request needs both devices",
			hosts:   []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 80))},
			prior:   []Request{prio(10, 1), prio(20, 1)},
			req:     prio(900, 2),
			victims: []int{0, 1}, host: "h1",
		},
		{
			name:    "a victim above the gap is spared, a lower one taken",
			hosts:   []*RegisterHost{host("h1", gpu("g1", 80), gpu("g2", 80))},
			prior:   []Request{prio(895, 1), prio(500, 1)},
			req:     prio(900, 1),
			victims: []int{1}, host: "h1",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, ids := polSetup{hosts: tc.hosts, policy: PriorityBased, prior: tc.prior}.build(t)
			a := h.must(&Allocate{Request: tc.req}).Allocation
			var want []string
			for _, i := range tc.victims {
				want = append(want, ids[i])
			}
			got := append([]string(nil), a.Preempted...)
			if !sameSet(got, want) || a.Host != tc.host {
				t.Fatalf("preempted %v on %s, want %v on %s", got, a.Host, want, tc.host)
			}
			for i, id := range ids {
				st := polStatus(t, h, id)
				if victim := contains(want, id); victim != (st == Preempted) {
					t.Fatalf("prior %d (%s) is %s; victim=%t", i, id, st, victim)
				}
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !contains(b, x) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestPolicyOverrides: a pool's policy overrides its type's; removing the
// override restores the type's; a type without a policy gets FirstFit.
func TestPolicyOverrides(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1",
		polWithPool(gpu("t1", 80), "train"), polWithPool(gpu("t2", 16), "train"),
		gpu("d1", 80), gpu("d2", 16)))
	polSet(h, GPU, BestFit)
	h.must(&SetPolicy{Pool: "train", Config: PolicyConfig{Policy: WorstFit}})
	if p := h.s.PolicyOf(GPU, "train").Policy; p != WorstFit {
		t.Fatalf("policy of pool train %s, want WorstFit", p)
	}
	inTrain := polGPU(12)
	inTrain.Pool = "train"
	a := h.must(&Allocate{Request: inTrain}).Allocation
	if a.Devices[0].DeviceID != "t1" || a.Policy != WorstFit {
		t.Fatalf("pool train: %s under %s, want t1 under WorstFit", a.Devices[0].DeviceID, a.Policy)
	}
	inDefault := polGPU(12)
	inDefault.Pool = DefaultPool
	if b := h.must(&Allocate{Request: inDefault}).Allocation; b.Devices[0].DeviceID != "d2" || b.Policy != BestFit {
		t.Fatalf("pool default: %s under %s, want d2 under BestFit", b.Devices[0].DeviceID, b.Policy)
	}
	h.must(&Release{AllocationID: a.ID})
	h.must(&SetPolicy{Pool: "train", Config: PolicyConfig{}}) // remove the override
	if c := h.must(&Allocate{Request: inTrain}).Allocation; c.Devices[0].DeviceID != "t2" || c.Policy != BestFit {
		t.Fatalf("override removed: %s under %s, want t2 under BestFit", c.Devices[0].DeviceID, c.Policy)
	}

	// Sensors have no default policy: FirstFit, not BestFit.
	sensor := func(id string, gbps float64) DeviceSpec {
		return DeviceSpec{ID: id, Type: Sensor, Capabilities: Capabilities{Resources: Resources{BandwidthGbps: gbps}}}
	}
	h.must(host("h2", sensor("s1", 10), sensor("s2", 1)))
	if p := h.s.PolicyOf(Sensor, "").Policy; p != FirstFit {
		t.Fatalf("sensor policy %s, want FirstFit", p)
	}
	r := Request{Claims: []Claim{{Type: Sensor, Count: 1, Capabilities: Capabilities{Resources: Resources{BandwidthGbps: 1}}}}}
	if s := h.must(&Allocate{Request: r}).Allocation; s.Devices[0].DeviceID != "s1" || s.Policy != FirstFit {
		t.Fatalf("sensor: %s under %s, want s1 under FirstFit", s.Devices[0].DeviceID, s.Policy)
	}
}

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
