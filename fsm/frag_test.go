package fsm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// fragGPU is a shareable GPU of 1000 compute units of a model.
func fragGPU(id, model string) DeviceSpec {
	return DeviceSpec{ID: id, Type: GPU, Shareable: true, Capabilities: Capabilities{
		Resources: Resources{ComputeUnits: 1000}, Custom: map[string]string{"model": model}}}
}

// fragCPU is a shareable CPU of milli cores.
func fragCPU(id string, milli float64) DeviceSpec {
	return DeviceSpec{ID: id, Type: CPU, Shareable: true, Capabilities: Capabilities{Resources: Resources{ComputeUnits: milli}}}
}

// fragTask is a request for a GPU share (milli < 1000), n whole GPUs
// (milli = 1000) or none (n = 0), of a model ("" for any), and CPU milli.
func fragTask(n int, milli float64, model string, cpuMilli float64) Request {
	var r Request
	if n > 0 {
		c := Claim{Type: GPU, Count: n, Amount: Resources{ComputeUnits: milli}}
		if model != "" {
			c.Capabilities.Custom = map[string]string{"model": model}
		}
		r.Claims = append(r.Claims, c)
	}
	if cpuMilli > 0 {
		r.Claims = append(r.Claims, Claim{Type: CPU, Count: 1, Amount: Resources{ComputeUnits: cpuMilli}})
	}
	return r
}

// fragTyped is a typical request and how often it is seen.
type fragTyped struct {
	req Request
	n   int
}

// fragSetup is an allocation made before the request under test, on a
// given device (and the host's CPU when it claims one).
type fragSetup struct {
	req    Request
	device string
}

// fragCase builds hosts, teaches the state a typical workload (each
// typical request allocated and released), makes the setup allocations
// with FirstFit and places want under policy. The requests before the
// one under test must number a power of two, so the typical workload is
// recomputed just before it and covers all of them.
func fragCase(t *testing.T, hosts []*RegisterHost, typical []fragTyped, setup []fragSetup, pol Policy, r Request) *Allocation {
	t.Helper()
	h := newHarness(t)
	for _, hc := range hosts {
		// Label every device with its ID, so a setup allocation can be
		// pinned to it.
		for i := range hc.Devices {
			hc.Devices[i].Labels = map[string]string{"id": hc.Devices[i].ID}
		}
		h.must(hc)
	}
	for _, typ := range []DeviceType{GPU, CPU} {
		h.must(&SetPolicy{DeviceType: typ, Config: PolicyConfig{Policy: FirstFit}})
	}
	for _, ty := range typical {
		for i := 0; i < ty.n; i++ {
			a := h.must(&Allocate{Request: ty.req}).Allocation
			h.must(&Release{AllocationID: a.ID})
		}
	}
	for _, su := range setup {
		r := su.req
		r.Labels.Required = map[string]string{"id": su.device}
		h.must(&Allocate{Request: r})
	}
	if n := h.s.seq; n&(n-1) != 0 {
		t.Fatalf("%d requests before the one under test: want a power of two", n)
	}
	for _, typ := range []DeviceType{GPU, CPU} {
		h.must(&SetPolicy{DeviceType: typ, Config: PolicyConfig{Policy: pol}})
	}
	return h.must(&Allocate{Request: r}).Allocation
}

func devicesOf(a *Allocation) string {
	out := a.Host + ":"
	for _, d := range a.Devices {
		out += " " + d.DeviceID
	}
	return out
}

// TestFragmentationAwarePlacement shows, per case, that FragmentationAware
// takes the placement that leaves the free capacity most usable by the
// typical requests, where the packing and spreading policies do not.
func TestFragmentationAwarePlacement(t *testing.T) {
	share := func(milli float64) Request { return fragTask(1, milli, "", 0) }
	cases := []struct {
		name    string
		hosts   []*RegisterHost
		typical []fragTyped
		setup   []fragSetup
		req     Request
		want    map[Policy]string
	}{
		{
			// A half GPU goes on the half-used GPU: breaking the free one
			// would leave no GPU for a whole-GPU task.
			name:    "share fills a used GPU",
			hosts:   []*RegisterHost{host("h1", fragGPU("h1-g1", "A"), fragGPU("h1-g2", "A"))},
			typical: []fragTyped{{share(1000), 20}, {share(500), 11}},
			setup:   []fragSetup{{share(500), "h1-g1"}},
			req:     share(500),
			want:    map[Policy]string{FragmentationAware: "h1: h1-g1", WorstFit: "h1: h1-g2"},
		},
		{
			// 0.3 GPU: on the GPU with 0.8 free it leaves 0.5, which the
			// typical half-GPU task still uses; on the GPU with 0.6 free
			// (the tighter fit) it would leave an unusable 0.3.
			name:  "share keeps a usable remainder",
			hosts: []*RegisterHost{host("h1", fragGPU("h1-g1", "A")), host("h2", fragGPU("h2-g1", "A"))},
			typical: []fragTyped{
				{share(500), 30},
			},
			setup: []fragSetup{{share(200), "h1-g1"}, {share(400), "h2-g1"}},
			req:   share(300),
			want:  map[Policy]string{FragmentationAware: "h1: h1-g1", BestFit: "h2: h2-g1"},
		},
		{
			// A CPU-only task on the host with little CPU would strand its
			// two GPUs: no typical task (1 GPU and 8 cores) could use them.
			name: "CPU task does not strand GPUs",
			hosts: []*RegisterHost{
				host("h1", fragCPU("h1-cpu", 16000), fragGPU("h1-g1", "A"), fragGPU("h1-g2", "A")),
				host("h2", fragCPU("h2-cpu", 64000), fragGPU("h2-g1", "A"), fragGPU("h2-g2", "A")),
			},
			typical: []fragTyped{{fragTask(1, 1000, "", 8000), 32}},
			req:     fragTask(0, 0, "", 12000),
			want:    map[Policy]string{FragmentationAware: "h2: h2-cpu", BestFit: "h1: h1-cpu"},
		},
		{
			// A CPU-only task that leaves one typical task room on either
			// host: on h1 it would leave CPU for one of its two free GPUs
			// only; h2 keeps CPU for both. Packing CPU picks h1.
			name: "CPU task keeps the CPU that free GPUs need",
			hosts: []*RegisterHost{
				host("h1", fragCPU("h1-cpu", 16000), fragGPU("h1-g1", "A"), fragGPU("h1-g2", "A")),
				host("h2", fragCPU("h2-cpu", 40000), fragGPU("h2-g1", "A"), fragGPU("h2-g2", "A")),
			},
			typical: []fragTyped{{fragTask(1, 1000, "", 8000), 32}},
			req:     fragTask(0, 0, "", 8000),
			want:    map[Policy]string{FragmentationAware: "h2: h2-cpu", BestFit: "h1: h1-cpu"},
		},
		{
			// A CPU-only task that strands no GPU on either host goes where
			// the GPUs are taken, keeping the CPU next to the free GPUs for
			// the GPU tasks; packing CPU alone would pick h2.
			name: "CPU task goes where the GPUs are taken",
			hosts: []*RegisterHost{
				host("h1", fragCPU("h1-cpu", 64000), fragGPU("h1-g1", "A"), fragGPU("h1-g2", "A")),
				host("h2", fragCPU("h2-cpu", 48000), fragGPU("h2-g1", "A"), fragGPU("h2-g2", "A")),
			},
			typical: []fragTyped{{fragTask(1, 1000, "", 8000), 30}},
			setup:   []fragSetup{{fragTask(1, 1000, "", 0), "h1-g1"}, {fragTask(1, 1000, "", 0), "h1-g2"}},
			req:     fragTask(0, 0, "", 16000),
			want:    map[Policy]string{FragmentationAware: "h1: h1-cpu", BestFit: "h2: h2-cpu"},
		},
		{
			// A GPU share with 4 cores, where both hosts' increases tie on
			// the grid (-0.045 and -0.061 of a device). On h2 it would
			// leave 8 cores, too few for the 12-core typical share, which
			// could then use none of h2's GPU; on h1 every typical shape
			// still fits. FGD's single-copy test breaks the tie; packing
			// would pick h2.
			name: "share leaves every typical shape room",
			hosts: []*RegisterHost{
				host("h1", fragCPU("h1-cpu", 16000), fragGPU("h1-g1", "A"), fragGPU("h1-g2", "A"), fragGPU("h1-g3", "A")),
				host("h2", fragCPU("h2-cpu", 12000), fragGPU("h2-g1", "A")),
			},
			typical: []fragTyped{
				{fragTask(1, 250, "", 8000), 22}, {fragTask(0, 0, "", 8000), 7}, {fragTask(1, 250, "", 12000), 3},
			},
			req:  fragTask(1, 250, "", 4000),
			want: map[Policy]string{FragmentationAware: "h1: h1-g1 h1-cpu", BestFit: "h2: h2-g1 h2-cpu"},
		},
		{
			// The same placement as above, but h1 and h2 now also keep the
			// same free GPU and the same share of their CPU free (2/3 of
			// 12 and of 18 cores), so only FGD's single-copy test tells
			// them apart: h1 is first by name, h2 by the measure.
			name: "the single-copy test decides where packing ties",
			hosts: []*RegisterHost{
				host("h1", fragCPU("h1-cpu", 12000), fragGPU("h1-g1", "A")),
				host("h2", fragCPU("h2-cpu", 18000), fragGPU("h2-g1", "A")),
			},
			typical: []fragTyped{
				{fragTask(1, 250, "", 8000), 21}, {fragTask(0, 0, "", 8000), 7}, {fragTask(1, 250, "", 12000), 3},
			},
			setup: []fragSetup{{fragTask(0, 0, "", 2000), "h2-cpu"}},
			req:   fragTask(1, 250, "", 4000),
			want:  map[Policy]string{FragmentationAware: "h2: h2-g1 h2-cpu"},
		},
		{
			// Any-model GPU: the model-B GPU, which the typical tasks
			// (model A only) cannot use anyway.
			name:    "keeps the model typical tasks need",
			hosts:   []*RegisterHost{host("h1", fragGPU("h1-g1", "A")), host("h2", fragGPU("h2-g1", "B"))},
			typical: []fragTyped{{fragTask(1, 1000, "A", 0), 32}},
			req:     share(1000),
			want:    map[Policy]string{FragmentationAware: "h2: h2-g1", BestFit: "h1: h1-g1"},
		},
		{
			// Two whole GPUs: from the host of four free GPUs, not from
			// the one whose partly used GPU would then be stranded next to
			// a single free one.
			name: "whole GPUs from the intact host",
			hosts: []*RegisterHost{
				host("h1", fragGPU("h1-g1", "A"), fragGPU("h1-g2", "A"), fragGPU("h1-g3", "A"), fragGPU("h1-g4", "A")),
				host("h2", fragGPU("h2-g1", "A"), fragGPU("h2-g2", "A"), fragGPU("h2-g3", "A"), fragGPU("h2-g4", "A")),
			},
			typical: []fragTyped{{fragTask(2, 1000, "", 0), 20}, {share(700), 11}},
			setup:   []fragSetup{{share(700), "h1-g1"}},
			req:     fragTask(2, 1000, "", 0),
			want:    map[Policy]string{FragmentationAware: "h2: h2-g1 h2-g2", BestFit: "h1: h1-g2 h1-g3"},
		},
	}
	for _, tc := range cases {
		for pol, want := range tc.want {
			t.Run(fmt.Sprintf("%s/%s", tc.name, pol), func(t *testing.T) {
				a := fragCase(t, tc.hosts, tc.typical, tc.setup, pol, tc.req)
				if got := devicesOf(a); got != want {
					t.Fatalf("placed on %s, want %s", got, want)
				}
			})
		}
	}
}

// TestFragSpansHoldEveryType: a view has a span for every device type.
func TestFragSpansHoldEveryType(t *testing.T) {
	if n := len(fragSpans{}); len(DeviceTypes) > n {
		t.Fatalf("%d device types, fragSpans has room for %d", len(DeviceTypes), n)
	}
}

// TestFragmentationAwareTiesPack: where every placement fragments alike,
// the request goes where it leaves the least free capacity.
func TestFragmentationAwareTiesPack(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", fragGPU("h1-g1", "A"), fragGPU("h1-g2", "A")))
	h.must(host("h2", fragGPU("h2-g1", "A")))
	h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: FragmentationAware}})
	a := h.must(&Allocate{Request: fragTask(1, 1000, "", 0)}).Allocation
	if got := devicesOf(a); got != "h2: h2-g1" {
		t.Fatalf("placed on %s, want h2: h2-g1", got)
	}
}

// TestFragmentationAwareMatchesReference applies random allocations and
// releases under FragmentationAware and checks every placement against an
// exhaustive search: no host and GPU the request fits would have raised
// the fragmentation less (by a grid step). The search reads the state afresh (through
// overlays), so a stale cache would show.
func TestFragmentationAwareMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	h := newHarness(t)
	models := []string{"A", "B"}
	for i := 0; i < 6; i++ {
		devs := []DeviceSpec{fragCPU(fmt.Sprintf("h%d-cpu", i), float64(8000*(1+rng.IntN(4))))}
		for g := 0; g < 1+rng.IntN(4); g++ {
			devs = append(devs, fragGPU(fmt.Sprintf("h%d-g%d", i, g), models[i%2]))
		}
		h.must(host(fmt.Sprintf("h%d", i), devs...))
	}
	for _, typ := range []DeviceType{GPU, CPU} {
		h.must(&SetPolicy{DeviceType: typ, Config: PolicyConfig{Policy: FragmentationAware}})
	}
	shares := []float64{1000, 1000, 500, 250, 700}
	randomTask := func() Request {
		model := ""
		if rng.IntN(4) == 0 {
			model = models[rng.IntN(2)]
		}
		switch k := rng.IntN(10); {
		case k == 0:
			return fragTask(0, 0, "", float64(1000*(1+rng.IntN(8))))
		case k == 1:
			return fragTask(2, 1000, model, 4000)
		default:
			return fragTask(1, shares[rng.IntN(len(shares))], model, float64(1000*(1+rng.IntN(8))))
		}
	}
	var live []string
	checked := 0
	for step := 0; step < 1500; step++ {
		if len(live) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(live))
			h.must(&Release{AllocationID: live[i]})
			live = append(live[:i], live[i+1:]...)
			continue
		}
		r := randomTask()
		if fragRefreshPoint(h.s.seq+1) != fragRefreshPoint(h.s.seq) {
			// The typical workload changes with this request: the search
			// below would measure with the old one.
			h.apply(&Allocate{Request: r})
			continue
		}
		best, ok := fragReference(h.s, &r)
		res := h.apply(&Allocate{Request: r})
		if !ok {
			if res.Err == nil {
				t.Fatalf("step %d: placed %s where the search found no host", step, devicesOf(res.Allocation))
			}
			continue
		}
		if res.Err != nil {
			t.Fatalf("step %d: refused (%v) where the search found a host", step, res.Err)
		}
		a := res.Allocation
		live = append(live, a.ID)
		// Increases within one grid step tie (and packing decides).
		got := fragDeltaOf(h.s, a)
		if onFragGrid(got) > onFragGrid(best) {
			t.Fatalf("step %d: %s raises fragmentation by %g; the search found %g", step, devicesOf(a), got, best)
		}
		checked++
	}
	if checked < 300 {
		t.Fatalf("only %d placements checked", checked)
	}
}

// fragReference is the least fragmentation increase over every host and
// every GPU the request's share could take there (CPU packed as the
// policy does), measured on the state as it is.
func fragReference(s *State, r *Request) (float64, bool) {
	c := &s.idx.frag
	c.sync(s)
	best, found := math.Inf(1), false
	fits := s.fitting(r)
	for _, f := range fits {
		if len(f) == 0 {
			return 0, false
		}
	}
	for _, hid := range sortedKeys(s.hosts) {
		h := s.hosts[hid]
		if !h.Up {
			continue
		}
		// Every choice for the first claim, the rest by evalHost.
		first := &r.Claims[0]
		var choices [][]string
		var devs []string
		for _, id := range h.Devices {
			d := s.devices[id]
			amt, whole := take(d.cls, first)
			if d.Type == first.Type && containsClass(fits[0], d.cls) && s.fits(d, amt, whole, nil) {
				devs = append(devs, id)
			}
		}
		if first.Count == 1 {
			for _, id := range devs {
				choices = append(choices, []string{id})
			}
		} else if len(devs) >= first.Count {
			choices = append(choices, devs[:first.Count]) // whole GPUs: all alike
		}
		for _, choice := range choices {
			ov := newOverlay()
			for _, id := range choice {
				d := s.devices[id]
				amt, _ := take(d.cls, first)
				ov.add(id, amt, 1)
			}
			rest := &Request{Claims: r.Claims[1:]}
			if len(rest.Claims) > 0 {
				assign, local := s.takeOnHost(h, s.newQuery(rest, fits[1:]), devicesLeastWaste, ov)
				if assign == nil {
					continue
				}
				ov = local
			}
			if d := fragDelta(s, h, nil, ov); d < best {
				best, found = d, true
			}
		}
	}
	return best, found
}

// fragDeltaOf is the fragmentation increase an active allocation caused
// on its host, measured by taking it away again.
func fragDeltaOf(s *State, a *Allocation) float64 {
	ov := newOverlay()
	for _, as := range a.Devices {
		v := as.Amount.vec()
		for i := range v {
			v[i] = -v[i]
		}
		ov.add(as.DeviceID, v, -1)
	}
	h := s.hosts[a.Host]
	return fragDelta(s, h, ov, nil)
}

// fragDelta is how much the fragmentation of h under the current typical
// workload is higher with the overlay after than with before.
func fragDelta(s *State, h *Host, before, after *overlay) float64 {
	c := &s.idx.frag
	c.sync(s)
	var sb, sa fragSpans
	b := buildView(s, h, before, &c.classes, nil, nil, &sb)
	a := buildView(s, h, after, &c.classes, nil, nil, &sa)
	return fragRound(c.work.fragBoth(a, &sa).frag - c.work.fragBoth(b, &sb).frag)
}

// TestStatsAndPlacementMeasureAgree: the fragmentation the statistics
// report and the one FragmentationAware places by are one measure. On a
// state where both see the same typical workload (every recent request
// claims GPUs, and the placement's workload was just recomputed), the
// statistics figure equals the placement cache's fragmentation summed
// over the hosts, over their free GPUs.
func TestStatsAndPlacementMeasureAgree(t *testing.T) {
	nonzero := 0
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		h := newHarness(t)
		for i := range 3 + rng.IntN(5) {
			devs := []DeviceSpec{fragCPU(fmt.Sprintf("h%d-cpu", i), float64(4000*(1+rng.IntN(6))))}
			for g := range 1 + rng.IntN(6) {
				devs = append(devs, fragGPU(fmt.Sprintf("h%d-g%d", i, g), []string{"A", "B"}[rng.IntN(2)]))
			}
			h.must(host(fmt.Sprintf("h%d", i), devs...))
		}
		h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: FirstFit}})
		// 2^k requests: the placement's typical workload is recomputed
		// at the last of them and covers them all.
		for range 1 << (4 + rng.IntN(4)) {
			n := 1 + rng.IntN(2)
			milli := []float64{1000, 500, 250}[rng.IntN(3)]
			if n > 1 {
				milli = 1000
			}
			r := h.apply(&Allocate{Request: fragTask(n, milli, []string{"", "A", "B"}[rng.IntN(3)], float64(1000*rng.IntN(6)))})
			if r.Err == nil && rng.IntN(3) == 0 {
				h.must(&Release{AllocationID: r.Allocation.ID})
			}
		}
		if n := h.s.seq; n&(n-1) != 0 {
			t.Fatalf("seed %d: %d requests, want a power of two", seed, n)
		}
		stats := findStats(t, h.s.Stats(StatsFilter{Type: GPU}), GPU, AllPools).Fragmentation

		c := &h.s.idx.frag
		c.sync(h.s)
		frag, free := 0.0, 0.0
		for _, id := range sortedKeys(c.hosts) {
			fh := c.hosts[id]
			frag += c.groupFrag(fh.group).frag
			free += c.work.free(fh.devs, &fh.span)
		}
		placement := 0.0
		if free > eps {
			placement = math.Min(1, frag/free)
		}
		if math.Abs(stats-placement) > 1e-9 {
			t.Fatalf("seed %d: statistics report fragmentation %v, placement measures %v", seed, stats, placement)
		}
		if stats > 0.01 {
			nonzero++
		}
	}
	if nonzero < 5 {
		t.Fatalf("only %d of 20 states fragmented: the comparison says little", nonzero)
	}
}
