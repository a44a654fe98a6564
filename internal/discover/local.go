package discover

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/dmsc/dmsc/fsm"
)

// Local discovers the machine's CPU cores and memory as shareable devices:
// one CPU device whose compute_units are the usable cores, and one Memory
// device whose memory_gb is the total memory. Allocations take amounts of
// them (cores, GiB) rather than whole devices. On a machine of several
// NUMA nodes there is a CPU and a Memory device per node, each with its
// node in its topology, so that a request's cores and memory can be taken
// on the node of its GPUs.
type Local struct {
	// HostID names the host; device IDs are "<host>-cpu" and "<host>-memory",
	// or "<host>-cpu<node>" and "<host>-memory<node>" per NUMA node.
	HostID string
	// ProcDir is where meminfo and cpuinfo are read; empty means /proc.
	ProcDir string
	// SysDir is where the NUMA nodes are read (devices/system/node);
	// empty means /sys.
	SysDir string
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
	if l.Cores <= 0 {
		sys := l.SysDir
		if sys == "" {
			sys = "/sys"
		}
		if nodes := numaNodes(filepath.Join(sys, "devices", "system", "node")); len(nodes) > 1 {
			return l.perNode(nodes, model)
		}
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

// numaNode is one NUMA node of the machine: its CPUs and memory.
type numaNode struct {
	id    int
	cpus  int
	memKB uint64
}

// numaNodes reads the NUMA nodes under dir (node<N>/cpulist and
// node<N>/meminfo), by node; none when they cannot be read whole.
func numaNodes(dir string) []numaNode {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []numaNode
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "node")
		id, err := strconv.Atoi(n)
		if !ok || err != nil || id < 0 || id > fsm.MaxNUMANode || strconv.Itoa(id) != n {
			continue
		}
		list, err := os.ReadFile(filepath.Join(dir, e.Name(), "cpulist"))
		if err != nil {
			return nil
		}
		cpus, err := CountCPUList(strings.TrimSpace(string(list)))
		if err != nil {
			return nil
		}
		f, err := os.Open(filepath.Join(dir, e.Name(), "meminfo"))
		if err != nil {
			return nil
		}
		kb, err := nodeMemTotalKB(f)
		f.Close()
		if err != nil {
			return nil
		}
		out = append(out, numaNode{id: id, cpus: cpus, memKB: kb})
	}
	slices.SortFunc(out, func(a, b numaNode) int { return a.id - b.id })
	return out
}

// perNode is a CPU and a Memory device per NUMA node (nodes without CPUs
// or memory have none of that kind), the reserved memory taken evenly
// from every node.
func (l Local) perNode(nodes []numaNode, model string) (Discovered, error) {
	var out Discovered
	for _, n := range nodes {
		numa := n.id
		if n.cpus > 0 {
			d := CPUDevice(l.HostID, n.cpus, model)
			d.ID += strconv.Itoa(n.id)
			d.Topology = &fsm.Topology{NUMA: &numa}
			out.Devices = append(out.Devices, d)
		}
	}
	for _, n := range nodes {
		numa := n.id
		gb := math.Round((float64(n.memKB)/(1<<20)-l.ReserveMemoryGB/float64(len(nodes)))*100) / 100
		if gb <= 0 {
			continue
		}
		d := MemoryDevice(l.HostID, gb)
		d.ID += strconv.Itoa(n.id)
		d.Topology = &fsm.Topology{NUMA: &numa}
		out.Devices = append(out.Devices, d)
	}
	return out, nil
}

// CountCPUList counts the CPUs of a Linux CPU list ("0-31,64-95").
func CountCPUList(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("cpu list %q: %q is not a CPU", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("cpu list %q: %q is not a range", s, part)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// nodeMemTotalKB reads "Node <n> MemTotal: <kB> kB" of a node's meminfo.
func nodeMemTotalKB(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 5 && f[0] == "Node" && f[2] == "MemTotal:" && f[4] == "kB" {
			return strconv.ParseUint(f[3], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no MemTotal line")
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
