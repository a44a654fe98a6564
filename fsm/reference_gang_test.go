package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// This file checks gang placement against a brute-force reference: what
// each host could take of the gang is found by trying every part size on
// it with the reference's one-host placement (refTakeOnHost), hosts are
// taken in the policy's host order (refHostOrder) as gang.go's definition
// says, with no index; and a gang is refused exactly when no set of at
// most MaxHosts hosts (of one domain) could take it, by enumeration.

// refGangCaps is what each schedulable host could take of the gang's
// first claim (with the other claims whole), in the policy's host order;
// hosts that cannot take the minimum are left out.
func refGangCaps(s *State, r *Request, pol Policy) ([]*Host, map[string]int) {
	caps := map[string]int{}
	var hosts []*Host
	for _, h := range refHostOrder(s, r, pol) {
		if !h.Schedulable() {
			continue
		}
		for k := r.Claims[0].Count; k >= r.minPerHost(); k-- {
			if refTakeOnHost(s, h, refPart(r, k), pol, func(*Device) bool { return true }) != nil {
				caps[h.ID] = k
				hosts = append(hosts, h)
				break
			}
		}
	}
	return hosts, caps
}

// refPart is one host's part of gang r: k devices of its first claim.
func refPart(r *Request, k int) *Request {
	p := *r
	p.Claims = slices.Clone(r.Claims)
	p.Claims[0].Count = k
	p.MaxHosts, p.MinPerHost, p.Same = 0, 0, ""
	p.Labels.Preferred = nil // a gang does not split hosts into tiers
	return &p
}

type refGangPart struct {
	h *Host
	n int
}

// refGangPack: repeatedly the host that could take the largest part (at
// most what is left, at least the minimum), first in host order among
// equals, until the hosts together can take the gang; then each takes
// the minimum and the rest fills them in the order chosen.
func refGangPack(r *Request, hosts []*Host, caps map[string]int) []refGangPart {
	n, m := r.Claims[0].Count, r.minPerHost()
	var parts []refGangPart
	used := map[string]bool{}
	sum := 0
	for sum < n {
		if len(parts) == r.MaxHosts {
			return nil
		}
		var best *Host
		bestV := 0
		for _, h := range hosts {
			if v := min(caps[h.ID], max(n-sum, m)); !used[h.ID] && v > bestV {
				best, bestV = h, v
			}
		}
		if best == nil {
			return nil
		}
		used[best.ID] = true
		parts = append(parts, refGangPart{best, bestV})
		sum += bestV
	}
	if len(parts)*m > n {
		return nil
	}
	extra := n - len(parts)*m
	for i := range parts {
		size := m + min(parts[i].n-m, extra)
		extra -= size - m
		parts[i].n = size
	}
	return parts
}

// refGangSpread: the first hosts in order that take an even part of the
// gang over as many hosts as it may use (one more device on the first
// ones when the split is not exact), or nil.
func refGangSpread(r *Request, hosts []*Host, caps map[string]int) []refGangPart {
	n, m := r.Claims[0].Count, r.minPerHost()
	j := min(r.MaxHosts, n/m)
	if j < 2 {
		return nil
	}
	base, extra := n/j, n%j
	var parts []refGangPart
	bigger := 0
	for _, h := range hosts {
		switch {
		case bigger < extra && caps[h.ID] >= base+1:
			parts = append(parts, refGangPart{h, base + 1})
			bigger++
		case len(parts)-bigger < j-extra && caps[h.ID] >= base:
			parts = append(parts, refGangPart{h, base})
		}
		if len(parts) == j {
			return parts
		}
	}
	return nil
}

// refGangPlace is the reference placement of gang r: its hosts sorted
// and its assignments part by part; nil when refused.
func refGangPlace(s *State, r *Request, pol Policy) ([]string, []Assignment) {
	hosts, caps := refGangCaps(s, r, pol)
	spreads := pol == WorstFit || pol == LoadBalanced
	placeIn := func(hosts []*Host) []refGangPart {
		if spreads {
			if p := refGangSpread(r, hosts, caps); p != nil {
				return p
			}
		}
		return refGangPack(r, hosts, caps)
	}
	var best []refGangPart
	if r.Same == "" {
		best = placeIn(hosts)
	} else {
		order := map[string]int{}
		for i, h := range hosts {
			order[h.ID] = i
		}
		byValue := map[string][]*Host{}
		for _, h := range hosts {
			if v, ok := h.Labels[r.Same]; ok {
				byValue[v] = append(byValue[v], h)
			}
		}
		for _, v := range sortedKeys(byValue) {
			p := placeIn(byValue[v])
			if p == nil {
				continue
			}
			better := best == nil
			if !better && len(p) != len(best) {
				better = (len(p) < len(best)) != spreads
			} else if !better {
				for i := range p {
					if order[p[i].h.ID] != order[best[i].h.ID] {
						better = order[p[i].h.ID] < order[best[i].h.ID]
						break
					}
				}
			}
			if better {
				best = p
			}
		}
	}
	if best == nil {
		return nil, nil
	}
	var ids []string
	var assign []Assignment
	for _, p := range best {
		ids = append(ids, p.h.ID)
		assign = append(assign, refTakeOnHost(s, p.h, refPart(r, p.n), pol, func(*Device) bool { return true })...)
	}
	slices.Sort(ids)
	return ids, assign
}

// refGangFeasible reports, by enumerating every set of hosts, whether
// some set of at most MaxHosts hosts of one domain could take gang r:
// each could take at least the minimum, together at least its count, and
// the minimum times their number is at most its count.
func refGangFeasible(s *State, r *Request, pol Policy) bool {
	hosts, caps := refGangCaps(s, r, pol)
	n, m := r.Claims[0].Count, r.minPerHost()
	for set := 1; set < 1<<len(hosts); set++ {
		var in []*Host
		for i, h := range hosts {
			if set&(1<<i) != 0 {
				in = append(in, h)
			}
		}
		if len(in) > r.MaxHosts || len(in)*m > n {
			continue
		}
		sum, dom, one := 0, "", true
		for i, h := range in {
			sum += caps[h.ID]
			if r.Same != "" {
				v, ok := h.Labels[r.Same]
				one = one && ok && (i == 0 || v == dom)
				dom = v
			}
		}
		if one && sum >= n {
			return true
		}
	}
	return false
}

// TestGangMatchesReference places random gangs on random small clusters
// under each classic policy and checks the hosts and devices against the
// reference, and that a gang is refused only when no set of hosts could
// take it, while the state moves on (gangs placed, released, hosts and
// devices changing).
func TestGangMatchesReference(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	compared, placed := 0, 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x9a46))
		h := refSetup(t, rng)
		for i := range 3 + rng.IntN(4) {
			hc := &RegisterHost{Host: HostSpec{ID: fmt.Sprintf("x%d", i), Labels: map[string]string{"rack": []string{"r1", "r2"}[rng.IntN(2)]}}}
			for j := range 2 + rng.IntN(5) {
				d := refDevice(rng, fmt.Sprintf("x%d-%d", i, j))
				if j%4 == 3 {
					d.Type = CPU
				}
				hc.Devices = append(hc.Devices, d)
			}
			h.must(hc)
		}
		var live []string
		for step := range 30 {
			pol := refPolicies[rng.IntN(len(refPolicies))]
			req := refManyRequest(rng)
			req.Claims[0].Count = 2 + rng.IntN(7)
			req.MaxHosts = 2 + rng.IntN(3)
			req.Timeout = 0 // no reservations: the reference does not model them
			if rng.IntN(3) == 0 {
				req.MinPerHost = 1 + rng.IntN(3)
				req.MinPerHost = min(req.MinPerHost, req.Claims[0].Count)
			}
			if rng.IntN(3) == 0 {
				req.Same = "rack"
			}
			wantHosts, want := refGangPlace(h.s, &req, pol)
			var gotHosts []string
			var got []Assignment
			if p := h.s.place(&req, PolicyConfig{Policy: pol}, nil); p != nil {
				gotHosts, got = p.hosts, p.assign
			}
			compared++
			if g, w := fmt.Sprint(gotHosts, refAssignString("*", got)), fmt.Sprint(wantHosts, refAssignString("*", want)); g != w {
				t.Fatalf("seed %d step %d %s: placed %s, reference %s\n%s", seed, step, pol, g, w, refDump(h.s, &req))
			}
			if feasible := refGangFeasible(h.s, &req, pol); feasible != (wantHosts != nil) {
				t.Fatalf("seed %d step %d %s: placed on %v, but some hosts could take it: %t\n%s", seed, step, pol, wantHosts, feasible, refDump(h.s, &req))
			}
			if wantHosts != nil {
				placed++
			}
			switch rng.IntN(6) {
			case 0, 1, 2:
				h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: pol}})
				r := h.apply(&Allocate{Request: req, Meta: Meta{RequestID: fmt.Sprintf("g%d-%d", seed, step)}})
				if r.Err == nil {
					live = append(live, r.Allocation.ID)
				}
				if err := h.s.CheckInvariants(); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			default:
				live = refMoveOn(h, rng, live)
			}
		}
		h.advance(time.Second)
	}
	if placed < compared/5 || placed == compared {
		t.Fatalf("degenerate workload: %d of %d gangs placed", placed, compared)
	}
	t.Logf("%d gangs compared, %d placed", compared, placed)
}
