package fsm

import "slices"

// Statistics summarise the retained history and the live state by device
// type and pool. They are read-only and deterministic: every list is
// sorted, every sum runs in a fixed order, and "now" is the state's clock
// (the last leader time applied), never the wall clock.
//
// An allocation counts under its first claim's type (Request.PrimaryType)
// and the pool of the first device it got; one that never got a device, or
// whose device has since left the inventory, counts under its first
// claim's pool ("" when the request named none).
//
// Durations are reported in seconds, as float64, in fields ending in _s.

// AllPools is the Pool of a Stats entry that totals every pool of a type.
const AllPools = "*"

// StatsFilter narrows Stats. An empty field matches everything.
type StatsFilter struct {
	// Namespaces limits the allocations counted to those of these
	// namespaces (devices are the cluster's: their figures stay whole).
	Namespaces []string   `json:"namespaces,omitempty"`
	Type       DeviceType `json:"type,omitempty"`
	// Pool keeps only the entries of this pool; AllPools keeps only the
	// per-type totals.
	Pool string `json:"pool,omitempty"`
}

// OutcomeCounts counts allocations by what became of them.
type OutcomeCounts struct {
	Total int `json:"total"`
	// Successful allocations got their devices at some point, whatever
	// happened after (released, expired, preempted, lost, or still active).
	Successful int `json:"successful"`
	Released   int `json:"released"`
	// Failed requests were refused at once (timeout 0): nothing fit, or
	// OverQuota of them because of their namespace's quota.
	Failed    int `json:"failed"`
	OverQuota int `json:"over_quota"`
	TimedOut  int `json:"timed_out"`
	Preempted int `json:"preempted"`
	Expired   int `json:"expired"`
	Lost      int `json:"lost"`
	Cancelled int `json:"cancelled"`
	Drained   int `json:"drained"`
	Active    int `json:"active"`
	Pending   int `json:"pending"`
}

// Decided is the number of requests whose placement is settled: all but
// the pending ones.
func (c OutcomeCounts) Decided() int { return c.Total - c.Pending }

func (c *OutcomeCounts) add(a *Allocation) {
	c.Total++
	if a.AllocatedAt != 0 {
		c.Successful++
	}
	switch a.Status {
	case Released:
		c.Released++
	case Failed:
		c.Failed++
		if a.Reason == reasonOverQuota {
			c.OverQuota++
		}
	case TimedOut:
		c.TimedOut++
	case Preempted:
		c.Preempted++
	case Expired:
		c.Expired++
	case Lost:
		c.Lost++
	case Cancelled:
		c.Cancelled++
	case Drained:
		c.Drained++
	case Active:
		c.Active++
	case Pending:
		c.Pending++
	}
}

// DurationStats summarises a set of durations, in seconds. Percentiles are
// nearest-rank: p50 of {10, 20, 30, 40} is 20, p95 is 40. All zero when
// Count is zero.
type DurationStats struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_s"`
	P50   float64 `json:"p50_s"`
	P95   float64 `json:"p95_s"`
}

// DeviceCounts counts devices by status. Offline devices (host down) are
// counted as offline whatever their own status; InUse devices hold at least
// one active allocation.
type DeviceCounts struct {
	Total     int `json:"total"`
	Available int `json:"available"`
	Draining  int `json:"draining"`
	Unhealthy int `json:"unhealthy"`
	Offline   int `json:"offline"`
	InUse     int `json:"in_use"`
}

func (c *DeviceCounts) add(s *State, d *Device) {
	c.Total++
	if len(d.Allocations) > 0 {
		c.InUse++
	}
	if h := s.hosts[d.Host]; h == nil || !h.Up {
		c.Offline++
		return
	}
	switch d.Status {
	case Available:
		c.Available++
	case Draining:
		c.Draining++
	case Unhealthy:
		c.Unhealthy++
	}
}

// Stats are the statistics of one device type in one pool, or in every
// pool (Pool == AllPools).
type Stats struct {
	Type DeviceType `json:"type"`
	Pool string     `json:"pool"`
	// Policy is the policy in force: the pool's override or the type's.
	Policy PolicyConfig  `json:"policy"`
	Counts OutcomeCounts `json:"counts"`
	// SuccessRate is Successful / Decided; 0 when nothing is decided.
	SuccessRate float64 `json:"success_rate"`
	// Duration runs from allocation to end (to now while active), over
	// every allocation that got devices.
	Duration DurationStats `json:"duration"`
	// QueueWait runs from request to allocation, over every allocation
	// that got devices.
	QueueWait DurationStats `json:"queue_wait"`
	// Utilisation is the mean used share of the schedulable devices
	// (available, host up): an exclusive device in use counts 1, a
	// shareable one its used share of its primary dimension.
	Utilisation float64 `json:"utilisation"`
	// Fragmentation is the share of the schedulable free capacity (in
	// devices, a shared one by its free share) that the typical recent
	// requests for this type and pool could not use where it sits: the
	// measure FragmentationAware places by (frag.go); 0 when nothing is
	// free or there are no such requests.
	Fragmentation float64      `json:"fragmentation"`
	Devices       DeviceCounts `json:"devices"`
}

// statsPool is the pool an allocation counts under.
func (s *State) statsPool(a *Allocation) string {
	if len(a.Devices) > 0 {
		if d := s.devices[a.Devices[0].DeviceID]; d != nil {
			return d.Pool
		}
	}
	return a.Request.statsPool()
}

// statsPool is the pool the figures of an allocation of r that holds no
// device of the inventory count under: its first claim's.
func (r *Request) statsPool() string {
	if len(r.Claims) == 0 {
		return r.Pool
	}
	return r.claimPool(0)
}

// outcomeSummary is the allocation figures of a Stats entry.
type outcomeSummary struct {
	counts    OutcomeCounts
	duration  DurationStats
	queueWait DurationStats
}

// successRate is successful over decided, 0 when nothing is decided.
func successRate(c OutcomeCounts) float64 {
	if c.Decided() == 0 {
		return 0
	}
	return float64(c.Successful) / float64(c.Decided())
}

// poolSet says which pools a figure covers.
type poolSet func(pool string) bool

func onePool(p string) poolSet {
	if p == AllPools {
		return func(string) bool { return true }
	}
	return func(q string) bool { return q == p }
}

// schedulable reports whether a device could take work now.
func (s *State) schedulable(d *Device) bool {
	h := s.hosts[d.Host]
	return h != nil && h.Schedulable() && d.Status == Available
}

// Stats returns statistics per device type: for each type, its total over
// every pool (Pool == AllPools) followed by one entry per pool, sorted by
// pool name. Types come in DeviceTypes order. A type appears when it has
// devices or allocations; a type named by the filter always has its total.
// The figures are assembled from the aggregates kept as commands apply
// (stats_agg.go) and as hosts change (stats_dev.go); statsFromScratch in
// the tests computes the same figures from every allocation and device.
func (s *State) Stats(f StatsFilter) []Stats {
	defer s.beginRead()()
	return s.statsWith(f, s.statsEntry)
}

// beginRead takes statsDev.mu and brings the device figures and the
// shape counts up to date; the read ends, and the lock is released, with
// the function it returns.
func (s *State) beginRead() (end func()) {
	g := s.agg.dev
	g.mu.Lock()
	g.reads++
	g.syncFigures(s)
	g.syncWindow(s.shapes.list)
	return func() {
		g.finishRead()
		g.mu.Unlock()
	}
}

// dedupe is the distinct strings of list, in their first order.
func dedupe(list []string) []string {
	var out []string
	for _, n := range list {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// poolSets gathers the buckets of type t in the namespaces ns (every
// namespace when empty) by pool, and names every pool with devices of the
// type or such buckets.
func (s *State) poolSets(t DeviceType, ns []string) (map[string]aggSet, map[string]bool) {
	sets := map[string]aggSet{}
	for p, byNS := range s.agg.buckets[t] {
		var set aggSet
		if len(ns) == 0 {
			for _, b := range byNS { // order-free: sums and counts
				set = append(set, b)
			}
		} else {
			for _, n := range ns {
				if b := byNS[n]; b != nil {
					set = append(set, b)
				}
			}
		}
		if len(set) > 0 {
			sets[p] = set
		}
	}
	names := map[string]bool{}
	for p := range s.agg.devPools[t] {
		names[p] = true
	}
	for p := range sets {
		names[p] = true
	}
	return sets, names
}

// statsWith is Stats with entry completing each entry.
func (s *State) statsWith(f StatsFilter, entry func(DeviceType, string, outcomeSummary) Stats) []Stats {
	ns := dedupe(f.Namespaces)
	out := []Stats{}
	for _, t := range DeviceTypes {
		if f.Type != "" && t != f.Type {
			continue
		}
		sets, names := s.poolSets(t, ns)
		if len(names) == 0 && f.Type == "" {
			continue
		}
		if f.Pool == "" || f.Pool == AllPools {
			var all aggSet
			for _, p := range sortedKeys(sets) {
				all = append(all, sets[p]...)
			}
			out = append(out, entry(t, AllPools, all.summary(s.now)))
		}
		if f.Pool == AllPools {
			continue
		}
		for _, p := range sortedKeys(names) {
			if f.Pool != "" && p != f.Pool {
				continue
			}
			out = append(out, entry(t, p, sets[p].summary(s.now)))
		}
	}
	return out
}

// summary is the allocation figures of the buckets.
func (bs aggSet) summary(now int64) outcomeSummary {
	return outcomeSummary{counts: bs.counts(), duration: bs.durations(now), queueWait: bs.waits()}
}

// statsEntry completes a Stats entry with the figures of the devices; the
// caller holds statsDev.mu.
func (s *State) statsEntry(t DeviceType, pool string, sum outcomeSummary) Stats {
	in := onePool(pool)
	g := s.agg.dev
	figs := g.poolFigures(t, in)
	typical, _ := s.typicalFor(t, in)
	frag := 0.0
	if len(typical) > 0 {
		frag = g.scope(s, t, poolScopeID(pool), in).fragmentation(s, typical)
	}
	return s.statsFrom(t, pool, sum, gridMean(figs.used, figs.sched), frag, figs.counts)
}

// statsFrom is a Stats entry of the figures given.
func (s *State) statsFrom(t DeviceType, pool string, sum outcomeSummary, util, frag float64, devs DeviceCounts) Stats {
	policyPool := pool
	if pool == AllPools {
		policyPool = ""
	}
	return Stats{
		Type:          t,
		Pool:          pool,
		Policy:        s.policyFor(t, policyPool),
		Counts:        sum.counts,
		SuccessRate:   successRate(sum.counts),
		Duration:      sum.duration,
		QueueWait:     sum.queueWait,
		Utilisation:   util,
		Fragmentation: frag,
		Devices:       devs,
	}
}

// PoolInfo describes a pool: the device types it holds, its devices by
// status and the policy in force for each type.
type PoolInfo struct {
	Name    string       `json:"name"`
	Types   []DeviceType `json:"types"`
	Devices DeviceCounts `json:"devices"`
	// Override is the pool's own policy; nil when each type's policy applies.
	Override *PolicyConfig `json:"override,omitempty"`
	// Policies is the policy in force for each type the pool holds.
	Policies map[DeviceType]PolicyConfig `json:"policies"`
}

// Pools lists every pool that holds devices or has a policy override,
// sorted by name.
func (s *State) Pools() []PoolInfo {
	byName := map[string]*PoolInfo{}
	get := func(name string) *PoolInfo {
		p := byName[name]
		if p == nil {
			p = &PoolInfo{Name: name, Types: []DeviceType{}, Policies: map[DeviceType]PolicyConfig{}}
			byName[name] = p
		}
		return p
	}
	for _, d := range s.devices { // counting only; types are sorted below
		p := get(d.Pool)
		p.Devices.add(s, d)
		if _, ok := p.Policies[d.Type]; !ok {
			p.Policies[d.Type] = s.policyFor(d.Type, d.Pool)
		}
	}
	for name, c := range s.poolPolicies {
		get(name).Override = &c
	}
	out := make([]PoolInfo, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		p := byName[name]
		for _, t := range DeviceTypes {
			if _, ok := p.Policies[t]; ok {
				p.Types = append(p.Types, t)
			}
		}
		out = append(out, *p)
	}
	return out
}
