package fsm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// This file checks the placement of requests for several devices or
// several claims against a brute-force reference that applies the policy
// definitions of DESIGN.md directly: every up host, in the policy's host
// order, is tried device by device, with no index and no pruning.

// refStaticFitClaim re-derives the static filters for claim i.
func refStaticFitClaim(d *Device, r *Request, i int) bool {
	one := Request{Claims: []Claim{r.Claims[i]}, Pool: r.Pool, Labels: r.Labels}
	one.Claims[0].Pool = r.claimPool(i)
	if !refStaticFit(d, &one) {
		return false
	}
	if cl := &r.Claims[i]; d.Shareable {
		caps, amt := d.Capabilities.vec(), cl.Amount.vec()
		for k := range caps {
			if caps[k]+eps < amt[k] {
				return false
			}
		}
	}
	return true
}

// refUse is what a placement in progress took of each device.
type refUse struct {
	used map[string]vec
	n    map[string]int
}

// refFitsNow re-derives whether device d can serve claim cl now, with
// what the placement in progress took.
func refFitsNow(s *State, d *Device, cl *Claim, u *refUse) bool {
	if h := s.hosts[d.Host]; h == nil || !h.Up || d.Status != Available {
		return false
	}
	n := len(d.Allocations) + u.n[d.ID]
	if !d.Shareable || cl.Amount.IsZero() {
		return n == 0
	}
	free := d.Capabilities.vec().sub(d.Used.vec()).sub(u.used[d.ID])
	amt := cl.Amount.vec()
	some := false
	for k := range free {
		if free[k]+eps < amt[k] {
			return false
		}
		some = some || free[k] > eps
	}
	return some
}

// refScale sums amount/norm over the positive parts, on a 1e-9 grid.
func refScale(v, norm vec) float64 {
	w := 0.0
	for k, x := range v {
		if norm[k] > 0 && x > 0 {
			w += x / norm[k]
		}
	}
	return math.Round(w*1e9) / 1e9
}

// refWaste is what d keeps unused by the claim: capacity beyond the
// thresholds for a whole device, free capacity beyond the amount for a
// share, with what the placement in progress took.
func refWaste(s *State, d *Device, cl *Claim, u *refUse) float64 {
	norm := refNorm(s, d.Type)
	if !d.Shareable || cl.Amount.IsZero() {
		return refScale(d.Capabilities.vec().sub(cl.Capabilities.vec()), norm)
	}
	return refScale(d.Capabilities.vec().sub(d.Used.vec()).sub(u.used[d.ID]).sub(cl.Amount.vec()), norm)
}

// refHostFree is the free capacity of a host's available devices, each
// type on its common scale: a device's on the grid, their sum (in ID
// order) on the grid.
func refHostFree(s *State, h *Host) float64 {
	sum := 0.0
	for _, id := range h.Devices {
		d := s.devices[id]
		if d.Status != Available || (!d.Shareable && len(d.Allocations) > 0) {
			continue
		}
		sum += refScale(d.Capabilities.vec().sub(d.Used.vec()), refNorm(s, d.Type))
	}
	return math.Round(sum*1e9) / 1e9
}

// refDef is a policy as DESIGN.md defines it: a device order and a host
// order (each least first, ties by ID), whether one-device requests rank
// every device of the cluster (global), and whether the orders start
// after the type's cursor.
type refDef struct {
	global bool
	cursor bool
	device func(s *State, d *Device, cl *Claim, u *refUse) float64
	host   func(s *State, h *Host, r *Request) float64
}

var (
	refNoDeviceKey = func(*State, *Device, *Claim, *refUse) float64 { return 0 }
	refNoHostKey   = func(*State, *Host, *Request) float64 { return 0 }
	refLeastWaste  = func(s *State, d *Device, cl *Claim, u *refUse) float64 { return refWaste(s, d, cl, u) }
	refLeastFree   = func(s *State, h *Host, _ *Request) float64 { return refHostFree(s, h) }
)

// refDefs holds the six classic policies.
var refDefs = map[Policy]refDef{
	FirstFit:   {global: true, device: refNoDeviceKey, host: refNoHostKey},
	RoundRobin: {global: true, cursor: true, device: refNoDeviceKey, host: refNoHostKey},
	BestFit:    {global: true, device: refLeastWaste, host: refLeastFree},
	WorstFit: {global: true,
		device: func(s *State, d *Device, cl *Claim, u *refUse) float64 { return -refWaste(s, d, cl, u) },
		host:   func(s *State, h *Host, _ *Request) float64 { return -refHostFree(s, h) }},
	PriorityBased: {global: true, device: refLeastWaste, host: refLeastFree},
	LoadBalanced: {
		device: func(_ *State, d *Device, _ *Claim, _ *refUse) float64 { return refUtil(d) },
		host:   func(s *State, h *Host, r *Request) float64 { return refHostUtil(s, h, r.Claims[0].Type) }},
}

// refTakeOnHost places the request on one host, claim by claim, each
// taking its fitting devices in the policy's device order (ID among
// equals); allowed0 limits the first claim's devices.
func refTakeOnHost(s *State, h *Host, r *Request, pol Policy, allowed0 func(*Device) bool) []Assignment {
	u := &refUse{used: map[string]vec{}, n: map[string]int{}}
	var out []Assignment
	for i := range r.Claims {
		cl := &r.Claims[i]
		var cands []*Device
		for _, id := range h.Devices {
			d := s.devices[id]
			if !refStaticFitClaim(d, r, i) || (i == 0 && !allowed0(d)) || !refFitsNow(s, d, cl, u) {
				continue
			}
			cands = append(cands, d)
		}
		if len(cands) < cl.Count {
			return nil
		}
		keys := map[string]float64{}
		for _, d := range cands {
			keys[d.ID] = refDefs[pol].device(s, d, cl, u)
		}
		sort.SliceStable(cands, func(a, b int) bool { return keys[cands[a].ID] < keys[cands[b].ID] })
		for _, d := range cands[:cl.Count] {
			amt := d.Capabilities.vec()
			if d.Shareable && !cl.Amount.IsZero() {
				amt = cl.Amount.vec()
			}
			u.used[d.ID] = u.used[d.ID].add(amt)
			u.n[d.ID]++
			out = append(out, Assignment{DeviceID: d.ID, Claim: i, Amount: amt.resources()})
		}
	}
	return out
}

// refHostOrder lists the up hosts in the policy's host order.
func refHostOrder(s *State, r *Request, pol Policy) []*Host {
	def := refDefs[pol]
	var hosts []*Host
	for _, id := range sortedKeys(s.hosts) {
		if h := s.hosts[id]; h.Up {
			hosts = append(hosts, h)
		}
	}
	if cur := s.devices[s.cursors[r.Claims[0].Type]]; def.cursor && cur != nil {
		i := sort.Search(len(hosts), func(i int) bool { return hosts[i].ID > cur.Host })
		hosts = append(hosts[i:len(hosts):len(hosts)], hosts[:i]...)
	}
	sort.SliceStable(hosts, func(a, b int) bool { return def.host(s, hosts[a], r) < def.host(s, hosts[b], r) })
	return hosts
}

// refPlaceMany is the brute-force placement of any request: for each tier
// of preferred labels (the first claim's devices with at least so many of
// them), the first host in the policy's order that takes the request.
func refPlaceMany(s *State, r *Request, pol Policy) (string, []Assignment) {
	score := func(d *Device) int {
		n := 0
		for k, v := range r.Labels.Preferred {
			if have, ok := d.Labels[k]; ok && have == v {
				n++
			}
		}
		return n
	}
	levels := map[int]bool{}
	for _, d := range s.devices {
		if refStaticFitClaim(d, r, 0) {
			levels[score(d)] = true
		}
	}
	var tiers []int
	for k := range levels {
		tiers = append(tiers, k)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(tiers)))
	for _, min := range tiers {
		allowed := func(d *Device) bool { return score(d) >= min }
		for _, h := range refHostOrder(s, r, pol) {
			if assign := refTakeOnHost(s, h, r, pol, allowed); assign != nil {
				return h.ID, assign
			}
		}
	}
	return "", nil
}

// refManyRequest is a random request for several devices or claims,
// milder than refRequest's so that a fair share of them fit.
func refManyRequest(rng *rand.Rand) Request {
	mild := func(cl Claim) Claim {
		if rng.IntN(3) > 0 {
			cl.Capabilities.Custom = nil
		}
		if rng.IntN(2) == 0 {
			cl.Capabilities.MemoryGB = 0
		}
		return cl
	}
	r := refRequest(rng, GPU)
	r.Claims[0] = mild(r.Claims[0])
	r.Claims[0].Count = 1 + rng.IntN(3)
	for range rng.IntN(3) {
		extra := mild(refRequest(rng, []DeviceType{GPU, CPU}[rng.IntN(2)]).Claims[0])
		extra.Count = 1 + rng.IntN(2)
		r.Claims = append(r.Claims, extra)
	}
	if len(r.Claims) == 1 && r.Claims[0].Count == 1 {
		r.Claims[0].Count = 2
	}
	return r
}

func refAssignString(host string, as []Assignment) string {
	if host == "" {
		return "nothing"
	}
	parts := []string{host + ":"}
	for _, a := range as {
		parts = append(parts, fmt.Sprintf("%s/%d", a.DeviceID, a.Claim))
	}
	return strings.Join(parts, " ")
}

// TestPlaceManyMatchesReference builds random small inventories and
// checks, request after request, that placement picks the host and the
// devices the brute-force reference picks, under each of the six classic
// policies, while the state moves on.
func TestPlaceManyMatchesReference(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	compared, placed := 0, 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x3a11))
		h := refSetup(t, rng)
		// Hosts with more devices, so that larger requests fit.
		for i := range 2 + rng.IntN(3) {
			hc := &RegisterHost{Host: HostSpec{ID: fmt.Sprintf("x%d", i), Labels: map[string]string{"zone": []string{"a", "b"}[rng.IntN(2)]}}}
			for j := range 3 + rng.IntN(6) {
				d := refDevice(rng, fmt.Sprintf("x%d-%d", i, j))
				if j%4 == 3 {
					d.Type = CPU
				}
				hc.Devices = append(hc.Devices, d)
			}
			h.must(hc)
		}
		var live []string
		for step := range 40 {
			pol := refPolicies[rng.IntN(len(refPolicies))]
			req := refManyRequest(rng)
			wantHost, want := refPlaceMany(h.s, &req, pol)
			gotHost, got := "", []Assignment(nil)
			if p := h.s.place(&req, PolicyConfig{Policy: pol}, nil); p != nil {
				gotHost, got = p.host, p.assign
			}
			compared++
			if g, w := refAssignString(gotHost, got), refAssignString(wantHost, want); g != w {
				t.Fatalf("seed %d step %d %s: placed %s, reference %s\n%s", seed, step, pol, g, w, refDump(h.s, &req))
			}
			if wantHost != "" {
				placed++
			}
			switch rng.IntN(6) {
			case 0, 1, 2:
				h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: pol}})
				r := h.apply(&Allocate{Request: req, Meta: Meta{RequestID: fmt.Sprintf("m%d-%d", seed, step)}})
				if (r.Err == nil) != (wantHost != "") {
					t.Fatalf("seed %d step %d %s: applied request: %v, reference placed %q", seed, step, pol, r.Err, wantHost)
				}
				if r.Err == nil {
					live = append(live, r.Allocation.ID)
				}
			default:
				live = refMoveOn(h, rng, live)
			}
		}
		h.advance(time.Second)
	}
	if placed < compared/5 || placed == compared {
		t.Fatalf("degenerate workload: %d of %d requests placed", placed, compared)
	}
	t.Logf("%d requests compared, %d placed", compared, placed)
}
