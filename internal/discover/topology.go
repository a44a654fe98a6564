package discover

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/dmsc/dmsc/fsm"
)

// GPUTopology is what `nvidia-smi topo -m` says of one GPU: its links to
// the other GPUs (by their indexes: "NV12", "PIX", "PXB", "PHB", "NODE"
// or "SYS"), its CPU affinity and its NUMA node (-1 when not reported).
type GPUTopology struct {
	Links       map[int]string
	CPUAffinity string
	NUMA        int
}

// ParseTopology parses the matrix of `nvidia-smi topo -m` into each GPU's
// topology, by GPU index. The header row names the columns (GPU<n>, then
// NICs as mlx5_<n> or NIC<n>, then "CPU Affinity", "NUMA Affinity" and,
// in recent drivers, "GPU NUMA ID"); each GPU's row gives its link to
// every column, " X " to itself. NIC rows, the legends and the columns
// after the affinities are ignored. "SOC", the name older drivers gave
// SYS, is read as SYS.
func ParseTopology(r io.Reader) (map[int]GPUTopology, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxNVIDIAOutput))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var header []string
	out := map[int]GPUTopology{}
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		fields := strings.Split(text, "\t")
		if header == nil {
			if len(fields) > 1 && strings.TrimSpace(fields[1]) == "GPU0" {
				header = make([]string, len(fields))
				for i, f := range fields {
					header[i] = strings.TrimSpace(f)
				}
			}
			continue
		}
		name := strings.TrimSpace(fields[0])
		if text == "" || strings.HasPrefix(name, "Legend") {
			break
		}
		idx, ok := gpuIndex(name)
		if !ok {
			continue // a NIC's row
		}
		if _, dup := out[idx]; dup {
			return nil, fmt.Errorf("%w: topology line %d: GPU%d listed twice", ErrMalformed, line, idx)
		}
		t := GPUTopology{Links: map[int]string{}, NUMA: -1}
		for col := 1; col < len(header); col++ {
			v := ""
			if col < len(fields) {
				v = strings.TrimSpace(fields[col])
			}
			switch h := header[col]; {
			case h == "CPU Affinity":
				if !notAvailable(v) {
					t.CPUAffinity = v
				}
			case h == "NUMA Affinity":
				if !notAvailable(v) {
					n, err := strconv.Atoi(v)
					if err != nil || n < 0 || n > fsm.MaxNUMANode {
						return nil, fmt.Errorf("%w: topology line %d: GPU%d NUMA affinity %q is not a node", ErrMalformed, line, idx, v)
					}
					t.NUMA = n
				}
			default:
				peer, isGPU := gpuIndex(h)
				if !isGPU || peer == idx {
					continue
				}
				if v == "SOC" {
					v = "SYS"
				}
				if !knownLink(v) {
					return nil, fmt.Errorf("%w: topology line %d: GPU%d to GPU%d is %q, not NV<n>, PIX, PXB, PHB, NODE or SYS", ErrMalformed, line, idx, peer, v)
				}
				t.Links[peer] = v
			}
		}
		out[idx] = t
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: topology: %v", ErrMalformed, err)
	}
	if header == nil {
		return nil, fmt.Errorf("%w: topology: no header row with GPU0", ErrMalformed)
	}
	return out, nil
}

// gpuIndex reads "GPU<n>".
func gpuIndex(s string) (int, bool) {
	n, ok := strings.CutPrefix(s, "GPU")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == n
}

// knownLink reports whether v is a link the matrix may give.
func knownLink(v string) bool {
	switch v {
	case "PIX", "PXB", "PHB", "NODE", "SYS":
		return true
	}
	n, ok := strings.CutPrefix(v, "NV")
	k, err := strconv.Atoi(n)
	return ok && err == nil && k >= 1 && k <= 99 && strconv.Itoa(k) == n
}

// applyTopology gives each GPU of d (discovered with indexes, in order)
// its NUMA node and its links by device ID; GPUs the matrix does not list
// keep none, with a warning.
func applyTopology(d *Discovered, indexes []int, topo map[int]GPUTopology) {
	ids := map[int]string{}
	for i, idx := range indexes {
		ids[idx] = d.Devices[i].ID
	}
	for i, idx := range indexes {
		t, ok := topo[idx]
		if !ok {
			d.Warnings = append(d.Warnings, fmt.Sprintf("GPU %d (%s) is not in nvidia-smi topo -m; registered without topology", idx, d.Devices[i].ID))
			continue
		}
		ft := &fsm.Topology{Links: map[string]string{}}
		if t.NUMA >= 0 {
			numa := t.NUMA
			ft.NUMA = &numa
		}
		for peer, l := range t.Links {
			if id, ok := ids[peer]; ok {
				ft.Links[id] = l
			}
		}
		if len(ft.Links) == 0 {
			ft.Links = nil
		}
		if ft.NUMA != nil || ft.Links != nil {
			d.Devices[i].Topology = ft
		}
	}
}
