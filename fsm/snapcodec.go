package fsm

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"time"
)

// The binary record encoding of snapshot format 2 (DESIGN.md, "History and
// snapshot"): unsigned integers as uvarints, signed ones as zig-zag
// varints, a string as its length and bytes, a Resources as a bit mask of
// the dimensions that are set followed by their float64 bits (little
// endian), a map as its length and its pairs in key order. One value has
// one encoding; the decoder refuses any other (keys out of order, a set
// bit for a zero dimension, a bool other than 0 or 1), so what it accepts
// encodes back to the same bytes.

// errRecord is any record that does not decode.
var errRecord = errors.New("malformed record")

// enc appends encoded values to b.
type enc struct{ b []byte }

func (e *enc) uvarint(x uint64) { e.b = binary.AppendUvarint(e.b, x) }
func (e *enc) varint(x int64)   { e.b = binary.AppendVarint(e.b, x) }
func (e *enc) int(x int)        { e.varint(int64(x)) }

func (e *enc) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *enc) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *enc) res(r Resources) {
	v := r.vec()
	var mask byte
	for i, x := range v {
		if math.Float64bits(x) != 0 {
			mask |= 1 << i
		}
	}
	e.b = append(e.b, mask)
	for i, x := range v {
		if mask&(1<<i) != 0 {
			e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(x))
		}
	}
}

func (e *enc) strs(l []string) {
	e.uvarint(uint64(len(l)))
	for _, s := range l {
		e.str(s)
	}
}

func (e *enc) strMap(m map[string]string) {
	e.uvarint(uint64(len(m)))
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.str(k)
		e.str(m[k])
	}
}

func (e *enc) host(h *Host) {
	e.str(h.ID)
	e.str(h.Address)
	e.strMap(h.Labels)
	e.boolean(h.Up)
	e.varint(h.Since)
	e.strs(h.Devices)
	e.str(h.InventoryHash)
}

func (e *enc) device(d *Device) {
	e.str(d.ID)
	e.str(string(d.Type))
	e.str(d.Name)
	e.str(d.Pool)
	e.res(d.Capabilities.Resources)
	e.strMap(d.Capabilities.Custom)
	e.strMap(d.Labels)
	e.boolean(d.Shareable)
	e.str(d.Host)
	e.str(string(d.Status))
	e.res(d.Used)
	e.strs(d.Allocations)
	if t := d.Topology; t != nil {
		// Tag 1 after the fields: a topology; devices without one keep
		// their bytes.
		e.b = append(e.b, 1)
		numa := -1
		if t.NUMA != nil {
			numa = *t.NUMA
		}
		e.int(numa)
		e.strMap(t.Links)
	}
}

func (e *enc) request(r *Request) {
	e.uvarint(uint64(len(r.Claims)))
	for i := range r.Claims {
		c := &r.Claims[i]
		e.str(string(c.Type))
		e.int(c.Count)
		e.str(c.Pool)
		e.res(c.Capabilities.Resources)
		e.strMap(c.Capabilities.Custom)
		e.res(c.Amount)
	}
	e.int(r.Priority)
	e.varint(int64(r.Timeout))
	e.varint(int64(r.LeaseTTL))
	e.str(r.Pool)
	e.strMap(r.Labels.Required)
	e.strMap(r.Labels.Preferred)
	e.strMap(r.Labels.Forbidden)
}

// alloc appends a's record and returns where in e.b its first device ID
// starts (0 when it has no devices).
func (e *enc) alloc(a *Allocation) (dev int) {
	e.str(a.ID)
	e.str(a.RequestID)
	e.str(a.Namespace)
	e.request(&a.Request)
	e.str(string(a.Status))
	e.str(string(a.Policy))
	e.str(a.Host)
	e.uvarint(uint64(len(a.Devices)))
	if len(a.Devices) > 0 {
		dev = len(e.b)
	}
	for _, as := range a.Devices {
		e.str(as.DeviceID)
		e.int(as.Claim)
		e.res(as.Amount)
	}
	e.uvarint(a.Seq)
	e.uvarint(a.CreateIndex)
	e.uvarint(a.ModifyIndex)
	e.varint(a.RequestedAt)
	e.varint(a.AllocatedAt)
	e.varint(a.EndedAt)
	e.varint(a.Deadline)
	e.varint(a.LeaseExpiresAt)
	e.str(a.PreemptedBy)
	e.strs(a.Preempted)
	e.str(a.Reason)
	if a.Request.IsGang() {
		// Tag 5, before the tags below: a gang's shape, hosts and
		// reservation; records of other requests keep their bytes.
		e.b = append(e.b, 5)
		e.int(a.Request.MaxHosts)
		e.int(a.Request.MinPerHost)
		e.str(a.Request.Same)
		e.strs(a.Hosts)
		e.strs(a.Reserved)
	}
	if slices.ContainsFunc(a.Request.Claims, func(c Claim) bool { return c.Topology != "" }) {
		// Tag 6: the claims' topologies, one per claim.
		e.b = append(e.b, 6)
		for i := range a.Request.Claims {
			e.str(a.Request.Claims[i].Topology)
		}
	}
	if a.Request.Host != "" {
		// Tag 7: the host a request is held to.
		e.b = append(e.b, 7)
		e.str(a.Request.Host)
	}
	if p := a.Preempting; p != nil {
		// Tag 3 after the why-not tags: a reclaim's mark, on an active
		// allocation, which has no why-not.
		e.b = append(e.b, 3)
		e.str(p.By)
		e.varint(p.Deadline)
		return dev
	}
	e.whyNot(a.WhyNot)
	return dev
}

// whyNot starts with a tag: 0 none, 1 a why-not, 2 one with a quota
// (written after the summary), so that why-nots without one keep the
// bytes they had before quotas.
func (e *enc) whyNot(w *WhyNot) {
	switch {
	case w == nil:
		e.b = append(e.b, 0)
		return
	case w.Gang != nil:
		e.b = append(e.b, 4)
	case w.Quota == "":
		e.b = append(e.b, 1)
	default:
		e.b = append(e.b, 2)
	}
	e.int(w.Devices)
	e.int(w.Hosts)
	e.uvarint(uint64(len(w.Claims)))
	for i := range w.Claims {
		c := &w.Claims[i]
		e.int(c.Claim)
		e.str(string(c.Type))
		e.int(c.Count)
		e.uvarint(uint64(len(c.Removed)))
		for _, r := range c.Removed {
			e.str(r.Reason)
			e.int(r.Count)
		}
		e.int(c.Fitting)
		e.int(c.HostsWithSome)
		e.int(c.HostsWithEnough)
	}
	e.int(w.HostsRejected)
	e.str(w.Summary)
	if w.Quota != "" || w.Gang != nil {
		e.str(w.Quota)
	}
	if g := w.Gang; g != nil {
		e.int(g.Count)
		e.int(g.MaxHosts)
		e.int(g.MinPerHost)
		e.str(g.Same)
		e.int(g.HostsAble)
		e.uvarint(uint64(len(g.Best)))
		for _, h := range g.Best {
			e.str(h.Host)
			e.int(h.Take)
		}
		e.int(g.BestTotal)
		e.uvarint(uint64(len(g.Domains)))
		for _, dm := range g.Domains {
			e.str(dm.Value)
			e.int(dm.HostsAble)
			e.int(dm.Total)
		}
		e.int(g.HostsUnlabelled)
	}
}

func (e *enc) cacheEntry(c *cacheEntry) {
	e.str(c.RequestID)
	e.str(c.Namespace)
	e.str(c.Digest)
	e.uvarint(c.Index)
	e.varint(c.Time)
	e.str(c.AllocationID)
	e.boolean(c.Err != nil)
	if c.Err != nil {
		e.str(c.Err.Code)
		e.str(c.Err.Message)
		e.whyNot(c.Err.WhyNot)
	}
}

// dec reads values from one record. The first failure sticks: later reads
// return zero values, and err says the record is malformed.
type dec struct {
	b   []byte
	err error
	// in, when set, holds what the records repeat.
	in *interner
	// devs, when set, are the devices of the state being restored, by
	// ID: a device ID they hold is interned as the device's own.
	devs map[string]restoredDev
	// devLeft is what alloc left of b where the first device ID starts
	// (0 when the allocation has none); first is the first device's
	// entry in devs, when it has one.
	devLeft int
	first   restoredDev
}

// restoredDev is a restored device's ID and pool, what a restore's decoders
// want of it: in a map of their own, which fits the processor's caches
// better than the devices do.
type restoredDev struct{ id, pool string }

// interner is what the records one decoder decodes share, so that what
// they repeat is held once: the short strings (types, statuses,
// namespaces, pools, hosts, device IDs), and requests' claims. A
// request's claims are never changed once made (they are copied when the
// request arrives), so allocations may share them.
type interner struct {
	syms   map[string]string
	claims map[string]sharedClaims
	// last is the claims shared last: a record that goes on with their
	// encoding has them, and they are not decoded again (lastClaims).
	last sharedClaims
	// scratch is where claims are decoded before they are looked up.
	scratch []Claim
	// recent holds syms by a hash of their bytes, in front of syms: the
	// few strings that most records repeat are found in a table that
	// stays in the processor's cache, whatever syms holds.
	recent [256]string
}

// Bounds on what an interner holds.
const (
	maxSyms   = 1 << 20
	maxClaims = 1 << 16
)

func newInterner() *interner {
	return &interner{syms: map[string]string{}, claims: map[string]sharedClaims{}}
}

// sharedClaims is a request's claims that records share, and their
// encoding.
type sharedClaims struct {
	enc    string
	claims []Claim
}

func (d *dec) fail() {
	d.err = errRecord
	d.b = nil
}

func (d *dec) uvarint() uint64 {
	x, n := binary.Uvarint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return x
}

// varint reads a zig-zag signed varint, as binary.Varint does, with
// uvarint's refusal of non-canonical encodings.
func (d *dec) varint() int64 {
	ux := d.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *dec) int() int {
	x := d.varint()
	if int64(int(x)) != x {
		d.fail()
		return 0
	}
	return int(x)
}

// count reads a length, which cannot exceed the bytes left since every
// element takes at least one.
func (d *dec) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *dec) raw() []byte {
	n := d.count()
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *dec) str() string { return string(d.raw()) }

// devID is str for a device ID, or the ID of the device of devs it
// names, and that device's entry (zero when devs does not hold it).
func (d *dec) devID() (string, restoredDev) {
	if v, ok := d.devs[string(d.peekRaw())]; ok {
		d.raw()
		return v.id, v
	}
	return d.str(), restoredDev{}
}

// peekRaw is what raw would return, without taking it (nil when it would
// fail).
func (d *dec) peekRaw() []byte {
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(len(d.b)-k) {
		return nil
	}
	return d.b[k : k+int(n)]
}

// sym is str for a string that many records repeat.
func (d *dec) sym() string {
	b := d.raw()
	if len(b) == 0 {
		return ""
	}
	if d.in == nil {
		return string(b)
	}
	x := uint8(len(b))
	for _, c := range b {
		x = x*31 + c
	}
	recent := &d.in.recent[x]
	if *recent == string(b) {
		return *recent
	}
	s, ok := d.in.syms[string(b)]
	if !ok {
		s = string(b)
		if len(d.in.syms) < maxSyms {
			d.in.syms[s] = s
		}
	}
	*recent = s
	return s
}

func (d *dec) boolean() bool {
	if len(d.b) == 0 || d.b[0] > 1 {
		d.fail()
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

func (d *dec) res() Resources {
	if len(d.b) == 0 || d.b[0] >= 1<<numDims {
		d.fail()
		return Resources{}
	}
	mask := d.b[0]
	d.b = d.b[1:]
	var v vec
	for i := range v {
		if mask&(1<<i) == 0 {
			continue
		}
		if len(d.b) < 8 {
			d.fail()
			return Resources{}
		}
		bits := binary.LittleEndian.Uint64(d.b)
		if bits == 0 {
			d.fail()
			return Resources{}
		}
		v[i] = math.Float64frombits(bits)
		d.b = d.b[8:]
	}
	return v.resources()
}

func (d *dec) strList() []string { return d.list(d.str) }

func (d *dec) symList() []string { return d.list(d.sym) }

func (d *dec) list(one func() string) []string {
	n := d.count()
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = one()
	}
	return out
}

func (d *dec) strMap() map[string]string {
	n := d.count()
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	prev := ""
	for i := range n {
		k := d.sym()
		if i > 0 && k <= prev {
			d.fail()
			return nil
		}
		m[k] = d.sym()
		prev = k
	}
	return m
}

func (d *dec) host() *Host {
	h := &Host{}
	h.ID = d.sym()
	h.Address = d.str()
	h.Labels = d.strMap()
	h.Up = d.boolean()
	h.Since = d.varint()
	h.Devices = d.symList()
	h.InventoryHash = d.str()
	return h
}

func (d *dec) device() *Device {
	v := &Device{}
	v.ID = d.sym()
	v.Type = DeviceType(d.sym())
	v.Name = d.str()
	v.Pool = d.sym()
	v.Capabilities.Resources = d.res()
	v.Capabilities.Custom = d.strMap()
	v.Labels = d.strMap()
	v.Shareable = d.boolean()
	v.Host = d.sym()
	v.Status = DeviceStatus(d.sym())
	v.Used = d.res()
	v.Allocations = d.strList()
	if len(d.b) > 0 && d.b[0] == 1 {
		d.b = d.b[1:]
		t := &Topology{}
		if n := d.int(); n >= 0 {
			t.NUMA = &n
		} else if n != -1 {
			d.fail()
		}
		t.Links = d.strMap()
		v.Topology = t
	}
	return v
}

func (d *dec) request(r *Request) {
	if !d.lastClaims(r) {
		d.claims(r)
	}
	r.Priority = d.int()
	r.Timeout = time.Duration(d.varint())
	r.LeaseTTL = time.Duration(d.varint())
	r.Pool = d.sym()
	r.Labels.Required = d.strMap()
	r.Labels.Preferred = d.strMap()
	r.Labels.Forbidden = d.strMap()
}

// claims decodes a request's claims.
func (d *dec) claims(r *Request) {
	start := d.b
	n := d.count()
	if n == 0 {
		return
	}
	var claims []Claim
	if d.in != nil {
		claims = slices.Grow(d.in.scratch[:0], n)[:n]
		d.in.scratch = claims
	} else {
		claims = make([]Claim, n)
	}
	for i := range claims {
		c := &claims[i]
		c.Type = DeviceType(d.sym())
		c.Count = d.int()
		c.Pool = d.sym()
		c.Capabilities.Resources = d.res()
		c.Capabilities.Custom = d.strMap()
		c.Amount = d.res()
	}
	r.Claims = d.shareClaims(start[:len(start)-len(d.b)], claims)
}

// lastClaims takes the claims the interner shared last, when the record
// goes on with their encoding: the same bytes decode to the same claims,
// whose encoding delimits itself.
func (d *dec) lastClaims(r *Request) bool {
	if d.in == nil {
		return false
	}
	enc := d.in.last.enc
	if enc == "" || len(d.b) < len(enc) || string(d.b[:len(enc)]) != enc {
		return false
	}
	r.Claims, d.b = d.in.last.claims, d.b[len(enc):]
	return true
}

// shareClaims returns claims decoded from enc, in the interner's scratch,
// as the claims of an earlier request of the same encoding or as a copy
// of their own (claims itself without an interner).
func (d *dec) shareClaims(enc []byte, claims []Claim) []Claim {
	if d.in == nil || d.err != nil {
		return claims
	}
	c, ok := d.in.claims[string(enc)]
	if !ok {
		c = sharedClaims{enc: string(enc), claims: slices.Clone(claims)}
		if len(d.in.claims) < maxClaims {
			d.in.claims[c.enc] = c
		}
	}
	d.in.last = c
	return c.claims
}

func (d *dec) alloc() *Allocation {
	a := &Allocation{}
	d.allocInto(a)
	return a
}

// allocInto decodes an allocation into a, which must be zero.
func (d *dec) allocInto(a *Allocation) {
	a.ID = d.str()
	a.RequestID = d.str()
	a.Namespace = d.sym()
	d.request(&a.Request)
	a.Status = AllocStatus(d.sym())
	a.Policy = Policy(d.sym())
	a.Host = d.sym()
	d.devLeft, d.first = 0, restoredDev{}
	if n := d.count(); n > 0 {
		d.devLeft = len(d.b)
		a.Devices = make([]Assignment, n)
		for i := range a.Devices {
			as := &a.Devices[i]
			var ref restoredDev
			as.DeviceID, ref = d.devID()
			if i == 0 {
				d.first = ref
			}
			as.Claim = d.int()
			as.Amount = d.res()
		}
	}
	a.Seq = d.uvarint()
	a.CreateIndex = d.uvarint()
	a.ModifyIndex = d.uvarint()
	a.RequestedAt = d.varint()
	a.AllocatedAt = d.varint()
	a.EndedAt = d.varint()
	a.Deadline = d.varint()
	a.LeaseExpiresAt = d.varint()
	a.PreemptedBy = d.str()
	a.Preempted = d.strList()
	a.Reason = d.sym()
	if len(d.b) > 0 && d.b[0] == 5 {
		d.b = d.b[1:]
		a.Request.MaxHosts = d.int()
		a.Request.MinPerHost = d.int()
		a.Request.Same = d.sym()
		a.Hosts = d.symList()
		a.Reserved = d.symList()
		if !a.Request.IsGang() {
			d.fail() // tag 5 says it is one
		}
	}
	if len(d.b) > 0 && d.b[0] == 6 {
		d.b = d.b[1:]
		// The claims may be shared with other records (shareClaims).
		a.Request.Claims = slices.Clone(a.Request.Claims)
		for i := range a.Request.Claims {
			a.Request.Claims[i].Topology = d.sym()
		}
	}
	if len(d.b) > 0 && d.b[0] == 7 {
		d.b = d.b[1:]
		if a.Request.Host = d.sym(); a.Request.Host == "" {
			d.fail() // tag 7 says there is one
		}
	}
	if len(d.b) > 0 && d.b[0] == 3 {
		d.b = d.b[1:]
		a.Preempting = &Preempting{By: d.str(), Deadline: d.varint()}
		return
	}
	a.WhyNot = d.whyNot()
}

func (d *dec) whyNot() *WhyNot {
	if len(d.b) == 0 || d.b[0] > 4 || d.b[0] == 3 {
		d.fail()
		return nil
	}
	tag := d.b[0]
	d.b = d.b[1:]
	if tag == 0 {
		return nil
	}
	w := &WhyNot{}
	w.Devices = d.int()
	w.Hosts = d.int()
	if n := d.count(); n > 0 {
		w.Claims = make([]ClaimWhyNot, n)
		for i := range w.Claims {
			c := &w.Claims[i]
			c.Claim = d.int()
			c.Type = DeviceType(d.sym())
			c.Count = d.int()
			if m := d.count(); m > 0 {
				c.Removed = make([]Reason, m)
				for j := range c.Removed {
					c.Removed[j] = Reason{Reason: d.sym(), Count: d.int()}
				}
			}
			c.Fitting = d.int()
			c.HostsWithSome = d.int()
			c.HostsWithEnough = d.int()
		}
	}
	w.HostsRejected = d.int()
	w.Summary = d.sym()
	if tag == 2 {
		if w.Quota = d.sym(); w.Quota == "" {
			d.fail() // tag 2 says there is one
		}
	}
	if tag == 4 {
		w.Quota = d.sym()
		g := &GangWhyNot{Count: d.int(), MaxHosts: d.int(), MinPerHost: d.int(), Same: d.sym(), HostsAble: d.int()}
		if n := d.count(); n > 0 {
			g.Best = make([]GangHost, n)
			for i := range g.Best {
				g.Best[i] = GangHost{Host: d.sym(), Take: d.int()}
			}
		}
		g.BestTotal = d.int()
		if n := d.count(); n > 0 {
			g.Domains = make([]GangDomain, n)
			for i := range g.Domains {
				g.Domains[i] = GangDomain{Value: d.sym(), HostsAble: d.int(), Total: d.int()}
			}
		}
		g.HostsUnlabelled = d.int()
		w.Gang = g
	}
	return w
}

func (d *dec) cacheEntry() cacheEntry {
	var c cacheEntry
	c.RequestID = d.str()
	c.Namespace = d.sym()
	c.Digest = d.str()
	c.Index = d.uvarint()
	c.Time = d.varint()
	c.AllocationID = d.sym()
	if d.boolean() {
		c.Err = &Error{Code: d.sym(), Message: d.sym()}
		c.Err.WhyNot = d.whyNot()
	}
	return c
}
