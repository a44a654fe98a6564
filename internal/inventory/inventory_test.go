package inventory

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/fsm"
)

func TestParseErrors(t *testing.T) {
	const gpu = `{"id":"g0","type":"GPU","capabilities":{"memory_gb":16}}`
	cases := []struct {
		name, in string
		errHas   string
	}{
		{"empty file", ``, "the file is empty"},
		{"not an object", `[]`, "want inventory.File"},
		{"syntax error with position", "{\n  \"host\": {\"id\": \"h\"},\n  \"devices\": [,]\n}", "line 3, column 15"},
		{"truncated", `{"host": {"id": "h"}, "devices": [`, "ends early"},
		{"unknown top-level field", `{"host":{"id":"h"},"devices":[],"gpus":[]}`, `unknown field "gpus"`},
		{"unknown device field", `{"devices":[{"id":"g0","type":"GPU","memory_gb":16}]}`, `unknown field "memory_gb"`},
		{"unknown capability", `{"devices":[{"id":"g0","type":"GPU","capabilities":{"vram":16}}]}`, `unknown field "vram"`},
		{"wrong value type", `{"devices":[{"id":"g0","type":"GPU","capabilities":{"memory_gb":"16"}}]}`, "line 1, column 68: devices.capabilities.memory_gb is string; want float64"},
		{"trailing data", `{"devices":[]} {"devices":[]}`, "unexpected data after"},
		{"device without id", `{"devices":[{"type":"GPU"}]}`, "devices[0] has no id"},
		{"id with slash", `{"devices":[{"id":"a/b","type":"GPU"}]}`, `devices[0] ("a/b"): id may not contain`},
		{"unknown type", `{"devices":[{"id":"g0","type":"gpu"}]}`, `has type "gpu"; want one of CPU, GPU`},
		{"duplicate id", `{"devices":[` + gpu + `,` + gpu + `]}`, `devices[1] ("g0") has the same id as devices[0]`},
		{"negative capacity", `{"devices":[{"id":"g0","type":"GPU","capabilities":{"memory_gb":-1}}]}`, "capabilities.memory_gb is -1"},
		{"shareable without capacity", `{"devices":[{"id":"c","type":"CPU","shareable":true}]}`, "no capacity to share"},
		{"host id with spaces", `{"host":{"id":" h"},"devices":[]}`, "leading or trailing spaces"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.in))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.errHas)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	big := `{"devices":[], "host":{"id":"h","labels":{"x":"` + strings.Repeat("a", MaxFileBytes) + `"}}}`
	if _, err := Parse(strings.NewReader(big)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v, want a size error", err)
	}
}

func TestTooManyDevices(t *testing.T) {
	inv := File{Host: fsm.HostSpec{ID: "h"}}
	for i := 0; i <= fsm.MaxDevicesPerHost; i++ {
		inv.Devices = append(inv.Devices, fsm.DeviceSpec{ID: "d" + string(rune('a'+i%26)) + itoa(i), Type: fsm.Sensor})
	}
	if err := inv.Validate(true); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err = %v, want a device count error", err)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestValidateRequiresHostID(t *testing.T) {
	inv := &File{}
	if err := inv.Validate(true); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "host.id is empty") {
		t.Fatalf("err = %v", err)
	}
	if err := inv.Validate(false); err != nil {
		t.Fatalf("host id optional: %v", err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "devices.json")
	if err := os.WriteFile(path, []byte(`{"devices":[{"id":"g0"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), path+": ") {
		t.Fatalf("err = %v, want it to start with the path", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
}

// registers checks that the scheduler accepts the inventory as a host.
func registers(t *testing.T, s *fsm.State, idx uint64, inv File) {
	t.Helper()
	if err := inv.Validate(true); err != nil {
		t.Fatal(err)
	}
	if r := s.Apply(idx, inv.Register()); r.Err != nil {
		t.Fatalf("register %s: %v", inv.Host.ID, r.Err)
	}
}

func TestExampleFileLoadsAndRegisters(t *testing.T) {
	inv, err := Load(filepath.Join("..", "..", "deploy", "devices.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	if inv.Host.ID != "gpu-node-1" || len(inv.Devices) != 6 {
		t.Fatalf("example = %+v", inv)
	}
	registers(t, fsm.New(), 1, *inv)
}

func TestSampleRegistersAndServesGPURequests(t *testing.T) {
	s := fsm.New()
	models := map[string]int{}
	ids := map[string]bool{}
	for i, inv := range Sample() {
		for _, d := range inv.Devices {
			if ids[d.ID] {
				t.Fatalf("device id %s appears twice in the sample", d.ID)
			}
			ids[d.ID] = true
			if d.Type == fsm.GPU {
				models[d.Capabilities.Custom["model"]]++
			}
		}
		registers(t, s, uint64(i+1), inv)
	}
	want := map[string]int{"T4": 4, "A100-PCIE-40GB": 4, "A100-SXM4-80GB": 8, "H100 80GB HBM3": 8}
	for m, n := range want {
		if models[m] != n {
			t.Errorf("sample has %d %s, want %d (all: %v)", models[m], m, n, models)
		}
	}
	// The request the dev agent suggests must succeed.
	r := s.Apply(uint64(len(Sample())+1), &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1,
		Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 16}}}}}})
	if r.Err != nil || r.Allocation == nil || r.Allocation.Status != fsm.Active {
		t.Fatalf("allocate a 16 GB GPU from the sample: %+v", r)
	}
	if err := s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// Sample returns fresh copies.
	a, b := Sample(), Sample()
	a[0].Devices[0].Capabilities.Custom["model"] = "changed"
	if b[0].Devices[0].Capabilities.Custom["model"] == "changed" {
		t.Fatal("Sample shares maps between calls")
	}
}
