package discover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/fsm"
)

func TestMemTotalKB(t *testing.T) {
	cases := []struct {
		name, in string
		want     uint64
		errHas   string
	}{
		{name: "typical", in: "MemTotal:       263785436 kB\nMemFree: 1 kB\n", want: 263785436},
		{name: "not first", in: "MemFree: 1 kB\nMemTotal: 2048 kB\n", want: 2048},
		{name: "missing", in: "MemFree: 1 kB\n", errHas: "no MemTotal"},
		{name: "not a number", in: "MemTotal: lots kB\n", errHas: "not a positive number"},
		{name: "zero", in: "MemTotal: 0 kB\n", errHas: "not a positive number"},
		{name: "wrong unit", in: "MemTotal: 12 MB\n", errHas: "is not"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MemTotalKB(strings.NewReader(tc.in))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestLocalDiscoverFromRecording(t *testing.T) {
	got, err := Local{HostID: "node7", ProcDir: "testdata", Cores: 128, ReserveMemoryGB: 4}.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 2 {
		t.Fatalf("devices = %+v, want CPU and memory", got.Devices)
	}
	cpu, mem := got.Devices[0], got.Devices[1]
	if cpu.ID != "node7-cpu" || cpu.Type != fsm.CPU || !cpu.Shareable || cpu.Capabilities.ComputeUnits != 128 || cpu.Name != "AMD EPYC 7763 64-Core Processor" {
		t.Errorf("cpu = %+v", cpu)
	}
	// 263785436 kB is 251.57 GiB; 4 are reserved.
	if mem.ID != "node7-memory" || mem.Type != fsm.Memory || !mem.Shareable || mem.Capabilities.MemoryGB != 247.57 {
		t.Errorf("memory = %+v", mem)
	}
	checkRegistrable(t, got.Devices)
}

func TestLocalDiscoverReserveTooLarge(t *testing.T) {
	if _, err := (Local{ProcDir: "testdata", ReserveMemoryGB: 1000}).Discover(); err == nil || !strings.Contains(err.Error(), "leaves nothing") {
		t.Fatalf("err = %v, want a reservation error", err)
	}
}

func TestLocalDiscoverWithoutMeminfo(t *testing.T) {
	dir := t.TempDir()
	got, err := Local{HostID: "h", ProcDir: dir}.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 1 || got.Devices[0].Type != fsm.CPU || len(got.Warnings) != 1 {
		t.Fatalf("got %+v, want only the CPU and a warning", got)
	}
}

func TestLocalDiscoverThisMachine(t *testing.T) {
	if _, err := os.Stat(filepath.Join("/proc", "meminfo")); err != nil {
		t.Skip("no /proc/meminfo on this system")
	}
	got, err := Local{HostID: "self"}.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 2 || got.Devices[0].Capabilities.ComputeUnits < 1 || got.Devices[1].Capabilities.MemoryGB <= 0 {
		t.Fatalf("got %+v", got.Devices)
	}
}

// TestLocalPerNUMANode: on a machine of two NUMA nodes, a CPU and a
// Memory device per node, each with its node; the reserve is taken from
// both.
func TestLocalPerNUMANode(t *testing.T) {
	got, err := Local{HostID: "box", ProcDir: "testdata", SysDir: filepath.Join("testdata", "sys-2numa"), ReserveMemoryGB: 4}.Discover()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id   string
		numa int
		cu   float64
		gb   float64
	}{{"box-cpu0", 0, 64, 0}, {"box-cpu1", 1, 64, 0}, {"box-memory0", 0, 0, 501.72}, {"box-memory1", 1, 0, 501.97}}
	if len(got.Devices) != len(want) {
		t.Fatalf("devices %+v", got.Devices)
	}
	for i, w := range want {
		d := got.Devices[i]
		if d.ID != w.id || d.Topology == nil || *d.Topology.NUMA != w.numa || d.Capabilities.ComputeUnits != w.cu || d.Capabilities.MemoryGB != w.gb {
			t.Errorf("device %d: %s numa %v cu %g gb %g, want %+v", i, d.ID, d.Topology, d.Capabilities.ComputeUnits, d.Capabilities.MemoryGB, w)
		}
	}
	if n, err := CountCPUList("0-3,8,10-11"); n != 7 || err != nil {
		t.Errorf("CountCPUList: %d, %v", n, err)
	}
	if _, err := CountCPUList("3-1"); err == nil {
		t.Error("CountCPUList accepted 3-1")
	}
	// One node: the one CPU and Memory device of before, without topology.
	one, err := Local{HostID: "box", ProcDir: "testdata", SysDir: t.TempDir()}.Discover()
	if err != nil || len(one.Devices) != 2 || one.Devices[0].ID != "box-cpu" || one.Devices[0].Topology != nil {
		t.Fatalf("one node: %+v, %v", one.Devices, err)
	}
}
