package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// topoHost is a host of 8 GPUs whose links come from link(i, j), GPUs
// 0-3 on NUMA node 0 and 4-7 on node 1, and a CPU device per node.
func topoHost(id string, link func(i, j int) string) *RegisterHost {
	c := host(id)
	for i := range 8 {
		d := gpu(fmt.Sprintf("%s-g%d", id, i), 48)
		numa := i / 4
		d.Topology = &Topology{NUMA: &numa, Links: map[string]string{}}
		for j := range 8 {
			if j != i {
				d.Topology.Links[fmt.Sprintf("%s-g%d", id, j)] = link(i, j)
			}
		}
		c.Devices = append(c.Devices, d)
	}
	for n := range 2 {
		numa := n
		c.Devices = append(c.Devices, DeviceSpec{ID: fmt.Sprintf("%s-cpu%d", id, n), Type: CPU, Shareable: true,
			Capabilities: Capabilities{Resources: Resources{ComputeUnits: 32}}, Topology: &Topology{NUMA: &numa}})
	}
	return c
}

// pcieIslands: pairs under one switch (PIX), a socket's four under
// several (PXB), across sockets SYS.
func pcieIslands(i, j int) string {
	switch {
	case i/4 != j/4:
		return "SYS"
	case i/2 == j/2:
		return "PIX"
	}
	return "PXB"
}

// nvPairs: NVLink bridges between pairs, PCIe otherwise.
func nvPairs(i, j int) string {
	if i/2 == j/2 {
		return "NV4"
	}
	return pcieIslands(i, j)
}

func nvSwitch(int, int) string { return "NV18" }

// nvBehind: GPU 0 has NVLink to 1, 2 and 3, and 2 to 3, so {0, 2, 3} is
// linked by NVLink pairwise while 1, next to 0 in the device order, is
// linked to 0 alone; PIX otherwise.
func nvBehind(i, j int) string {
	i, j = min(i, j), max(i, j)
	if i == 0 && j <= 3 || i == 2 && j == 3 {
		return "NV2"
	}
	return "PIX"
}

// cubeMesh is the hybrid cube-mesh of 8 SXM2 GPUs: NVLink within 0-3 and
// within 4-7, and between i and i+4; PCIe otherwise.
func cubeMesh(i, j int) string {
	if i/4 == j/4 || i%4 == j%4 {
		return "NV1"
	}
	return pcieIslands(i, j)
}

// TestTopologyPlacement: a claim of several GPUs takes the best-linked
// ones that fit; "nvlink" requires NVLink between all of them; a CPU
// claim takes the CPU of the GPUs' NUMA node; under FragmentationAware
// too.
func TestTopologyPlacement(t *testing.T) {
	cases := []struct {
		name  string
		link  func(i, j int) string
		used  []int // GPUs taken first
		req   Request
		gpus  []int // nil: refused
		cpu   int   // the CPU device's NUMA node, -1 for none asked
		first Policy
		out   []int // GPUs unhealthy (the others stay alike: no labels)
	}{
		{"one island over two", pcieIslands, []int{0, 2}, Request{Claims: []Claim{{Type: GPU, Count: 4}}}, []int{4, 5, 6, 7}, -1, FirstFit, nil},
		{"a pair under one switch", pcieIslands, []int{0, 2}, Request{Claims: []Claim{{Type: GPU, Count: 2}}}, []int{4, 5}, -1, FirstFit, nil},
		{"nvlink pair preferred", nvPairs, []int{0}, Request{Claims: []Claim{{Type: GPU, Count: 2}}}, []int{2, 3}, -1, BestFit, nil},
		{"nvlink required, none left", nvPairs, []int{0, 2, 4, 6}, Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: TopologyNVLink}}}, nil, -1, FirstFit, nil},
		{"nvlink required, a pair left", nvPairs, []int{0, 2, 4}, Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: TopologyNVLink}}}, []int{6, 7}, -1, FirstFit, nil},
		{"nvlink required, the set behind a partner", nvBehind, nil, Request{Claims: []Claim{{Type: GPU, Count: 3, Topology: TopologyNVLink}}}, []int{0, 2, 3}, -1, FirstFit, nil},
		{"nvlink preferred, the set behind a partner", nvBehind, nil, Request{Claims: []Claim{{Type: GPU, Count: 3}}}, []int{0, 2, 3}, -1, FirstFit, nil},
		{"cube mesh, nvlink required", cubeMesh, []int{0, 2, 4, 6}, Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: TopologyNVLink}}}, []int{1, 3}, -1, FirstFit, nil},
		{"cube mesh, no triangle left", cubeMesh, []int{0, 3, 5, 6}, Request{Claims: []Claim{{Type: GPU, Count: 3, Topology: TopologyNVLink}}}, nil, -1, FirstFit, nil},
		{"NVSwitch: any", nvSwitch, []int{1}, Request{Claims: []Claim{{Type: GPU, Count: 4, Topology: TopologyNVLink}}}, []int{0, 2, 3, 4}, -1, FirstFit, nil},
		{"CPU on the GPUs' node", pcieIslands, []int{0, 1, 2}, Request{Claims: []Claim{{Type: GPU, Count: 2}, {Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 8}}}},
			[]int{4, 5}, 1, LoadBalanced, nil},
		// FragmentationAware picks devices by its measure, then the
		// best-linked among those alike to its picks, and the CPU on
		// their node.
		{"FA: a pair under one switch, CPU on its node", pcieIslands, nil, Request{Claims: []Claim{{Type: GPU, Count: 2}, {Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 8}}}},
			[]int{4, 5}, 1, FragmentationAware, []int{0, 1, 2}},
		{"FA: nvlink required, a pair left", nvPairs, nil, Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: TopologyNVLink}}}, []int{6, 7}, -1, FragmentationAware, []int{0, 2, 4}},
		{"FA: nvlink required, none left", nvPairs, nil, Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: TopologyNVLink}}}, nil, -1, FragmentationAware, []int{0, 2, 4, 6}},
		{"FA: the set behind a partner", nvBehind, nil, Request{Claims: []Claim{{Type: GPU, Count: 3, Topology: TopologyNVLink}}}, []int{0, 2, 3}, -1, FragmentationAware, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			hc := topoHost("h1", tc.link)
			for i := range hc.Devices {
				if tc.used != nil { // labelled, to take them by label
					hc.Devices[i].Labels = map[string]string{"slot": strings.TrimPrefix(hc.Devices[i].ID, "h1-")}
				}
			}
			h.must(hc)
			for _, g := range tc.out {
				h.must(&SetDeviceStatus{DeviceID: fmt.Sprintf("h1-g%d", g), Status: Unhealthy})
			}
			for _, g := range tc.used {
				h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}, Labels: LabelSelector{Required: map[string]string{"slot": fmt.Sprintf("g%d", g)}}}})
			}
			polSet(h, GPU, tc.first)
			polSet(h, CPU, tc.first)
			res := h.apply(&Allocate{Request: tc.req})
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if tc.gpus == nil {
				if res.Err == nil {
					t.Fatalf("placed on %v", res.Allocation.Devices)
				}
				if sum := res.Allocation.WhyNot.Summary; !strings.Contains(sum, "linked by NVLink: 1 hosts") {
					t.Fatalf("why-not %q does not say the links are missing", sum)
				}
				return
			}
			if res.Err != nil {
				t.Fatalf("refused: %v", res.Err)
			}
			var gpus []int
			cpu := -1
			for _, as := range res.Allocation.Devices {
				var n int
				if _, err := fmt.Sscanf(as.DeviceID, "h1-g%d", &n); err == nil {
					gpus = append(gpus, n)
				} else if _, err := fmt.Sscanf(as.DeviceID, "h1-cpu%d", &n); err == nil {
					cpu = n
				}
			}
			slices.Sort(gpus)
			if !slices.Equal(gpus, tc.gpus) || cpu != tc.cpu {
				t.Fatalf("GPUs %v CPU node %d, want %v and %d", gpus, cpu, tc.gpus, tc.cpu)
			}
		})
	}
}

// TestTopologySnapshotAndUpdate: the topology travels in the snapshot byte
// for byte, a device without one keeps its bytes, and registering a host
// again with another topology changes its devices.
func TestTopologySnapshotAndUpdate(t *testing.T) {
	h := newHarness(t)
	h.must(topoHost("h1", pcieIslands))
	h.must(host("h2", gpu("plain", 16)))
	var b1, b2 bytes.Buffer
	if err := h.s.Snapshot(&b1); err != nil {
		t.Fatal(err)
	}
	r, err := Restore(bytes.NewReader(b1.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot(&b2); err != nil || !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Fatalf("restored snapshot differs (%v)", err)
	}
	d, _ := r.Device("h1-g0")
	if d.Topology == nil || *d.Topology.NUMA != 0 || d.Topology.Links["h1-g1"] != "PIX" {
		t.Fatalf("restored topology %+v", d.Topology)
	}
	if p, _ := r.Device("plain"); p.Topology != nil {
		t.Fatalf("a device without a topology has %+v", p.Topology)
	}
	h.must(topoHost("h1", nvSwitch))
	if d, _ := h.s.Device("h1-g0"); d.Topology.Links["h1-g1"] != "NV18" {
		t.Fatalf("after registering again: %+v", d.Topology)
	}
}

// TestTopologyValidation: a topology or claim topology that is not one
// is refused before the state.
func TestTopologyValidation(t *testing.T) {
	bad := -1
	for _, tc := range []struct {
		topo *Topology
		want string
	}{
		{&Topology{NUMA: &bad}, "numa node"},
		{&Topology{Links: map[string]string{"g2": "NVX"}}, "is not NV<n>"},
		{&Topology{Links: map[string]string{"a b": "PIX"}}, "not a device id"},
	} {
		c := host("h1", gpu("g1", 16))
		c.Devices[0].Topology = tc.topo
		if err := Precheck(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.topo, err, tc.want)
		}
	}
	if err := Precheck(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: "pcie"}}}}); err == nil {
		t.Error("claim topology pcie accepted")
	}
	if s, _ := CommandNeeds(topoHost("h1", nvSwitch)); s.Level != 4 {
		t.Errorf("a RegisterHost with topology needs level %d", s.Level)
	}
}

// TestLinkedSearchBound: on 64 GPUs in 7 groups, NVLink between every two
// of different groups and PIX within one, no 8 are linked by NVLink
// pairwise, and an exact search for them would test millions of pairs.
// The search of a level stops after its bound, so 8 GPUs that require
// NVLink are refused and 8 that prefer it take the first 8 that reach
// each other over PIX; 7, one per group, are found at once.
func TestLinkedSearchBound(t *testing.T) {
	cands := make([]rankedDevice, 64)
	for i := range cands {
		d := &Device{DeviceSpec: DeviceSpec{ID: fmt.Sprintf("g%02d", i), Topology: &Topology{Links: map[string]string{}}}}
		cands[i] = rankedDevice{d: d, key: float64(i)}
	}
	for i, a := range cands {
		for j, b := range cands {
			if i != j {
				l := "PIX"
				if i%7 != j%7 {
					l = "NV2"
				}
				a.d.Topology.Links[b.d.ID] = l
			}
		}
	}
	ids := func(p []rankedDevice) []int {
		var out []int
		for _, c := range p {
			out = append(out, int(c.key))
		}
		return out
	}
	if p := linked(cands, 8, true); p != nil {
		t.Fatalf("8 over NVLink: %v", ids(p))
	}
	if p := ids(linked(cands, 8, false)); !slices.Equal(p, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("8 preferring NVLink: %v", p)
	}
	if p := ids(linked(cands, 7, true)); !slices.Equal(p, []int{0, 1, 2, 3, 4, 5, 6}) {
		t.Fatalf("7 over NVLink: %v", p)
	}
}

// TestLinkedMatchesBruteForce: on one host of 8 GPUs with random links
// and random GPUs out of service, under every policy, a claim of 2 to 5 GPUs is placed on a set whose
// worst link is the best any set of that many free GPUs has, found by
// brute force; one that requires NVLink is placed exactly when some set
// is linked by NVLink pairwise.
func TestLinkedMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	names := []string{"NV2", "NV2", "NV2", "PIX", "PXB", "PHB", "NODE", "SYS"}
	rank := map[string]int{"NV2": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
	policies := []Policy{FirstFit, BestFit, WorstFit, RoundRobin, LoadBalanced, FragmentationAware}
	for round := range 400 {
		var links [8][8]string
		for i := range 8 {
			for j := i + 1; j < 8; j++ {
				links[i][j] = names[rng.Intn(len(names))]
				links[j][i] = links[i][j]
			}
		}
		used := rng.Perm(8)[:rng.Intn(5)]
		n := 2 + rng.Intn(4)
		nvOnly := rng.Intn(2) == 0
		var free []int
		for g := range 8 {
			if !slices.Contains(used, g) {
				free = append(free, g)
			}
		}
		// worst is the worst link within a set of GPUs.
		worst := func(set []int) int {
			w := 0
			for a := range set {
				for _, b := range set[a+1:] {
					w = max(w, rank[links[set[a]][b]])
				}
			}
			return w
		}
		best := len(rank) // the best worst link of n free GPUs
		var search func(from int, set []int)
		search = func(from int, set []int) {
			if len(set) == n {
				best = min(best, worst(set))
				return
			}
			for k := from; k < len(free); k++ {
				search(k+1, append(set, free[k]))
			}
		}
		search(0, nil)

		// The GPUs are alike but for their links (no labels: a label
		// would make each its own class), and those taken are unhealthy.
		h := newHarness(t)
		h.must(topoHost("h1", func(i, j int) string { return links[i][j] }))
		for _, g := range used {
			h.must(&SetDeviceStatus{DeviceID: fmt.Sprintf("h1-g%d", g), Status: Unhealthy})
		}
		pol := policies[rng.Intn(len(policies))]
		polSet(h, GPU, pol)
		cl := Claim{Type: GPU, Count: n}
		if nvOnly {
			cl.Topology = TopologyNVLink
		}
		res := h.apply(&Allocate{Request: Request{Claims: []Claim{cl}}})
		if err := h.s.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("round %d, %s, %d GPUs (nvlink %v) of %v, links %v", round, pol, n, nvOnly, free, links)
		wantPlaced := best < len(rank) && (!nvOnly || best == 0)
		if (res.Err == nil) != wantPlaced {
			t.Fatalf("%s: placed %v (err %v), want placed %v", what, res.Err == nil, res.Err, wantPlaced)
		}
		if res.Err != nil {
			continue
		}
		var got []int
		for _, as := range res.Allocation.Devices {
			var g int
			if _, err := fmt.Sscanf(as.DeviceID, "h1-g%d", &g); err != nil {
				t.Fatalf("%s: took %s", what, as.DeviceID)
			}
			got = append(got, g)
		}
		if w := worst(got); w != best {
			t.Fatalf("%s: took %v, worst link %d, but a set's worst link is %d", what, got, w, best)
		}
	}
}

// BenchmarkLinked is the link search of one claim on a host: 4 of the 7
// GPUs a hybrid cube-mesh has left with GPU 0 out, NVLink required (the
// search passes over 1, 2 and 3, whose fourth is out, to 4-7), 3 of them
// preferring NVLink, and the worst case, 8 of 64 GPUs in 7 groups
// (TestLinkedSearchBound), which runs the NVLink level to its bound.
func BenchmarkLinked(b *testing.B) {
	cands := func(n int, link func(i, j int) string) []rankedDevice {
		out := make([]rankedDevice, n)
		for i := range out {
			out[i] = rankedDevice{d: &Device{DeviceSpec: DeviceSpec{ID: fmt.Sprintf("g%02d", i), Topology: &Topology{Links: map[string]string{}}}}, key: float64(i)}
		}
		for i, a := range out {
			for j, c := range out {
				if i != j {
					a.d.Topology.Links[c.d.ID] = link(i, j)
				}
			}
		}
		return out
	}
	mesh := cands(8, cubeMesh)[1:]
	turan := cands(64, func(i, j int) string {
		if i%7 != j%7 {
			return "NV2"
		}
		return "PIX"
	})
	for _, bc := range []struct {
		name   string
		cands  []rankedDevice
		n      int
		nvlink bool
	}{{"cube-mesh/4", mesh, 4, true}, {"cube-mesh/3-preferred", mesh, 3, false}, {"tangled/8", turan, 8, true}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				linked(bc.cands, bc.n, bc.nvlink)
			}
		})
	}
}

// TestGangReservationNVLink: a waiting gang whose parts require NVLink
// reserves the hosts that could take them linked so, not those with as
// many GPUs in smaller islands.
func TestGangReservationNVLink(t *testing.T) {
	islands := func(i, j int) string {
		if i/4 == j/4 {
			return "NV12"
		}
		return "SYS"
	}
	h := newHarness(t)
	for _, hc := range []*RegisterHost{topoHost("h1", islands), topoHost("h2", nvSwitch)} {
		for i := range hc.Devices {
			hc.Devices[i].Labels = map[string]string{"host": hc.Host.ID}
		}
		h.must(hc)
		holdOn(h, hc.Host.ID, 1, 0)
	}
	g := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 8, Topology: TopologyNVLink}},
		MaxHosts: 2, MinPerHost: 8, Timeout: time.Hour}}).Allocation
	if g.Status != Pending || !slices.Equal(g.Reserved, []string{"h2"}) {
		t.Fatalf("gang %s reserved %v, want h2 (h1's islands hold 4 each)", g.Status, g.Reserved)
	}
}

// TestGangExpectedStartNVLink: a gang of 4 GPUs linked by NVLink on one
// host of two NVLink islands of 4 starts when one island is all free,
// not when any 4 of its GPUs are.
func TestGangExpectedStartNVLink(t *testing.T) {
	h := newHarness(t)
	hc := topoHost("h1", func(i, j int) string {
		if i/4 == j/4 {
			return "NV12"
		}
		return "SYS"
	})
	for i := range hc.Devices {
		hc.Devices[i].Labels = map[string]string{"slot": strings.TrimPrefix(hc.Devices[i].ID, "h1-")}
	}
	h.must(hc)
	// GPUs 0 and 1 free after 10 minutes, 4 and 5 after 20, 2 and 3
	// after 30, 6 and 7 after 40: any 4 are free after 20 minutes, the
	// island 0-3 after 30.
	var start int64
	for g, ttl := range []int{10, 10, 30, 30, 20, 20, 40, 40} {
		a := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}, LeaseTTL: time.Duration(ttl) * time.Minute,
			Labels: LabelSelector{Required: map[string]string{"slot": fmt.Sprintf("g%d", g)}}}}).Allocation
		if g < 4 {
			start = max(start, a.LeaseExpiresAt)
		}
	}
	g := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 4, Topology: TopologyNVLink}}, MaxHosts: 2, MinPerHost: 4, Timeout: time.Hour}}).Allocation
	got, _ := h.s.Allocation(g.ID)
	if !slices.Equal(got.Reserved, []string{"h1"}) || got.ExpectedStart != start {
		t.Fatalf("reserved %v, expected start %v, want h1 at %v", got.Reserved, time.Unix(0, got.ExpectedStart), time.Unix(0, start))
	}
}
