package fsm

import "time"

// A host drain (DrainHost) takes the host out of placement at once:
// Host.Schedulable is false, so the index, the fragmentation measure and
// preemption pass it by, as they do a host that is down. Its active
// allocations keep their devices; a drain with a deadline sets a timer
// (drainTimer, keyed by host ID) that, when a tick reaches it, ends the
// allocations still there as drained. The drain stays until a DrainHost
// with Enable false ends it, or the host is removed.

func (s *State) drainHost(c *DrainHost) Result {
	h := s.hosts[c.HostID]
	if h == nil {
		return Result{Err: errf(ErrNotFound, "host %q", c.HostID)}
	}
	if c.Deadline < 0 || c.Deadline > MaxDuration {
		return Result{Err: errf(ErrInvalid, "drain deadline %v out of [0, %v]", c.Deadline, MaxDuration)}
	}
	if !c.Enable && h.Drain == nil {
		return Result{}
	}
	var next *HostDrain
	if c.Enable {
		next = &HostDrain{Since: s.now}
		if h.Drain != nil {
			next.Since = h.Drain.Since
		}
		if c.Deadline > 0 {
			next.Deadline = s.now + int64(c.Deadline)
		}
	}
	s.setDrain(h, next)
	s.emitHost(h, EventUpdated)
	if next == nil {
		s.kickQueue()
	}
	return Result{}
}

// setDrain replaces a host's drain and its timer, refiling the host's
// devices under the index.
func (s *State) setDrain(h *Host, d *HostDrain) {
	if old := h.Drain; old != nil && old.Deadline != 0 && !old.Ended {
		s.timers.Delete(timerKey{at: old.Deadline, kind: drainTimer, id: h.ID})
	}
	s.changeHost(h, func() { h.Drain = d })
	s.armDrain(h)
}

// armDrain sets the timer of the host's drain, if its deadline is still
// to come.
func (s *State) armDrain(h *Host) {
	if d := h.Drain; d != nil && d.Deadline != 0 && !d.Ended {
		s.timers.ReplaceOrInsert(timerKey{at: d.Deadline, kind: drainTimer, id: h.ID})
	}
}

// drainDue ends the allocations left on a drained host whose deadline
// came. It reports whether it freed any devices.
func (s *State) drainDue(k timerKey) bool {
	h := s.hosts[k.id]
	if h == nil || h.Drain == nil || h.Drain.Deadline != k.at || h.Drain.Ended {
		return false
	}
	ids := s.hostAllocations(h)
	for _, aid := range ids {
		s.endAllocation(s.allocs[aid], Drained, "host "+h.ID+" drained (deadline "+time.Unix(0, k.at).UTC().Format(time.RFC3339)+")")
	}
	h.Drain.Ended = true
	s.emitHost(h, EventUpdated)
	return len(ids) > 0
}

// hostAllocations lists the active allocations on a host, each once, in
// the order of its devices.
func (s *State) hostAllocations(h *Host) []string {
	var ids []string
	seen := map[string]bool{}
	for _, id := range h.Devices {
		for _, aid := range s.devices[id].Allocations {
			if !seen[aid] && s.allocs[aid] != nil {
				seen[aid] = true
				ids = append(ids, aid)
			}
		}
	}
	return ids
}

// changeHost applies change to a host's placement state (up, drain) with
// its devices out of the index, and files them again after.
func (s *State) changeHost(h *Host, change func()) {
	for _, id := range h.Devices {
		s.unindex(s.devices[id])
	}
	change()
	for _, id := range h.Devices {
		s.reindex(s.devices[id])
	}
}

// drains lists the drained hosts' drains, for the snapshot.
func (s *State) drains() map[string]HostDrain {
	var out map[string]HostDrain
	for id, h := range s.hosts {
		if h.Drain != nil {
			if out == nil {
				out = map[string]HostDrain{}
			}
			out[id] = *h.Drain
		}
	}
	return out
}

// restoreDrains gives restored hosts their drains, before their devices
// are indexed.
func (s *State) restoreDrains(drains map[string]HostDrain) error {
	for _, id := range sortedKeys(drains) {
		h := s.hosts[id]
		d := drains[id]
		if h == nil || d.Deadline < 0 || (d.Ended && d.Deadline == 0) {
			return errf(ErrSnapshot, "drain of unknown host %q or bad deadline", id)
		}
		h.Drain = &d
		s.armDrain(h)
	}
	return nil
}
