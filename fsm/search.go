package fsm

// The searches below find the first fitting device of the whole cluster in
// a device order (orders.go) through the class index, in O(classes · log
// n): a class's devices are alike in everything the static filters read,
// so its free devices are kept in ordered sets and only the best of each
// class is looked at.

// firstFitting is the fitting device with the lowest ID after the given
// one ("" for none) among the classes. The first free device of an
// exclusive class always fits, so those classes cost one tree lookup
// each and only the winner is looked at.
func (s *State) firstFitting(classes []*class, cl *Claim, after string) *Device {
	var best *Device
	firstID := ""
	pivot := ""
	if after != "" {
		pivot = after + "\x00"
	}
	for _, c := range classes {
		var id string
		var ok bool
		if pivot == "" {
			id, ok = c.free.Min()
		} else {
			id, ok = s.freeAfter(c, after, pivot)
		}
		if !ok {
			continue
		}
		if c.shareable {
			// The first free device may be too used for the claim: then
			// search on device by device.
			d := s.devices[id]
			if amt, whole := take(c, cl); !s.fits(d, amt, whole, nil) {
				d = s.firstFree(c, cl, after)
			}
			if d != nil && (best == nil || d.ID < best.ID) {
				best = d
			}
			continue
		}
		if firstID == "" || id < firstID {
			firstID = id
		}
	}
	if firstID == "" || (best != nil && best.ID < firstID) {
		return best
	}
	d := s.devices[firstID]
	amt, whole := take(d.cls, cl)
	if s.fits(d, amt, whole, nil) {
		return d
	}
	// The index disagrees with the devices: look device by device.
	best = nil
	for _, c := range classes {
		if d := s.firstFree(c, cl, after); d != nil && (best == nil || d.ID < best.ID) {
			best = d
		}
	}
	return best
}

// nextAfterCursor is the fitting device with the lowest ID after the
// type's cursor, or the lowest of all when none comes after it.
func (s *State) nextAfterCursor(classes []*class, cl *Claim) *Device {
	if after := s.cursors[cl.Type]; after != "" {
		if d := s.firstFitting(classes, cl, after); d != nil {
			return d
		}
	}
	return s.firstFitting(classes, cl, "")
}

// bestScored is the fitting device with the lowest score (waste, or minus
// waste when worst is set), the lowest ID among equals. A claim that takes
// whole devices scores the same on every device of a class, so the
// classes with the best such score are searched first and classes that
// cannot beat the pick so far are skipped.
func (s *State) bestScored(classes []*class, cl *Claim, worst bool) *Device {
	var best *Device
	bestScore := 0.0
	consider := func(d *Device, score float64) {
		if d == nil {
			return
		}
		if best == nil || score < bestScore || (score == bestScore && d.ID < best.ID) {
			best, bestScore = d, score
		}
	}
	pick := func(c *class) *Device {
		if worst {
			return s.mostFree(c, cl)
		}
		return s.leastFree(c, cl)
	}
	var buf [64]float64
	scores := buf[:0]
	if len(classes) > len(buf) {
		scores = make([]float64, 0, len(classes))
	}
	lo, haveLo := 0.0, false
	norm := s.normOf(cl.Type)
	for _, c := range classes {
		sc := 0.0
		if wholeTake(c, cl) {
			sc = wholeWaste(c, cl, norm)
			if worst {
				sc = -sc
			}
			if c.free.Len() > 0 && (!haveLo || sc < lo) {
				lo, haveLo = sc, true
			}
		}
		scores = append(scores, sc)
	}
	for i, c := range classes {
		if wholeTake(c, cl) && c.free.Len() > 0 && scores[i] == lo {
			consider(pick(c), lo)
		}
	}
	for i, c := range classes {
		if !wholeTake(c, cl) {
			if d := pick(c); d != nil {
				sc := s.waste(d, cl, nil)
				if worst {
					sc = -sc
				}
				consider(d, sc)
			}
			continue
		}
		// A class without free devices has no pick; one at lo was seen.
		if c.free.Len() == 0 || scores[i] == lo || (best != nil && scores[i] > bestScore) {
			continue
		}
		consider(pick(c), scores[i])
	}
	return best
}

// firstFree is the first device of c after the given ID that fits.
func (s *State) firstFree(c *class, cl *Claim, after string) *Device {
	amt, whole := take(c, cl)
	if !c.shareable && after == "" {
		// The first free device of an exclusive class fits, unless the
		// index disagrees with the devices.
		id, ok := c.free.Min()
		if !ok {
			return nil
		}
		if d := s.devices[id]; s.fits(d, amt, whole, nil) {
			return d
		}
	}
	var found *Device
	c.free.AscendGreaterOrEqual(after+"\x00", func(id string) bool {
		d := s.devices[id]
		if s.fits(d, amt, whole, nil) {
			found = d
			return false
		}
		return true
	})
	return found
}

// leastFree is the fitting device of c with the least free capacity (by
// ID among equals: exclusive devices of a class are all alike).
func (s *State) leastFree(c *class, cl *Claim) *Device {
	if !c.shareable {
		return s.firstFree(c, cl, "")
	}
	amt, whole := take(c, cl)
	var found *Device
	// A device with amt free in every dimension has at least amt's key.
	low := onScale(amt, s.normOf(c.typ)) - 1e-6
	c.byFree.AscendGreaterOrEqual(freeKey{free: low}, func(k freeKey) bool {
		d := s.devices[k.id]
		if s.fits(d, amt, whole, nil) {
			found = d
			return false
		}
		return true
	})
	return found
}

// mostFree is the fitting device of c with the most free capacity, the
// lowest ID among equals. It searches key by key from the top, each key's
// devices in ID order, so equal keys cost no more than the first fit.
func (s *State) mostFree(c *class, cl *Claim) *Device {
	if !c.shareable {
		return s.firstFree(c, cl, "")
	}
	amt, whole := take(c, cl)
	top, ok := c.byFree.Max()
	for ok {
		level := top.free
		var found *Device
		c.byFree.AscendGreaterOrEqual(freeKey{free: level}, func(k freeKey) bool {
			if k.free != level {
				return false
			}
			if d := s.devices[k.id]; s.fits(d, amt, whole, nil) {
				found = d
				return false
			}
			return true
		})
		if found != nil {
			return found
		}
		// The next lower key: IDs are never empty, so {level, ""} sorts
		// before every entry with this key.
		ok = false
		c.byFree.DescendLessOrEqual(freeKey{free: level}, func(k freeKey) bool {
			top, ok = k, true
			return false
		})
	}
	return nil
}

// freeAfter is the first ID in c's free set after the given one (not
// empty); pivot is after+"\x00". While the set is unchanged, the answer
// for a later after that is still below the last answer is that answer:
// the RoundRobin cursor only moves forward, so most classes need no search.
func (s *State) freeAfter(c *class, after, pivot string) (string, bool) {
	n := &c.next
	if n.valid && n.ver == c.freeVer && n.after <= after && (!n.ok || after < n.id) {
		return n.id, n.ok
	}
	id, ok := s.firstFrom(c.free, pivot)
	*n = nextFree{valid: true, ver: c.freeVer, after: after, id: id, ok: ok}
	return id, ok
}
