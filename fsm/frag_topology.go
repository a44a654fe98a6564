package fsm

import "slices"

// linkPicks makes FragmentationAware's picks on a host (indexes into its
// view, in claim order) read the devices' topology, as takeOnHost does
// for the other policies (topology.go). The measure sees devices by class
// and state, not by their links, so a claim of several devices may take
// any devices alike to those it picked (the same class and state) without
// changing the measure: among them it takes the best-linked set, in view
// order. A CPU or memory claim likewise takes, among devices alike to its
// picks, those on the NUMA nodes of the GPUs taken first.
//
// A claim that requires NVLink and finds no set among the alike devices
// takes any NVLink set of the devices that can serve it (the measure of
// that placement is then not the one ranked); with none the host cannot
// take the request, and linkPicks reports false. Claims that share their
// type with another claim of the request keep their picks (the devices
// one takes change what the other can); one of them that requires NVLink
// is placed only where its picks are linked so.
func (c *fragCache) linkPicks(r *Request, rq *fragRequest, view []fragDev, span *fragSpans, picks []int16) ([]int16, bool) {
	if !slices.ContainsFunc(view, func(d fragDev) bool { return d.d.Topology != nil }) {
		// No device here says where it sits: only a claim of several
		// devices that requires NVLink reads that, and it cannot have it.
		ok := !slices.ContainsFunc(r.Claims, func(cl Claim) bool { return cl.Count > 1 && cl.Topology == TopologyNVLink })
		return picks, ok
	}
	out, cloned := picks, false
	var numas []int
	k := 0
	for i := range r.Claims {
		cl := &r.Claims[i]
		mine := out[k : k+cl.Count]
		k += cl.Count
		sameType := 0
		for _, o := range r.Claims {
			if o.Type == cl.Type {
				sameType++
			}
		}
		var pick []int16
		switch {
		case sameType > 1:
			if cl.Topology == TopologyNVLink && !nvlinked(view, mine) {
				return nil, false
			}
		case cl.Count > 1:
			var ok bool
			if pick, ok = c.linkedAlike(view, span, &rq.claims[i], mine, cl.Topology == TopologyNVLink); !ok {
				return nil, false
			}
		case (cl.Type == CPU || cl.Type == Memory) && len(numas) > 0:
			pick = nearAlike(view, span, &rq.claims[i], mine, numas)
		}
		if pick != nil {
			if !cloned {
				out, cloned = slices.Clone(picks), true
			}
			copy(out[k-cl.Count:k], pick)
			mine = out[k-cl.Count : k]
		}
		if cl.Type == GPU {
			for _, p := range mine {
				if t := view[p].d.Topology; t != nil && t.NUMA != nil && !slices.Contains(numas, *t.NUMA) {
					numas = append(numas, *t.NUMA)
				}
			}
		}
	}
	return out, true
}

// alikeOf lists the devices of the claim's type in view that are alike
// (class and state) to one of picks, as candidates in view order, with
// the kind of each (the first pick it is alike to) and how many of each
// kind picks holds.
func alikeOf(view []fragDev, span *fragSpans, fc *fragClaim, picks []int16) (cands []rankedDevice, kind, quota []int) {
	quota = make([]int, len(picks))
	rep := make([]int, len(picks)) // the kind of each pick
	for a, p := range picks {
		rep[a] = a
		for b := range a {
			if alike(&view[picks[b]], &view[p]) {
				rep[a] = rep[b]
				break
			}
		}
		quota[rep[a]]++
	}
	for j := span[fc.typ][0]; j < span[fc.typ][1]; j++ {
		for a, p := range picks {
			if rep[a] == a && alike(&view[p], &view[j]) {
				cands = append(cands, rankedDevice{d: view[j].d, key: float64(j)})
				kind = append(kind, a)
				break
			}
		}
	}
	return cands, kind, quota
}

// alike reports whether two devices of a view are the same to the measure.
func alike(a, b *fragDev) bool { return a.cls == b.cls && a.free == b.free && a.idle == b.idle }

// linkedAlike is the best-linked set of the devices alike to picks, as
// view indexes, or nil to keep picks (no links among them); false when
// the claim requires NVLink and no set of the devices that can serve it
// has it.
func (c *fragCache) linkedAlike(view []fragDev, span *fragSpans, fc *fragClaim, picks []int16, nvlinkOnly bool) ([]int16, bool) {
	cands, kind, quota := alikeOf(view, span, fc, picks)
	if !slices.ContainsFunc(cands, func(c rankedDevice) bool { return c.d.Topology != nil && len(c.d.Topology.Links) > 0 }) && !nvlinkOnly {
		return nil, true
	}
	set := linkedSet(linkSearch{cands: cands, n: len(picks), kind: kind, quota: quota}, nvlinkOnly)
	if set == nil && nvlinkOnly {
		cands = cands[:0]
		for j := span[fc.typ][0]; j < span[fc.typ][1]; j++ {
			if c.work.canTake(&view[j], fc) {
				cands = append(cands, rankedDevice{d: view[j].d, key: float64(j)})
			}
		}
		if set = linked(cands, len(picks), true); set == nil {
			return nil, false
		}
	}
	return viewIndexes(set), true
}

// nearAlike is, among the devices alike to picks, those on the NUMA nodes
// numas first (view order otherwise), as view indexes.
func nearAlike(view []fragDev, span *fragSpans, fc *fragClaim, picks []int16, numas []int) []int16 {
	cands, kind, quota := alikeOf(view, span, fc, picks)
	nearNUMA(cands, numas)
	var set []rankedDevice
	for i, c := range cands {
		if quota[kind[i]] > 0 {
			quota[kind[i]]--
			set = append(set, c)
		}
	}
	return viewIndexes(set)
}

func viewIndexes(set []rankedDevice) []int16 {
	if set == nil {
		return nil
	}
	out := make([]int16, len(set))
	for i, c := range set {
		out[i] = int16(c.key)
	}
	return out
}

// nvlinked reports whether the picked devices are linked by NVLink
// pairwise.
func nvlinked(view []fragDev, picks []int16) bool {
	for a, p := range picks {
		for _, q := range picks[a+1:] {
			if link(view[p].d, view[q].d) != linkNVLink {
				return false
			}
		}
	}
	return true
}
