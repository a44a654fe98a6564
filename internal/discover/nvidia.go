// Package discover finds the devices of the local machine: NVIDIA GPUs
// through nvidia-smi, and the machine's CPU cores and memory, as device
// specs a host registers with the cluster.
package discover

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// NVIDIAFields are the columns discovery asks nvidia-smi for, in order.
var NVIDIAFields = []string{"index", "uuid", "name", "memory.total", "pci.bus_id", "compute_cap"}

// legacyNVIDIAFields are asked for when the driver predates compute_cap
// (drivers older than 510 refuse that field).
var legacyNVIDIAFields = NVIDIAFields[:5]

// DefaultNVIDIASMI is the nvidia-smi looked up on PATH when no path is set.
const DefaultNVIDIASMI = "nvidia-smi"

// DefaultNVIDIATimeout bounds one nvidia-smi run when no timeout is set.
const DefaultNVIDIATimeout = 15 * time.Second

// maxNVIDIAOutput caps what is read from nvidia-smi.
const maxNVIDIAOutput = 1 << 20

// ErrMalformed is returned (wrapped) when nvidia-smi output cannot be parsed.
var ErrMalformed = errors.New("malformed nvidia-smi output")

// ErrNVIDIASMI is returned (wrapped) when nvidia-smi cannot be run or fails.
var ErrNVIDIASMI = errors.New("nvidia-smi failed")

// NVIDIA discovers NVIDIA GPUs by running nvidia-smi.
type NVIDIA struct {
	// Binary is the nvidia-smi to run; empty means DefaultNVIDIASMI on PATH.
	Binary string
	// HostID names the host; it prefixes device IDs of GPUs without a UUID.
	HostID string
	// Timeout bounds one run; zero means DefaultNVIDIATimeout.
	Timeout time.Duration
}

// Discovered is what a discovery run found.
type Discovered struct {
	Devices []fsm.DeviceSpec
	// Warnings describe fields the tool could not report ("[N/A]") and
	// fallbacks taken; the devices are still usable.
	Warnings []string
	// indexes are the GPUs' nvidia-smi indexes, in Devices' order.
	indexes []int
}

// Discover runs nvidia-smi and returns the GPUs it reports, each with its
// topology (NUMA node and links to the other GPUs) from
// `nvidia-smi topo -m` when the tool gives it. A machine without NVIDIA
// GPUs ("No devices were found") yields no devices and no error; a
// missing nvidia-smi is an error; a topology it cannot give is a warning.
func (n NVIDIA) Discover(ctx context.Context) (Discovered, error) {
	d, err := n.discoverGPUs(ctx)
	if err != nil || len(d.Devices) == 0 {
		return d, err
	}
	out, err := n.run(ctx, "topo", "-m")
	var topo map[int]GPUTopology
	if err == nil {
		topo, err = ParseTopology(bytes.NewReader(out))
	}
	if err != nil {
		d.Warnings = append(d.Warnings, fmt.Sprintf("no GPU topology: %v", err))
		return d, nil
	}
	applyTopology(&d, d.indexes, topo)
	return d, nil
}

// discoverGPUs queries the GPUs' fields.
func (n NVIDIA) discoverGPUs(ctx context.Context) (Discovered, error) {
	out, err := n.query(ctx, NVIDIAFields)
	if err != nil && bytes.Contains(out, []byte("is not a valid field")) {
		out, err = n.query(ctx, legacyNVIDIAFields)
		if err == nil {
			d, perr := ParseNVIDIA(bytes.NewReader(out), n.HostID, legacyNVIDIAFields)
			d.Warnings = append([]string{"driver does not report compute_cap; GPUs are registered without it"}, d.Warnings...)
			return d, perr
		}
	}
	if bytes.Contains(out, []byte("No devices were found")) {
		return Discovered{}, nil
	}
	if err != nil {
		return Discovered{}, err
	}
	return ParseNVIDIA(bytes.NewReader(out), n.HostID, NVIDIAFields)
}

// query runs nvidia-smi for fields and returns its combined output.
func (n NVIDIA) query(ctx context.Context, fields []string) ([]byte, error) {
	return n.run(ctx, "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader,nounits")
}

// run runs nvidia-smi with args and returns its standard output, or, on
// failure, its combined output.
func (n NVIDIA) run(ctx context.Context, args ...string) ([]byte, error) {
	bin := n.Binary
	if bin == "" {
		bin = DefaultNVIDIASMI
	}
	timeout := n.Timeout
	if timeout <= 0 {
		timeout = DefaultNVIDIATimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = maxNVIDIAOutput, 64<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	combined := make([]byte, 0, stdout.Len()+stderr.Len())
	combined = append(append(combined, stdout.Bytes()...), stderr.Bytes()...)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return combined, fmt.Errorf("%w: %s did not finish within %s", ErrNVIDIASMI, bin, timeout)
	case ctx.Err() != nil:
		return combined, fmt.Errorf("%w: %s: %v", ErrNVIDIASMI, bin, ctx.Err())
	case errors.Is(err, exec.ErrNotFound):
		return combined, fmt.Errorf("%w: %s not found (is the NVIDIA driver installed?)", ErrNVIDIASMI, bin)
	case err != nil:
		msg := strings.TrimSpace(string(combined))
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
		return combined, fmt.Errorf("%w: %s: %v: %s", ErrNVIDIASMI, bin, err, msg)
	case stdout.truncated:
		return combined, fmt.Errorf("%w: output larger than %d bytes", ErrMalformed, maxNVIDIAOutput)
	}
	return stdout.Bytes(), nil
}

// ParseNVIDIA parses the output of
//
//	nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits
//
// into GPU device specs. fields names the columns in order and must
// include index and name; memory.total is in MiB. Each GPU becomes an
// exclusive device whose ID is its UUID (unique and stable across
// reboots, and what CUDA_VISIBLE_DEVICES accepts), or "<host>-gpu<index>"
// when the UUID is not available; its name is the product name; its
// memory_gb is memory.total in GiB; its custom values are "model" (the
// product name without the "NVIDIA"/"Tesla" prefix) and "compute_cap".
// Values nvidia-smi cannot report ("[N/A]", "[Unknown Error]") are left out
// and noted in the warnings. An empty output is no GPUs.
func ParseNVIDIA(r io.Reader, hostID string, fields []string) (Discovered, error) {
	col := map[string]int{}
	for i, f := range fields {
		col[f] = i
	}
	for _, need := range []string{"index", "name"} {
		if _, ok := col[need]; !ok {
			return Discovered{}, fmt.Errorf("discover: query fields %v lack %q", fields, need)
		}
	}
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true

	var out Discovered
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return Discovered{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if len(rec) != len(fields) {
			return Discovered{}, fmt.Errorf("%w: line %d has %d fields, want %d (%s)", ErrMalformed, line, len(rec), len(fields), strings.Join(fields, ","))
		}
		get := func(name string) (string, bool) {
			i, ok := col[name]
			if !ok {
				return "", false
			}
			v := strings.TrimSpace(rec[i])
			if notAvailable(v) {
				return "", false
			}
			return v, true
		}
		idxText, ok := get("index")
		index, err := strconv.Atoi(idxText)
		if !ok || err != nil || index < 0 {
			return Discovered{}, fmt.Errorf("%w: line %d: index %q is not a GPU index", ErrMalformed, line, rec[col["index"]])
		}
		name, ok := get("name")
		if !ok || name == "" {
			return Discovered{}, fmt.Errorf("%w: line %d: GPU %d has no name", ErrMalformed, line, index)
		}
		d := fsm.DeviceSpec{
			Type:         fsm.GPU,
			Name:         name,
			Capabilities: fsm.Capabilities{Custom: map[string]string{"model": ShortModel(name)}},
		}
		if uuid, ok := get("uuid"); ok {
			d.ID = uuid
		} else {
			d.ID = fmt.Sprintf("%s-gpu%d", hostPrefix(hostID), index)
			if _, asked := col["uuid"]; asked {
				out.Warnings = append(out.Warnings, fmt.Sprintf("GPU %d reports no UUID; registered as %s", index, d.ID))
			}
		}
		if mib, ok := get("memory.total"); ok {
			v, err := strconv.ParseFloat(mib, 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return Discovered{}, fmt.Errorf("%w: line %d: GPU %d memory.total %q is not a number of MiB", ErrMalformed, line, index, mib)
			}
			d.Capabilities.MemoryGB = MiBToGiB(v)
		} else if _, asked := col["memory.total"]; asked {
			out.Warnings = append(out.Warnings, fmt.Sprintf("GPU %d (%s) reports no memory.total; registered with memory_gb 0", index, d.ID))
		}
		if cc, ok := get("compute_cap"); ok {
			d.Capabilities.Custom["compute_cap"] = cc
		} else if _, asked := col["compute_cap"]; asked {
			out.Warnings = append(out.Warnings, fmt.Sprintf("GPU %d (%s) reports no compute_cap", index, d.ID))
		}
		if prev, dup := seen[d.ID]; dup {
			return Discovered{}, fmt.Errorf("%w: line %d: GPU %d has the same id %q as line %d", ErrMalformed, line, index, d.ID, prev)
		}
		seen[d.ID] = line
		out.Devices = append(out.Devices, d)
		out.indexes = append(out.indexes, index)
	}
	return out, nil
}

// notAvailable reports whether an nvidia-smi value is a placeholder such as
// "[N/A]", "[Not Supported]" or "[Unknown Error]".
func notAvailable(v string) bool {
	return v == "" || v == "N/A" || (strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]"))
}

// ShortModel is a GPU product name without its vendor or brand prefix:
// "NVIDIA A100-SXM4-80GB" → "A100-SXM4-80GB", "Tesla T4" → "T4".
func ShortModel(name string) string {
	s := strings.TrimSpace(name)
	for _, p := range []string{"NVIDIA ", "Tesla ", "Quadro ", "GeForce "} {
		s = strings.TrimPrefix(s, p)
	}
	if s == "" {
		return strings.TrimSpace(name)
	}
	return s
}

// MiBToGiB converts MiB to GiB rounded to two decimals, so that 81920 MiB is
// exactly 80 and 15360 MiB (a T4) is 15.
func MiBToGiB(mib float64) float64 {
	return math.Round(mib/1024*100) / 100
}

func hostPrefix(hostID string) string {
	if hostID == "" {
		return "local"
	}
	return hostID
}

// limitedBuffer keeps at most limit bytes and remembers whether it dropped any.
type limitedBuffer struct {
	bytes.Buffer
	limit     int
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); len(p) > room {
		b.truncated = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
