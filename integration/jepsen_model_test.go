package integration

// The sequential specification the fault-injection test checks histories
// against (with porcupine): which allocation holds which device. It knows
// nothing of placement policies: an allocate may take any devices that
// were free and fit, and may be refused only when none fit.

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/dmsc/dmsc/client/wire"
)

// opKind is what a client operation does.
type opKind string

const (
	opAllocate    opKind = "allocate"
	opRelease     opKind = "release"
	opRenew       opKind = "renew"
	opReadAlloc   opKind = "read-allocation"
	opReadDevices opKind = "read-devices"
)

// opInput is what a client asked for.
type opInput struct {
	Kind      opKind `json:"kind"`
	RequestID string `json:"request_id,omitempty"`
	// An allocate asks for Count devices of Type, on Host when it is set;
	// of a shareable device it takes Units compute units (0: all of it).
	Type  wire.DeviceType `json:"type,omitempty"`
	Count int             `json:"count,omitempty"`
	Units float64         `json:"units,omitempty"`
	Host  string          `json:"host,omitempty"`
	// AllocID is the allocation a release, renew or read-allocation names.
	AllocID string `json:"allocation_id,omitempty"`
}

// outcome is how an operation ended.
type outcome string

const (
	outOK        outcome = "ok"
	outRefused   outcome = "refused"    // no_capacity
	outNotActive outcome = "not_active" // release or renew of an ended allocation
	outNotFound  outcome = "not_found"
	// outUnknown: no answer (timeouts, connection errors). Before the
	// check, an unknown allocate or release is resolved from the final
	// state (and stays open to the end of the history) or dropped; other
	// unknown operations are dropped: they constrain nothing.
	outUnknown outcome = "unknown"
)

// held is one device an allocation holds (Units: of a shareable device).
type held struct {
	Device string  `json:"device"`
	Units  float64 `json:"units,omitempty"`
}

// deviceView is one device as a read of the device list saw it.
type deviceView struct {
	ID          string   `json:"id"`
	Allocations []string `json:"allocations,omitempty"`
	Units       float64  `json:"units,omitempty"`
}

// opOutput is what the client got.
type opOutput struct {
	Outcome outcome `json:"outcome"`
	AllocID string  `json:"allocation_id,omitempty"`
	Host    string  `json:"host,omitempty"`
	Held    []held  `json:"held,omitempty"`
	// Status is what a read-allocation saw.
	Status wire.AllocStatus `json:"status,omitempty"`
	// Devices is what a read-devices saw.
	Devices []deviceView `json:"devices,omitempty"`
	// From is the server that answered a read and the state index it
	// read at, for the record (the model ignores it).
	From readFrom `json:"from,omitzero"`
	// Error is the last error the client saw, for the record.
	Error string `json:"error,omitempty"`
	// Resolved marks an unknown outcome filled in from the final state.
	Resolved bool `json:"resolved,omitempty"`
}

// readFrom is the server that answered a read and the state index
// (X-Dmsc-Index) it answered at.
type readFrom struct {
	Server string `json:"server"`
	Index  uint64 `json:"index"`
}

// catalogDevice is a device of the cluster under test.
type catalogDevice struct {
	ID        string
	Host      string
	Type      wire.DeviceType
	Shareable bool
	Units     float64 // compute units of a shareable device
}

// allocModel is the specification over a fixed set of devices.
type allocModel struct {
	devices []catalogDevice // sorted by ID
	byID    map[string]int
	hosts   []string
}

func newAllocModel(devices []catalogDevice) *allocModel {
	m := &allocModel{devices: append([]catalogDevice(nil), devices...), byID: map[string]int{}}
	sort.Slice(m.devices, func(i, j int) bool { return m.devices[i].ID < m.devices[j].ID })
	seen := map[string]bool{}
	for i, d := range m.devices {
		m.byID[d.ID] = i
		if !seen[d.Host] {
			seen[d.Host] = true
			m.hosts = append(m.hosts, d.Host)
		}
	}
	sort.Strings(m.hosts)
	return m
}

// allocState is the model's state; it is never changed once made.
type allocState struct {
	live  map[string][]held // allocation ID -> devices it holds
	ended map[string]bool   // allocations released
	// endedSum is the XOR of the hashes of the ended IDs: with the count,
	// it stands for the ended set in key (the checker compares states
	// reached by linearizing the same operations, whose ended sets are
	// then the same, so the key need not list them).
	endedSum uint64
	key      string // canonical form, for Equal and Hash
}

func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

func newAllocState(live map[string][]held, ended map[string]bool, endedSum uint64) *allocState {
	s := &allocState{live: live, ended: ended, endedSum: endedSum}
	var b strings.Builder
	for _, id := range sortedKeys(live) {
		b.WriteString(id)
		b.WriteByte('=')
		for _, h := range live[id] {
			fmt.Fprintf(&b, "%s:%g,", h.Device, h.Units)
		}
		b.WriteByte(';')
	}
	fmt.Fprintf(&b, "|%d:%x", len(ended), endedSum)
	s.key = b.String()
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// usage is, per device index, how many allocations hold it and how many
// units they take.
func (m *allocModel) usage(s *allocState) (holders []int, units []float64) {
	holders = make([]int, len(m.devices))
	units = make([]float64, len(m.devices))
	for _, hs := range s.live {
		for _, h := range hs {
			if i, ok := m.byID[h.Device]; ok {
				holders[i]++
				units[i] += h.Units
			}
		}
	}
	return holders, units
}

// free says whether device i can take a claim of in.
func (m *allocModel) free(i int, in opInput, holders []int, units []float64) bool {
	d := m.devices[i]
	if d.Type != in.Type || (in.Host != "" && d.Host != in.Host) {
		return false
	}
	if !d.Shareable || in.Units == 0 {
		return holders[i] == 0
	}
	return units[i]+in.Units <= d.Units
}

// fits says whether some host has in.Count devices free for in.
func (m *allocModel) fits(s *allocState, in opInput) bool {
	holders, units := m.usage(s)
	for _, h := range m.hosts {
		n := 0
		for i, d := range m.devices {
			if d.Host == h && m.free(i, in, holders, units) {
				n++
			}
		}
		if n >= in.Count {
			return true
		}
	}
	return false
}

// placementError says why out is not a placement the model allows for in
// in state s ("" when it is one).
func (m *allocModel) placementError(s *allocState, in opInput, out opOutput) string {
	if out.AllocID == "" {
		return "no allocation ID"
	}
	if _, ok := s.live[out.AllocID]; ok || s.ended[out.AllocID] {
		return "allocation ID " + out.AllocID + " already used"
	}
	if len(out.Held) != in.Count {
		return fmt.Sprintf("%d devices for a claim of %d", len(out.Held), in.Count)
	}
	holders, units := m.usage(s)
	seen := map[string]bool{}
	host := ""
	for _, h := range out.Held {
		i, ok := m.byID[h.Device]
		if !ok {
			return "unknown device " + h.Device
		}
		if seen[h.Device] {
			return "device " + h.Device + " twice"
		}
		seen[h.Device] = true
		if host == "" {
			host = m.devices[i].Host
		} else if host != m.devices[i].Host {
			return "devices on more than one host"
		}
		if !m.free(i, in, holders, units) {
			return "device " + h.Device + " was not free"
		}
		if m.devices[i].Shareable && in.Units != 0 && h.Units != in.Units {
			return fmt.Sprintf("device %s: took %g units, asked %g", h.Device, h.Units, in.Units)
		}
	}
	if out.Host != "" && out.Host != host {
		return "allocation host " + out.Host + " is not its devices' host " + host
	}
	return ""
}

// sameHeld compares two device lists as sets.
func sameHeld(a, b []held) bool {
	if len(a) != len(b) {
		return false
	}
	x := append([]held(nil), a...)
	y := append([]held(nil), b...)
	sort.Slice(x, func(i, j int) bool { return x[i].Device < x[j].Device })
	sort.Slice(y, func(i, j int) bool { return y[i].Device < y[j].Device })
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// step is the specification: whether the operation could return out in
// state s, and the state after it.
func (m *allocModel) step(s *allocState, in opInput, out opOutput) (bool, *allocState) {
	switch in.Kind {
	case opAllocate:
		switch out.Outcome {
		case outOK:
			if m.placementError(s, in, out) != "" {
				return false, s
			}
			live := make(map[string][]held, len(s.live)+1)
			for k, v := range s.live {
				live[k] = v
			}
			live[out.AllocID] = out.Held
			return true, newAllocState(live, s.ended, s.endedSum)
		case outRefused:
			return !m.fits(s, in), s
		}
	case opRelease:
		switch out.Outcome {
		case outOK:
			if _, ok := s.live[in.AllocID]; !ok {
				return false, s
			}
			live := make(map[string][]held, len(s.live))
			for k, v := range s.live {
				if k != in.AllocID {
					live[k] = v
				}
			}
			ended := make(map[string]bool, len(s.ended)+1)
			for k := range s.ended {
				ended[k] = true
			}
			ended[in.AllocID] = true
			return true, newAllocState(live, ended, s.endedSum^idHash(in.AllocID))
		case outNotActive:
			return s.ended[in.AllocID], s
		}
	case opRenew:
		switch out.Outcome {
		case outOK:
			_, ok := s.live[in.AllocID]
			return ok, s
		case outNotActive:
			return s.ended[in.AllocID], s
		}
	case opReadAlloc:
		if out.Outcome != outOK {
			return false, s
		}
		switch out.Status {
		case wire.Active:
			hs, ok := s.live[in.AllocID]
			return ok && sameHeld(hs, out.Held), s
		case wire.Released:
			return s.ended[in.AllocID], s
		}
	case opReadDevices:
		if out.Outcome != outOK {
			return false, s
		}
		return m.viewError(s, out.Devices) == "", s
	}
	return false, s
}

// viewError says how a device list differs from state s ("" when it
// matches).
func (m *allocModel) viewError(s *allocState, view []deviceView) string {
	want := map[string][]string{}
	units := map[string]float64{}
	for id, hs := range s.live {
		for _, h := range hs {
			want[h.Device] = append(want[h.Device], id)
			units[h.Device] += h.Units
		}
	}
	if len(view) != len(m.devices) {
		return fmt.Sprintf("%d devices listed, %d exist", len(view), len(m.devices))
	}
	for _, v := range view {
		i, ok := m.byID[v.ID]
		if !ok {
			return "unknown device " + v.ID
		}
		w := want[v.ID]
		sort.Strings(w)
		got := append([]string(nil), v.Allocations...)
		sort.Strings(got)
		if strings.Join(w, ",") != strings.Join(got, ",") {
			return fmt.Sprintf("device %s held by %v, want %v", v.ID, got, w)
		}
		if m.devices[i].Shareable && v.Units != units[v.ID] {
			return fmt.Sprintf("device %s uses %g units, want %g", v.ID, v.Units, units[v.ID])
		}
	}
	return ""
}

// porcupine returns the model in porcupine's terms.
func (m *allocModel) porcupine() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return newAllocState(map[string][]held{}, map[string]bool{}, 0) },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			return m.step(state.(*allocState), input.(opInput), output.(opOutput))
		},
		Equal: func(a, b interface{}) bool { return a.(*allocState).key == b.(*allocState).key },
		Hash: func(state interface{}) uint64 {
			h := fnv.New64a()
			h.Write([]byte(state.(*allocState).key))
			return h.Sum64()
		},
		DescribeOperation: describeOp,
		DescribeState:     describeState,
	}
}

// short abbreviates an allocation ID for display.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func describeHeld(hs []held) string {
	var parts []string
	for _, h := range hs {
		if h.Units != 0 {
			parts = append(parts, fmt.Sprintf("%s(%g)", h.Device, h.Units))
		} else {
			parts = append(parts, h.Device)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func describeOp(input, output interface{}) string {
	in, out := input.(opInput), output.(opOutput)
	var call string
	switch in.Kind {
	case opAllocate:
		call = fmt.Sprintf("allocate %d %s", in.Count, in.Type)
		if in.Units != 0 {
			call += fmt.Sprintf(" x%g", in.Units)
		}
		if in.Host != "" {
			call += " on " + in.Host
		}
	case opReadDevices:
		call = "read devices"
	default:
		call = fmt.Sprintf("%s %s", in.Kind, short(in.AllocID))
	}
	res := string(out.Outcome)
	switch {
	case in.Kind == opAllocate && out.Outcome == outOK:
		res = short(out.AllocID) + " " + describeHeld(out.Held)
	case in.Kind == opReadAlloc && out.Outcome == outOK:
		res = string(out.Status) + " " + describeHeld(out.Held)
	case in.Kind == opReadDevices && out.Outcome == outOK:
		var parts []string
		for _, v := range out.Devices {
			if len(v.Allocations) > 0 {
				var ids []string
				for _, a := range v.Allocations {
					ids = append(ids, short(a))
				}
				parts = append(parts, v.ID+":"+strings.Join(ids, "+"))
			}
		}
		res = "{" + strings.Join(parts, " ") + "}"
	}
	if out.Resolved {
		res += " (resolved)"
	}
	if out.From.Server != "" {
		res += fmt.Sprintf(" (%s at %d)", out.From.Server, out.From.Index)
	}
	return call + " -> " + res
}

func describeState(state interface{}) string {
	s := state.(*allocState)
	var parts []string
	for _, id := range sortedKeys(s.live) {
		parts = append(parts, short(id)+describeHeld(s.live[id]))
	}
	return fmt.Sprintf("live: %s; %d released", strings.Join(parts, " "), len(s.ended))
}

// TestAllocModel: the model accepts the histories a correct scheduler can
// produce and refuses double allocations, refusals while a device was
// free, stale reads and releases of ended allocations.
func TestAllocModel(t *testing.T) {
	m := newAllocModel([]catalogDevice{
		{ID: "h1-gpu0", Host: "h1", Type: wire.GPU},
		{ID: "h1-gpu1", Host: "h1", Type: wire.GPU},
		{ID: "h1-cpu", Host: "h1", Type: wire.CPU, Shareable: true, Units: 16},
		{ID: "h2-gpu0", Host: "h2", Type: wire.GPU},
	})
	gpu := func(n int) opInput { return opInput{Kind: opAllocate, Type: wire.GPU, Count: n} }
	cpu := func(units float64) opInput { return opInput{Kind: opAllocate, Type: wire.CPU, Count: 1, Units: units} }
	got := func(id string, devs ...string) opOutput {
		out := opOutput{Outcome: outOK, AllocID: id}
		for _, d := range devs {
			h := held{Device: d}
			if d == "h1-cpu" {
				_, u, _ := strings.Cut(id, ":")
				h.Units, _ = strconv.ParseFloat(u, 64)
			}
			out.Held = append(out.Held, h)
		}
		return out
	}
	refused := opOutput{Outcome: outRefused}
	rel := func(id string) opInput { return opInput{Kind: opRelease, AllocID: id} }
	ok := opOutput{Outcome: outOK}
	view := func(holders map[string]string) opOutput {
		out := opOutput{Outcome: outOK}
		for _, d := range m.devices {
			v := deviceView{ID: d.ID}
			if a := holders[d.ID]; a != "" {
				v.Allocations = strings.Split(a, ",")
				if d.Shareable {
					for _, id := range v.Allocations {
						_, u, _ := strings.Cut(id, ":")
						x, _ := strconv.ParseFloat(u, 64)
						v.Units += x
					}
				}
			}
			out.Devices = append(out.Devices, v)
		}
		return out
	}
	read := opInput{Kind: opReadDevices}
	op := func(client int, in opInput, call, ret int64, out opOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	const open = 1000 // an operation without an answer stays open to the end
	cases := []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"sequential allocate, release, read", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(1, gpu(1), 20, 30, got("b", "h1-gpu1")),
			op(0, rel("a"), 40, 50, ok),
			op(1, read, 60, 70, view(map[string]string{"h1-gpu1": "b"})),
		}, true},
		{"two allocations on one host", []porcupine.Operation{
			op(0, gpu(2), 0, 10, got("a", "h1-gpu0", "h1-gpu1")),
		}, true},
		{"a claim across hosts", []porcupine.Operation{
			op(0, gpu(2), 0, 10, got("a", "h1-gpu0", "h2-gpu0")),
		}, false},
		{"double allocation", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(1, gpu(1), 20, 30, got("b", "h1-gpu0")),
		}, false},
		{"reuse concurrent with the release", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(0, rel("a"), 20, 40, ok),
			op(1, gpu(1), 30, 50, got("b", "h1-gpu0")),
		}, true},
		{"reuse before the release was called", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(1, gpu(1), 20, 30, got("b", "h1-gpu0")),
			op(0, rel("a"), 40, 50, ok),
		}, false},
		{"refused while a device was free", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(1, gpu(1), 20, 30, refused),
		}, false},
		{"refused when none was free", []porcupine.Operation{
			op(0, gpu(2), 0, 10, got("a", "h1-gpu0", "h1-gpu1")),
			op(1, gpu(2), 20, 30, refused),
			op(1, gpu(1), 40, 50, got("b", "h2-gpu0")),
			op(1, gpu(1), 60, 70, refused),
		}, true},
		{"stale read after a release", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(0, rel("a"), 20, 30, ok),
			op(1, read, 40, 50, view(map[string]string{"h1-gpu0": "a"})),
		}, false},
		{"read concurrent with the release", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(0, rel("a"), 20, 50, ok),
			op(1, read, 30, 40, view(map[string]string{"h1-gpu0": "a"})),
		}, true},
		{"release of a released allocation", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(0, rel("a"), 20, 30, ok),
			op(0, rel("a"), 40, 50, ok),
		}, false},
		{"not active after the release", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(0, rel("a"), 20, 30, ok),
			op(0, rel("a"), 40, 50, opOutput{Outcome: outNotActive}),
			op(0, opInput{Kind: opRenew, AllocID: "a"}, 60, 70, opOutput{Outcome: outNotActive}),
		}, true},
		{"read of an allocation with other devices", []porcupine.Operation{
			op(0, gpu(1), 0, 10, got("a", "h1-gpu0")),
			op(0, opInput{Kind: opReadAlloc, AllocID: "a"}, 20, 30, opOutput{Outcome: outOK, Status: wire.Active, Held: []held{{Device: "h1-gpu1"}}}),
		}, false},
		{"shareable device within its units", []porcupine.Operation{
			op(0, cpu(8), 0, 10, got("a:8", "h1-cpu")),
			op(1, cpu(8), 20, 30, got("b:8", "h1-cpu")),
			op(1, read, 40, 50, view(map[string]string{"h1-cpu": "a:8,b:8"})),
			op(1, cpu(4), 60, 70, refused),
		}, true},
		{"shareable device over its units", []porcupine.Operation{
			op(0, cpu(12), 0, 10, got("a:12", "h1-cpu")),
			op(1, cpu(8), 20, 30, got("b:8", "h1-cpu")),
		}, false},
		{"an allocate without answer seen by a later read", []porcupine.Operation{
			op(0, gpu(1), 0, open, got("a", "h2-gpu0")),
			op(1, read, 10, 20, view(nil)),
			op(1, read, 30, 40, view(map[string]string{"h2-gpu0": "a"})),
		}, true},
		{"a read that sees a write undone", []porcupine.Operation{
			op(0, gpu(1), 0, open, got("a", "h2-gpu0")),
			op(1, read, 10, 20, view(map[string]string{"h2-gpu0": "a"})),
			op(1, read, 30, 40, view(nil)),
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(m.porcupine(), tc.ops); got != tc.want {
				t.Errorf("linearizable = %v, want %v", got, tc.want)
			}
		})
	}
}
