package fsm

import "sort"

// preempt finds, for a request that fits nowhere under a policy that
// preempts, active allocations whose priority is lower by at least the
// policy's gap and whose removal lets the request fit on one host,
// placed there as the policy places on a host (a gang: on its hosts,
// gang_preempt.go): on each host the victims freed lowest first until
// it fits, less those it can spare; of the hosts, the one with the
// fewest, then lowest-priority victims (preemptAmong). It changes
// nothing; the caller ends the victims and places.
func (s *State) preempt(a *Allocation, pc PolicyConfig) ([]*Allocation, *placement) {
	limit := a.Request.Priority - pc.gap()
	if limit < 0 {
		return nil, nil
	}
	return s.preemptAmong(a, pc, victimRule{eligible: func(v *Allocation) bool { return v.Request.Priority <= limit }, first: lowerFirst})
}

// lowerFirst is preemption's order of victims on a host: lowest priority
// first, newest first within a priority.
func lowerFirst(a, b *Allocation) bool {
	if a.Request.Priority != b.Request.Priority {
		return a.Request.Priority < b.Request.Priority
	}
	return a.Seq > b.Seq
}

// victimRule says which active allocations may end for a request
// (eligible), in what order they are freed on a host (first), and
// whether, between hosts whose victims are otherwise as good, the one
// whose first victim comes first in that order wins (byOrder) rather
// than the first host by ID.
type victimRule struct {
	eligible func(*Allocation) bool
	first    func(a, b *Allocation) bool
	byOrder  bool
}

// preemptAmong is preempt's search over the active allocations the rule
// makes eligible, freed on each host in its order until a fits.
func (s *State) preemptAmong(a *Allocation, pc PolicyConfig, rule victimRule) ([]*Allocation, *placement) {
	if a.Request.IsGang() {
		return s.preemptGang(a, pc, rule)
	}
	fits := s.fitting(&a.Request)
	for _, f := range fits {
		if len(f) == 0 {
			return nil, nil
		}
	}
	q := s.newQuery(&a.Request, fits)
	pl := definition(pc.Policy).place
	onHost := func(h *Host, ov *overlay) *placement {
		if assign := pl.onHost(s, h, q, ov); assign != nil {
			return &placement{host: h.ID, assign: assign}
		}
		return nil
	}
	type option struct {
		victims []*Allocation
		p       *placement
		sum     int
	}
	var best *option
	better := func(o *option) bool {
		if best == nil {
			return true
		}
		if len(o.victims) != len(best.victims) {
			return len(o.victims) < len(best.victims)
		}
		if maxPrio(o.victims) != maxPrio(best.victims) {
			return maxPrio(o.victims) < maxPrio(best.victims)
		}
		if o.sum != best.sum || !rule.byOrder {
			return o.sum < best.sum
		}
		return rule.first(o.victims[0], best.victims[0])
	}
	for _, hid := range sortedKeys(s.hosts) {
		h := s.hosts[hid]
		if !h.Schedulable() || a.Request.Host != "" && hid != a.Request.Host {
			continue
		}
		cands := s.victimsOn(h, &a.Request, rule.eligible, rule.first)
		if len(cands) == 0 {
			continue
		}
		// Free victims lowest priority first until the request fits.
		ov := newOverlay()
		n := 0
		var p *placement
		for n < len(cands) && p == nil {
			freeInto(ov, cands[n])
			n++
			p = onHost(h, ov)
		}
		if p == nil {
			continue
		}
		chosen := append([]*Allocation(nil), cands[:n]...)
		// Drop victims that turn out not to be needed, highest first.
		for i := len(chosen) - 1; i >= 0 && len(chosen) > 1; i-- {
			trial := newOverlay()
			for j, v := range chosen {
				if j != i {
					freeInto(trial, v)
				}
			}
			if alt := onHost(h, trial); alt != nil {
				chosen = append(chosen[:i:i], chosen[i+1:]...)
				p = alt
			}
		}
		o := &option{victims: chosen, p: p}
		for _, v := range chosen {
			o.sum += v.Request.Priority
		}
		if better(o) {
			best = o
		}
	}
	if best == nil {
		return nil, nil
	}
	return best.victims, best.p
}

func maxPrio(list []*Allocation) int {
	m := -1
	for _, a := range list {
		if a.Request.Priority > m {
			m = a.Request.Priority
		}
	}
	return m
}

// victimsOn lists the active allocations on a host, on devices of a type
// the request asks for, that eligible accepts, in the order first.
func (s *State) victimsOn(h *Host, r *Request, eligible func(*Allocation) bool, first func(a, b *Allocation) bool) []*Allocation {
	seen := map[string]bool{}
	var out []*Allocation
	for _, id := range h.Devices {
		d := s.devices[id]
		if !requestUses(r, d.Type) {
			continue
		}
		for _, aid := range d.Allocations {
			a := s.allocs[aid]
			if seen[aid] || !eligible(a) {
				continue
			}
			seen[aid] = true
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return first(out[i], out[j]) })
	return out
}

// freeInto records in ov what ending allocation a would free.
// An allocation may hold a shareable device for several claims, but it
// counts once among the device's allocations.
func freeInto(ov *overlay, a *Allocation) {
	counted := map[string]bool{}
	for _, as := range a.Devices {
		v := as.Amount.vec()
		for i := range v {
			v[i] = -v[i]
		}
		n := 0
		if !counted[as.DeviceID] {
			counted[as.DeviceID] = true
			n = -1
		}
		ov.add(as.DeviceID, v, n)
	}
}

func requestUses(r *Request, t DeviceType) bool {
	for _, c := range r.Claims {
		if c.Type == t {
			return true
		}
	}
	return false
}
