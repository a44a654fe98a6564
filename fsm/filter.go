package fsm

import (
	"encoding/binary"
	"math"
	"sort"
)

// The filter chain is the same for every policy. Static filters read only
// what devices of a class share (type, pool, capabilities, custom values,
// labels, shareability), so they run once per class and their verdicts are
// cached per claim; dynamic filters read a device's state (its host, its
// status, its free capacity). The policy ranks what passes both. When a
// request is refused, the chain runs over every device and each filter
// records what it dropped (explain.go): the why-not is the filters' own
// account, in chain order.

// claimFilter is what the filters read of a claim: the claim, the pool it
// is restricted to ("" for any) and the request's label selector.
type claimFilter struct {
	cl   *Claim
	pool string
	sel  *LabelSelector
}

// staticFilter judges a class against a claim: "" keeps the class, else
// the reason it drops the class's devices.
type staticFilter func(c *class, f *claimFilter) string

// staticFilters are the static filters in chain order.
var staticFilters = []staticFilter{
	func(c *class, f *claimFilter) string { return when(c.typ != f.cl.Type, "type") },
	func(c *class, f *claimFilter) string { return when(f.pool != "" && c.pool != f.pool, "pool") },
	func(c *class, f *claimFilter) string {
		req := f.cl.Capabilities.vec()
		for i := range req {
			if c.caps[i]+eps < req[i] {
				return "capability " + dimNames[i] + " too small"
			}
		}
		return ""
	},
	func(c *class, f *claimFilter) string {
		for _, k := range sortedKeys(f.cl.Capabilities.Custom) {
			if have, ok := c.custom[k]; !ok || !customMatches(have, f.cl.Capabilities.Custom[k]) {
				return "custom " + k + " does not match"
			}
		}
		return ""
	},
	func(c *class, f *claimFilter) string {
		for _, k := range sortedKeys(f.sel.Required) {
			if have, ok := c.labels[k]; !ok || have != f.sel.Required[k] {
				return "required label " + k + " missing"
			}
		}
		return ""
	},
	func(c *class, f *claimFilter) string {
		for _, k := range sortedKeys(f.sel.Forbidden) {
			if have, ok := c.labels[k]; ok && (f.sel.Forbidden[k] == "*" || have == f.sel.Forbidden[k]) {
				return "forbidden label " + k
			}
		}
		return ""
	},
	func(c *class, f *claimFilter) string {
		return when(c.shareable && !c.caps.covers(f.cl.Amount.vec()), "amount larger than device")
	},
}

// deviceFilter judges one device against a claim now: "" keeps it, else
// the reason it drops it.
type deviceFilter func(s *State, d *Device, cl *Claim) string

// deviceFilters are the dynamic filters in chain order, after the static
// ones.
var deviceFilters = []deviceFilter{
	func(s *State, d *Device, _ *Claim) string {
		h := s.hosts[d.Host]
		switch {
		case h == nil || !h.Up:
			return "host down (device offline)"
		case h.Drain != nil:
			return "host drained"
		}
		return ""
	},
	func(_ *State, d *Device, _ *Claim) string {
		return when(d.Status != Available, "status "+string(d.Status))
	},
	func(s *State, d *Device, _ *Claim) string {
		return when(s.reservedAgainst(d, nil), "reserved for a waiting gang")
	},
	func(s *State, d *Device, cl *Claim) string {
		amt, whole := take(d.cls, cl)
		return when(!s.fits(d, amt, whole, nil), "in use (not enough free capacity)")
	},
}

func when(drop bool, reason string) string {
	if drop {
		return reason
	}
	return ""
}

// staticFit runs the static filters: the index of the filter that drops
// the class (-1 when it passes) and its reason. fitting caches whether a
// class passes by claimKey: whatever a static filter reads of the claim,
// pool or selector must be part of that key.
func staticFit(c *class, f *claimFilter) (int, string) {
	for i, filter := range staticFilters {
		if why := filter(c, f); why != "" {
			return i, why
		}
	}
	return -1, ""
}

// passes reports whether a class passes a claim's static filters.
func passes(c *class, cl *Claim, pool string, sel *LabelSelector) bool {
	i, _ := staticFit(c, &claimFilter{cl: cl, pool: pool, sel: sel})
	return i < 0
}

// take is what a claim takes from a device of class c, and whether it
// needs the whole device.
func take(c *class, cl *Claim) (vec, bool) {
	if wholeTake(c, cl) {
		return c.caps, true
	}
	return cl.Amount.vec(), false
}

// wholeTake reports whether a claim takes whole devices of class c.
func wholeTake(c *class, cl *Claim) bool { return !c.shareable || cl.Amount.IsZero() }

// fits reports whether device d can take amt now (whole: the entire
// device), with the overlay's changes applied: the dynamic filters. A
// share needs the device to have some free capacity, as the index does
// (hasFree), so an amount within float noise of zero cannot overfill it.
func (s *State) fits(d *Device, amt vec, whole bool, ov *overlay) bool {
	if !s.open(d, ov) {
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
	free := d.cls.caps.sub(used)
	return free.covers(amt) && free.anyAbove(eps)
}

// fitting returns, per claim, the classes that pass its static filters.
// The lists are shared with a cache: callers must not change them.
func (s *State) fitting(r *Request) [][]*class {
	out := make([][]*class, len(r.Claims))
	var buf [256]byte
	for i := range r.Claims {
		f := claimFilter{cl: &r.Claims[i], pool: r.claimPool(i), sel: &r.Labels}
		key := claimKey(buf[:0], &f)
		if list, ok := s.idx.fit[string(key)]; ok {
			out[i] = list
			continue
		}
		var list []*class
		for _, c := range s.idx.byType[f.cl.Type] {
			if k, _ := staticFit(c, &f); k < 0 {
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

// claimKey encodes everything the static filters read of a claim: type,
// pool, capabilities, amount, custom values, required and forbidden labels.
func claimKey(b []byte, f *claimFilter) []byte {
	b = appendKeyString(b, string(f.cl.Type))
	b = appendKeyString(b, f.pool)
	for _, x := range f.cl.Capabilities.vec() {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	for _, x := range f.cl.Amount.vec() {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	b = appendKeyMap(b, f.cl.Capabilities.Custom)
	b = appendKeyMap(b, f.sel.Required)
	return appendKeyMap(b, f.sel.Forbidden)
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

func preferredScore(c *class, sel *LabelSelector) int {
	n := 0
	for k, v := range sel.Preferred {
		if c.labels[k] == v {
			n++
		}
	}
	return n
}
