package discover

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTopologyFixtures reads the topo -m matrices of three machines: a
// DGX A100 (8 A100 SXM4 over NVSwitch, NV12, four NUMA nodes), a DGX H100
// (8 H100 SXM5, NV18, two nodes, NIC legend and GPU NUMA ID column) and a
// PCIe box of 8 L40S in two islands, one per socket (pairs under one
// switch, PIX; four under two, PXB; across the sockets SYS).
func TestTopologyFixtures(t *testing.T) {
	cases := []struct {
		file string
		link func(i, j int) string
		numa []int
		cpus map[int]string
	}{
		{"topo-a100-sxm4-80gb-x8.txt", func(int, int) string { return "NV12" }, []int{3, 3, 1, 1, 7, 7, 5, 5},
			map[int]string{0: "48-63,176-191", 2: "16-31,144-159"}},
		{"topo-h100-80gb-hbm3-x8.txt", func(int, int) string { return "NV18" }, []int{0, 0, 0, 0, 1, 1, 1, 1},
			map[int]string{0: "0-55,112-167", 7: "56-111,168-223"}},
		{"topo-l40s-pcie-x8.txt", func(i, j int) string {
			switch {
			case i/4 != j/4:
				return "SYS"
			case i/2 == j/2:
				return "PIX"
			}
			return "PXB"
		}, []int{0, 0, 0, 0, 1, 1, 1, 1}, map[int]string{0: "0-31,64-95", 4: "32-63,96-127"}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			topo, err := ParseTopology(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(topo) != 8 {
				t.Fatalf("%d GPUs, want 8", len(topo))
			}
			for i := range 8 {
				g := topo[i]
				if g.NUMA != tc.numa[i] || len(g.Links) != 7 {
					t.Fatalf("GPU%d: NUMA %d, %d links; want %d, 7", i, g.NUMA, len(g.Links), tc.numa[i])
				}
				for j, l := range g.Links {
					if want := tc.link(i, j); l != want {
						t.Errorf("GPU%d-GPU%d: %s, want %s", i, j, l, want)
					}
				}
				if want, ok := tc.cpus[i]; ok && g.CPUAffinity != want {
					t.Errorf("GPU%d CPU affinity %q, want %q", i, g.CPUAffinity, want)
				}
			}
		})
	}
}

// TestTopologyBadInput: what is not a topo -m matrix is refused with a
// clear error, never a panic.
func TestTopologyBadInput(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no header row"},
		{"\tGPU0\tGPU1\nGPU0\t X \tNVL\n", `"NVL"`},
		{"\tGPU0\tGPU1\tNUMA Affinity\nGPU0\t X \tPIX\tzero\n", "NUMA affinity"},
		{"\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU0\t X \tPIX\n", "listed twice"},
	} {
		_, err := ParseTopology(strings.NewReader(tc.in))
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want ErrMalformed with %q", tc.in, err, tc.want)
		}
	}
	// Old drivers' SOC is SYS; short rows and N/A affinities are fine.
	topo, err := ParseTopology(strings.NewReader("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSOC\tN/A\tN/A\nGPU1\tSOC\t X\n"))
	if err != nil || topo[0].Links[1] != "SYS" || topo[0].NUMA != -1 || topo[1].Links[0] != "SYS" {
		t.Fatalf("old driver: %+v, %v", topo, err)
	}
}

// TestNVIDIADiscoverTopology: discovery gives each GPU its NUMA node and
// its links to the others by device ID (its UUID).
func TestNVIDIADiscoverTopology(t *testing.T) {
	bin := fakeSMI(t, "l40s-x8.csv", "0", false)
	withTopo(t, "topo-l40s-pcie-x8.txt")
	got, err := NVIDIA{Binary: bin, HostID: "box"}.Discover(context.Background())
	if err != nil || len(got.Warnings) != 0 {
		t.Fatalf("%v, warnings %q", err, got.Warnings)
	}
	g0, g1, g4 := got.Devices[0], got.Devices[1], got.Devices[4]
	if *g0.Topology.NUMA != 0 || *g4.Topology.NUMA != 1 || g0.Topology.Links[g1.ID] != "PIX" || g0.Topology.Links[g4.ID] != "SYS" {
		t.Fatalf("GPU0 topology %+v", g0.Topology)
	}
}

func FuzzParseTopology(f *testing.F) {
	for _, name := range []string{"topo-a100-sxm4-80gb-x8.txt", "topo-h100-80gb-hbm3-x8.txt", "topo-l40s-pcie-x8.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, in string) {
		topo, err := ParseTopology(strings.NewReader(in))
		if err == nil && topo == nil {
			t.Fatal("no error and no topology")
		}
	})
}
