package fsm

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Recommendations turn the statistics into advice per device type. They
// are judged per policy scope, since that is what a SetPolicy command
// changes: the type's scope (Pool "" in a recommendation: every pool of
// the type without a policy override of its own) and each pool of the
// type that has an override. Drain advice names the pool of the devices.
// Like Stats, Recommend is read-only and deterministic.

// RecommendationKind names what a recommendation advises. The strings are
// stable: clients may match on them.
type RecommendationKind string

// Recommendation kinds.
const (
	// KindSwitchPolicy: change the scope's policy (to Recommendation.Policy).
	KindSwitchPolicy RecommendationKind = "switch_policy"
	// KindAddCapacity: add devices; requests are refused or wait longer.
	KindAddCapacity RecommendationKind = "add_capacity"
	// KindRebalance: load under LoadBalanced is uneven across hosts.
	KindRebalance RecommendationKind = "rebalance"
	// KindDrainUnhealthy: drain and repair or replace the listed devices.
	KindDrainUnhealthy RecommendationKind = "drain_unhealthy"
	// KindLongRunning: allocations run long without leases; set lease TTLs.
	KindLongRunning RecommendationKind = "long_running"
	// KindShortRunning: most allocations are short; keep a warm pool.
	KindShortRunning RecommendationKind = "short_running"
	// KindKeepPolicy: nothing calls for a change of policy or capacity.
	KindKeepPolicy RecommendationKind = "keep_policy"
)

// RecommendationPriority says how soon a recommendation deserves action.
type RecommendationPriority string

// Recommendation priorities, most urgent first.
const (
	PriorityHigh   RecommendationPriority = "high"
	PriorityMedium RecommendationPriority = "medium"
	PriorityLow    RecommendationPriority = "low"
)

func (p RecommendationPriority) rank() int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityMedium:
		return 1
	}
	return 2
}

// Thresholds of the recommendations. Rates are shares of decided requests
// (all but pending) in the scope's retained history and live allocations.
const (
	// RecommendMinSamples is the fewest samples (decided requests, recent
	// requests, queue waits, placed or ended allocations) a rate or
	// pattern needs before it is acted on.
	RecommendMinSamples = 10
	// RecommendConfidenceHalf is the sample count at which confidence is
	// 0.5: confidence = n / (n + RecommendConfidenceHalf).
	RecommendConfidenceHalf = 20
	// RecommendFragmentationHigh is the share of free capacity that the
	// typical recent requests cannot use above which a non-packing policy
	// should give way to FragmentationAware.
	RecommendFragmentationHigh = 0.3
	// RecommendTimeoutRateHigh is the share of timed-out requests above
	// which PriorityBased is advised (when requests differ in priority).
	RecommendTimeoutRateHigh = 0.1
	// RecommendRefusalRateHigh is the share of failed plus timed-out
	// requests above which capacity should be added.
	RecommendRefusalRateHigh = 0.1
	// RecommendWaitGrowth: queue waits grow when the mean wait of the
	// recent half of the requests is at least this many times that of the
	// older half...
	RecommendWaitGrowth = 2.0
	// RecommendWaitMin ...and at least this long.
	RecommendWaitMin = time.Second
	// RecommendHotSpread is the spread (most minus least) of host
	// utilisation under LoadBalanced above which hosts need rebalancing.
	RecommendHotSpread = 0.5
	// RecommendLostPerDevice is how many lost allocations mark a device as
	// flaky, to be drained and replaced.
	RecommendLostPerDevice = 3
	// RecommendLongP95 is the p95 allocation duration above which
	// allocations count as long-running...
	RecommendLongP95 = 6 * time.Hour
	// RecommendNoLeaseShare ...and lease TTLs are advised when at least
	// this share of them has none.
	RecommendNoLeaseShare = 0.5
	// RecommendShortDuration is the longest duration of a short allocation.
	RecommendShortDuration = time.Minute
	// RecommendShortShare is the share of short allocations (among ended
	// ones) above which a warm pool is advised.
	RecommendShortShare = 0.5
)

// Recommendation is one piece of advice with the numbers behind it.
type Recommendation struct {
	Kind RecommendationKind `json:"kind"`
	Type DeviceType         `json:"type"`
	// Pool is the pool the advice is for; "" is the type's own policy
	// scope (every pool of the type without an override).
	Pool    string `json:"pool,omitempty"`
	Message string `json:"message"`
	// Evidence holds the numbers behind the advice, by name; durations in
	// seconds (names ending in _s), rates and shares in 0..1.
	Evidence map[string]float64     `json:"evidence"`
	Priority RecommendationPriority `json:"priority"`
	// Confidence grows with the number of samples behind the advice, 0..1.
	Confidence float64 `json:"confidence"`
	// Policy is the suggested policy of a switch_policy recommendation.
	Policy Policy `json:"policy,omitempty"`
	// Devices are the devices a drain_unhealthy recommendation names.
	Devices []string `json:"devices,omitempty"`
}

// confidence grows with the sample count: 0 at none, 0.5 at
// RecommendConfidenceHalf, towards 1.
func confidence(n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(n) / float64(n+RecommendConfidenceHalf)
}

// packs reports whether a policy packs work together (and so keeps free
// capacity whole).
func packs(p Policy) bool {
	return p == BestFit || p == PriorityBased || p == FragmentationAware
}

// recScope is a policy scope of one device type.
type recScope struct {
	t      DeviceType
	pool   string
	in     poolSet
	policy PolicyConfig
	allocs []*Allocation // Seq order
}

// scopes lists the policy scopes of type t: the type's own (when any of
// its pools follows the type's policy), then each overridden pool by name.
func (s *State) scopes(t DeviceType, buckets map[string][]*Allocation, devPools map[string]bool) []recScope {
	names := map[string]bool{}
	for p := range devPools {
		names[p] = true
	}
	for p := range buckets {
		names[p] = true
	}
	var own []*Allocation
	ownUsed := false
	var overridden []string
	for _, p := range sortedKeys(names) {
		if _, ok := s.poolPolicies[p]; ok && p != "" {
			overridden = append(overridden, p)
			continue
		}
		ownUsed = true
		own = append(own, buckets[p]...)
	}
	var out []recScope
	if ownUsed {
		sort.Slice(own, func(i, j int) bool { return own[i].Seq < own[j].Seq })
		out = append(out, recScope{t: t, pool: "", policy: s.policyFor(t, ""), allocs: own,
			in: func(p string) bool { _, ok := s.poolPolicies[p]; return !ok || p == "" }})
	}
	for _, p := range overridden {
		out = append(out, recScope{t: t, pool: p, in: onePool(p), policy: s.policyFor(t, p), allocs: buckets[p]})
	}
	return out
}

// Recommend returns the recommendations for device type t, or for every
// type when t is "", from the allocations of the namespaces ns (every
// namespace when none is named), sorted by priority (high first), kind,
// pool, type and message. An unknown type has none.
func (s *State) Recommend(t DeviceType, ns ...string) []Recommendation {
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
		for _, sc := range s.scopes(typ, buckets[typ], devPools[typ]) {
			out = append(out, s.recommendScope(&sc)...)
		}
		out = append(out, s.recommendDrain(typ, lost)...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if a.Priority.rank() != b.Priority.rank() {
			return a.Priority.rank() < b.Priority.rank()
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Pool != b.Pool {
			return a.Pool < b.Pool
		}
		if a.Type != b.Type {
			return typeRank(a.Type) < typeRank(b.Type)
		}
		return a.Message < b.Message
	})
	return out
}

func typeRank(t DeviceType) int {
	for i, k := range DeviceTypes {
		if k == t {
			return i
		}
	}
	return len(DeviceTypes)
}

// scopeName is how a message names a scope.
func scopeName(sc *recScope) string {
	if sc.pool == "" {
		return string(sc.t)
	}
	return fmt.Sprintf("%s in pool %q", sc.t, sc.pool)
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
	if len(ds) == 0 {
		return 0
	}
	sum := 0.0
	for _, d := range ds {
		sum += float64(d)
	}
	return sum / float64(len(ds)) / 1e9
}

// hostUtilSpread is the most and least utilisation of type t among up
// hosts with schedulable devices of t in the scope, the number of those
// hosts and of their devices in use.
func (s *State) hostUtilSpread(t DeviceType, in poolSet) (hi, lo float64, hosts, inUse int) {
	for _, hid := range sortedKeys(s.hosts) {
		n, used := 0, 0.0
		for _, id := range s.hosts[hid].Devices {
			d := s.devices[id]
			if d.Type != t || !in(d.Pool) || !s.schedulable(d) {
				continue
			}
			n++
			u := deviceUtil(d)
			used += u
			if u > 0 {
				inUse++
			}
		}
		if n == 0 {
			continue
		}
		u := used / float64(n)
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

// recommendScope judges one policy scope.
func (s *State) recommendScope(sc *recScope) []Recommendation {
	var out []Recommendation
	rec := func(kind RecommendationKind, prio RecommendationPriority, n int, msg string, ev map[string]float64) *Recommendation {
		out = append(out, Recommendation{Kind: kind, Type: sc.t, Pool: sc.pool, Message: msg, Evidence: ev, Priority: prio, Confidence: confidence(n)})
		return &out[len(out)-1]
	}
	name := scopeName(sc)
	pol := sc.policy.Policy
	sum := s.summarize(sc.allocs)
	c := sum.counts
	decided := c.Decided()
	refusals := c.Failed + c.TimedOut
	var refusalRate, timeoutRate float64
	if decided > 0 {
		refusalRate = float64(refusals) / float64(decided)
		timeoutRate = float64(c.TimedOut) / float64(decided)
	}
	priorities := map[int]bool{}
	for _, a := range sc.allocs {
		priorities[a.Request.Priority] = true
	}
	policyAdvised := false

	// Switch policy: fragmentation under a policy that does not pack.
	frag, fragSamples := s.fragmentation(sc.t, sc.in)
	if !packs(pol) && fragSamples >= RecommendMinSamples && frag >= RecommendFragmentationHigh {
		prio := PriorityMedium
		if refusals > 0 {
			prio = PriorityHigh
		}
		r := rec(KindSwitchPolicy, prio, fragSamples, fmt.Sprintf(
			"%.0f%% of the free %s capacity is unusable by the typical recent requests under %s; switch to %s (or %s, which packs more cheaply)",
			100*frag, name, pol, FragmentationAware, BestFit),
			map[string]float64{"fragmentation": frag, "recent_requests": float64(fragSamples), "refused": float64(refusals)})
		r.Policy = FragmentationAware
		policyAdvised = true
	}
	// Switch policy: timeouts, when priority could decide who waits.
	if !policyAdvised && pol != PriorityBased && decided >= RecommendMinSamples &&
		timeoutRate >= RecommendTimeoutRateHigh && len(priorities) > 1 {
		r := rec(KindSwitchPolicy, PriorityHigh, decided, fmt.Sprintf(
			"%.0f%% of %s requests timed out under %s while their priorities differ; switch to %s so the most important are served and may preempt",
			100*timeoutRate, name, pol, PriorityBased),
			map[string]float64{"timeout_rate": timeoutRate, "timed_out": float64(c.TimedOut), "decided": float64(decided), "distinct_priorities": float64(len(priorities))})
		r.Policy = PriorityBased
		policyAdvised = true
	}

	// Add capacity: refusals over the threshold, or queue waits growing.
	waits := s.waitSamples(sc.allocs)
	older, recent := waits[:len(waits)/2], waits[len(waits)/2:]
	olderMean, recentMean := meanSeconds(older), meanSeconds(recent)
	growing := len(waits) >= RecommendMinSamples && recentMean >= RecommendWaitMin.Seconds() &&
		recentMean >= RecommendWaitGrowth*olderMean
	refusing := decided >= RecommendMinSamples && refusalRate >= RecommendRefusalRateHigh
	capacityAdvised := refusing || growing
	if capacityAdvised {
		ev := map[string]float64{
			"refusal_rate": refusalRate, "failed": float64(c.Failed), "timed_out": float64(c.TimedOut), "decided": float64(decided),
			"wait_older_mean_s": olderMean, "wait_recent_mean_s": recentMean, "wait_samples": float64(len(waits)),
		}
		var why []string
		if refusing {
			why = append(why, fmt.Sprintf("%.0f%% of requests were refused or timed out", 100*refusalRate))
		}
		if growing {
			why = append(why, fmt.Sprintf("queue waits grew from %.1fs to %.1fs on average", olderMean, recentMean))
		}
		prio, n := PriorityMedium, len(waits)
		if refusing {
			prio, n = PriorityHigh, decided
		}
		rec(KindAddCapacity, prio, n, fmt.Sprintf("add %s capacity: %s", name, strings.Join(why, "; ")), ev)
	}

	// Rebalance: hot hosts under LoadBalanced.
	rebalanceAdvised := false
	if pol == LoadBalanced {
		hi, lo, hosts, inUse := s.hostUtilSpread(sc.t, sc.in)
		if hosts >= 2 && hi-lo >= RecommendHotSpread {
			rec(KindRebalance, PriorityMedium, inUse, fmt.Sprintf(
				"%s host utilisation ranges from %.0f%% to %.0f%% under %s; move or drain work from the hottest hosts",
				name, 100*lo, 100*hi, pol),
				map[string]float64{"host_util_max": hi, "host_util_min": lo, "host_util_spread": hi - lo, "hosts": float64(hosts)})
			rebalanceAdvised = true
		}
	}

	// Long- and short-running patterns.
	placed := c.Successful
	noLease, ended, short := 0, 0, 0
	for _, a := range sc.allocs {
		if a.AllocatedAt == 0 {
			continue
		}
		if a.Request.LeaseTTL == 0 {
			noLease++
		}
		if a.EndedAt != 0 {
			ended++
			if a.EndedAt-a.AllocatedAt <= int64(RecommendShortDuration) {
				short++
			}
		}
	}
	if placed >= RecommendMinSamples && sum.duration.P95 >= RecommendLongP95.Seconds() {
		share := float64(noLease) / float64(placed)
		if share >= RecommendNoLeaseShare {
			rec(KindLongRunning, PriorityLow, placed, fmt.Sprintf(
				"%s allocations run long (p95 %s) and %.0f%% hold no lease; set lease TTLs so abandoned allocations expire",
				name, fmtSeconds(sum.duration.P95), 100*share),
				map[string]float64{"duration_p95_s": sum.duration.P95, "no_lease_share": share, "placed": float64(placed)})
		}
	}
	if ended >= RecommendMinSamples {
		share := float64(short) / float64(ended)
		if share >= RecommendShortShare {
			msg := fmt.Sprintf("%.0f%% of %s allocations end within %s; keep a warm pool of free devices", 100*share, name, RecommendShortDuration)
			if pol != FirstFit {
				msg += fmt.Sprintf(", and %s places them fastest", FirstFit)
			}
			rec(KindShortRunning, PriorityLow, ended, msg,
				map[string]float64{"short_share": share, "ended": float64(ended), "duration_p50_s": sum.duration.P50})
		}
	}

	// Keep the policy when nothing above calls for a change.
	if !policyAdvised && !capacityAdvised && !rebalanceAdvised {
		msg := fmt.Sprintf("keep %s for %s: ", pol, name)
		if decided < RecommendMinSamples {
			msg += fmt.Sprintf("only %d decided requests so far, nothing calls for a change", decided)
		} else {
			msg += fmt.Sprintf("%.0f%% of requests succeed, fragmentation, timeouts and waits are within bounds", 100*successRate(c))
		}
		rec(KindKeepPolicy, PriorityLow, decided, msg, map[string]float64{
			"success_rate": successRate(c), "decided": float64(decided), "fragmentation": frag, "refusal_rate": refusalRate,
		})
	}
	return out
}

// fmtSeconds writes a number of seconds as a rounded duration.
func fmtSeconds(sec float64) string {
	return time.Duration(sec * 1e9).Round(time.Second).String()
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

// recommendDrain advises draining and replacing, per pool, the devices of
// type t that are unhealthy or keep losing allocations.
func (s *State) recommendDrain(t DeviceType, lost map[string]int) []Recommendation {
	type poolDevs struct {
		unhealthy, flaky []string
		lostOnFlaky      int
		held             int
	}
	byPool := map[string]*poolDevs{}
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
			p = &poolDevs{}
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
	var out []Recommendation
	for _, pool := range sortedKeys(byPool) {
		p := byPool[pool]
		var parts []string
		if len(p.unhealthy) > 0 {
			parts = append(parts, fmt.Sprintf("%d unhealthy (%s)", len(p.unhealthy), listIDs(p.unhealthy)))
		}
		if len(p.flaky) > 0 {
			parts = append(parts, fmt.Sprintf("%d lost %d or more allocations each (%s)", len(p.flaky), RecommendLostPerDevice, listIDs(p.flaky)))
		}
		r := Recommendation{
			Kind: KindDrainUnhealthy, Type: t, Pool: pool, Priority: PriorityMedium,
			Message: fmt.Sprintf("%s devices in pool %q: %s; drain them and repair or replace", t, pool, strings.Join(parts, "; ")),
			Evidence: map[string]float64{
				"unhealthy_devices": float64(len(p.unhealthy)), "allocations_on_unhealthy": float64(p.held),
				"flaky_devices": float64(len(p.flaky)), "lost_on_flaky": float64(p.lostOnFlaky),
			},
			Confidence: confidence(p.lostOnFlaky),
		}
		if len(p.unhealthy) > 0 {
			// A device's status is observed, not inferred.
			r.Priority, r.Confidence = PriorityHigh, 1
		}
		seen := map[string]bool{}
		for _, id := range append(append([]string(nil), p.unhealthy...), p.flaky...) {
			if !seen[id] {
				seen[id] = true
				r.Devices = append(r.Devices, id)
			}
		}
		sort.Strings(r.Devices)
		out = append(out, r)
	}
	return out
}

// listIDs writes up to ten IDs and how many more there are.
func listIDs(ids []string) string {
	const most = 10
	if len(ids) <= most {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:most], ", ") + fmt.Sprintf(" and %d more", len(ids)-most)
}
