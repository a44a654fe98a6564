package fsm

import (
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/google/btree"
)

// The device side of Stats and Recommend (device counts, utilisation,
// fragmentation, the spread of host utilisation, unhealthy devices) is
// kept per host: each host's share of every figure is stored, and the
// figures are its sums. It is derived state, never serialized.
//
// A device or host change (the index's unindex and reindex) notes the host
// in a journal; a read brings the figures up to date by replacing the
// shares of the hosts noted since it last read (a host noted twice is
// recomputed twice, to the same share), so a read costs what changed
// since the last one, not the size of the cluster. Commands write the
// journal while no read runs (the state's lock); reads run side by side
// under a shared lock and serialize on statsDev.mu.
//
// Sums are exact in any order: shares of a device (utilisation, free and
// unusable capacity) are kept on a grid of 2^-32 of a device as integers,
// so a sum kept as hosts change equals a sum computed afresh.

// gridUnit is the number of grid steps in one device.
const gridUnit = 1 << 32

// onGrid is x devices on the grid.
func onGrid(x float64) int64 { return int64(math.Round(x * gridUnit)) }

// gridMean is the mean of n values whose sum on the grid is sum; 0 when n
// is 0.
func gridMean(sum int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(sum) / gridUnit / float64(n)
}

// devFigures are the device figures of one type and pool.
type devFigures struct {
	counts DeviceCounts
	// sched counts the schedulable devices, used their utilisation on the
	// grid.
	sched int
	used  int64
}

func (f *devFigures) add(g *devFigures, sign int) {
	f.counts.Total += sign * g.counts.Total
	f.counts.Available += sign * g.counts.Available
	f.counts.Draining += sign * g.counts.Draining
	f.counts.Unhealthy += sign * g.counts.Unhealthy
	f.counts.Offline += sign * g.counts.Offline
	f.counts.InUse += sign * g.counts.InUse
	f.sched += sign * g.sched
	f.used += int64(sign) * g.used
}

// devShare is a host's share of the figures of one type and pool.
type devShare struct {
	t    DeviceType
	pool string
	f    devFigures
}

// devRef names a device of a type.
type devRef struct {
	t  DeviceType
	id string
}

// hostShare is what one host adds to the figures.
type hostShare struct {
	shares    []devShare
	unhealthy []devRef
}

// statsDev holds the device side of the statistics.
type statsDev struct {
	mu sync.Mutex
	// journal lists the hosts noted, from journal position base on;
	// noted holds each host's latest position, readAt the journal's end
	// at the latest read.
	journal []string
	base    uint64
	noted   map[string]uint64
	readAt  uint64

	// The figures per type and pool, synced up to position at (when ok).
	ok        bool
	at        uint64
	hosts     map[string]*hostShare
	figures   map[DeviceType]map[string]*devFigures
	unhealthy map[DeviceType]map[string]bool

	// scopes hold the fragmentation and host utilisation of pool scopes.
	scopes map[string]*scopeCache
	reads  uint64

	// The recent request shapes counted by key (syncWindow); keys is
	// the sorted keys, nil when they changed.
	added, tallied uint64
	ring           []string
	window         map[string]*shapeTally
	keys           []string
}

func newStatsDev() *statsDev {
	return &statsDev{noted: map[string]uint64{}, scopes: map[string]*scopeCache{}}
}

// end is the journal's end position.
func (g *statsDev) end() uint64 { return g.base + uint64(len(g.journal)) }

// since is the journal from position at on, and whether it still holds
// that position.
func (g *statsDev) since(at uint64) ([]string, bool) {
	if at < g.base {
		return nil, false
	}
	return g.journal[at-g.base:], true
}

// note records that a host or one of its devices changed. A host noted
// since the latest read is not noted again: every reader is at or before
// that entry. The journal restarts when it outgrows the hosts; readers
// behind it then recompute everything.
func (g *statsDev) note(host string, hosts int) {
	if p, ok := g.noted[host]; ok && p >= g.readAt && p >= g.base {
		return
	}
	if len(g.journal) > 2*hosts+1024 {
		g.base = g.end()
		g.journal = g.journal[:0]
		clear(g.noted)
	}
	g.noted[host] = g.end()
	g.journal = append(g.journal, host)
}

// syncFigures brings the per-type-and-pool figures up to date.
func (g *statsDev) syncFigures(s *State) {
	list, ok := g.since(g.at)
	if !g.ok || !ok {
		g.hosts = map[string]*hostShare{}
		g.figures = map[DeviceType]map[string]*devFigures{}
		g.unhealthy = map[DeviceType]map[string]bool{}
		for id := range s.hosts { // order-free: integer sums and sets
			g.setHost(s, id)
		}
	} else {
		for _, id := range list {
			g.setHost(s, id)
		}
	}
	g.ok, g.at = true, g.end()
	g.readAt = g.at
}

// setHost replaces a host's share by what it holds now.
func (g *statsDev) setHost(s *State, id string) {
	if old := g.hosts[id]; old != nil {
		g.apply(old, -1)
		delete(g.hosts, id)
	}
	h := s.hosts[id]
	if h == nil {
		return
	}
	sh := &hostShare{}
	for _, did := range h.Devices {
		d := s.devices[did]
		var f *devFigures
		for i := range sh.shares {
			if sh.shares[i].t == d.Type && sh.shares[i].pool == d.Pool {
				f = &sh.shares[i].f
			}
		}
		if f == nil {
			sh.shares = append(sh.shares, devShare{t: d.Type, pool: d.Pool})
			f = &sh.shares[len(sh.shares)-1].f
		}
		f.counts.add(s, d)
		if s.schedulable(d) {
			f.sched++
			f.used += onGrid(deviceUtil(d))
		}
		if d.Status == Unhealthy {
			sh.unhealthy = append(sh.unhealthy, devRef{d.Type, d.ID})
		}
	}
	g.hosts[id] = sh
	g.apply(sh, 1)
}

func (g *statsDev) apply(sh *hostShare, sign int) {
	for i := range sh.shares {
		ds := &sh.shares[i]
		m, f := typePoolEntry(g.figures, ds.t, ds.pool, func() *devFigures { return &devFigures{} })
		f.add(&ds.f, sign)
		if f.counts.Total == 0 {
			delete(m, ds.pool)
		}
	}
	for _, r := range sh.unhealthy {
		m := g.unhealthy[r.t]
		if m == nil {
			m = map[string]bool{}
			g.unhealthy[r.t] = m
		}
		if sign > 0 {
			m[r.id] = true
		} else {
			delete(m, r.id)
		}
	}
}

// poolFigures sums the figures of type t over the pools of in.
func (g *statsDev) poolFigures(t DeviceType, in poolSet) devFigures {
	var out devFigures
	for p, f := range g.figures[t] { // order-free: integer sums
		if in(p) {
			out.add(f, 1)
		}
	}
	return out
}

// scopeID names a set of pools: every pool ("*"), one pool ("=" and its
// name), or every pool but some ("-" and their names).
func scopeID(t DeviceType, pools string) string { return string(t) + "\x00" + pools }

// scope returns the cache of type t over the pools of in, named id.
func (g *statsDev) scope(s *State, t DeviceType, id string, in poolSet) *scopeCache {
	c := g.scopes[scopeID(t, id)]
	if c == nil {
		c = &scopeCache{t: t, in: in, idx: map[string]int32{}}
		g.scopes[scopeID(t, id)] = c
	}
	c.used = g.reads
	c.sync(s, g)
	return c
}

// finishRead forgets the scopes not read for a while (pools that went, a
// changed set of overridden pools).
func (g *statsDev) finishRead() {
	for k, c := range g.scopes { // deleting only
		if c.used+64 < g.reads {
			delete(g.scopes, k)
		}
	}
}

// scopeCache keeps, for one device type over a set of pools, each host's
// free capacity of the type and what each cached request shape could not
// use of it (frag.go's measure, devices of the type in other pools shown
// taken), and each host's utilisation of the type.
type scopeCache struct {
	t    DeviceType
	in   poolSet
	ok   bool
	at   uint64
	used uint64

	fc     fragClasses
	idx    map[string]int32
	hosts  []scopeHost
	free   int64
	shapes []*scopeShape
	// work measures the cached shapes, in order; nil when they changed.
	work *fragWorkload
	// utils orders the hosts with schedulable devices of the scope by
	// utilisation; inUse counts their devices in use.
	utils *btree.BTreeG[utilKey]
	inUse int

	view []fragDev
	span fragSpans
}

// scopeHost is a host's share of a scope.
type scopeHost struct {
	id    string
	live  bool
	free  int64
	sched int
	used  int64
	inUse int
}

// scopeShape is a cached request shape: what it could not use on each
// host, and the sum.
type scopeShape struct {
	key   string
	shape Shape
	terms []int64
	sum   int64
}

type utilKey struct {
	u    float64
	host int32
}

func utilKeyLess(a, b utilKey) bool {
	if a.u != b.u {
		return a.u < b.u
	}
	return a.host < b.host
}

func (c *scopeCache) hide(d *Device) bool { return d.Type == c.t && !c.in(d.Pool) }

func (c *scopeCache) workload() *fragWorkload {
	if c.work == nil {
		ws := make([]weightedShape, len(c.shapes))
		for i, sh := range c.shapes {
			ws[i] = weightedShape{shape: sh.shape, weight: 1, key: sh.key}
		}
		c.work = compileWorkload(&c.fc, ws, c.t)
	}
	return c.work
}

// sync replaces the shares of the hosts noted since the cache last read.
func (c *scopeCache) sync(s *State, g *statsDev) {
	list, ok := g.since(c.at)
	if !c.ok || !ok {
		c.idx = map[string]int32{}
		c.hosts = c.hosts[:0]
		c.free, c.inUse = 0, 0
		c.utils = btree.NewG(btreeDegree, utilKeyLess)
		for _, sh := range c.shapes {
			sh.terms, sh.sum = sh.terms[:0], 0
		}
		list = sortedKeys(s.hosts)
	}
	for _, id := range list {
		c.setHost(s, id)
	}
	c.ok, c.at = true, g.end()
}

func (c *scopeCache) setHost(s *State, id string) {
	i, ok := c.idx[id]
	h := s.hosts[id]
	if !ok {
		if h == nil {
			return
		}
		i = int32(len(c.hosts))
		c.idx[id] = i
		c.hosts = append(c.hosts, scopeHost{})
		for _, sh := range c.shapes {
			sh.terms = append(sh.terms, 0)
		}
	}
	sh := &c.hosts[i]
	if sh.live {
		c.free -= sh.free
		c.inUse -= sh.inUse
		for _, ss := range c.shapes {
			ss.sum -= ss.terms[i]
			ss.terms[i] = 0
		}
		if sh.sched > 0 {
			c.utils.Delete(utilKey{gridMean(sh.used, sh.sched), i})
		}
		*sh = scopeHost{id: id}
	}
	if h == nil {
		return
	}
	sh.id, sh.live = id, true
	w := c.workload()
	c.view = buildView(s, h, nil, &c.fc, c.hide, c.view[:0], &c.span)
	var terms []int64
	sh.free, terms = hostFragTerms(w, c.view, &c.span, terms)
	c.free += sh.free
	for k, ss := range c.shapes {
		ss.terms[i] = terms[k]
		ss.sum += terms[k]
	}
	for _, did := range h.Devices {
		d := s.devices[did]
		if d.Type != c.t || !c.in(d.Pool) || !s.schedulable(d) {
			continue
		}
		u := deviceUtil(d)
		sh.sched++
		sh.used += onGrid(u)
		if u > 0 {
			sh.inUse++
		}
	}
	c.inUse += sh.inUse
	if sh.sched > 0 {
		c.utils.ReplaceOrInsert(utilKey{gridMean(sh.used, sh.sched), i})
	}
}

// hostFragTerms is a host's free capacity of the measured type on the
// grid and, for each of the workload's shapes, the part of it the
// shape could not use (0 where hardly anything is free), appended to dst.
func hostFragTerms(w *fragWorkload, view []fragDev, span *fragSpans, dst []int64) (int64, []int64) {
	n := len(w.shapes)
	total := w.free(view, span)
	if total <= eps {
		for range n {
			dst = append(dst, 0)
		}
		return onGrid(total), dst
	}
	w.measure(view, span)
	for k := range n {
		dst = append(dst, onGrid(w.unusable(&w.shapes[k], total)))
	}
	return onGrid(total), dst
}

// gridFragmentation is the fragmentation of free capacity free (on the
// grid) of which each typical shape could not use unusable[k]: the
// weighted sum in the shapes' order, over free; 0 when hardly anything is
// free.
func gridFragmentation(shapes []weightedShape, unusable []int64, free int64) float64 {
	if float64(free)/gridUnit <= eps {
		return 0
	}
	frag := 0.0
	for k, ws := range shapes {
		frag += ws.weight * float64(unusable[k])
	}
	return math.Min(1, frag/float64(free))
}

// ensure caches the shapes not cached yet, measuring them on every host,
// and forgets cached shapes when there are many more than wanted.
func (c *scopeCache) ensure(s *State, want []weightedShape) {
	var add []weightedShape
	for _, ws := range want {
		if c.shape(ws.key) == nil && !slices.ContainsFunc(add, func(o weightedShape) bool { return o.key == ws.key }) {
			add = append(add, ws)
		}
	}
	if len(c.shapes)+len(add) > 2*len(want)+16 {
		keep := c.shapes[:0]
		for _, sh := range c.shapes {
			if slices.ContainsFunc(want, func(o weightedShape) bool { return o.key == sh.key }) {
				keep = append(keep, sh)
			}
		}
		clear(c.shapes[len(keep):])
		c.shapes = keep
		c.work = nil
	}
	if len(add) == 0 {
		return
	}
	first := len(c.shapes)
	for _, ws := range add {
		c.shapes = append(c.shapes, &scopeShape{key: ws.key, shape: ws.shape, terms: make([]int64, len(c.hosts))})
	}
	c.work = nil
	w := c.workload()
	var terms []int64
	for i := range c.hosts {
		// A host without devices may leave unnoted: it holds no share.
		h := s.hosts[c.hosts[i].id]
		if !c.hosts[i].live || h == nil {
			continue
		}
		c.view = buildView(s, h, nil, &c.fc, c.hide, c.view[:0], &c.span)
		_, terms = hostFragTerms(w, c.view, &c.span, terms[:0])
		for k := first; k < len(c.shapes); k++ {
			c.shapes[k].terms[i] = terms[k]
			c.shapes[k].sum += terms[k]
		}
	}
}

func (c *scopeCache) shape(key string) *scopeShape {
	for _, sh := range c.shapes {
		if sh.key == key {
			return sh
		}
	}
	return nil
}

// fragmentation is the scope's fragmentation under the typical shapes.
func (c *scopeCache) fragmentation(s *State, typical []weightedShape) float64 {
	c.ensure(s, typical)
	sums := make([]int64, len(typical))
	for k, ws := range typical {
		sums[k] = c.shape(ws.key).sum
	}
	return gridFragmentation(typical, sums, c.free)
}

// spread is the most and least utilisation among the hosts with
// schedulable devices of the scope, their number and their devices in use.
func (c *scopeCache) spread() (hi, lo float64, hosts, inUse int) {
	if c.utils.Len() == 0 {
		return 0, 0, 0, 0
	}
	mx, _ := c.utils.Max()
	mn, _ := c.utils.Min()
	return mx.u, mn.u, c.utils.Len(), c.inUse
}

// shapeTally counts the requests of one shape in the recent window.
type shapeTally struct {
	n     int
	shape Shape
}

// syncWindow brings the count of the window's shapes by key up to date:
// allocate counts the shapes added (added); a read keys the new ones and
// uncounts those that left the window (the oldest of ring, which mirrors
// the window's keys).
func (g *statsDev) syncWindow(list []Shape) {
	k := g.added - g.tallied
	if g.window == nil || k > uint64(len(list)) {
		g.window, g.ring = map[string]*shapeTally{}, g.ring[:0]
		k = uint64(len(list))
	}
	if k == 0 {
		return
	}
	g.keys = nil
	for i := len(list) - int(k); i < len(list); i++ {
		key := list[i].key()
		g.ring = append(g.ring, key)
		t := g.window[key]
		if t == nil {
			t = &shapeTally{}
			g.window[key] = t
		}
		t.n++
		t.shape = list[i]
	}
	drop := len(g.ring) - len(list)
	for _, key := range g.ring[:drop] {
		t := g.window[key]
		if t.n--; t.n == 0 {
			delete(g.window, key)
		}
	}
	g.ring = append(g.ring[:0], g.ring[drop:]...)
	g.tallied = g.added
}

// typicalFor is the typical workload of the requests with a claim of type
// t in the pools of in, servable shapes only, and the number of those
// requests. Shapes with one key are one shape.
func (s *State) typicalFor(t DeviceType, in poolSet) ([]weightedShape, int) {
	g := s.agg.dev
	if g.keys == nil {
		g.keys = sortedKeys(g.window)
	}
	var counts []shapeCount
	for _, k := range g.keys {
		tl := g.window[k]
		if claimsIn(&tl.shape, t, in) {
			counts = append(counts, shapeCount{key: k, n: tl.n, shape: tl.shape})
		}
	}
	shapes, samples := typicalOf(counts)
	if len(shapes) == 0 {
		return nil, samples
	}
	return servableShapes(s, shapes), samples
}

// claimsIn reports whether a shape has a claim of type t in the pools of
// in (a claim without a pool is in every one).
func claimsIn(sh *Shape, t DeviceType, in poolSet) bool {
	for _, c := range sh.Claims {
		if c.Type == t && (c.Pool == "" || in(c.Pool)) {
			return true
		}
	}
	return false
}

// ownScope is the type's own policy scope: every pool without an override;
// its id names the overridden pools.
func (s *State) ownScope() (string, poolSet) {
	var over []string
	for _, p := range sortedKeys(s.poolPolicies) {
		if p != "" {
			over = append(over, p)
		}
	}
	if len(over) == 0 {
		return "*", onePool(AllPools)
	}
	// The scope's cache outlives this call: in reads the set named by
	// the id, not the policies as they will be.
	return "-" + strings.Join(over, "\x00"), func(p string) bool { return !slices.Contains(over, p) }
}

// poolScopeID is the id of the scope of one pool, or of every pool.
func poolScopeID(pool string) string {
	if pool == AllPools {
		return "*"
	}
	return "=" + pool
}
