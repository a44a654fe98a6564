package fsm

import (
	"slices"
	"sort"
)

// Reservations for waiting gangs (Slurm's backfill with reservations). A
// gang that waits could otherwise wait forever: each device that frees
// goes to the small requests that fit at once. So the first waiting gang
// of each device type (the type of its first claim), in queue order,
// holds a reservation: the hosts it will run on. Their devices of that
// type are closed to the requests behind it in the queue (open,
// reservedAgainst), with the reason "reserved for a waiting gang", and
// stay open to the gang itself (overlay.own), so as they free the gang
// gathers them and is placed by the queue pass that frees the last one it
// needs. A one-host request ahead of it takes them when it fits nowhere
// else (placeAhead).
//
// The hosts are chosen once, and kept while the gang waits, so that a
// reservation does not wander off the hosts that are about to free: a
// packing of the gang as if every device of the type were free, on the
// hosts with the most devices that pass its first claim's filters (the
// fewest hosts), then the most free now, then by ID. A reservation ends
// when its gang is placed or leaves the queue, when another gang comes
// first in the queue for the type, or when one of its hosts can no longer
// take work (down, drained, removed); settleReservations, run after every
// command, then moves it. When a gang leaves the queue placed, the gang
// next in line reserves before any request behind it is tried
// (settleHeads, gangLeftQueue). Reservations are kept on the allocation
// (Allocation.Reserved), so they travel in the snapshot; the map by host
// is rebuilt on restore.

// reservedAgainst reports whether device d is reserved for a gang other
// than the overlay's own.
func (s *State) reservedAgainst(d *Device, ov *overlay) bool {
	if len(s.reserved) == 0 {
		return false
	}
	g := s.reserved[d.Host]
	if g == nil || g.Request.Claims[0].Type != d.Type {
		return false
	}
	return ov == nil || ov.own != g.ID
}

// open reports whether device d may take new work from the overlay's
// request: its host is up and not drained, it is available, and it is not
// reserved for another gang.
func (s *State) open(d *Device, ov *overlay) bool {
	h := s.hosts[d.Host]
	return h != nil && h.Schedulable() && d.Status == Available && !s.reservedAgainst(d, ov)
}

// placeAhead places a one-host request on the hosts reserved for gangs it
// comes before in the queue (a higher priority, or the same and earlier),
// when it fits nowhere else: a reservation holds capacity against the
// requests behind its gang, not against those ahead, as Slurm's backfill
// plans a job of a higher priority first. The reservations stay; their
// gangs wait for the devices to free again. nil when the request does not
// fit there either.
func (s *State) placeAhead(a *Allocation, pc PolicyConfig) (p *placement) {
	if behind := s.gangsBehind(a); len(behind) > 0 {
		s.withOpen(behind, func() { p = s.place(&a.Request, pc, nil) })
	}
	return p
}

// gangsBehind are the reserving gangs that one-host allocation a comes
// before in the queue, of a type it asks for.
func (s *State) gangsBehind(a *Allocation) []*Allocation {
	if len(s.reserving) == 0 || a.Request.IsGang() {
		return nil
	}
	var out []*Allocation
	for _, id := range sortedKeys(s.reserving) {
		g := s.reserving[id]
		t := g.Request.Claims[0].Type
		asks := slices.ContainsFunc(a.Request.Claims, func(c Claim) bool { return c.Type == t })
		if asks && queueKeyLess(queueKeyOf(a), queueKeyOf(g)) {
			out = append(out, g)
		}
	}
	return out
}

// withOpen runs fn with the hosts reserved for gangs open to every
// request, and closes them again.
func (s *State) withOpen(gangs []*Allocation, fn func()) {
	for _, g := range gangs {
		s.setReservedHosts(g, false)
	}
	fn()
	for _, g := range gangs {
		s.setReservedHosts(g, true)
	}
}

// setReservedHosts closes (on) or opens g's reserved hosts to other
// requests, leaving the reservation itself as it is.
func (s *State) setReservedHosts(g *Allocation, on bool) {
	t := g.Request.Claims[0].Type
	for _, id := range g.Reserved {
		change := func() { s.reserved[id] = g }
		if !on {
			if s.reserved[id] != g {
				continue
			}
			change = func() { delete(s.reserved, id) }
		}
		if h := s.hosts[id]; h != nil {
			s.changeTypeOn(h, t, change)
		} else {
			change()
		}
	}
}

// ownOverlay is the overlay a waiting allocation is placed with: its
// reservation open to it; nil when it has none.
func ownOverlay(a *Allocation) *overlay {
	if len(a.Reserved) == 0 {
		return nil
	}
	ov := newOverlay()
	ov.own = a.ID
	return ov
}

// reservedHosts are the hosts reserved for the overlay's own gang that
// can take work.
func (s *State) reservedHosts(ov *overlay) []*Host {
	if ov == nil || ov.own == "" {
		return nil
	}
	a := s.allocs[ov.own]
	if a == nil {
		return nil
	}
	var out []*Host
	for _, id := range a.Reserved {
		if h := s.hosts[id]; h != nil && h.Schedulable() {
			out = append(out, h)
		}
	}
	return out
}

// settleReservations gives the first waiting gang of each type its
// reservation and ends the others (see above). A reservation that ended,
// here or as its gang left the queue, may let other requests in: the
// queue is examined again, which may place gangs and change who comes
// first, until nothing moves.
func (s *State) settleReservations() {
	for range 16 { // each round places work or ends a reservation; a bound for safety
		if len(s.reserving) == 0 && s.gangs.Len() == 0 && !s.reopened {
			return
		}
		s.settleHeads()
		if !s.reopened {
			return
		}
		s.reopened = false
		s.kickQueue()
	}
}

// settleHeads ends the reservations of gangs that no longer come first or
// whose hosts cannot take work, and reserves for each first gang without
// one, placing it if it fits. A gang placed so makes the next in line
// first: it reserves in turn before the queue is examined, so that a
// reservation that passed to a gang ahead (of a higher priority) does not
// open its hosts to the requests behind in between. Each pass that goes
// on has placed a gang, so the passes end.
func (s *State) settleHeads() {
	for {
		heads := map[DeviceType]*Allocation{}
		s.gangs.Ascend(func(k queueKey) bool {
			a := s.allocs[k.id]
			if t := a.Request.Claims[0].Type; heads[t] == nil {
				heads[t] = a
			}
			return len(heads) < len(DeviceTypes)
		})
		for _, id := range sortedKeys(s.reserving) {
			g := s.reserving[id]
			if heads[g.Request.Claims[0].Type] != g || !s.reservationHolds(g) {
				s.unreserve(g)
			}
		}
		placed := false
		for _, t := range DeviceTypes {
			if g := heads[t]; g != nil && len(g.Reserved) == 0 {
				if hosts := s.planReservation(g); hosts != nil {
					s.reserve(g, hosts)
					placed = s.tryReserved(g) || placed
				}
			}
		}
		if !placed {
			return
		}
	}
}

// gangLeftQueue follows a placement from the queue: a gang placed may have
// been the first of its type, holding a reservation, so the next in line
// reserves (settleHeads) before the pass goes on to the requests behind.
func (s *State) gangLeftQueue(a *Allocation) {
	if a.Request.IsGang() {
		s.settleHeads()
	}
}

// tryReserved places gang g if it fits now that its reserved hosts come
// first (with a quota, the placement first chosen may have been past it),
// and reports whether it did.
func (s *State) tryReserved(g *Allocation) bool {
	if g.Deadline <= s.now {
		return false
	}
	p, _ := s.placeInQuota(g, s.requestPolicy(&g.Request))
	if p == nil {
		return false
	}
	s.activate(g, p)
	return true
}

// reservationHolds reports whether every host of g's reservation can still
// take work.
func (s *State) reservationHolds(g *Allocation) bool {
	for _, id := range g.Reserved {
		if h := s.hosts[id]; h == nil || !h.Schedulable() {
			return false
		}
	}
	return true
}

// reserve gives g the reservation of hosts: their devices of its first
// claim's type close to other requests (placeAhead opens them to those
// ahead of it).
func (s *State) reserve(g *Allocation, hosts []string) {
	g.Reserved = hosts
	g.ModifyIndex = s.last
	s.reserving[g.ID] = g
	s.setReservedHosts(g, true)
	s.emitAlloc(g, EventReserved)
}

// unreserve ends g's reservation.
func (s *State) unreserve(g *Allocation) {
	if len(g.Reserved) == 0 {
		return
	}
	s.setReservedHosts(g, false)
	delete(s.reserving, g.ID)
	g.Reserved = nil
	g.ModifyIndex = s.last
	s.reopened = true
}

// changeTypeOn applies change between taking h's devices of type t out of
// the indexes and putting them back.
func (s *State) changeTypeOn(h *Host, t DeviceType, change func()) {
	devs := s.hostTypeDevices(h, t)
	for _, d := range devs {
		s.unindex(d)
	}
	change()
	for _, d := range devs {
		s.reindex(d)
	}
}

// planReservation chooses the hosts of g's reservation, or nil when no
// hosts could ever take it: its first claim packed as if every device of
// the type were free, on the hosts with the most devices that pass the
// claim's filters (for a claim that requires NVLink, the most linked so
// pairwise), then the most free now, then by ID; with Same, in the
// domain that needs the fewest hosts, then has the most free, then by
// value. Hosts reserved for another gang are not taken.
func (s *State) planReservation(g *Allocation) []string {
	r := &g.Request
	fits := s.fitting(r)
	for _, f := range fits {
		if len(f) == 0 {
			return nil
		}
	}
	q := s.newQuery(r, fits)
	cl := &r.Claims[0]
	type cand struct {
		id        string
		pot, free int
	}
	byDomain := map[string][]cand{}
	s.eachGangHost(r, func(h *Host, dom string) {
		if s.reserved[h.ID] != nil {
			return
		}
		c := cand{id: h.ID}
		var linkable []rankedDevice
		for _, d := range s.hostTypeDevices(h, cl.Type) {
			if d.Status != Available || !q.passes(d.cls, 0) {
				continue
			}
			c.pot++
			if cl.Topology == TopologyNVLink {
				linkable = append(linkable, rankedDevice{d: d})
			}
			if amt, whole := take(d.cls, cl); s.fits(d, amt, whole, nil) {
				c.free++
			}
		}
		if cl.Topology == TopologyNVLink {
			// A part is linked by NVLink pairwise: at most the host's
			// largest such set.
			c.pot = largestLinked(linkable)
			c.free = min(c.free, c.pot)
		}
		if c.pot >= r.minPerHost() {
			byDomain[dom] = append(byDomain[dom], c)
		}
	})
	var best []string
	bestFree := 0
	for _, dom := range sortedKeys(byDomain) {
		cands := byDomain[dom]
		sort.SliceStable(cands, func(i, j int) bool {
			if cands[i].pot != cands[j].pot {
				return cands[i].pot > cands[j].pot
			}
			return cands[i].free > cands[j].free
		})
		var hosts []string
		free, left := 0, cl.Count
		for _, c := range cands {
			if left == 0 || len(hosts) == max(r.MaxHosts, 1) {
				break
			}
			take := min(c.pot, left)
			if rest := left - take; rest > 0 && rest < r.minPerHost() {
				take = left - r.minPerHost()
				if take < r.minPerHost() {
					continue
				}
			}
			hosts = append(hosts, c.id)
			free += min(c.free, take)
			left -= take
		}
		if left > 0 {
			continue
		}
		if best == nil || len(hosts) < len(best) || len(hosts) == len(best) && free > bestFree {
			best, bestFree = hosts, free
		}
	}
	slices.Sort(best)
	return best
}

// restoreReservations rebuilds the waiting gangs and the reservations by
// host from the allocations, before the devices are indexed, and checks
// them: a reservation is on known hosts, sorted, none held twice, one
// gang of a type at most.
func (s *State) restoreReservations() error {
	types := map[DeviceType]bool{}
	for _, id := range sortedKeys(s.allocs) {
		a := s.allocs[id]
		if a.Status != Pending || !a.Request.IsGang() {
			continue
		}
		s.gangs.ReplaceOrInsert(queueKeyOf(a))
		if len(a.Reserved) == 0 {
			continue
		}
		if t := a.Request.Claims[0].Type; types[t] {
			return errf(ErrSnapshot, "gang %s: a second reservation for %s", a.ID, t)
		} else {
			types[t] = true
		}
		if !slices.IsSorted(a.Reserved) {
			return errf(ErrSnapshot, "gang %s: reserved hosts out of order", a.ID)
		}
		s.reserving[a.ID] = a
		for _, h := range a.Reserved {
			if s.hosts[h] == nil || s.reserved[h] != nil {
				return errf(ErrSnapshot, "gang %s: reserved host %q unknown or reserved twice", a.ID, h)
			}
			s.reserved[h] = a
		}
	}
	return nil
}

// expectedStart is when gang g, waiting with a reservation, should find
// enough devices free on its reserved hosts: each device that passes its
// first claim's filters frees when the last lease on it ends (now when it
// is free); the gang starts at the first of those times by which its
// reserved hosts could take it, each what it has free by then (for a
// claim that requires NVLink, its largest set of them linked so
// pairwise) when that is at least the minimum per host. 0 when it has no
// reservation or needs a device held without a lease.
func (s *State) expectedStart(g *Allocation) int64 {
	if g.Status != Pending || len(g.Reserved) == 0 {
		return 0
	}
	r := &g.Request
	fits := s.fitting(r)
	if len(fits[0]) == 0 {
		return 0
	}
	q := s.newQuery(r, fits)
	cl := &r.Claims[0]
	type freeing struct {
		d  *Device
		at int64
	}
	var byHost [][]freeing
	var times []int64
	for _, id := range g.Reserved {
		h := s.hosts[id]
		if h == nil {
			continue
		}
		var frees []freeing
		for _, d := range s.hostTypeDevices(h, cl.Type) {
			if d.Status != Available || !q.passes(d.cls, 0) {
				continue
			}
			at := s.now
			for _, aid := range d.Allocations {
				a := s.allocs[aid]
				if a == nil || a.LeaseExpiresAt == 0 {
					at = 0
					break
				}
				at = max(at, a.LeaseExpiresAt)
			}
			if at != 0 {
				frees = append(frees, freeing{d, at})
				times = append(times, at)
			}
		}
		byHost = append(byHost, frees)
	}
	// enough reports whether the hosts could take the gang by time t;
	// once they can, they can at every later time.
	enough := func(t int64) bool {
		total := 0
		for _, frees := range byHost {
			var free []rankedDevice
			for _, f := range frees {
				if f.at <= t {
					free = append(free, rankedDevice{d: f.d})
				}
			}
			n := len(free)
			if cl.Topology == TopologyNVLink {
				n = largestLinked(free)
			}
			if n >= r.minPerHost() {
				total += n
			}
		}
		return total >= cl.Count
	}
	slices.Sort(times)
	times = slices.Compact(times)
	if i := sort.Search(len(times), func(i int) bool { return enough(times[i]) }); i < len(times) {
		return times[i]
	}
	return 0
}
