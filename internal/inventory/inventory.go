// Package inventory loads and validates a host's device inventory file
// (devices.json), and holds the sample inventory the dev agent registers.
package inventory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/dmsc/dmsc/fsm"
)

// MaxFileBytes caps the size of an inventory file.
const MaxFileBytes = 4 << 20

// ErrInvalid is returned (wrapped) for an inventory that cannot be used.
var ErrInvalid = errors.New("invalid device inventory")

// File is a host's inventory as written in devices.json:
//
//	{
//	  "host": {"id": "gpu-node-1", "labels": {"rack": "r1"}},
//	  "devices": [
//	    {"id": "gpu-node-1-gpu0", "type": "GPU", "name": "NVIDIA A100-SXM4-80GB",
//	     "capabilities": {"memory_gb": 80, "custom": {"model": "A100-SXM4-80GB"}}}
//	  ]
//	}
//
// Fields are those of fsm.HostSpec and fsm.DeviceSpec; unknown fields are
// refused. The host id may be left out: the agent fills in its node name.
type File struct {
	Host    fsm.HostSpec     `json:"host"`
	Devices []fsm.DeviceSpec `json:"devices"`
}

// Load reads and validates an inventory file. Errors name the file and,
// for syntax errors, the line and column.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("device inventory: %w", err)
	}
	defer f.Close()
	inv, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return inv, nil
}

// Parse decodes and validates an inventory. The host id may be empty.
func Parse(r io.Reader) (*File, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var inv File
	if err := dec.Decode(&inv); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, describeJSONError(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := position(data, dec.InputOffset())
		return nil, fmt.Errorf("%w: line %d, column %d: unexpected data after the inventory object", ErrInvalid, line, col)
	}
	if err := inv.Validate(false); err != nil {
		return nil, err
	}
	return &inv, nil
}

// Validate checks what the scheduler would refuse, with messages that name
// the device. requireHostID says whether the host id must be set.
func (inv *File) Validate(requireHostID bool) error {
	if requireHostID && inv.Host.ID == "" {
		return fmt.Errorf("%w: host.id is empty", ErrInvalid)
	}
	if strings.TrimSpace(inv.Host.ID) != inv.Host.ID {
		return fmt.Errorf("%w: host.id %q has leading or trailing spaces", ErrInvalid, inv.Host.ID)
	}
	if len(inv.Devices) > fsm.MaxDevicesPerHost {
		return fmt.Errorf("%w: %d devices, more than %d per host", ErrInvalid, len(inv.Devices), fsm.MaxDevicesPerHost)
	}
	seen := map[string]int{}
	for i, d := range inv.Devices {
		where := fmt.Sprintf("devices[%d]", i)
		if d.ID != "" {
			where = fmt.Sprintf("devices[%d] (%q)", i, d.ID)
		}
		switch {
		case d.ID == "":
			return fmt.Errorf("%w: %s has no id", ErrInvalid, where)
		case strings.TrimSpace(d.ID) != d.ID || strings.ContainsAny(d.ID, "/?#%"):
			return fmt.Errorf("%w: %s: id may not contain spaces at its ends or any of / ? # %%", ErrInvalid, where)
		case !d.Type.Valid():
			return fmt.Errorf("%w: %s has type %q; want one of %s", ErrInvalid, where, d.Type, typeList())
		}
		if j, dup := seen[d.ID]; dup {
			return fmt.Errorf("%w: %s has the same id as devices[%d]", ErrInvalid, where, j)
		}
		seen[d.ID] = i
		r := d.Capabilities.Resources
		for _, dim := range []struct {
			name string
			v    float64
		}{{"memory_gb", r.MemoryGB}, {"compute_units", r.ComputeUnits}, {"storage_gb", r.StorageGB}, {"bandwidth_gbps", r.BandwidthGbps}} {
			if dim.v < 0 || math.IsNaN(dim.v) || math.IsInf(dim.v, 0) {
				return fmt.Errorf("%w: %s: capabilities.%s is %v; want a number ≥ 0", ErrInvalid, where, dim.name, dim.v)
			}
		}
		if d.Shareable && r.IsZero() {
			return fmt.Errorf("%w: %s is shareable but has no capacity to share (set memory_gb, compute_units, storage_gb or bandwidth_gbps)", ErrInvalid, where)
		}
	}
	return nil
}

// Register is the command that registers this inventory.
func (inv *File) Register() *fsm.RegisterHost {
	return &fsm.RegisterHost{Host: inv.Host, Devices: inv.Devices}
}

func typeList() string {
	names := make([]string, len(fsm.DeviceTypes))
	for i, t := range fsm.DeviceTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// describeJSONError turns a decoding error into a message with a line and
// column where the decoder gives an offset.
func describeJSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(data, syn.Offset-1)
		return fmt.Sprintf("line %d, column %d: %v", line, col, syn)
	case errors.As(err, &typ):
		line, col := position(data, typ.Offset-1)
		field := strings.ReplaceAll(typ.Field, "Resources.", "")
		if field == "" {
			field = "value"
		}
		return fmt.Sprintf("line %d, column %d: %s is %s; want %s", line, col, field, typ.Value, typ.Type)
	case errors.Is(err, io.EOF):
		return "the file is empty; want a JSON object {\"host\": {...}, \"devices\": [...]}"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	}
	msg := err.Error()
	if strings.Contains(msg, "unknown field") {
		return strings.TrimPrefix(msg, "json: ") + " (known: " + knownFields() + ")"
	}
	return msg
}

func knownFields() string {
	f := []string{"host.id", "host.address", "host.labels", "devices[].id", "devices[].type", "devices[].name",
		"devices[].pool", "devices[].capabilities", "devices[].labels", "devices[].shareable"}
	sort.Strings(f)
	return strings.Join(f, ", ")
}

// position is the 1-based line and column of a byte offset.
func position(data []byte, offset int64) (line, col int) {
	if offset < 0 {
		offset = 0
	}
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}
