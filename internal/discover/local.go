package discover

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/dmsc/dmsc/fsm"
)

// Local discovers the machine's CPU cores and memory as shareable devices:
// one CPU device whose compute_units are the usable cores, and one Memory
// device whose memory_gb is the total memory. Allocations take amounts of
// them (cores, GiB) rather than whole devices.
type Local struct {
	// HostID names the host; device IDs are "<host>-cpu" and "<host>-memory".
	HostID string
	// ProcDir is where meminfo and cpuinfo are read; empty means /proc.
	ProcDir string
	// Cores overrides the core count; zero means runtime.NumCPU().
	Cores int
	// ReserveMemoryGB is kept back for the operating system and the agent.
	ReserveMemoryGB float64
}

// Discover returns the CPU device and, where the memory size can be read,
// the Memory device.
func (l Local) Discover() (Discovered, error) {
	proc := l.ProcDir
	if proc == "" {
		proc = "/proc"
	}
	cores := l.Cores
	if cores <= 0 {
		cores = runtime.NumCPU()
	}
	var out Discovered
	model := ""
	if f, err := os.Open(filepath.Join(proc, "cpuinfo")); err == nil {
		model = CPUModel(f)
		f.Close()
	}
	out.Devices = append(out.Devices, CPUDevice(l.HostID, cores, model))

	f, err := os.Open(filepath.Join(proc, "meminfo"))
	if err != nil {
		if os.IsNotExist(err) {
			out.Warnings = append(out.Warnings, "no "+filepath.Join(proc, "meminfo")+"; memory is not registered")
			return out, nil
		}
		return Discovered{}, fmt.Errorf("discover memory: %w", err)
	}
	defer f.Close()
	kb, err := MemTotalKB(f)
	if err != nil {
		return Discovered{}, fmt.Errorf("discover memory: %s: %w", f.Name(), err)
	}
	gb := math.Round((float64(kb)/(1<<20)-l.ReserveMemoryGB)*100) / 100
	if gb <= 0 {
		return Discovered{}, fmt.Errorf("discover memory: reserving %g GiB leaves nothing of %g GiB", l.ReserveMemoryGB, MiBToGiB(float64(kb)/1024))
	}
	out.Devices = append(out.Devices, MemoryDevice(l.HostID, gb))
	return out, nil
}

// CPUDevice is a host's CPU as one shareable device of cores.
func CPUDevice(hostID string, cores int, model string) fsm.DeviceSpec {
	d := fsm.DeviceSpec{
		ID:           hostPrefix(hostID) + "-cpu",
		Type:         fsm.CPU,
		Name:         model,
		Shareable:    true,
		Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: float64(cores)}},
	}
	if d.Name == "" {
		d.Name = runtime.GOARCH
	}
	d.Capabilities.Custom = map[string]string{"arch": runtime.GOARCH}
	return d
}

// MemoryDevice is a host's memory as one shareable device of GiB.
func MemoryDevice(hostID string, gb float64) fsm.DeviceSpec {
	return fsm.DeviceSpec{
		ID:           hostPrefix(hostID) + "-memory",
		Type:         fsm.Memory,
		Name:         "system memory",
		Shareable:    true,
		Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: gb}},
	}
}

// MemTotalKB reads the MemTotal line of /proc/meminfo, in kB.
func MemTotalKB(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != "MemTotal" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 || (len(f) == 2 && f[1] != "kB") || len(f) > 2 {
			return 0, fmt.Errorf("MemTotal line %q is not \"<n> kB\"", sc.Text())
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("MemTotal %q is not a positive number of kB", f[0])
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no MemTotal line")
}

// CPUModel reads the first "model name" of /proc/cpuinfo, or "".
func CPUModel(r io.Reader) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(val)
		}
	}
	return ""
}
