package fsm

import (
	"encoding/binary"
	"math"
	"sort"
)

// Placement runs as a chain: static filters pick the device classes a
// claim may use (type, pool, capabilities, labels), dynamic filters keep
// the devices of those classes that are schedulable and have the free
// capacity, and the policy ranks what is left. A single-device request
// takes an indexed path per policy; anything else is placed host by host.

type placement struct {
	host   string
	assign []Assignment
}

// overlay changes the apparent use of devices without touching the state:
// what an evaluation has already taken (positive) or what preemption
// would free (negative).
type overlay struct {
	used map[string]vec
	n    map[string]int
}

func newOverlay() *overlay { return &overlay{used: map[string]vec{}, n: map[string]int{}} }

func (o *overlay) add(id string, amt vec, n int) {
	o.used[id] = o.used[id].add(amt)
	o.n[id] += n
}

func (o *overlay) clone() *overlay {
	c := newOverlay()
	if o != nil {
		for k, v := range o.used {
			c.used[k] = v
		}
		for k, v := range o.n {
			c.n[k] = v
		}
	}
	return c
}

// staticFit reports why a class fails a claim's static filters, or "".
// fitting caches the verdicts by claimKey: whatever staticFit reads of the
// claim, pool or selector must be part of that key.
func staticFit(c *class, cl *Claim, pool string, sel *LabelSelector) string {
	if c.typ != cl.Type {
		return "type"
	}
	if pool != "" && c.pool != pool {
		return "pool"
	}
	req := cl.Capabilities.vec()
	for i := range req {
		if c.caps[i]+eps < req[i] {
			return "capability " + dimNames[i] + " too small"
		}
	}
	for _, k := range sortedKeys(cl.Capabilities.Custom) {
		have, ok := c.custom[k]
		if !ok || !customMatches(have, cl.Capabilities.Custom[k]) {
			return "custom " + k + " does not match"
		}
	}
	for _, k := range sortedKeys(sel.Required) {
		if have, ok := c.labels[k]; !ok || have != sel.Required[k] {
			return "required label " + k + " missing"
		}
	}
	for _, k := range sortedKeys(sel.Forbidden) {
		if have, ok := c.labels[k]; ok && (sel.Forbidden[k] == "*" || have == sel.Forbidden[k]) {
			return "forbidden label " + k
		}
	}
	if c.shareable && !c.caps.covers(cl.Amount.vec()) {
		return "amount larger than device"
	}
	return ""
}

func preferredScore(c *class, sel *LabelSelector) int {
	n := 0
	for k, v := range sel.Preferred {
		if c.labels[k] == v {
			n++
		}
	}
	return n
}

// take is what a claim takes from a device of class c, and whether it
// needs the whole device.
func take(c *class, cl *Claim) (vec, bool) {
	if !c.shareable || cl.Amount.IsZero() {
		return c.caps, true
	}
	return cl.Amount.vec(), false
}

// fits reports whether device d can take amt now (whole: the entire
// device), with the overlay's changes applied.
func (s *State) fits(d *Device, amt vec, whole bool, ov *overlay) bool {
	if h := s.hosts[d.Host]; h == nil || !h.Up || d.Status != Available {
		return false
	}
	used, n := d.Used.vec(), len(d.Allocations)
	if ov != nil {
		if u, ok := ov.used[d.ID]; ok {
			used = used.add(u)
			n += ov.n[d.ID]
		}
	}
	if whole || !d.cls.shareable {
		return n <= 0
	}
	return d.cls.caps.sub(used).covers(amt)
}

// waste is what a device would keep unused by this claim, put on one
// scale across dimensions: the BestFit and WorstFit measure.
func (s *State) waste(d *Device, cl *Claim, ov *overlay) float64 {
	c := d.cls
	if !c.shareable || cl.Amount.IsZero() {
		return s.classWaste(c, cl)
	}
	norm := s.normOf(d.Type)
	used := d.Used.vec()
	if ov != nil {
		used = used.add(ov.used[d.ID])
	}
	left := c.caps.sub(used).sub(cl.Amount.vec())
	w := 0.0
	for i, x := range left {
		if norm[i] > 0 && x > 0 {
			w += x / norm[i]
		}
	}
	return roundScore(w)
}

// classWaste is waste for a claim that takes whole devices of class c:
// the same for every device of the class.
func (s *State) classWaste(c *class, cl *Claim) float64 {
	return wholeWaste(c, cl, s.normOf(c.typ))
}

// wholeWaste is classWaste on the type's common scale norm.
func wholeWaste(c *class, cl *Claim, norm vec) float64 {
	left := c.caps.sub(cl.Capabilities.vec())
	w := 0.0
	for i, x := range left {
		if norm[i] > 0 && x > 0 {
			w += x / norm[i]
		}
	}
	return roundScore(w)
}

// roundScore puts a score on a 1e-9 grid, so float noise never decides
// between equal placements: ties go to the lower device ID.
func roundScore(x float64) float64 { return math.Round(x*1e9) / 1e9 }

// fitting returns, per claim, the classes that pass its static filters.
// The lists are shared with a cache: callers must not change them.
func (s *State) fitting(r *Request) [][]*class {
	out := make([][]*class, len(r.Claims))
	var buf [256]byte
	for i := range r.Claims {
		cl := &r.Claims[i]
		pool := r.claimPool(i)
		key := claimKey(buf[:0], cl, pool, &r.Labels)
		if list, ok := s.idx.fit[string(key)]; ok {
			out[i] = list
			continue
		}
		var list []*class
		for _, c := range s.idx.byType[cl.Type] {
			if staticFit(c, cl, pool, &r.Labels) == "" {
				list = append(list, c)
			}
		}
		list = list[:len(list):len(list)]
		if s.idx.fit == nil || len(s.idx.fit) >= maxFitCache {
			s.idx.fit = map[string][]*class{}
		}
		s.idx.fit[string(key)] = list
		out[i] = list
	}
	return out
}

// maxFitCache bounds the fitting cache; it starts over when full.
const maxFitCache = 4096

// claimKey encodes everything staticFit reads of a claim: type, pool,
// capabilities, amount, custom values, required and forbidden labels.
func claimKey(b []byte, cl *Claim, pool string, sel *LabelSelector) []byte {
	b = appendKeyString(b, string(cl.Type))
	b = appendKeyString(b, pool)
	for _, x := range cl.Capabilities.vec() {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	for _, x := range cl.Amount.vec() {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	b = appendKeyMap(b, cl.Capabilities.Custom)
	b = appendKeyMap(b, sel.Required)
	return appendKeyMap(b, sel.Forbidden)
}

func appendKeyString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendKeyMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	if len(m) == 0 {
		return b
	}
	for _, k := range sortedKeys(m) {
		b = appendKeyString(b, k)
		b = appendKeyString(b, m[k])
	}
	return b
}

// tiers returns the first claim's classes in growing sets: those that carry
// the most preferred labels, then those with at least the next most, and
// so on to all of them; without preferred labels there is one tier. The
// sets grow, rather than partition, so that a request for several devices
// may mix devices that carry the preferred labels with devices that do not.
func tiers(classes []*class, sel *LabelSelector) [][]*class {
	if len(sel.Preferred) == 0 || len(classes) == 0 {
		return [][]*class{classes}
	}
	byScore := map[int][]*class{}
	for _, c := range classes {
		p := preferredScore(c, sel)
		byScore[p] = append(byScore[p], c)
	}
	scores := make([]int, 0, len(byScore))
	for k := range byScore {
		scores = append(scores, k)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(scores)))
	out := make([][]*class, 0, len(scores))
	for _, k := range scores {
		var tier []*class
		for _, c := range classes {
			if preferredScore(c, sel) >= k {
				tier = append(tier, c)
			}
		}
		out = append(out, tier)
	}
	return out
}

// place finds where a request goes under a policy, or nil.
func (s *State) place(r *Request, pc PolicyConfig, ov *overlay) *placement {
	fits := s.fitting(r)
	for _, f := range fits {
		if len(f) == 0 {
			return nil
		}
	}
	for _, tier := range tiers(fits[0], &r.Labels) {
		fits[0] = tier
		var p *placement
		if pc.Policy == FragmentationAware && ov == nil {
			p = s.placeFrag(r, fits)
		} else if len(r.Claims) == 1 && r.Claims[0].Count == 1 && ov == nil {
			p = s.placeOne(r, pc.Policy, tier)
		} else {
			p = s.placeOnHosts(r, pc.Policy, fits, ov, nil)
		}
		if p != nil {
			return p
		}
	}
	return nil
}

// placeOne places a one-device request through the class index.
func (s *State) placeOne(r *Request, pol Policy, classes []*class) *placement {
	cl := &r.Claims[0]
	var best *Device
	switch pol {
	case LoadBalanced:
		return s.placeLeastLoaded(r, classes)
	case FirstFit:
		best = s.firstFitting(classes, cl, "")
	case RoundRobin:
		if after := s.cursors[cl.Type]; after != "" {
			best = s.firstFitting(classes, cl, after)
		}
		if best == nil {
			best = s.firstFitting(classes, cl, "")
		}
	case WorstFit:
		best = s.bestScored(classes, cl, true)
	default: // BestFit, PriorityBased
		best = s.bestScored(classes, cl, false)
	}
	if best == nil {
		return nil
	}
	amt, _ := take(best.cls, cl)
	return &placement{host: best.Host, assign: []Assignment{{DeviceID: best.ID, Claim: 0, Amount: amt.resources()}}}
}

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

// bestScored is the fitting device with the lowest score (waste under
// BestFit, minus waste under WorstFit), the lowest ID among equals. A
// claim that takes whole devices scores the same on every device of a
// class, so the classes with the best such score are searched first and
// classes that cannot beat the pick so far are skipped.
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

// wholeTake reports whether a claim takes whole devices of class c.
func wholeTake(c *class, cl *Claim) bool { return !c.shareable || cl.Amount.IsZero() }

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
	low := shareKey(amt, s.normOf(c.typ)) - 1e-6
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

// placeLeastLoaded walks hosts from least to most utilised for the type and
// takes the least used fitting device on the first host that has one (a
// host counts when one of its devices of the classes is free in the index).
func (s *State) placeLeastLoaded(r *Request, classes []*class) *placement {
	cl := &r.Claims[0]
	tree := s.loadTree(cl.Type)
	if tree == nil {
		return nil
	}
	mark := s.markClasses(classes)
	var best *Device
	tree.Ascend(func(k loadKey) bool {
		h := s.hosts[k.host]
		usable := false
		var pick *Device
		var pickUtil float64
		for _, d := range s.hostTypeDevices(h, cl.Type) {
			if d.cls.mark != mark {
				continue
			}
			if d.indexed {
				usable = true
			}
			amt, whole := take(d.cls, cl)
			if !s.fits(d, amt, whole, nil) {
				continue
			}
			u := deviceUtil(d)
			if pick == nil || u < pickUtil {
				pick, pickUtil = d, u
			}
		}
		if usable {
			best = pick
		}
		return best == nil
	})
	if best == nil {
		return nil
	}
	amt, _ := take(best.cls, cl)
	return &placement{host: best.Host, assign: []Assignment{{DeviceID: best.ID, Claim: 0, Amount: amt.resources()}}}
}

// candidateHosts lists, in ID order, the hosts with a free device in any of
// the classes.
func candidateHosts(classes []*class) []string {
	var out []string
	for _, c := range classes {
		c.hosts.Ascend(func(h string) bool {
			out = append(out, h)
			return true
		})
	}
	sort.Strings(out)
	n := 0
	for i, h := range out {
		if i == 0 || h != out[n-1] {
			out[n] = h
			n++
		}
	}
	return out[:n]
}

// firstHostFit is placeOnHosts for FirstFit and RoundRobin over every
// candidate host: it walks the candidates in the same order (RoundRobin:
// from the host after the cursor's, wrapping around) without listing them
// all, and stops at the first host that takes the request.
func (s *State) firstHostFit(r *Request, pol Policy, fits [][]*class, ov *overlay) *placement {
	start := ""
	if pol == RoundRobin {
		if cur := s.devices[s.cursors[r.Claims[0].Type]]; cur != nil {
			start = cur.Host + "\x00"
		}
	}
	var found *placement
	try := func(hid string) bool {
		h := s.hosts[hid]
		if h == nil || !h.Up {
			return true
		}
		if assign, _ := s.evalHost(h, r, pol, fits, ov); assign != nil {
			found = &placement{host: hid, assign: assign}
			return false
		}
		return true
	}
	if s.eachCandidateHost(fits[0], start, "", try) && start != "" {
		s.eachCandidateHost(fits[0], "", start, try)
	}
	return found
}

// eachCandidateHost calls f, in ID order, for each host at or after from
// and before to ("": no end) with a free device in any of the classes (the
// hosts candidateHosts lists), until f returns false; it reports whether
// f never did.
func (s *State) eachCandidateHost(classes []*class, from, to string, f func(string) bool) bool {
	for {
		next := ""
		for _, c := range classes {
			if id, ok := s.firstFrom(c.hosts, from); ok && (next == "" || id < next) {
				next = id
			}
		}
		if next == "" || (to != "" && next >= to) {
			return true
		}
		if !f(next) {
			return false
		}
		from = next + "\x00"
	}
}

// placeOnHosts evaluates the request host by host. hosts limits the
// candidates (nil: every host with a free device for the first claim).
func (s *State) placeOnHosts(r *Request, pol Policy, fits [][]*class, ov *overlay, hosts []string) *placement {
	if hosts == nil && (pol == FirstFit || pol == RoundRobin) {
		return s.firstHostFit(r, pol, fits, ov)
	}
	if hosts == nil {
		hosts = candidateHosts(fits[0])
	}
	if pol == RoundRobin {
		if cur := s.devices[s.cursors[r.Claims[0].Type]]; cur != nil {
			i := sort.SearchStrings(hosts, cur.Host+"\x00")
			hosts = append(append([]string(nil), hosts[i:]...), hosts[:i]...)
		}
	}
	var best *placement
	bestScore := 0.0
	for _, hid := range hosts {
		h := s.hosts[hid]
		if h == nil || !h.Up {
			continue
		}
		assign, local := s.evalHost(h, r, pol, fits, ov)
		if assign == nil {
			continue
		}
		if pol == FirstFit || pol == RoundRobin {
			return &placement{host: hid, assign: assign}
		}
		var score float64
		switch pol {
		case LoadBalanced:
			score = hostUtil(h, r.Claims[0].Type)
		case WorstFit:
			score = -s.hostLeftover(h, r, local) - s.stranded(r, assign)
		case FragmentationAware:
			score = s.fragDelta(h, r, ov, local)
		default:
			score = s.hostLeftover(h, r, local) + s.stranded(r, assign)
		}
		if best == nil || score < bestScore {
			best, bestScore = &placement{host: hid, assign: assign}, score
		}
	}
	return best
}

// stranded is what the whole devices of a placement hold beyond their
// claims' thresholds, on the type's common scale: the device-level waste
// of BestFit and WorstFit, which the host's leftover does not see.
func (s *State) stranded(r *Request, assign []Assignment) float64 {
	w := 0.0
	for _, as := range assign {
		d, cl := s.devices[as.DeviceID], &r.Claims[as.Claim]
		if wholeTake(d.cls, cl) {
			w += s.classWaste(d.cls, cl)
		}
	}
	return w
}

func hostUtil(h *Host, t DeviceType) float64 {
	l := h.load[t]
	if l == nil || l.n == 0 {
		return 0
	}
	return l.used / float64(l.n)
}

// evalHost picks devices on one host for every claim, ranked by the
// policy. It returns nil if the host cannot take the request, and the
// overlay that includes what it took.
func (s *State) evalHost(h *Host, r *Request, pol Policy, fits [][]*class, ov *overlay) ([]Assignment, *overlay) {
	// local is ov plus what this host took so far. It is copied from ov
	// when the host first takes something: a host that fails its first
	// claim costs no copy.
	local, copied := ov, false
	var assign []Assignment
	var cands []*Device
	for i := range r.Claims {
		cl := &r.Claims[i]
		cands = cands[:0]
		for _, id := range h.Devices {
			d := s.devices[id]
			if d.Type != cl.Type || !containsClass(fits[i], d.cls) {
				continue
			}
			amt, whole := take(d.cls, cl)
			if s.fits(d, amt, whole, local) {
				cands = append(cands, d)
			}
		}
		if len(cands) < cl.Count {
			return nil, nil
		}
		s.rankDevices(cands, cl, pol, local)
		if !copied {
			local, copied = ov.clone(), true
		}
		for _, d := range cands[:cl.Count] {
			amt, _ := take(d.cls, cl)
			local.add(d.ID, amt, 1)
			assign = append(assign, Assignment{DeviceID: d.ID, Claim: i, Amount: amt.resources()})
		}
	}
	return assign, local
}

func containsClass(list []*class, c *class) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}

// rankDevices orders a host's fitting devices for a claim by policy.
func (s *State) rankDevices(ds []*Device, cl *Claim, pol Policy, ov *overlay) {
	type ranked struct {
		d   *Device
		key float64
	}
	rs := make([]ranked, len(ds))
	for i, d := range ds {
		rs[i].d = d
		switch pol {
		case FirstFit, RoundRobin:
			rs[i].key = 0
		case WorstFit:
			rs[i].key = -s.waste(d, cl, ov)
		case LoadBalanced:
			rs[i].key = deviceUtil(d)
		default:
			rs[i].key = s.waste(d, cl, ov)
		}
	}
	// Device IDs are unique: the order is total.
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].key != rs[j].key {
			return rs[i].key < rs[j].key
		}
		return rs[i].d.ID < rs[j].d.ID
	})
	for i := range rs {
		ds[i] = rs[i].d
	}
}

// hostLeftover is the free capacity a host would keep, over all its
// available devices (a CPU-only request still weighs the host's free GPUs),
// each type on its common scale: the host-level BestFit measure.
func (s *State) hostLeftover(h *Host, r *Request, ov *overlay) float64 {
	total := 0.0
	for _, id := range h.Devices {
		d := s.devices[id]
		if d.Status != Available {
			continue
		}
		total += s.freeScore(d, ov)
	}
	return total
}

// freeScore is a device's free capacity on the type's common scale.
func (s *State) freeScore(d *Device, ov *overlay) float64 {
	return freeOnScale(d, ov, s.normOf(d.Type))
}

// freeOnScale is a device's free capacity, with the overlay's changes
// applied, in units of norm (its type's common scale): the sum over the
// dimensions of free / norm; 0 for a whole device that is taken.
func freeOnScale(d *Device, ov *overlay, norm vec) float64 {
	used, n := d.Used.vec(), len(d.Allocations)
	if ov != nil {
		used = used.add(ov.used[d.ID])
		n += ov.n[d.ID]
	}
	if !d.cls.shareable && n > 0 {
		return 0
	}
	w := 0.0
	for i, x := range d.cls.caps.sub(used) {
		if norm[i] > 0 && x > 0 {
			w += x / norm[i]
		}
	}
	return w
}

func requestUses(r *Request, t DeviceType) bool {
	for _, c := range r.Claims {
		if c.Type == t {
			return true
		}
	}
	return false
}
