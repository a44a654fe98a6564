package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/agentconfig"
	"github.com/dmsc/dmsc/internal/inventory"
)

// fakeNVIDIASMI installs the fake nvidia-smi of the discover tests, printing
// the named recording, and for topo -m the named topology recording
// (none: the tool fails it).
func fakeNVIDIASMI(t *testing.T, recording, topo string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "internal", "discover", "testdata", "fake-nvidia-smi"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	rec, err := filepath.Abs(filepath.Join("..", "..", "internal", "discover", "testdata", recording))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_NVIDIA_SMI_RECORDING", rec)
	t.Setenv("FAKE_NVIDIA_SMI_EXIT", "0")
	t.Setenv("FAKE_NVIDIA_SMI_OLD_DRIVER", "")
	t.Setenv("FAKE_NVIDIA_SMI_TOPO", "")
	if topo != "" {
		path, err := filepath.Abs(filepath.Join("..", "..", "internal", "discover", "testdata", topo))
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("FAKE_NVIDIA_SMI_TOPO", path)
	}
	return bin
}

func TestCollectInventory(t *testing.T) {
	example := filepath.Join("..", "..", "deploy", "devices.example.json")
	dupFile := filepath.Join(t.TempDir(), "dup.json")
	if err := os.WriteFile(dupFile, []byte(`{"devices":[{"id":"node7-cpu","type":"CPU","shareable":true,"capabilities":{"compute_units":4}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		args     []string
		nvidia   string
		topo     string
		types    map[fsm.DeviceType]int
		labels   map[string]string
		warnHas  string
		errHas   string
		errIsInv bool
	}{
		{name: "devices file", args: []string{"-devices", example},
			types:   map[fsm.DeviceType]int{fsm.GPU: 2, fsm.CPU: 1, fsm.Memory: 1, fsm.Storage: 1, fsm.Network: 1},
			labels:  map[string]string{"rack": "r12", "zone": "eu-west-1a"},
			warnHas: `names host "gpu-node-1" but the node is "node7"`},
		{name: "file labels overridden by config", args: []string{"-devices", example, "-label", "rack=r1,row=2"},
			types:   map[fsm.DeviceType]int{fsm.GPU: 2, fsm.CPU: 1, fsm.Memory: 1, fsm.Storage: 1, fsm.Network: 1},
			labels:  map[string]string{"rack": "r1", "row": "2", "zone": "eu-west-1a"},
			warnHas: "the node name is used"},
		{name: "nvidia, cpu and memory discovered", args: []string{"-discover", "nvidia,cpu,memory"}, nvidia: "h100-80gb-hbm3-x8.csv",
			topo: "topo-h100-80gb-hbm3-x8.txt", types: map[fsm.DeviceType]int{fsm.GPU: 8, fsm.CPU: 1, fsm.Memory: 1}},
		{name: "nvidia without topology", args: []string{"-discover", "nvidia"}, nvidia: "t4-x4.csv",
			types: map[fsm.DeviceType]int{fsm.GPU: 4}, warnHas: "no GPU topology"},
		{name: "cpu only", args: []string{"-discover", "cpu"},
			types: map[fsm.DeviceType]int{fsm.CPU: 1}},
		{name: "no GPUs is a warning", args: []string{"-discover", "nvidia"}, nvidia: "empty.csv",
			types: map[fsm.DeviceType]int{}, warnHas: "reports no GPUs"},
		{name: "broken nvidia-smi output", args: []string{"-discover", "nvidia"}, nvidia: "malformed-line.csv",
			errHas: "discover nvidia: malformed nvidia-smi output: line 2"},
		{name: "same id from file and discovery", args: []string{"-devices", dupFile, "-discover", "cpu"},
			errHas: `("node7-cpu") has the same id as devices[0]`, errIsInv: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-host", "-join", "127.0.0.1", "-node", "node7"}, tc.args...)
			if tc.nvidia != "" {
				args = append(args, "-nvidia-smi", fakeNVIDIASMI(t, tc.nvidia, tc.topo))
			}
			cfg, err := agentconfig.Load(args, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			host, devices, warnings, err := collectInventory(context.Background(), cfg)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) || (tc.errIsInv && !errors.Is(err, inventory.ErrInvalid)) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if host.ID != "node7" {
				t.Fatalf("host id = %q, want the node name", host.ID)
			}
			got := map[fsm.DeviceType]int{}
			for _, d := range devices {
				got[d.Type]++
			}
			if len(got) != len(tc.types) {
				t.Fatalf("types = %v, want %v", got, tc.types)
			}
			for typ, n := range tc.types {
				if got[typ] != n {
					t.Fatalf("types = %v, want %v", got, tc.types)
				}
			}
			for k, v := range tc.labels {
				if host.Labels[k] != v {
					t.Fatalf("labels = %v, want %v", host.Labels, tc.labels)
				}
			}
			if w := strings.Join(warnings, "\n"); (tc.warnHas == "") != (w == "") || !strings.Contains(w, tc.warnHas) {
				t.Fatalf("warnings = %q, want %q", warnings, tc.warnHas)
			}
			s := fsm.New()
			if r := s.Apply(1, &fsm.RegisterHost{Host: host, Devices: devices}); r.Err != nil {
				t.Fatalf("the scheduler refuses the inventory: %v", r.Err)
			}
		})
	}
}

func TestDescribeInventory(t *testing.T) {
	var all []fsm.DeviceSpec
	for _, f := range inventory.Sample() {
		all = append(all, f.Devices...)
	}
	got := describeInventory(all)
	want := "4 CPU, 24 GPU (T4, A100-PCIE-40GB, A100-SXM4-80GB, H100 80GB HBM3), 4 Memory"
	if got != want {
		t.Fatalf("describeInventory = %q, want %q", got, want)
	}
	if describeInventory(nil) != "no devices" {
		t.Fatal("empty inventory")
	}
}

func TestAdvertisedHTTPAddr(t *testing.T) {
	cases := []struct {
		listen, bind, advertise, want string
	}{
		{"127.0.0.1:4646", "0.0.0.0", "", "127.0.0.1:4646"},
		{"0.0.0.0:4646", "0.0.0.0", "10.0.0.5", "10.0.0.5:4646"},
		{"0.0.0.0:4646", "10.0.0.6", "", "10.0.0.6:4646"},
		{"[::]:4646", "0.0.0.0", "fd00::7", "[fd00::7]:4646"},
	}
	for _, tc := range cases {
		cfg := &agentconfig.Config{BindAddr: tc.bind, AdvertiseAddr: tc.advertise}
		if got := advertisedHTTPAddr(cfg, tc.listen); got != tc.want {
			t.Errorf("advertisedHTTPAddr(%s, bind %s, advertise %s) = %s, want %s", tc.listen, tc.bind, tc.advertise, got, tc.want)
		}
	}
}
