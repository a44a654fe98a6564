package fsm

import (
	"fmt"
	"math"
	"runtime"
	"slices"
)

// CheckInvariants verifies that the state holds together: no device is
// over-committed, an exclusive device has at most one allocation, every
// active allocation's devices exist, are on its host, are not offline and
// list it back, none was placed on a drained host or outlived the drain's
// deadline, the queue holds exactly the pending allocations, and the
// derived index agrees with the devices, and the snapshot records kept
// for hosts and devices are their current encodings, and the history's
// records, entries, index and digest agree (history.check), and so do
// the request cache's (requestCache.check), and no apply found the
// statistics short of a value (Fault). It returns the first violation.
func (s *State) CheckInvariants() error {
	if err := s.Fault(); err != nil {
		return err
	}
	if err := s.checkLive(sortedKeys(s.devices)); err != nil {
		return err
	}
	if err := s.history.check(); err != nil {
		return err
	}
	return s.cache.check()
}

// Fault is the first inconsistency an apply found in the state it keeps
// derived (the statistics' trees short of a value they should hold), or
// nil. It does not heal: a replica with a fault must stop applying, as
// for an entry it cannot decode, rather than serve figures that have
// drifted.
func (s *State) Fault() error { return s.agg.fault }

// checkLive is CheckInvariants but for the history, which a restore
// checks record by record as it files them; devices are the device IDs
// in order. Its parts only read, so on a large state they run side by
// side (firstError), the first failure in their order winning: the
// devices (in two halves or more), the classes, the hosts, the live
// allocations and the queue, the kept snapshot records.
func (s *State) checkLive(devices []string) error {
	parts := []func() error{s.checkClasses, s.checkHosts, s.checkAllocs, s.checkHeadCache, s.checkQuotaUse, s.checkFairShare, s.checkReclaims}
	chunks := 1
	if len(devices) > 4096 {
		chunks = runtime.GOMAXPROCS(0)
	}
	for c := chunks - 1; c >= 0; c-- {
		ids := devices[c*len(devices)/chunks : (c+1)*len(devices)/chunks]
		parts = slices.Insert(parts, 0, func() error {
			for _, id := range ids {
				if err := s.checkDevice(id); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return firstError(parts, len(devices) > 4096)
}

// checkClasses checks that the class index holds only indexed devices of
// the class.
func (s *State) checkClasses() error {
	for _, key := range sortedKeys(s.idx.classes) {
		c := s.idx.classes[key]
		var bad string
		c.free.Ascend(func(id string) bool {
			if d := s.devices[id]; d == nil || d.cls != c || !d.indexed {
				bad = id
				return false
			}
			return true
		})
		if bad != "" {
			return fmt.Errorf("class index holds stale device %s", bad)
		}
	}
	return nil
}

// checkHosts checks that each host lists its own devices, in order.
func (s *State) checkHosts() error {
	for _, hid := range sortedKeys(s.hosts) {
		h := s.hosts[hid]
		for i, id := range h.Devices {
			if d := s.devices[id]; d == nil || d.Host != hid {
				return fmt.Errorf("host %s: lists device %s it does not have", hid, id)
			}
			if i > 0 && h.Devices[i-1] >= id {
				return fmt.Errorf("host %s: devices not sorted", hid)
			}
		}
	}
	return nil
}

// checkAllocs checks the live allocations against their hosts, devices
// and claims, and the queue against the pending ones.
func (s *State) checkAllocs() error {
	pending := 0
	for _, aid := range sortedKeys(s.allocs) {
		a := s.allocs[aid]
		switch a.Status {
		case Pending:
			pending++
			if !s.queue.Has(queueKeyOf(a)) {
				return fmt.Errorf("allocation %s: pending but not queued", aid)
			}
			if len(a.Devices) != 0 {
				return fmt.Errorf("allocation %s: pending with devices", aid)
			}
		case Active:
			if err := s.checkPlaced(a); err != nil {
				return fmt.Errorf("allocation %s: %w", aid, err)
			}
		default:
			return fmt.Errorf("allocation %s: live map holds status %s", aid, a.Status)
		}
	}
	if s.queue.Len() != pending {
		return fmt.Errorf("queue holds %d, %d allocations pending", s.queue.Len(), pending)
	}
	return s.checkGangs()
}

// checkPlaced checks an active allocation against its hosts, devices and
// claims: a one-host request has every device on its host; a gang has
// its first claim whole over at most MaxHosts hosts, at least MinPerHost
// on each, every other claim whole on each, all hosts with one value of
// its Same label, and lists those hosts, sorted, the first its Host.
func (s *State) checkPlaced(a *Allocation) error {
	r := &a.Request
	hosts := []string{a.Host}
	if r.IsGang() {
		hosts = a.Hosts
		if len(hosts) == 0 || len(hosts) > r.MaxHosts || !slices.IsSorted(hosts) || hosts[0] != a.Host {
			return fmt.Errorf("gang hosts %v (host %q) over at most %d", hosts, a.Host, r.MaxHosts)
		}
	} else if len(a.Hosts) != 0 {
		return fmt.Errorf("one-host request with gang hosts %v", a.Hosts)
	}
	if r.Host != "" && a.Host != r.Host {
		return fmt.Errorf("held to host %s, placed on %s", r.Host, a.Host)
	}
	perHost := map[string][]int{}
	for _, id := range hosts {
		h := s.hosts[id]
		if h == nil || !h.Up {
			return fmt.Errorf("active on missing or down host %q", id)
		}
		if perHost[id] != nil {
			return fmt.Errorf("host %s listed twice", id)
		}
		perHost[id] = make([]int, len(r.Claims))
	}
	seen := map[string]bool{}
	for _, as := range a.Devices {
		d := s.devices[as.DeviceID]
		if d == nil || perHost[d.Host] == nil {
			return fmt.Errorf("device %s missing or on another host", as.DeviceID)
		}
		if seen[as.DeviceID] && !d.cls.shareable {
			return fmt.Errorf("holds exclusive device %s twice", as.DeviceID)
		}
		seen[as.DeviceID] = true
		if as.Claim < 0 || as.Claim >= len(r.Claims) {
			return fmt.Errorf("assignment to claim %d", as.Claim)
		}
		perHost[d.Host][as.Claim]++
		if d.Type != r.Claims[as.Claim].Type {
			return fmt.Errorf("device %s of type %s for a %s claim", d.ID, d.Type, r.Claims[as.Claim].Type)
		}
	}
	first := 0
	for _, id := range hosts {
		n := perHost[id]
		first += n[0]
		if r.IsGang() && n[0] < r.minPerHost() {
			return fmt.Errorf("host %s takes %d of the first claim, fewer than %d", id, n[0], r.minPerHost())
		}
		for i := 1; i < len(n); i++ {
			if n[i] != r.Claims[i].Count {
				return fmt.Errorf("claim %d has %d devices on %s, wants %d", i, n[i], id, r.Claims[i].Count)
			}
		}
		if r.Same != "" {
			v, ok := s.hosts[id].Labels[r.Same]
			if w := s.hosts[hosts[0]].Labels[r.Same]; !ok || v != w {
				return fmt.Errorf("host %s has %s=%q, the first host %q", id, r.Same, v, w)
			}
		}
	}
	if first != r.Claims[0].Count {
		return fmt.Errorf("claim 0 has %d devices, wants %d", first, r.Claims[0].Count)
	}
	return s.checkNVLink(a)
}

// checkNVLink checks that the devices a claim requiring NVLink took on a
// host are linked by NVLink pairwise (a device whose links change leaves
// its allocations, so this holds as long as the allocation does).
func (s *State) checkNVLink(a *Allocation) error {
	for i, as := range a.Devices {
		if a.Request.Claims[as.Claim].Topology != TopologyNVLink {
			continue
		}
		d := s.devices[as.DeviceID]
		for _, bs := range a.Devices[i+1:] {
			if e := s.devices[bs.DeviceID]; bs.Claim == as.Claim && e.Host == d.Host && link(d, e) != linkNVLink {
				return fmt.Errorf("claim %d requires NVLink, but devices %s and %s are linked %v", as.Claim, d.ID, e.ID, link(d, e))
			}
		}
	}
	return nil
}

// checkGangs checks the waiting gangs and their reservations: the gangs
// are those pending; only the first of each type in queue order holds a
// reservation, on hosts that can take work, each held by it alone; and
// no waiting gang of a namespace without a quota could be placed now (the
// reservation gathers capacity for it, the queue pass that frees the last
// it needs places it).
func (s *State) checkGangs() error {
	n := 0
	heads := map[DeviceType]*Allocation{}
	var bad error
	s.gangs.Ascend(func(k queueKey) bool {
		a := s.allocs[k.id]
		if a == nil || a.Status != Pending || !a.Request.IsGang() {
			bad = fmt.Errorf("gang list holds %s, not a waiting gang", k.id)
			return false
		}
		n++
		if t := a.Request.Claims[0].Type; heads[t] == nil {
			heads[t] = a
		}
		return true
	})
	if bad != nil {
		return bad
	}
	held := 0
	for _, aid := range sortedKeys(s.allocs) {
		a := s.allocs[aid]
		if a.Status == Pending && a.Request.IsGang() {
			n--
		}
		if len(a.Reserved) == 0 {
			if s.reserving[aid] != nil {
				return fmt.Errorf("gang %s: listed as reserving without hosts", aid)
			}
			continue
		}
		if a.Status != Pending || heads[a.Request.Claims[0].Type] != a || s.reserving[aid] != a {
			return fmt.Errorf("allocation %s (%s) holds a reservation and is not the first waiting gang of its type", aid, a.Status)
		}
		for _, h := range a.Reserved {
			if s.reserved[h] != a {
				return fmt.Errorf("gang %s: reserved host %s held by another", aid, h)
			}
			if host := s.hosts[h]; host == nil || !host.Schedulable() {
				return fmt.Errorf("gang %s: reserved host %s cannot take work", aid, h)
			}
			held++
		}
	}
	if n != 0 || held != len(s.reserved) || len(s.reserving) > len(heads) {
		return fmt.Errorf("gangs: %d waiting unlisted, %d hosts reserved of %d held, %d reserving", n, held, len(s.reserved), len(s.reserving))
	}
	s.gangs.Ascend(func(k queueKey) bool {
		a := s.allocs[k.id]
		// (A quota is checked on the placement the placer chose: another,
		// within the quota, may be found only once that one changes.)
		if a.Deadline > s.now && s.quotas[a.Namespace] == nil {
			if p, _ := s.placeInQuota(a, s.requestPolicy(&a.Request)); p != nil {
				bad = fmt.Errorf("gang %s waits, yet could be placed now on %v", a.ID, p.hosts)
			}
		}
		return bad == nil
	})
	return bad
}

// checkDevice checks device id against its host and its allocations and
// the index.
func (s *State) checkDevice(id string) error {
	d := s.devices[id]
	h := s.hosts[d.Host]
	if h == nil {
		return fmt.Errorf("device %s: unknown host %q", id, d.Host)
	}
	if !d.Capabilities.vec().covers(d.Used.vec()) {
		return fmt.Errorf("device %s: used %+v exceeds capacity %+v", id, d.Used, d.Capabilities.Resources)
	}
	if !d.Used.valid() {
		return fmt.Errorf("device %s: used %+v negative or NaN", id, d.Used)
	}
	exclusive := !d.cls.shareable
	if exclusive && len(d.Allocations) > 1 {
		return fmt.Errorf("device %s: exclusive with %d allocations", id, len(d.Allocations))
	}
	var sum vec
	for _, aid := range d.Allocations {
		a := s.allocs[aid]
		if a == nil || a.Status != Active {
			return fmt.Errorf("device %s: lists allocation %s that is not active", id, aid)
		}
		found := false
		for _, as := range a.Devices {
			if as.DeviceID == id {
				sum = sum.add(as.Amount.vec())
				found = true
			}
		}
		if !found {
			return fmt.Errorf("device %s: allocation %s does not hold it", id, aid)
		}
	}
	for i := range sum {
		if math.Abs(sum[i]-d.Used.vec()[i]) > 1e-6 {
			return fmt.Errorf("device %s: used %+v but allocations sum to %+v", id, d.Used, sum.resources())
		}
	}
	if len(d.Allocations) > 0 && !h.Up {
		return fmt.Errorf("device %s: offline with active allocations", id)
	}
	if dr := h.Drain; dr != nil {
		if len(d.Allocations) > 0 && dr.Ended {
			return fmt.Errorf("device %s: allocations kept past its host's drain deadline", id)
		}
		for _, aid := range d.Allocations {
			if a := s.allocs[aid]; a != nil && a.AllocatedAt > dr.Since {
				return fmt.Errorf("device %s: allocation %s placed on a drained host", id, aid)
			}
		}
		if dr.Deadline != 0 && !dr.Ended && !s.timers.Has(timerKey{at: dr.Deadline, kind: drainTimer, id: h.ID}) {
			return fmt.Errorf("host %s: drain deadline without its timer", h.ID)
		}
	}
	if d.indexed != s.hasFree(d) {
		return fmt.Errorf("device %s: indexed=%t but free=%t", id, d.indexed, s.hasFree(d))
	}
	if d.indexed && !d.cls.free.Has(d.ID) {
		return fmt.Errorf("device %s: missing from its class index", id)
	}
	return nil
}

// firstError calls each of checks and returns the error of the first
// that fails in their order, nil if none does; side by side on up to one
// goroutine per processor when parallel is set (checks must then only
// read), one after the other else.
func firstError(checks []func() error, parallel bool) error {
	errs := make([]error, len(checks))
	if parallel {
		inParallel(len(checks), func(i int) { errs[i] = checks[i]() })
	} else {
		for i, check := range checks {
			if errs[i] = check(); errs[i] != nil {
				break
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
