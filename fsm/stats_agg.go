package fsm

import (
	"cmp"
	"maps"
	"math"
	"math/big"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
)

// The allocation figures of Stats (outcome counts, durations, queue waits)
// are kept as commands apply, so that a read assembles them in a time that
// does not grow with the history. They are derived state: never
// serialized, rebuilt on restore (statsGather, statsAgg.settle).
//
// Every allocation counts in one bucket, (type, pool, namespace), the pool
// as statsPool gives it. A bucket keeps:
//   - the outcome counts;
//   - the durations of ended allocations that got devices, and the
//     allocation times of active ones (whose duration runs to now), each
//     in an order-statistic set (rankSet) with its exact sum;
//   - the queue waits of every allocation that got devices.
//
// Percentiles over several buckets (every pool of a type, several
// namespaces) are found by a binary search over the value, counting in
// each tree; means come from exact 128-bit sums. So the figures equal a
// from-scratch computation exactly, whatever the order of the updates.
//
// statsPool reads the allocation's first device: when a device joins or
// leaves the inventory, the allocations whose first device it is move
// between buckets (byFirstDev).

// u128 is an unsigned 128-bit sum.
type u128 struct{ hi, lo uint64 }

func (u *u128) add(v uint64) {
	var c uint64
	u.lo, c = bits.Add64(u.lo, v, 0)
	u.hi += c
}

func (u *u128) sub(v uint64) {
	var b uint64
	u.lo, b = bits.Sub64(u.lo, v, 0)
	u.hi -= b
}

func (u u128) plus(v u128) u128 {
	lo, c := bits.Add64(u.lo, v.lo, 0)
	return u128{hi: u.hi + v.hi + c, lo: lo}
}

func (u u128) minus(v u128) u128 {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	return u128{hi: u.hi - v.hi - b, lo: lo}
}

// mul64 is a times b, both non-negative.
func mul64(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi: hi, lo: lo}
}

// float is the sum rounded to the nearest float64.
func (u u128) float() float64 {
	if u.hi == 0 {
		return float64(u.lo)
	}
	x := new(big.Int).SetUint64(u.hi)
	x.Lsh(x, 64).Or(x, new(big.Int).SetUint64(u.lo))
	f, _ := new(big.Float).SetInt(x).Float64()
	return f
}

// ostVal is a value of an ostTree, and seqVal one of a seqTree: a value
// ordered by its allocation's Seq.
type ostVal int64

func (v ostVal) before(o ostVal) bool { return v < o }
func (v ostVal) weight() uint64       { return uint64(v) }

type seqVal struct{ seq, v uint64 }

func (x seqVal) before(o seqVal) bool { return x.seq < o.seq }
func (x seqVal) weight() uint64       { return x.v }

// ostTree is a multiset of int64 with rank queries and an exact sum of
// its (non-negative) values.
type ostTree struct {
	set rankSet[ostVal]
	// gathered holds values to build the set from (settle).
	gathered chunks[ostVal]
}

// gather keeps a value for settle, which builds the set at once.
func (o *ostTree) gather(v int64) { o.gathered.add(ostVal(v)) }

// settle builds the (empty) set from the values gathered, sorted.
func (o *ostTree) settle() {
	values := o.gathered.take()
	slices.Sort(values)
	o.set.build(values)
}

func (o *ostTree) len() int       { return o.set.len() }
func (o *ostTree) sum() u128      { return o.set.all }
func (o *ostTree) insert(v int64) { o.set.insert(ostVal(v)) }

// remove takes v out, and reports whether the tree held it.
func (o *ostTree) remove(v int64) bool { return o.set.remove(ostVal(v)) }

// countLE is how many values are at most v, and countLT how many are
// below v.
func (o *ostTree) countLE(v int64) int { return o.set.countUpTo(ostVal(v)) }
func (o *ostTree) countLT(v int64) int { return o.set.countBefore(ostVal(v)) }

// min and max are the least and the greatest value; the tree must not be
// empty.
func (o *ostTree) min() int64 { return int64(o.set.first()) }
func (o *ostTree) max() int64 { return int64(o.set.last()) }

// chunks is a list that grows a chunk at a time and never moves what it
// holds: the values a restore gathers for a tree, a million or more.
type chunks[T any] struct {
	full [][]T
	last []T
	n    int
}

// maxChunk is the length of a full chunk; the first ones are shorter, so
// that a short list takes little.
const maxChunk = 4096

func (c *chunks[T]) add(v T) {
	if len(c.last) == cap(c.last) {
		if c.last != nil {
			c.full = append(c.full, c.last)
		}
		c.last = make([]T, 0, min(max(2*cap(c.last), 16), maxChunk))
	}
	c.last = append(c.last, v)
	c.n++
}

// absorb moves o's values to the end of c.
func (c *chunks[T]) absorb(o *chunks[T]) {
	if o.n == 0 {
		return
	}
	if len(c.last) > 0 {
		c.full = append(c.full, c.last)
	}
	c.full = append(c.full, o.full...)
	c.last = o.last
	c.n += o.n
	*o = chunks[T]{}
}

// take returns the values in one slice, in the order added, and empties
// the list.
func (c *chunks[T]) take() []T {
	if c.n == 0 {
		return nil
	}
	out := make([]T, 0, c.n)
	for _, f := range c.full {
		out = append(out, f...)
	}
	out = append(out, c.last...)
	*c = chunks[T]{}
	return out
}

// seqTree holds one value per allocation, ordered by Seq, with counts and
// sums of the values up to a Seq.
type seqTree struct {
	set rankSet[seqVal]
	// gathered holds the Seqs and values to build the set from (settle).
	gathered chunks[seqVal]
}

// gather keeps a value for settle, which builds the set at once.
func (o *seqTree) gather(seq, v uint64) { o.gathered.add(seqVal{seq: seq, v: v}) }

// settle builds the (empty) set from the values gathered, sorted by Seq.
func (o *seqTree) settle() {
	values := o.gathered.take()
	slices.SortFunc(values, func(a, b seqVal) int { return cmp.Compare(a.seq, b.seq) })
	o.set.build(values)
}

func (o *seqTree) len() int             { return o.set.len() }
func (o *seqTree) insert(seq, v uint64) { o.set.insert(seqVal{seq: seq, v: v}) }

// remove takes the value at seq out, and reports whether the tree held
// it.
func (o *seqTree) remove(seq uint64) bool { return o.set.remove(seqVal{seq: seq}) }

// upTo is the count and sum of the values at Seq seq or below.
func (o *seqTree) upTo(seq uint64) (int, u128) { return o.set.sumUpTo(seqVal{seq: seq}) }

// allocAgg is the figures of one bucket.
type allocAgg struct {
	counts OutcomeCounts
	// ended holds the durations of ended allocations that got devices;
	// active the allocation times of the active ones.
	ended, active ostTree
	waits         ostTree
	// What Recommend reads: the allocations by priority; of those that
	// got devices, how many hold no lease, how many ended and how many of
	// those ran at most RecommendShortDuration; the queue waits of the
	// requests not refused at once by Seq, fixed (placed or ended) or
	// running (pending: the request times).
	prios                    map[int]int
	noLease, finished, short int
	waited, waiting          seqTree
}

func (c *OutcomeCounts) addSigned(a *Allocation, sign int) {
	var one OutcomeCounts
	one.add(a)
	c.Total += sign * one.Total
	c.Successful += sign * one.Successful
	c.Released += sign * one.Released
	c.Failed += sign * one.Failed
	c.OverQuota += sign * one.OverQuota
	c.TimedOut += sign * one.TimedOut
	c.Preempted += sign * one.Preempted
	c.Expired += sign * one.Expired
	c.Lost += sign * one.Lost
	c.Cancelled += sign * one.Cancelled
	c.Drained += sign * one.Drained
	c.Active += sign * one.Active
	c.Pending += sign * one.Pending
}

// aggKey names a bucket.
type aggKey struct {
	t    DeviceType
	pool string
	ns   string
}

// devAllocs lists the allocations whose first device is one device: the
// live ones, and the history's by record number, some of them perhaps
// dropped since (dead counts them).
type devAllocs struct {
	live []*Allocation
	hist []uint64
	dead int
}

// statsAgg is the derived state behind Stats.
type statsAgg struct {
	buckets map[DeviceType]map[string]map[string]*allocAgg // type, pool, namespace
	// pending holds the queued allocations counted as pending.
	pending map[*Allocation]bool
	// byFirstDev is nil until a device first joins or leaves.
	byFirstDev map[string]*devAllocs
	// last is the bucket last counted in, of key lastKey (nil when it was
	// dropped): consecutive allocations often share one.
	last    *allocAgg
	lastKey aggKey
	// devPools counts the devices per type and pool.
	devPools map[DeviceType]map[string]int
	// lost counts, per device, the retained allocations lost on it;
	// flaky holds, per type and pool, the devices with at least
	// RecommendLostPerDevice of them.
	lost  map[string]int
	flaky map[DeviceType]map[string]*flakySet
	// dev is the device side (stats_dev.go).
	dev *statsDev
	// fault is the first removal that found a value the trees do not
	// hold: the figures no longer match the allocations (State.Fault).
	fault error
}

// flakySet is the flaky devices of a type and pool, and the allocations
// lost on them.
type flakySet struct {
	ids  *btree.BTreeG[string]
	lost int
}

func newStatsAgg() *statsAgg {
	return &statsAgg{
		buckets:  map[DeviceType]map[string]map[string]*allocAgg{},
		pending:  map[*Allocation]bool{},
		devPools: map[DeviceType]map[string]int{},
		lost:     map[string]int{},
		flaky:    map[DeviceType]map[string]*flakySet{},
		dev:      newStatsDev(),
	}
}

// typePoolEntry is the entry of type t and pool in m, made by mk when
// there is none, and the type's map.
func typePoolEntry[V any](m map[DeviceType]map[string]*V, t DeviceType, pool string, mk func() *V) (map[string]*V, *V) {
	byPool := m[t]
	if byPool == nil {
		byPool = map[string]*V{}
		m[t] = byPool
	}
	v := byPool[pool]
	if v == nil {
		v = mk()
		byPool[pool] = v
	}
	return byPool, v
}

// countLost counts (sign 1) or uncounts (-1) a retained lost allocation
// on each of its devices.
func (s *State) countLost(a *Allocation, sign int) {
	if a.Status != Lost {
		return
	}
	for i, as := range a.Devices {
		if slices.ContainsFunc(a.Devices[:i], func(o Assignment) bool { return o.DeviceID == as.DeviceID }) {
			continue
		}
		id := as.DeviceID
		d := s.devices[id]
		s.agg.flakyFile(d, -1)
		s.agg.lost[id] += sign
		if s.agg.lost[id] == 0 {
			delete(s.agg.lost, id)
		}
		s.agg.flakyFile(d, 1)
	}
}

// flakyFile adds (sign 1) or removes (-1) a device to or from the flaky
// set of its type and pool when it lost enough allocations.
func (g *statsAgg) flakyFile(d *Device, sign int) {
	if d == nil || g.lost[d.ID] < RecommendLostPerDevice {
		return
	}
	m, f := typePoolEntry(g.flaky, d.Type, d.Pool, func() *flakySet {
		return &flakySet{ids: btree.NewG(btreeDegree, func(a, b string) bool { return a < b })}
	})
	f.lost += sign * g.lost[d.ID]
	if sign > 0 {
		f.ids.ReplaceOrInsert(d.ID)
	} else {
		f.ids.Delete(d.ID)
	}
	if f.ids.Len() == 0 {
		delete(m, d.Pool)
	}
}

// bucket returns the bucket of k, made when make is set (else nil when
// there is none).
func (g *statsAgg) bucket(k aggKey, make bool) *allocAgg {
	pools := g.buckets[k.t]
	if pools == nil {
		if !make {
			return nil
		}
		pools = map[string]map[string]*allocAgg{}
		g.buckets[k.t] = pools
	}
	nss := pools[k.pool]
	if nss == nil {
		if !make {
			return nil
		}
		nss = map[string]*allocAgg{}
		pools[k.pool] = nss
	}
	b := nss[k.ns]
	if b == nil && make {
		b = &allocAgg{}
		nss[k.ns] = b
	}
	return b
}

// drop forgets the bucket of k once it counts nothing.
func (g *statsAgg) drop(k aggKey) {
	nss := g.buckets[k.t][k.pool]
	delete(nss, k.ns)
	if len(nss) == 0 {
		delete(g.buckets[k.t], k.pool)
		if len(g.buckets[k.t]) == 0 {
			delete(g.buckets, k.t)
		}
	}
}

// aggCount adds (sign 1) or removes (sign -1) allocation a, as it is now,
// to or from its bucket.
func (s *State) aggCount(a *Allocation, sign int) { s.aggCountIn(a, s.statsPool(a), sign) }

// aggCountIn is aggCount for an allocation whose statsPool is pool.
func (s *State) aggCountIn(a *Allocation, pool string, sign int) {
	k := aggKey{t: a.Request.PrimaryType(), pool: pool, ns: a.Namespace}
	b := s.agg.last
	if b == nil || k != s.agg.lastKey {
		b = s.agg.bucket(k, true)
		s.agg.last, s.agg.lastKey = b, k
	}
	if !b.count(a, sign, false) && s.agg.fault == nil {
		s.agg.fault = errf(ErrInconsistent, "the statistics of %s/%s/%s do not hold allocation %s", k.t, k.pool, k.ns, a.ID)
	}
	if b.counts.Total == 0 {
		s.agg.drop(k)
		s.agg.last = nil
	}
}

// count adds (sign 1) or removes (-1) allocation a, as it is now, to or
// from the bucket; gather keeps the trees' values for settle instead. It
// reports false when a removal finds a value the trees do not hold.
func (b *allocAgg) count(a *Allocation, sign int, gather bool) bool {
	b.counts.addSigned(a, sign)
	if b.prios == nil {
		b.prios = map[int]int{}
	}
	if b.prios[a.Request.Priority] += sign; b.prios[a.Request.Priority] == 0 {
		delete(b.prios, a.Request.Priority)
	}
	if a.AllocatedAt != 0 {
		if a.Request.LeaseTTL == 0 {
			b.noLease += sign
		}
		if a.EndedAt != 0 {
			b.finished += sign
			if a.EndedAt-a.AllocatedAt <= int64(RecommendShortDuration) {
				b.short += sign
			}
		}
	}
	return b.trees(a, sign, gather)
}

// absorb adds the counts of o, a bucket a restore gathered
// (statsGather), to b, and takes its gathered values.
func (b *allocAgg) absorb(o *allocAgg) {
	b.counts = aggSet{b, o}.counts()
	if b.prios == nil {
		b.prios = map[int]int{}
	}
	for p, n := range o.prios { // adding: order-free
		b.prios[p] += n
	}
	b.noLease += o.noLease
	b.finished += o.finished
	b.short += o.short
	b.ended.gathered.absorb(&o.ended.gathered)
	b.active.gathered.absorb(&o.active.gathered)
	b.waits.gathered.absorb(&o.waits.gathered)
	b.waited.gathered.absorb(&o.waited.gathered)
	b.waiting.gathered.absorb(&o.waiting.gathered)
}

// trees adds (sign 1) or removes (-1) allocation a, as it is now, to or
// from the bucket's trees; gather keeps the values for settle instead. It
// reports false when a removal finds a value the trees do not hold.
func (b *allocAgg) trees(a *Allocation, sign int, gather bool) bool {
	ok := true
	if a.AllocatedAt != 0 {
		wait := a.AllocatedAt - a.RequestedAt
		tree, v := &b.ended, a.EndedAt-a.AllocatedAt
		if a.Status == Active {
			tree, v = &b.active, a.AllocatedAt
		}
		switch {
		case gather:
			tree.gather(v)
			b.waits.gather(wait)
		case sign > 0:
			tree.insert(v)
			b.waits.insert(wait)
		default:
			ok = tree.remove(v)
			ok = b.waits.remove(wait) && ok
		}
	}
	if a.Status != Failed {
		tree, v := &b.waited, a.EndedAt-a.RequestedAt
		switch {
		case a.AllocatedAt != 0:
			v = a.AllocatedAt - a.RequestedAt
		case a.Status == Pending:
			tree, v = &b.waiting, a.RequestedAt
		}
		switch {
		case gather:
			tree.gather(a.Seq, uint64(v))
		case sign > 0:
			tree.insert(a.Seq, uint64(v))
		default:
			ok = tree.remove(a.Seq) && ok
		}
	}
	return ok
}

// firstDevList is the list of the allocations whose first device is
// id, made when there is none.
func (g *statsAgg) firstDevList(id string) *devAllocs {
	l := g.byFirstDev[id]
	if l == nil {
		l = &devAllocs{}
		g.byFirstDev[id] = l
	}
	return l
}

// aggAddFirstDev files a placed allocation under its first device (once
// the lists are built).
func (s *State) aggAddFirstDev(a *Allocation) {
	if len(a.Devices) == 0 || s.agg.byFirstDev == nil {
		return
	}
	l := s.agg.firstDevList(a.Devices[0].DeviceID)
	l.live = append(l.live, a)
}

// aggDropped is called when the history drops a.
func (s *State) aggDropped(a *Allocation) {
	s.aggCount(a, -1)
	s.countLost(a, -1)
	if len(a.Devices) == 0 || s.agg.byFirstDev == nil {
		return
	}
	id := a.Devices[0].DeviceID
	l := s.agg.byFirstDev[id]
	l.dead++
	if l.dead*2 > len(l.hist) {
		s.compactFirstDev(id, l)
	}
}

// compactFirstDev keeps of a list's records those still in the history.
func (s *State) compactFirstDev(id string, l *devAllocs) {
	l.hist = slices.DeleteFunc(l.hist, func(n uint64) bool { return !s.history.kept(n) })
	l.dead = 0
	if len(l.live)+len(l.hist) == 0 {
		delete(s.agg.byFirstDev, id)
	}
}

// firstDevCount adds (sign 1) or removes (-1) the allocations of a list
// to or from their buckets, the history's decoded for it.
func (s *State) firstDevCount(l *devAllocs, sign int) {
	for _, a := range l.live {
		s.aggCount(a, sign)
	}
	for _, n := range l.hist {
		s.aggCount(s.history.at(n), sign)
	}
}

// aggDeviceChanging is called just before device id joins or leaves the
// inventory, and aggDeviceChanged just after: the allocations whose first
// device it is move to the bucket they count in now.
func (s *State) aggDeviceChanging(id string) {
	if d := s.devices[id]; d != nil {
		s.agg.countDevice(d, -1)
		s.agg.flakyFile(d, -1)
	}
	if s.agg.byFirstDev == nil {
		s.agg.byFirstDev = map[string]*devAllocs{}
		s.history.eachFirstDevice(func(n uint64, dev []byte) {
			l := s.agg.byFirstDev[string(dev)]
			if l == nil {
				l = s.agg.firstDevList(string(dev))
			}
			l.hist = append(l.hist, n)
		})
		for _, a := range s.allocs { // filing only: lists are order-free
			s.aggAddFirstDev(a)
		}
	}
	if l := s.agg.byFirstDev[id]; l != nil {
		s.compactFirstDev(id, l)
		s.firstDevCount(l, -1)
	}
}

func (s *State) aggDeviceChanged(id string) {
	if d := s.devices[id]; d != nil {
		s.agg.countDevice(d, 1)
		s.agg.flakyFile(d, 1)
	}
	if l := s.agg.byFirstDev[id]; l != nil {
		s.firstDevCount(l, 1)
	}
}

// countDevice adds or removes a device from the count of its type and
// pool.
func (g *statsAgg) countDevice(d *Device, sign int) {
	m := g.devPools[d.Type]
	if m == nil {
		m = map[string]int{}
		g.devPools[d.Type] = m
	}
	m[d.Pool] += sign
	if m[d.Pool] == 0 {
		delete(m, d.Pool)
		if len(m) == 0 {
			delete(g.devPools, d.Type)
		}
	}
}

// aggLiveEnter counts a live allocation that has just been queued or
// placed, or a request refused at once as it enters the history.
func (s *State) aggLiveEnter(a *Allocation) {
	s.aggCount(a, 1)
	if a.Status == Pending {
		s.agg.pending[a] = true
	}
	s.aggAddFirstDev(a)
}

// aggLiveLeave uncounts a live allocation about to change (placed from the
// queue, or ended); one not counted yet is left alone.
func (s *State) aggLiveLeave(a *Allocation) {
	switch {
	case a.Status == Pending && s.agg.pending[a]:
		delete(s.agg.pending, a)
		s.aggCount(a, -1)
	case a.Status == Active:
		s.aggCount(a, -1)
	}
}

// aggEnded counts an allocation that ended, the history's last record:
// one filed under its first device as live is filed again by its record.
func (s *State) aggEnded(a *Allocation) {
	s.aggCount(a, 1)
	s.countLost(a, 1)
	if len(a.Devices) > 0 && s.agg.byFirstDev != nil {
		l := s.agg.firstDevList(a.Devices[0].DeviceID)
		if i := slices.Index(l.live, a); i >= 0 {
			l.live = slices.Delete(l.live, i, i+1)
		}
		l.hist = append(l.hist, s.history.last())
	}
}

// statsGather counts allocations for the statistics of a state being
// restored, as they are read: the live ones, and the history's records
// as they are decoded, each decoder into one of its own, so that the
// records are counted side by side; restoreFinish adds them up
// (statsAgg.settle). What it keeps adds up in any order: the buckets'
// counts, and their values for the trees, which are sorted when the
// trees are built; the devices lost allocations were lost on, once per
// allocation, counted when they are sorted. The devices are counted as
// they are read (restoreDevice).
type statsGather struct {
	buckets map[aggKey]*allocAgg
	last    *allocAgg
	lastKey aggKey
	lost    []string
}

func newStatsGather() *statsGather { return &statsGather{buckets: map[aggKey]*allocAgg{}} }

// add counts allocation a, pool its statsPool. The device IDs it counts
// lost allocations under are kept: a's must be its own.
func (g *statsGather) add(a *Allocation, pool string) {
	k := aggKey{t: a.Request.PrimaryType(), pool: pool, ns: a.Namespace}
	b := g.last
	if b == nil || k != g.lastKey {
		if b = g.buckets[k]; b == nil {
			b = &allocAgg{}
			g.buckets[k] = b
		}
		g.last, g.lastKey = b, k
	}
	b.count(a, 1, true)
	if a.Status == Lost {
		for i, as := range a.Devices {
			if !slices.ContainsFunc(a.Devices[:i], func(o Assignment) bool { return o.DeviceID == as.DeviceID }) {
				g.lost = append(g.lost, as.DeviceID)
			}
		}
	}
}

// gatherLive counts live allocation a of a state being restored into g,
// as aggLiveEnter counts one that a command placed or queued.
func (s *State) gatherLive(g *statsGather, a *Allocation) {
	g.add(a, s.statsPool(a))
	if a.Status == Pending {
		s.agg.pending[a] = true
	}
}

// settle completes the aggregates of a restored state from what was
// gathered, in time linear in the history: the gathers are added up,
// each bucket's values sorted and built into its trees at once, and the
// devices (of devices) with lost allocations filed as flaky. It reads
// nothing of the state but the devices' IDs, types and pools, and
// writes nothing but the buckets, the lost counts and the flaky sets, so
// a restore runs it beside the devices' indexing. The lists of
// allocations by first device are built when a device first joins or
// leaves; the device side is computed by the first read.
func (g *statsAgg) settle(gathers []*statsGather, devices map[string]*Device) {
	var lost []string
	for _, h := range gathers {
		for _, k := range slices.SortedFunc(maps.Keys(h.buckets), aggKeyCompare) {
			g.bucket(k, true).absorb(h.buckets[k])
		}
		lost = append(lost, h.lost...)
	}
	// Counted by runs of one device once sorted: one map insert a device
	// rather than one a lost allocation.
	slices.Sort(lost)
	if len(g.lost) == 0 {
		g.lost = make(map[string]int, len(lost))
	}
	for i := 0; i < len(lost); {
		j := i + 1
		for j < len(lost) && lost[j] == lost[i] {
			j++
		}
		g.lost[lost[i]] += j - i
		i = j
	}
	var settle []func()
	for _, pools := range g.buckets { // building each: order-free
		for _, nss := range pools {
			for _, b := range nss {
				settle = append(settle, b.ended.settle, b.active.settle, b.waits.settle, b.waited.settle, b.waiting.settle)
			}
		}
	}
	// The trees share nothing: they are built side by side.
	inParallel(len(settle), func(i int) { settle[i]() })
	for id, n := range g.lost { // filing each: order-free
		if n >= RecommendLostPerDevice {
			g.flakyFile(devices[id], 1)
		}
	}
}

func aggKeyCompare(a, b aggKey) int {
	return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.pool, b.pool), cmp.Compare(a.ns, b.ns))
}

// inParallel calls f(0) to f(n-1) on up to one goroutine per processor,
// and returns once every call has returned.
func inParallel(n int, f func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// aggSet is the buckets one Stats entry covers.
type aggSet []*allocAgg

func (bs aggSet) counts() OutcomeCounts {
	var c OutcomeCounts
	for _, b := range bs {
		c.Total += b.counts.Total
		c.Successful += b.counts.Successful
		c.Released += b.counts.Released
		c.Failed += b.counts.Failed
		c.OverQuota += b.counts.OverQuota
		c.TimedOut += b.counts.TimedOut
		c.Preempted += b.counts.Preempted
		c.Expired += b.counts.Expired
		c.Lost += b.counts.Lost
		c.Cancelled += b.counts.Cancelled
		c.Drained += b.counts.Drained
		c.Active += b.counts.Active
		c.Pending += b.counts.Pending
	}
	return c
}

// durations summarises the durations of the buckets: ended ones as kept,
// active ones to now.
func (bs aggSet) durations(now int64) DurationStats {
	n := 0
	var sum u128
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, b := range bs {
		if k := b.ended.len(); k > 0 {
			n += k
			sum = sum.plus(b.ended.sum())
			lo, hi = min(lo, b.ended.min()), max(hi, b.ended.max())
		}
		if k := b.active.len(); k > 0 {
			n += k
			sum = sum.plus(mul64(uint64(k), uint64(now))).minus(b.active.sum())
			lo, hi = min(lo, now-b.active.max()), max(hi, now-b.active.min())
		}
	}
	if n == 0 {
		return DurationStats{}
	}
	countLE := func(v int64) int {
		c := 0
		for _, b := range bs {
			c += b.ended.countLE(v)
			c += b.active.len() - b.active.countLT(now-v)
		}
		return c
	}
	return durationStats(n, sum, lo, hi, countLE)
}

// waits summarises the queue waits of the buckets.
func (bs aggSet) waits() DurationStats {
	n := 0
	var sum u128
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, b := range bs {
		if k := b.waits.len(); k > 0 {
			n += k
			sum = sum.plus(b.waits.sum())
			lo, hi = min(lo, b.waits.min()), max(hi, b.waits.max())
		}
	}
	if n == 0 {
		return DurationStats{}
	}
	countLE := func(v int64) int {
		c := 0
		for _, b := range bs {
			c += b.waits.countLE(v)
		}
		return c
	}
	return durationStats(n, sum, lo, hi, countLE)
}

// durationStats is the DurationStats of n values (nanoseconds) in [lo, hi]
// summing to sum, whose ranks countLE counts.
func durationStats(n int, sum u128, lo, hi int64, countLE func(int64) int) DurationStats {
	return DurationStats{
		Count: n,
		Mean:  sum.float() / float64(n) / 1e9,
		P50:   float64(rankSearch(n, 0.50, lo, hi, countLE)) / 1e9,
		P95:   float64(rankSearch(n, 0.95, lo, hi, countLE)) / 1e9,
	}
}

// rankSearch is the nearest-rank p-th percentile of n values in [lo, hi]
// that countLE counts: the smallest v with at least rank values at or
// below it.
func rankSearch(n int, p float64, lo, hi int64, countLE func(int64) int) int64 {
	rank := min(max(int(math.Ceil(p*float64(n))), 1), n)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if countLE(mid) >= rank {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
