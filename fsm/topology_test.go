package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
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

// TestTopologyPlacement: a claim of several GPUs takes the best-linked
// ones that fit; "nvlink" requires NVLink between all of them; a CPU
// claim takes the CPU of the GPUs' NUMA node.
func TestTopologyPlacement(t *testing.T) {
	cases := []struct {
		name  string
		link  func(i, j int) string
		used  []int // GPUs taken first
		req   Request
		gpus  []int // nil: refused
		cpu   int   // the CPU device's NUMA node, -1 for none asked
		first Policy
	}{
		{"one island over two", pcieIslands, []int{0, 2}, Request{Claims: []Claim{{Type: GPU, Count: 4}}}, []int{4, 5, 6, 7}, -1, FirstFit},
		{"a pair under one switch", pcieIslands, []int{0, 2}, Request{Claims: []Claim{{Type: GPU, Count: 2}}}, []int{4, 5}, -1, FirstFit},
		{"nvlink pair preferred", nvPairs, []int{0}, Request{Claims: []Claim{{Type: GPU, Count: 2}}}, []int{2, 3}, -1, BestFit},
		{"nvlink required, none left", nvPairs, []int{0, 2, 4, 6}, Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: TopologyNVLink}}}, nil, -1, FirstFit},
		{"nvlink required, a pair left", nvPairs, []int{0, 2, 4}, Request{Claims: []Claim{{Type: GPU, Count: 2, Topology: TopologyNVLink}}}, []int{6, 7}, -1, FirstFit},
		{"NVSwitch: any", nvSwitch, []int{1}, Request{Claims: []Claim{{Type: GPU, Count: 4, Topology: TopologyNVLink}}}, []int{0, 2, 3, 4}, -1, FirstFit},
		{"CPU on the GPUs' node", pcieIslands, []int{0, 1, 2}, Request{Claims: []Claim{{Type: GPU, Count: 2}, {Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 8}}}},
			[]int{4, 5}, 1, LoadBalanced},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			hc := topoHost("h1", tc.link)
			for i := range hc.Devices {
				hc.Devices[i].Labels = map[string]string{"slot": strings.TrimPrefix(hc.Devices[i].ID, "h1-")}
			}
			h.must(hc)
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
