package fsm

// Preemption for gangs, with the rules of preempt.go (and of a reclaim,
// reclaim.go): only the allocations the rule makes eligible may end, the
// fewest first. On each host they are freed in the rule's order and each
// step records the largest part the host could
// then take; the parts are then chosen as gangPack chooses them, the
// largest first, each on the host that reaches it with the fewest
// victims (then the lowest highest priority among them, then by host
// ID). A victim that spans several hosts is counted on each, so the
// search never frees less than it needs; it ends once, whole.

// gangStage is a host after its first victims are freed: the largest part
// it can then take.
type gangStage struct {
	take    int
	victims int
}

// gangVictimHost is one host's victims, in order, and its stages.
type gangVictimHost struct {
	h      *Host
	cands  []*Allocation
	stages []gangStage
}

// preemptGang finds victims among the allocations the rule makes eligible
// that let gang a be placed, and the placement; nil when none do.
func (s *State) preemptGang(a *Allocation, pc PolicyConfig, rule victimRule) ([]*Allocation, *placement) {
	r := &a.Request
	fits := s.fitting(r)
	for _, f := range fits {
		if len(f) == 0 {
			return nil, nil
		}
	}
	g := s.newGangQuery(r, fits, ownOverlay(a))
	pl := definition(pc.Policy).place
	byDomain := map[string][]*gangVictimHost{}
	s.eachGangHost(r, func(h *Host, dom string) {
		vh := &gangVictimHost{h: h, cands: s.victimsOn(h, r, rule.eligible, rule.first)}
		ov := g.ov.clone()
		last, _ := s.gangTakeMax(g, pl, h, ov)
		vh.stages = append(vh.stages, gangStage{take: last})
		for i, v := range vh.cands {
			if last == g.n {
				break
			}
			freeInto(ov, v)
			if n, _ := s.gangTakeMax(g, pl, h, ov); n > last {
				last = n
				vh.stages = append(vh.stages, gangStage{take: n, victims: i + 1})
			}
		}
		if last >= g.min {
			byDomain[dom] = append(byDomain[dom], vh)
		}
	})
	var bestVictims []*Allocation
	var best *placement
	for _, dom := range sortedKeys(byDomain) {
		victims, p := s.packVictims(g, pl, byDomain[dom])
		if p != nil && (best == nil || len(victims) < len(bestVictims) ||
			len(victims) == len(bestVictims) && maxPrio(victims) < maxPrio(bestVictims)) {
			bestVictims, best = victims, p
		}
	}
	return bestVictims, best
}

// packVictims chooses the hosts as gangPack does, each part on the host
// that reaches it with the fewest victims, and sizes the parts as
// sizeParts does; it returns the victims (each once) and the placement,
// or nil.
func (s *State) packVictims(g *gangQuery, pl placer, hosts []*gangVictimHost) ([]*Allocation, *placement) {
	type choice struct {
		vh    *gangVictimHost
		n, at int // the part, and the victims it needs on vh
	}
	var chosen []choice
	used := map[*gangVictimHost]bool{}
	most := 0
	for _, vh := range hosts {
		most = max(most, vh.stages[len(vh.stages)-1].take)
	}
	sum := 0
	for sum < g.n {
		if len(chosen) == g.k {
			return nil, nil
		}
		var got *choice
		for c := max(min(g.n-sum, most), g.min); c >= g.min && got == nil; c-- {
			for _, vh := range hosts {
				if used[vh] {
					continue
				}
				if at := vh.stageFor(c); at >= 0 && (got == nil || at < got.at ||
					at == got.at && maxPrio(vh.cands[:at]) < maxPrio(got.vh.cands[:got.at])) {
					got = &choice{vh: vh, n: c, at: at}
				}
			}
		}
		if got == nil {
			return nil, nil
		}
		used[got.vh] = true
		chosen = append(chosen, *got)
		sum += got.n
	}
	// Sized as sizeParts sizes them, each host freeing only the victims
	// its part needs.
	if len(chosen)*g.min > g.n {
		return nil, nil
	}
	extra := g.n - len(chosen)*g.min
	var victims []*Allocation
	seen := map[string]bool{}
	var parts []gangPart
	for _, c := range chosen {
		size := g.min + min(c.n-g.min, extra)
		extra -= size - g.min
		ov := g.ov.clone()
		for _, v := range c.vh.cands[:c.vh.stageFor(size)] {
			freeInto(ov, v)
			if !seen[v.ID] {
				seen[v.ID] = true
				victims = append(victims, v)
			}
		}
		assign := pl.onHost(s, c.vh.h, g.part(size), ov)
		if assign == nil {
			return nil, nil // the stages promised it: a defect, refuse rather than over-commit
		}
		parts = append(parts, gangPart{h: c.vh.h, n: size, assign: assign})
	}
	return victims, gangPlacement(parts)
}

// stageFor is how many of its victims the host must free to take a part
// of n, or -1 when freeing them all is not enough.
func (vh *gangVictimHost) stageFor(n int) int {
	for _, st := range vh.stages {
		if st.take >= n {
			return st.victims
		}
	}
	return -1
}

// gangTakeMax is the largest part (of at least the gang's minimum) host h
// can take with the overlay's changes, and its assignments; 0 when none.
func (s *State) gangTakeMax(g *gangQuery, pl placer, h *Host, ov *overlay) (int, []Assignment) {
	cl := &g.q.r.Claims[0]
	ub := 0
	for _, d := range s.hostTypeDevices(h, cl.Type) {
		if g.q.passes(d.cls, 0) {
			if amt, whole := take(d.cls, cl); s.fits(d, amt, whole, ov) {
				ub++
			}
		}
	}
	hi := min(ub, g.n)
	if hi < g.min {
		return 0, nil
	}
	if a := pl.onHost(s, h, g.part(hi), ov); a != nil {
		return hi, a
	}
	// Fewer devices always fit where more do: search the largest.
	best, lo := 0, g.min
	var bestA []Assignment
	for hi--; lo <= hi; {
		m := (lo + hi) / 2
		if a := pl.onHost(s, h, g.part(m), ov); a != nil {
			best, bestA, lo = m, a, m+1
		} else {
			hi = m - 1
		}
	}
	return best, bestA
}
