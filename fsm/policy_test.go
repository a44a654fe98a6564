package fsm

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// Table tests for the defining behaviour of each policy: single and
// multi-device picks, the priority queue, preemption and overrides.

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
