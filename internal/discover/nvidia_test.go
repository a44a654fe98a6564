package discover

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/fsm"
)

// gpuWant is what a test expects of one discovered GPU.
type gpuWant struct {
	id, name, model, cc string
	memGB               float64
}

func TestParseNVIDIARecordings(t *testing.T) {
	cases := []struct {
		file     string
		fields   []string
		n        int
		first    gpuWant
		last     gpuWant
		warnings int
		err      error
		errHas   string
	}{
		{file: "a100-sxm4-80gb-x8.csv", n: 8,
			first: gpuWant{"GPU-4f6a1c2e-9b3d-4e5f-8a7b-0c1d2e3f4a50", "NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "8.0", 80},
			last:  gpuWant{"GPU-d3a5810c-8e6f-4b29-a7d4-7b8c9d0e1fc7", "NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "8.0", 80}},
		{file: "t4-x4.csv", n: 4,
			first: gpuWant{"GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f801", "Tesla T4", "T4", "7.5", 15},
			last:  gpuWant{"GPU-4d5e6f70-8192-a3b4-c5d6-e7f8091a2b34", "Tesla T4", "T4", "7.5", 15}},
		{file: "h100-80gb-hbm3-x8.csv", n: 8,
			first: gpuWant{"GPU-0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f0", "NVIDIA H100 80GB HBM3", "H100 80GB HBM3", "9.0", 79.65},
			last:  gpuWant{"GPU-7f8091a2-b3c4-d5e6-f708-192a3b4c5d67", "NVIDIA H100 80GB HBM3", "H100 80GB HBM3", "9.0", 79.65}},
		{file: "a100-pcie-40gb-old-driver.csv", fields: legacyNVIDIAFields, n: 2,
			first: gpuWant{"GPU-5a6b7c8d-9e0f-4a1b-2c3d-4e5f6a7b8c90", "NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB", "", 40},
			last:  gpuWant{"GPU-6b7c8d9e-0f1a-4b2c-3d4e-5f6a7b8c9d01", "NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB", "", 40}},
		{file: "not-available-fields.csv", n: 2, warnings: 3,
			first: gpuWant{"GPU-9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4", "NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB", "8.0", 40},
			last:  gpuWant{"node7-gpu1", "NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB", "", 0}},
		{file: "empty.csv", n: 0},
		{file: "malformed-line.csv", err: ErrMalformed, errHas: "line 2 has 4 fields, want 6"},
		{file: "bad-memory.csv", err: ErrMalformed, errHas: `memory.total "forty"`},
		{file: "no-devices.txt", err: ErrMalformed, errHas: "line 1 has 1 fields"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fields := tc.fields
			if fields == nil {
				fields = NVIDIAFields
			}
			got, err := ParseNVIDIA(f, "node7", fields)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Devices) != tc.n {
				t.Fatalf("%d devices, want %d", len(got.Devices), tc.n)
			}
			if len(got.Warnings) != tc.warnings {
				t.Fatalf("warnings = %q, want %d", got.Warnings, tc.warnings)
			}
			if tc.n == 0 {
				return
			}
			checkGPU(t, got.Devices[0], tc.first)
			checkGPU(t, got.Devices[tc.n-1], tc.last)
			checkRegistrable(t, got.Devices)
		})
	}
}

func checkGPU(t *testing.T, d fsm.DeviceSpec, w gpuWant) {
	t.Helper()
	if d.ID != w.id || d.Name != w.name || d.Type != fsm.GPU || d.Shareable {
		t.Errorf("device = %s %q %s shareable=%t, want %s %q GPU exclusive", d.ID, d.Name, d.Type, d.Shareable, w.id, w.name)
	}
	if d.Capabilities.MemoryGB != w.memGB {
		t.Errorf("%s memory_gb = %v, want %v", d.ID, d.Capabilities.MemoryGB, w.memGB)
	}
	if got := d.Capabilities.Custom["model"]; got != w.model {
		t.Errorf("%s model = %q, want %q", d.ID, got, w.model)
	}
	if got, ok := d.Capabilities.Custom["compute_cap"]; got != w.cc || ok != (w.cc != "") {
		t.Errorf("%s compute_cap = %q (present %t), want %q", d.ID, got, ok, w.cc)
	}
}

// checkRegistrable applies the devices to a scheduler state, which refuses
// what a host could not register.
func checkRegistrable(t *testing.T, devs []fsm.DeviceSpec) {
	t.Helper()
	s := fsm.New()
	if r := s.Apply(1, &fsm.RegisterHost{Host: fsm.HostSpec{ID: "node7"}, Devices: devs}); r.Err != nil {
		t.Fatalf("register discovered devices: %v", r.Err)
	}
}

func TestShortModel(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
		"Tesla T4":              "T4",
		"NVIDIA H100 80GB HBM3": "H100 80GB HBM3",
		"Tesla V100-SXM2-16GB":  "V100-SXM2-16GB",
		"NVIDIA ":               "NVIDIA",
		"A10G":                  "A10G",
	} {
		if got := ShortModel(in); got != want {
			t.Errorf("ShortModel(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeSMI copies the fake nvidia-smi into a temporary directory (so the
// test does not depend on the checked-out file mode) and points it at a
// recording.
func fakeSMI(t *testing.T, recording string, exit string, oldDriver bool) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake nvidia-smi is a POSIX shell script")
	}
	src, err := os.ReadFile(filepath.Join("testdata", "fake-nvidia-smi"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	rec := ""
	if recording != "" {
		rec, err = filepath.Abs(filepath.Join("testdata", recording))
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FAKE_NVIDIA_SMI_RECORDING", rec)
	t.Setenv("FAKE_NVIDIA_SMI_EXIT", exit)
	old := ""
	if oldDriver {
		old = "1"
	}
	t.Setenv("FAKE_NVIDIA_SMI_OLD_DRIVER", old)
	t.Setenv("FAKE_NVIDIA_SMI_TOPO", "")
	return bin
}

// withTopo makes the fake nvidia-smi answer topo -m with a recording.
func withTopo(t *testing.T, recording string) {
	t.Helper()
	if recording == "" {
		return
	}
	p, err := filepath.Abs(filepath.Join("testdata", recording))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_NVIDIA_SMI_TOPO", p)
}

func TestNVIDIADiscoverEndToEnd(t *testing.T) {
	cases := []struct {
		name      string
		recording string
		topo      string // the topo -m recording; none: the tool fails it
		exit      string
		oldDriver bool
		n         int
		warnings  int
		err       error
		errHas    string
	}{
		{name: "eight A100", recording: "a100-sxm4-80gb-x8.csv", topo: "topo-a100-sxm4-80gb-x8.txt", exit: "0", n: 8},
		{name: "four T4, no topology", recording: "t4-x4.csv", exit: "0", n: 4, warnings: 1},
		{name: "H100 box", recording: "h100-80gb-hbm3-x8.csv", topo: "topo-h100-80gb-hbm3-x8.txt", exit: "0", n: 8},
		{name: "PCIe box", recording: "l40s-x8.csv", topo: "topo-l40s-pcie-x8.txt", exit: "0", n: 8},
		{name: "no GPUs", recording: "no-devices.txt", exit: "6", n: 0},
		{name: "empty output", recording: "empty.csv", exit: "0", n: 0},
		{name: "old driver falls back", recording: "a100-pcie-40gb-old-driver.csv", exit: "0", oldDriver: true, n: 2, warnings: 2},
		{name: "N/A fields", recording: "not-available-fields.csv", exit: "0", n: 2, warnings: 4},
		{name: "malformed", recording: "malformed-line.csv", exit: "0", err: ErrMalformed, errHas: "line 2"},
		{name: "driver failure", recording: "", exit: "9", err: ErrNVIDIASMI, errHas: "exit status 9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bin := fakeSMI(t, tc.recording, tc.exit, tc.oldDriver)
			withTopo(t, tc.topo)
			got, err := NVIDIA{Binary: bin, HostID: "node7"}.Discover(context.Background())
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Devices) != tc.n || len(got.Warnings) != tc.warnings {
				t.Fatalf("%d devices, warnings %q; want %d devices, %d warnings", len(got.Devices), got.Warnings, tc.n, tc.warnings)
			}
			for _, d := range got.Devices {
				if d.Type != fsm.GPU || d.Capabilities.Custom["model"] == "" {
					t.Fatalf("device %+v is not a GPU with a model", d)
				}
				if hasTopo := d.Topology != nil && len(d.Topology.Links) == tc.n-1; hasTopo != (tc.topo != "") {
					t.Fatalf("device %s topology %+v with topo recording %q", d.ID, d.Topology, tc.topo)
				}
			}
		})
	}
}

func TestNVIDIADiscoverMissingBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-nvidia-smi")
	_, err := NVIDIA{Binary: missing}.Discover(context.Background())
	if !errors.Is(err, ErrNVIDIASMI) {
		t.Fatalf("err = %v, want ErrNVIDIASMI", err)
	}
}

func TestNVIDIADiscoverRespectsContext(t *testing.T) {
	bin := fakeSMI(t, "t4-x4.csv", "0", false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (NVIDIA{Binary: bin}).Discover(ctx); !errors.Is(err, ErrNVIDIASMI) {
		t.Fatalf("err = %v with a cancelled context, want ErrNVIDIASMI", err)
	}
}
