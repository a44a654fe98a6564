package fsm

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
)

// statsFromScratch is the reference for Stats: it computes every figure
// from every retained and live allocation and every device, as Stats did
// before the aggregates (stats_agg.go, stats_dev.go) were kept. Tests
// compare the two.
func (s *State) statsFromScratch(f StatsFilter) []Stats {
	return s.statsFromScratchWith(f, s.statsEntryFromScratch)
}

// statsEntryFromScratch completes a Stats entry with the device figures
// computed from every device.
func (s *State) statsEntryFromScratch(t DeviceType, pool string, sum outcomeSummary) Stats {
	in := onePool(pool)
	frag, _ := s.fragmentation(t, in)
	return s.statsFrom(t, pool, sum, s.utilisation(t, in), frag, s.deviceCounts(t, in))
}

// utilisation is the mean used share of the schedulable devices of type t
// in the pools of in.
func (s *State) utilisation(t DeviceType, in poolSet) float64 {
	n, used := 0, int64(0)
	for _, hid := range sortedKeys(s.hosts) {
		for _, id := range s.hosts[hid].Devices {
			d := s.devices[id]
			if d.Type != t || !in(d.Pool) || !s.schedulable(d) {
				continue
			}
			n++
			used += onGrid(deviceUtil(d))
		}
	}
	return gridMean(used, n)
}

// deviceCounts counts the devices of type t in the pools of in.
func (s *State) deviceCounts(t DeviceType, in poolSet) DeviceCounts {
	var c DeviceCounts
	for _, d := range s.devices { // counting only
		if d.Type == t && in(d.Pool) {
			c.add(s, d)
		}
	}
	return c
}

// devicePools lists, per type, the pools that hold devices of the type.
func (s *State) devicePools() map[DeviceType]map[string]bool {
	out := map[DeviceType]map[string]bool{}
	for _, d := range s.devices {
		if out[d.Type] == nil {
			out[d.Type] = map[string]bool{}
		}
		out[d.Type][d.Pool] = true
	}
	return out
}

// fragmentation is the fragmentation of type t in the pools of in and the
// number of recent requests behind it, computed over the whole shape
// window and every host.
func (s *State) fragmentation(t DeviceType, in poolSet) (float64, int) {
	shapes, samples := typicalShapes(s.shapes.list, func(sh *Shape) bool { return claimsIn(sh, t, in) })
	if len(shapes) == 0 {
		return 0, samples
	}
	shapes = servableShapes(s, shapes)
	fc := &fragClasses{}
	w := compileWorkload(fc, shapes, t)
	hide := func(d *Device) bool { return d.Type == t && !in(d.Pool) }
	var view []fragDev
	var span fragSpans
	var terms []int64
	free, unusable := int64(0), make([]int64, len(shapes))
	for _, hid := range sortedKeys(s.hosts) {
		view = buildView(s, s.hosts[hid], nil, fc, hide, view[:0], &span)
		var f int64
		f, terms = hostFragTerms(w, view, &span, terms[:0])
		free += f
		for k := range terms {
			unusable[k] += terms[k]
		}
	}
	return gridFragmentation(shapes, unusable, free), samples
}

// hostUtilSpread is the most and least utilisation of type t among up
// hosts with schedulable devices of t in the pools of in, the number of
// those hosts and of their devices in use.
func (s *State) hostUtilSpread(t DeviceType, in poolSet) (hi, lo float64, hosts, inUse int) {
	for _, hid := range sortedKeys(s.hosts) {
		n, used := 0, int64(0)
		for _, id := range s.hosts[hid].Devices {
			d := s.devices[id]
			if d.Type != t || !in(d.Pool) || !s.schedulable(d) {
				continue
			}
			n++
			u := deviceUtil(d)
			used += onGrid(u)
			if u > 0 {
				inUse++
			}
		}
		if n == 0 {
			continue
		}
		u := gridMean(used, n)
		if hosts == 0 || u > hi {
			hi = u
		}
		if hosts == 0 || u < lo {
			lo = u
		}
		hosts++
	}
	return hi, lo, hosts, inUse
}

// recommendFromScratch is the reference for Recommend: every figure
// computed from every retained and live allocation and every device.
func (s *State) recommendFromScratch(t DeviceType, ns ...string) []Recommendation {
	out := []Recommendation{}
	if t != "" && !t.Valid() {
		return out
	}
	buckets := s.allocBuckets(t, ns)
	devPools := s.devicePools()
	lost := s.lostPerDevice()
	for _, typ := range DeviceTypes {
		if t != "" && typ != t {
			continue
		}
		for _, sc := range s.scopes(typ, poolNames(devPools[typ], buckets[typ])) {
			f := s.scopeFiguresFromScratch(&sc, scopeAllocs(&sc, buckets[typ]))
			out = append(out, s.recommendScope(&sc, &f)...)
		}
		out = append(out, recommendDrain(typ, s.drainPoolsFromScratch(typ, lost))...)
		if qs := s.quotaLimitsOn(typ, ns); len(qs) > 0 {
			util := s.utilisation(typ, onePool(AllPools))
			counts := map[string]*OutcomeCounts{}
			for i := range qs {
				counts[qs[i].ns] = &qs[i].counts
			}
			for _, list := range buckets[typ] {
				for _, a := range list {
					if c := counts[a.Namespace]; c != nil {
						c.add(a)
					}
				}
			}
			for _, q := range qs {
				out = append(out, recommendQuota(typ, util, q)...)
			}
		}
	}
	sortRecommendations(out)
	return out
}

// poolNames are the pools with devices of a type (devPools) or its
// allocations (buckets).
func poolNames(devPools map[string]bool, buckets map[string][]*Allocation) map[string]bool {
	names := map[string]bool{}
	for p := range devPools {
		names[p] = true
	}
	for p := range buckets {
		names[p] = true
	}
	return names
}

// scopeAllocs are the allocations of a type's buckets in the pools of
// scope sc, in Seq order.
func scopeAllocs(sc *recScope, buckets map[string][]*Allocation) []*Allocation {
	var allocs []*Allocation
	for _, p := range sc.pools {
		allocs = append(allocs, buckets[p]...)
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].Seq < allocs[j].Seq })
	return allocs
}

// scopeFiguresFromScratch computes a scope's figures from its allocations
// (in Seq order) and every device.
func (s *State) scopeFiguresFromScratch(sc *recScope, allocs []*Allocation) scopeFigures {
	f := scopeFigures{sum: s.summarize(allocs)}
	prios := map[int]bool{}
	for _, a := range allocs {
		prios[a.Request.Priority] = true
		if a.AllocatedAt == 0 {
			continue
		}
		if a.Request.LeaseTTL == 0 {
			f.noLease++
		}
		if a.EndedAt != 0 {
			f.ended++
			if a.EndedAt-a.AllocatedAt <= int64(RecommendShortDuration) {
				f.short++
			}
		}
	}
	f.priorities = len(prios)
	waits := s.waitSamples(allocs)
	f.waits = len(waits)
	f.olderMean, f.recentMean = meanSeconds(waits[:len(waits)/2]), meanSeconds(waits[len(waits)/2:])
	f.frag, f.fragSamples = s.fragmentation(sc.t, sc.in)
	f.utilHi, f.utilLo, f.utilHosts, f.inUse = s.hostUtilSpread(sc.t, sc.in)
	return f
}

// waitSamples are the queue waits of the requests that were not refused
// at once, in arrival order: until placed, until they timed out or were
// cancelled, or until now while pending.
func (s *State) waitSamples(list []*Allocation) []int64 {
	var out []int64
	for _, a := range list {
		switch {
		case a.Status == Failed:
			continue
		case a.AllocatedAt != 0:
			out = append(out, a.AllocatedAt-a.RequestedAt)
		case a.Status == Pending:
			out = append(out, s.now-a.RequestedAt)
		default:
			out = append(out, a.EndedAt-a.RequestedAt)
		}
	}
	return out
}

func meanSeconds(ds []int64) float64 {
	var sum u128
	for _, d := range ds {
		sum.add(uint64(d))
	}
	return meanOf(sum, len(ds))
}

// lostPerDevice counts, per device, the retained allocations lost on it.
func (s *State) lostPerDevice() map[string]int {
	out := map[string]int{}
	s.history.each(func(a *Allocation) bool {
		if a.Status != Lost {
			return true
		}
		seen := map[string]bool{}
		for _, as := range a.Devices {
			if !seen[as.DeviceID] {
				seen[as.DeviceID] = true
				out[as.DeviceID]++
			}
		}
		return true
	})
	return out
}

// drainPoolsFromScratch gathers the drainPools of type t from every
// device.
func (s *State) drainPoolsFromScratch(t DeviceType, lost map[string]int) map[string]*drainPool {
	byPool := map[string]*drainPool{}
	for _, id := range sortedKeys(s.devices) {
		d := s.devices[id]
		if d.Type != t {
			continue
		}
		bad := d.Status == Unhealthy
		flaky := lost[id] >= RecommendLostPerDevice
		if !bad && !flaky {
			continue
		}
		p := byPool[d.Pool]
		if p == nil {
			p = &drainPool{}
			byPool[d.Pool] = p
		}
		if bad {
			p.unhealthy = append(p.unhealthy, id)
			p.held += len(d.Allocations)
		}
		if flaky {
			p.flaky = append(p.flaky, id)
			p.lostOnFlaky += lost[id]
		}
	}
	return byPool
}

func (s *State) statsFromScratchWith(f StatsFilter, entry func(DeviceType, string, outcomeSummary) Stats) []Stats {
	buckets := s.allocBuckets(f.Type, f.Namespaces)
	pools := s.devicePools()
	out := []Stats{}
	for _, t := range DeviceTypes {
		if f.Type != "" && t != f.Type {
			continue
		}
		names := poolNames(pools[t], buckets[t])
		if len(names) == 0 && f.Type == "" {
			continue
		}
		if f.Pool == "" || f.Pool == AllPools {
			var all []*Allocation
			for _, p := range sortedKeys(buckets[t]) {
				all = append(all, buckets[t][p]...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i].Seq < all[j].Seq })
			out = append(out, entry(t, AllPools, s.summarize(all)))
		}
		if f.Pool == AllPools {
			continue
		}
		for _, p := range sortedKeys(names) {
			if f.Pool != "" && p != f.Pool {
				continue
			}
			out = append(out, entry(t, p, s.summarize(buckets[t][p])))
		}
	}
	return out
}

// CheckStatsAgainstScratch compares Stats with statsFromScratch with no
// filter and with the i-th (modulo their number) of the filters of every
// kind: each type, every pool's total, each pool, each namespace, two
// namespaces together, and a type, pool and namespace at once; i < 0
// checks them all. It is exported for the randomized log test.
func CheckStatsAgainstScratch(s *State, i int) error {
	pools, nss := map[string]bool{}, map[string]bool{}
	for _, d := range s.devices {
		pools[d.Pool] = true
	}
	note := func(a *Allocation) bool {
		pools[s.statsPool(a)] = true
		nss[a.Namespace] = true
		return true
	}
	s.history.each(note)
	for _, a := range s.allocs {
		note(a)
	}
	poolList, nsList := sortedKeys(pools), sortedKeys(nss)
	filters := []StatsFilter{{}, {Pool: AllPools}, {Pool: "no-such-pool"}, {Namespaces: []string{"no-such-ns"}}}
	for _, t := range DeviceTypes {
		filters = append(filters, StatsFilter{Type: t})
	}
	for _, p := range poolList {
		filters = append(filters, StatsFilter{Pool: p})
	}
	for i, n := range nsList {
		filters = append(filters, StatsFilter{Namespaces: []string{n}})
		if i > 0 {
			filters = append(filters, StatsFilter{Namespaces: []string{nsList[i-1], n, n}})
		}
		for _, p := range poolList {
			filters = append(filters, StatsFilter{Type: GPU, Pool: p, Namespaces: []string{n}})
		}
	}
	// The device figures (utilisation, fragmentation) are computed alike
	// on both sides: only every 64th check pays for them.
	read, ref := s.Stats, s.statsFromScratch
	if i >= 0 {
		filters = []StatsFilter{{}, filters[i%len(filters)]}
		if i%64 != 0 {
			allocOnly := func(t DeviceType, pool string, o outcomeSummary) Stats {
				return Stats{Type: t, Pool: pool, Counts: o.counts, Duration: o.duration, QueueWait: o.queueWait}
			}
			read = func(f StatsFilter) []Stats { return s.statsWith(f, allocOnly) }
			ref = func(f StatsFilter) []Stats { return s.statsFromScratchWith(f, allocOnly) }
		}
	}
	for _, f := range filters {
		got, want := read(f), ref(f)
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("stats under %+v differ from a recomputation:\n got %+v\nwant %+v", f, got, want)
		}
	}
	if err := checkDeviceFigures(s, i); err != nil {
		return err
	}
	// Recommend: with no filter where everything is checked, every 32nd
	// check under one filter in turn.
	type recFilter struct {
		t  DeviceType
		ns []string
	}
	recs := []recFilter{{}}
	for _, t := range DeviceTypes {
		recs = append(recs, recFilter{t: t})
	}
	for k, n := range nsList {
		recs = append(recs, recFilter{ns: []string{n}})
		if k > 0 {
			recs = append(recs, recFilter{t: GPU, ns: []string{nsList[k-1], n}})
		}
	}
	switch {
	case i < 0:
		recs = recs[:1]
	case i%32 == 0:
		recs = recs[i/32%len(recs) : i/32%len(recs)+1]
	default:
		recs = nil
	}
	for _, f := range recs {
		got, want := s.Recommend(f.t, f.ns...), s.recommendFromScratch(f.t, f.ns...)
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("recommendations for %q in %v differ from a recomputation:\n got %+v\nwant %+v", f.t, f.ns, got, want)
		}
	}
	// The figures the recommendations are judged from, which a
	// recommendation shows only once they cross its threshold: of every
	// namespace and each one where everything is checked, else with the
	// namespaces of the recommendations checked.
	nsSets := [][]string{nil}
	switch {
	case i < 0:
		for _, n := range nsList {
			nsSets = append(nsSets, []string{n})
		}
	case len(recs) > 0:
		nsSets = [][]string{recs[0].ns}
	default:
		nsSets = nil
	}
	for _, ns := range nsSets {
		if err := checkScopeFigures(s, ns); err != nil {
			return err
		}
	}
	return nil
}

// checkScopeFigures compares what Recommend reads of every policy scope
// of every type for the allocations of the namespaces ns (the pools it
// covers, scopeFigures, drainPools), kept as commands apply, with a
// recomputation from every allocation and device.
func checkScopeFigures(s *State, ns []string) error {
	defer s.beginRead()()
	ns = dedupe(ns)
	buckets := s.allocBuckets("", ns)
	devPools := s.devicePools()
	lost := s.lostPerDevice()
	for _, t := range DeviceTypes {
		sets, names := s.poolSets(t, ns)
		if want := poolNames(devPools[t], buckets[t]); !reflect.DeepEqual(names, want) {
			return fmt.Errorf("pools of %s in %v: kept %v, recomputed %v", t, ns, sortedKeys(names), sortedKeys(want))
		}
		for _, sc := range s.scopes(t, names) {
			got, ref := s.scopeFigures(&sc, sets), s.scopeFiguresFromScratch(&sc, scopeAllocs(&sc, buckets[t]))
			if sc.policy.Policy != LoadBalanced {
				// Only LoadBalanced reads the spread, so only then is it
				// assembled (checkDeviceFigures checks every scope's).
				got.utilHi, got.utilLo, got.utilHosts, got.inUse = 0, 0, 0, 0
				ref.utilHi, ref.utilLo, ref.utilHosts, ref.inUse = 0, 0, 0, 0
			}
			if !reflect.DeepEqual(got, ref) {
				return fmt.Errorf("figures of the %s scope %q in %v: kept %+v, recomputed %+v", t, sc.id, ns, got, ref)
			}
		}
		if got, ref := s.drainPools(t), s.drainPoolsFromScratch(t, lost); !reflect.DeepEqual(got, ref) {
			return fmt.Errorf("drain figures of %s: kept %+v, recomputed %+v", t, got, ref)
		}
	}
	return nil
}

// checkDeviceFigures compares the device figures kept per type and pool
// (counts, utilisation, every pool and all together) with a
// recomputation; and, every 8th check, those of one pool scope
// (fragmentation under the scope's typical requests, the spread of host
// utilisation), the scopes of every type (every pool, each pool, the own
// policy scope) in turn; all of them when i < 0.
func checkDeviceFigures(s *State, i int) error {
	defer s.beginRead()()
	g := s.agg.dev
	type scope struct {
		t  DeviceType
		id string
		in poolSet
	}
	var scopes []scope
	pools := s.devicePools()
	for _, t := range DeviceTypes {
		for _, p := range append(sortedKeys(pools[t]), AllPools) {
			in := onePool(p)
			got, util, counts := g.poolFigures(t, in), s.utilisation(t, in), s.deviceCounts(t, in)
			if got.counts != counts || gridMean(got.used, got.sched) != util {
				return fmt.Errorf("device figures of %s in pool %q: kept %+v (utilisation %v), recomputed %+v (utilisation %v)",
					t, p, got.counts, gridMean(got.used, got.sched), counts, util)
			}
			scopes = append(scopes, scope{t, poolScopeID(p), in})
		}
		id, in := s.ownScope()
		scopes = append(scopes, scope{t, id, in})
	}
	switch {
	case i < 0:
	case i%8 == 0:
		k := i / 8 % len(scopes)
		scopes = scopes[k : k+1]
	default:
		scopes = nil
	}
	for _, sc := range scopes {
		typical, samples := s.typicalFor(sc.t, sc.in)
		c := g.scope(s, sc.t, sc.id, sc.in)
		frag := 0.0
		if len(typical) > 0 {
			frag = c.fragmentation(s, typical)
		}
		want, wantSamples := s.fragmentation(sc.t, sc.in)
		if frag != want || samples != wantSamples {
			return fmt.Errorf("fragmentation of %s over %q: kept %v of %d requests, recomputed %v of %d", sc.t, sc.id, frag, samples, want, wantSamples)
		}
		hi, lo, hosts, inUse := c.spread()
		whi, wlo, whosts, winUse := s.hostUtilSpread(sc.t, sc.in)
		if hi != whi || lo != wlo || hosts != whosts || inUse != winUse {
			return fmt.Errorf("host utilisation of %s over %q: kept %v..%v on %d hosts (%d in use), recomputed %v..%v on %d (%d)",
				sc.t, sc.id, lo, hi, hosts, inUse, wlo, whi, whosts, winUse)
		}
	}
	return nil
}

// summarizeDurations sorts ds (nanoseconds) in place and summarises it.
func summarizeDurations(ds []int64) DurationStats {
	if len(ds) == 0 {
		return DurationStats{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	// An exact sum, rounded once: the incremental statistics
	// (stats_agg.go) sum in another order and must give the same mean.
	var sum u128
	for _, d := range ds {
		sum.add(uint64(d))
	}
	return DurationStats{
		Count: len(ds),
		Mean:  sum.float() / float64(len(ds)) / 1e9,
		P50:   float64(nearestRank(ds, 0.50)) / 1e9,
		P95:   float64(nearestRank(ds, 0.95)) / 1e9,
	}
}

// nearestRank is the p-th percentile of sorted ds: the smallest value with
// at least p of the values at or below it.
func nearestRank(ds []int64, p float64) int64 {
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(ds) {
		i = len(ds) - 1
	}
	return ds[i]
}

// allocBuckets groups the retained and live allocations of type only (or
// of every type when only is "") in the namespaces ns (every namespace
// when empty) by type and pool, each list in arrival (Seq) order.
func (s *State) allocBuckets(only DeviceType, ns []string) map[DeviceType]map[string][]*Allocation {
	out := map[DeviceType]map[string][]*Allocation{}
	put := func(a *Allocation) {
		t := a.Request.PrimaryType()
		if only != "" && t != only {
			return
		}
		if len(ns) > 0 && !slices.Contains(ns, a.Namespace) {
			return
		}
		m := out[t]
		if m == nil {
			m = map[string][]*Allocation{}
			out[t] = m
		}
		p := s.statsPool(a)
		m[p] = append(m[p], a)
	}
	s.history.each(func(a *Allocation) bool {
		put(a)
		return true
	})
	for _, a := range s.allocs { // sorted below
		put(a)
	}
	for _, m := range out {
		for _, list := range m {
			sort.Slice(list, func(i, j int) bool { return list[i].Seq < list[j].Seq })
		}
	}
	return out
}

func (s *State) summarize(list []*Allocation) outcomeSummary {
	var o outcomeSummary
	var durs, waits []int64
	for _, a := range list {
		o.counts.add(a)
		if a.AllocatedAt == 0 {
			continue
		}
		end := a.EndedAt
		if a.Status == Active {
			end = s.now
		}
		durs = append(durs, end-a.AllocatedAt)
		waits = append(waits, a.AllocatedAt-a.RequestedAt)
	}
	o.duration = summarizeDurations(durs)
	o.queueWait = summarizeDurations(waits)
	return o
}
