package fsm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// This file checks the indexed placement of one-device requests against a
// brute-force reference that scans every device in ID order and applies
// the policy definitions of DESIGN.md directly, with no index.

// refStaticFit re-derives the static filters for a one-claim request.
func refStaticFit(d *Device, r *Request) bool {
	cl := &r.Claims[0]
	if d.Type != cl.Type {
		return false
	}
	if pool := r.claimPool(0); pool != "" && d.Pool != pool {
		return false
	}
	caps, need := d.Capabilities.vec(), cl.Capabilities.vec()
	for i := range caps {
		if caps[i]+eps < need[i] {
			return false
		}
	}
	for k, want := range cl.Capabilities.Custom {
		have, ok := d.Capabilities.Custom[k]
		if !ok {
			return false
		}
		match := false
		for _, alt := range strings.Split(want, "|") {
			if alt == have {
				match = true
			}
		}
		if !match {
			return false
		}
	}
	for k, v := range r.Labels.Required {
		if have, ok := d.Labels[k]; !ok || have != v {
			return false
		}
	}
	for k, v := range r.Labels.Forbidden {
		if have, ok := d.Labels[k]; ok && (v == "*" || have == v) {
			return false
		}
	}
	return true
}

// refWhole reports whether the claim takes the whole device.
func refWhole(d *Device, cl *Claim) bool { return !d.Shareable || cl.Amount.IsZero() }

// refFits re-derives whether device d can serve the request now.
func refFits(s *State, d *Device, r *Request) bool {
	if !refStaticFit(d, r) {
		return false
	}
	h := s.hosts[d.Host]
	if h == nil || !h.Up || d.Status != Available {
		return false
	}
	cl := &r.Claims[0]
	if refWhole(d, cl) {
		return len(d.Allocations) == 0
	}
	free, amt := d.Capabilities.vec().sub(d.Used.vec()), cl.Amount.vec()
	for i := range free {
		if free[i]+eps < amt[i] {
			return false
		}
	}
	return true
}

// refNorm is the largest capacity of any device of type t, per dimension.
func refNorm(s *State, t DeviceType) vec {
	var n vec
	for _, d := range s.devices {
		if d.Type != t {
			continue
		}
		for i, x := range d.Capabilities.vec() {
			if x > n[i] {
				n[i] = x
			}
		}
	}
	return n
}

// refLeft is what device d keeps free after serving the claim, on the
// type's common scale (the sum of left/norm over dimensions, norm being
// the largest capacity of the type): capacity beyond the thresholds for a whole device,
// free capacity beyond the amount for a share.
func refLeft(s *State, d *Device, cl *Claim) float64 {
	norm := refNorm(s, d.Type)
	caps := d.Capabilities.vec()
	var left vec
	if refWhole(d, cl) {
		left = caps.sub(cl.Capabilities.vec())
	} else {
		left = caps.sub(d.Used.vec()).sub(cl.Amount.vec())
	}
	w := 0.0
	for i, x := range left {
		if norm[i] > 0 && x > 0 {
			w += x / norm[i]
		}
	}
	// Scores compare at 1e-9 resolution: float noise is not a preference.
	return math.Round(w*1e9) / 1e9
}

// refUtil is the used fraction of a device: all or nothing for an
// exclusive device, the first non-zero dimension (compute units, then
// memory, storage, bandwidth) for a shareable one.
func refUtil(d *Device) float64 {
	caps := d.Capabilities.vec()
	if d.Shareable {
		for _, i := range []int{1, 0, 2, 3} {
			if caps[i] > 0 {
				return d.Used.vec()[i] / caps[i]
			}
		}
	}
	if len(d.Allocations) > 0 {
		return 1
	}
	return 0
}

// refHostUtil is a host's mean device utilisation over its devices of type t.
func refHostUtil(s *State, h *Host, t DeviceType) float64 {
	n, used := 0, 0.0
	for _, id := range h.Devices {
		if d := s.devices[id]; d.Type == t {
			n++
			used += refUtil(d)
		}
	}
	if n == 0 {
		return 0
	}
	return used / float64(n)
}

// refPlace is the brute-force placement of a one-device request: the ID
// of the device the policy picks, or "" when none fits. A global policy
// ranks every fitting device of the cluster in its device order (among
// those with the most preferred labels); the others place as any request.
func refPlace(s *State, r *Request, pol Policy) string {
	def := refDefs[pol]
	if !def.global {
		if _, as := refPlaceMany(s, r, pol); as != nil {
			return as[0].DeviceID
		}
		return ""
	}
	cl := &r.Claims[0]
	var cands []*Device
	for _, id := range sortedKeys(s.devices) {
		if d := s.devices[id]; refFits(s, d, r) {
			cands = append(cands, d)
		}
	}
	// Preferred labels: only the devices that carry the most of them.
	if len(r.Labels.Preferred) > 0 && len(cands) > 0 {
		score := func(d *Device) int {
			n := 0
			for k, v := range r.Labels.Preferred {
				if have, ok := d.Labels[k]; ok && have == v {
					n++
				}
			}
			return n
		}
		top := -1
		for _, d := range cands {
			if p := score(d); p > top {
				top = p
			}
		}
		var kept []*Device
		for _, d := range cands {
			if score(d) == top {
				kept = append(kept, d)
			}
		}
		cands = kept
	}
	if len(cands) == 0 {
		return ""
	}
	none := &refUse{}
	sort.SliceStable(cands, func(a, b int) bool {
		return def.device(s, cands[a], cl, none) < def.device(s, cands[b], cl, none)
	})
	if def.cursor {
		for _, d := range cands {
			if d.ID > s.cursors[cl.Type] {
				return d.ID
			}
		}
	}
	return cands[0].ID
}

// refInventory is a random small inventory: GPUs of several sizes, some
// shareable, a few CPUs, spread over hosts with interleaved device IDs.
func refInventory(rng *rand.Rand) []*RegisterHost {
	nHosts := 2 + rng.IntN(4)
	hosts := make([]*RegisterHost, nHosts)
	for i := range hosts {
		hosts[i] = &RegisterHost{Host: HostSpec{ID: fmt.Sprintf("h%d", i+1)}}
		if rng.IntN(3) == 0 {
			hosts[i].Host.Labels = map[string]string{"zone": []string{"a", "b"}[rng.IntN(2)]}
		}
	}
	nDev := nHosts * (1 + rng.IntN(5))
	for k, n := range rng.Perm(nDev) {
		d := refDevice(rng, fmt.Sprintf("d%02d", n))
		if k%7 == 6 {
			d.Type = CPU
		}
		h := hosts[rng.IntN(nHosts)]
		h.Devices = append(h.Devices, d)
	}
	return hosts
}

// refDevice is a random GPU: one of four sizes, some shareable, some in
// another pool, of one of three architectures, some labelled fast.
func refDevice(rng *rand.Rand, id string) DeviceSpec {
	d := DeviceSpec{ID: id, Type: GPU}
	switch rng.IntN(4) {
	case 0:
		d.Capabilities.Resources = Resources{MemoryGB: 16, ComputeUnits: 40}
	case 1:
		d.Capabilities.Resources = Resources{MemoryGB: 24, ComputeUnits: 60}
	case 2:
		d.Capabilities.Resources = Resources{MemoryGB: 40, ComputeUnits: 100}
	default:
		d.Capabilities.Resources = Resources{MemoryGB: 80, ComputeUnits: 100}
	}
	if rng.IntN(8) == 0 {
		d.Capabilities.ComputeUnits = 0 // memory is its only dimension
	}
	d.Shareable = rng.IntN(2) == 0
	if rng.IntN(4) == 0 {
		d.Pool = "batch"
	}
	d.Capabilities.Custom = map[string]string{"arch": []string{"ampere", "hopper", "ada"}[rng.IntN(3)]}
	if rng.IntN(3) == 0 {
		d.Labels = map[string]string{"fast": "yes"}
	}
	return d
}

// refRequest is a random one-device request.
func refRequest(rng *rand.Rand, typ DeviceType) Request {
	cl := Claim{Type: typ, Count: 1}
	cl.Capabilities.MemoryGB = []float64{0, 0, 12, 20, 40, 60}[rng.IntN(6)]
	if rng.IntN(3) > 0 {
		cl.Amount = Resources{
			MemoryGB:     []float64{0, 4, 8, 10, 16, 20}[rng.IntN(6)],
			ComputeUnits: []float64{0, 10, 20, 25, 40, 50}[rng.IntN(6)],
		}
	}
	switch rng.IntN(6) {
	case 0:
		cl.Capabilities.Custom = map[string]string{"arch": "hopper"}
	case 1:
		cl.Capabilities.Custom = map[string]string{"arch": "ampere|ada"}
	}
	r := Request{Claims: []Claim{cl}}
	switch rng.IntN(8) {
	case 0:
		r.Pool = "batch"
	case 1:
		r.Pool = DefaultPool
	}
	switch rng.IntN(8) {
	case 0:
		r.Labels.Required = map[string]string{"zone": "a"}
	case 1:
		r.Labels.Forbidden = map[string]string{"fast": "*"}
	case 2, 3:
		r.Labels.Preferred = map[string]string{"fast": "yes", "zone": "b"}
	}
	return r
}

var refPolicies = []Policy{FirstFit, BestFit, WorstFit, RoundRobin, PriorityBased, LoadBalanced}

// refSetup applies a random inventory, random prior allocations under
// random policies (some released), drained and unhealthy devices and
// down hosts.
func refSetup(t *testing.T, rng *rand.Rand) *harness {
	h := newHarness(t)
	for _, c := range refInventory(rng) {
		h.must(c)
	}
	var live []string
	for range 3 + rng.IntN(12) {
		pol := refPolicies[rng.IntN(len(refPolicies))]
		h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: pol}})
		typ := GPU
		if rng.IntN(5) == 0 {
			typ = CPU
		}
		req := refRequest(rng, typ)
		if rng.IntN(5) == 0 {
			req.Claims[0].Count = 2
		}
		if r := h.apply(&Allocate{Request: req}); r.Err == nil {
			live = append(live, r.Allocation.ID)
		}
		if len(live) > 0 && rng.IntN(4) == 0 {
			i := rng.IntN(len(live))
			h.must(&Release{AllocationID: live[i]})
			live = append(live[:i], live[i+1:]...)
		}
	}
	ids := sortedKeys(h.s.devices)
	for range rng.IntN(3) {
		st := []DeviceStatus{Draining, Unhealthy}[rng.IntN(2)]
		h.must(&SetDeviceStatus{DeviceID: ids[rng.IntN(len(ids))], Status: st})
	}
	hosts := sortedKeys(h.s.hosts)
	if rng.IntN(2) == 0 {
		h.must(&SetHostStatus{HostID: hosts[rng.IntN(len(hosts))], Up: false})
	}
	return h
}

// refMoveOn changes the state as the reference tests go: it releases a
// live allocation, sets a device's status or a host's, at random. It
// returns the allocations still live.
func refMoveOn(h *harness, rng *rand.Rand, live []string) []string {
	switch rng.IntN(3) {
	case 0:
		if len(live) > 0 {
			i := rng.IntN(len(live))
			if r := h.apply(&Release{AllocationID: live[i]}); r.Err == nil || errors.Is(r.Err, ErrNotActive) {
				live = append(live[:i], live[i+1:]...)
			}
		}
	case 1:
		ids := sortedKeys(h.s.devices)
		st := []DeviceStatus{Available, Available, Draining}[rng.IntN(3)]
		h.must(&SetDeviceStatus{DeviceID: ids[rng.IntN(len(ids))], Status: st})
	default:
		hosts := sortedKeys(h.s.hosts)
		h.must(&SetHostStatus{HostID: hosts[rng.IntN(len(hosts))], Up: rng.IntN(3) > 0})
	}
	return live
}

// refDump describes the candidates of a request for a failure message.
func refDump(s *State, r *Request) string {
	var b strings.Builder
	cl := &r.Claims[0]
	fmt.Fprintf(&b, "request %+v cursor=%q\n", *r, s.cursors[cl.Type])
	for _, id := range sortedKeys(s.devices) {
		d := s.devices[id]
		if d.Type != cl.Type {
			continue
		}
		fmt.Fprintf(&b, "  %s host=%s up=%t status=%s share=%t pool=%s caps=%v used=%v allocs=%d labels=%v custom=%v fits=%t left=%.4f util=%.3f hostutil=%.3f\n",
			d.ID, d.Host, s.hosts[d.Host].Up, d.Status, d.Shareable, d.Pool, d.Capabilities.vec(), d.Used.vec(),
			len(d.Allocations), d.Labels, d.Capabilities.Custom, refFits(s, d, r), refLeft(s, d, cl), refUtil(d),
			refHostUtil(s, s.hosts[d.Host], cl.Type))
	}
	return b.String()
}

// TestPlaceOneMatchesReference builds random small inventories and checks,
// request after request, that the indexed placement picks the device the
// brute-force reference picks, under every policy it serves. Requests are
// then applied (or not) so the index is checked as the state moves.
func TestPlaceOneMatchesReference(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 60
	}
	compared, placed := 0, 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
		h := refSetup(t, rng)
		var live []string
		for step := range 40 {
			pol := refPolicies[rng.IntN(len(refPolicies))]
			req := refRequest(rng, GPU)
			want := refPlace(h.s, &req, pol)
			got := ""
			if p := h.s.place(&req, PolicyConfig{Policy: pol}, nil); p != nil {
				if len(p.assign) != 1 {
					t.Fatalf("seed %d step %d %s: %d assignments for a one-device request", seed, step, pol, len(p.assign))
				}
				got = p.assign[0].DeviceID
			}
			compared++
			if got != want {
				t.Fatalf("seed %d step %d %s: place picked %q, reference %q\n%s", seed, step, pol, got, want, refDump(h.s, &req))
			}
			if want != "" {
				placed++
			}
			// Move the state on: apply the request under the same policy,
			// release something, or flip a device or host.
			switch rng.IntN(6) {
			case 0, 1, 2:
				h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: pol}})
				r := h.apply(&Allocate{Request: req, Meta: Meta{RequestID: fmt.Sprintf("s%d-%d", seed, step)}})
				if want == "" {
					if r.Err == nil {
						t.Fatalf("seed %d step %d %s: applied request placed on %s, reference says nothing fits", seed, step, pol, r.Allocation.Devices[0].DeviceID)
					}
					continue
				}
				if r.Err != nil || r.Allocation.Devices[0].DeviceID != want {
					t.Fatalf("seed %d step %d %s: applied request got %+v (%v), want device %s", seed, step, pol, r.Allocation, r.Err, want)
				}
				live = append(live, r.Allocation.ID)
			default:
				live = refMoveOn(h, rng, live)
			}
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		h.advance(time.Second)
	}
	// The comparison must have had something to compare.
	if placed < compared/4 || placed == compared {
		t.Fatalf("degenerate workload: %d of %d requests placed", placed, compared)
	}
	t.Logf("%d requests compared, %d placed", compared, placed)
}
