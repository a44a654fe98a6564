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
// records, entries, index and digest agree (history.check). It returns
// the first violation.
func (s *State) CheckInvariants() error {
	if err := s.checkLive(sortedKeys(s.devices)); err != nil {
		return err
	}
	return s.history.check()
}

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
			h := s.hosts[a.Host]
			if h == nil || !h.Up {
				return fmt.Errorf("allocation %s: active on missing or down host %q", aid, a.Host)
			}
			perClaim := make([]int, len(a.Request.Claims))
			seen := map[string]bool{}
			for _, as := range a.Devices {
				d := s.devices[as.DeviceID]
				if d == nil || d.Host != a.Host {
					return fmt.Errorf("allocation %s: device %s missing or on another host", aid, as.DeviceID)
				}
				if seen[as.DeviceID] && !d.cls.shareable {
					return fmt.Errorf("allocation %s: holds exclusive device %s twice", aid, as.DeviceID)
				}
				seen[as.DeviceID] = true
				if as.Claim < 0 || as.Claim >= len(perClaim) {
					return fmt.Errorf("allocation %s: assignment to claim %d", aid, as.Claim)
				}
				perClaim[as.Claim]++
				if d.Type != a.Request.Claims[as.Claim].Type {
					return fmt.Errorf("allocation %s: device %s of type %s for a %s claim", aid, d.ID, d.Type, a.Request.Claims[as.Claim].Type)
				}
			}
			for i, n := range perClaim {
				if n != a.Request.Claims[i].Count {
					return fmt.Errorf("allocation %s: claim %d has %d devices, wants %d", aid, i, n, a.Request.Claims[i].Count)
				}
			}
		default:
			return fmt.Errorf("allocation %s: live map holds status %s", aid, a.Status)
		}
	}
	if s.queue.Len() != pending {
		return fmt.Errorf("queue holds %d, %d allocations pending", s.queue.Len(), pending)
	}
	return nil
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
