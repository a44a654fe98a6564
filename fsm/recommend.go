package fsm

import (
	"fmt"
	"slices"
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
	// KindRaiseQuota: a namespace's requests are refused for its quota
	// while devices of the type sit idle; raise its max count or let it
	// borrow (Recommendation.Namespace).
	KindRaiseQuota RecommendationKind = "raise_quota"
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
	// RecommendQuotaIdle is the utilisation of a type below which a
	// namespace refused for its quota (at RecommendRefusalRateHigh of its
	// decided requests or more) is advised a higher quota.
	RecommendQuotaIdle = 0.7
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
	// Namespace is the namespace a raise_quota recommendation is for.
	Namespace string `json:"namespace,omitempty"`
}

// quotaFigures are what the quota advice of one namespace and type reads.
type quotaFigures struct {
	ns       string
	maxCount int
	borrow   bool
	held     int
	counts   OutcomeCounts
}

// quotaLimitsOn lists, by namespace, the namespaces among ns (all when
// empty) whose quota bounds the count of type t in every pool, with
// what they hold; counts is left to the caller.
func (s *State) quotaLimitsOn(t DeviceType, ns []string) []quotaFigures {
	var out []quotaFigures
	for _, n := range sortedKeys(s.quotas) {
		if len(ns) > 0 && !slices.Contains(ns, n) {
			continue
		}
		q := s.quotas[n]
		for _, l := range q.Limits {
			if l.DeviceType == t && l.Pool == "" && l.MaxCount != nil {
				out = append(out, quotaFigures{ns: n, maxCount: *l.MaxCount, borrow: q.Borrow, held: s.heldUnder(n, l).count})
			}
		}
	}
	return out
}

// recommendQuota advises a higher quota for a namespace whose requests of
// type t are refused for it while the type's devices are mostly idle.
func recommendQuota(t DeviceType, util float64, f quotaFigures) []Recommendation {
	decided := f.counts.Decided()
	if decided < RecommendMinSamples || util >= RecommendQuotaIdle {
		return nil
	}
	rate := float64(f.counts.OverQuota) / float64(decided)
	if rate < RecommendRefusalRateHigh {
		return nil
	}
	how := "raise its max count or let it borrow idle capacity"
	if f.borrow {
		how = "raise its max count"
	}
	return []Recommendation{{
		Kind: KindRaiseQuota, Type: t, Namespace: f.ns, Priority: PriorityMedium, Confidence: confidence(decided),
		Message: fmt.Sprintf("%.0f%% of namespace %s's %s requests were refused for its quota (%d devices) while %s devices are %.0f%% used; %s",
			100*rate, f.ns, t, f.maxCount, t, 100*util, how),
		Evidence: map[string]float64{"over_quota": float64(f.counts.OverQuota), "decided": float64(decided), "refusal_rate": rate,
			"utilisation": util, "held": float64(f.held), "max_count": float64(f.maxCount)},
	}}
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
	t    DeviceType
	pool string
	// id names the scope's pools for the device figures (stats_dev.go).
	id     string
	in     poolSet
	policy PolicyConfig
	// pools are the pools with devices or allocations it covers, by name.
	pools []string
}

// scopes lists the policy scopes of type t over the pools named: the
// type's own (when any of them follows the type's policy), then each
// overridden pool by name.
func (s *State) scopes(t DeviceType, names map[string]bool) []recScope {
	var own, overridden []string
	for _, p := range sortedKeys(names) {
		if _, ok := s.poolPolicies[p]; ok && p != "" {
			overridden = append(overridden, p)
			continue
		}
		own = append(own, p)
	}
	var out []recScope
	if len(own) > 0 {
		id, in := s.ownScope()
		out = append(out, recScope{t: t, id: id, in: in, policy: s.policyFor(t, ""), pools: own})
	}
	for _, p := range overridden {
		out = append(out, recScope{t: t, pool: p, id: poolScopeID(p), in: onePool(p), policy: s.policyFor(t, p), pools: []string{p}})
	}
	return out
}

// scopeFigures are what the recommendations of a scope read.
type scopeFigures struct {
	sum outcomeSummary
	// priorities counts the distinct request priorities.
	priorities int
	// waits counts the queue waits of the requests not refused at once;
	// olderMean and recentMean are the mean of the older half (in arrival
	// order, the smaller half) and of the rest, in seconds.
	waits                 int
	olderMean, recentMean float64
	// Of the allocations that got devices: how many hold no lease, how
	// many ended and how many of those within RecommendShortDuration.
	noLease, ended, short int
	frag                  float64
	fragSamples           int
	// The spread of host utilisation (hostUtilSpread).
	utilHi, utilLo   float64
	utilHosts, inUse int
}

// Recommend returns the recommendations for device type t, or for every
// type when t is "", from the allocations of the namespaces ns (every
// namespace when none is named), sorted by priority (high first), kind,
// pool, type and message. An unknown type has none. It reads the
// aggregates kept as commands apply; recommendFromScratch in the tests
// computes the same from every allocation and device.
func (s *State) Recommend(t DeviceType, ns ...string) []Recommendation {
	out := []Recommendation{}
	if t != "" && !t.Valid() {
		return out
	}
	defer s.beginRead()()
	ns = dedupe(ns)
	for _, typ := range DeviceTypes {
		if t != "" && typ != t {
			continue
		}
		sets, names := s.poolSets(typ, ns)
		for _, sc := range s.scopes(typ, names) {
			f := s.scopeFigures(&sc, sets)
			out = append(out, s.recommendScope(&sc, &f)...)
		}
		out = append(out, recommendDrain(typ, s.drainPools(typ))...)
		if qs := s.quotaLimitsOn(typ, ns); len(qs) > 0 {
			figs := s.agg.dev.poolFigures(typ, onePool(AllPools))
			util := gridMean(figs.used, figs.sched)
			sets := s.namespaceSets(typ)
			for _, q := range qs {
				q.counts = sets[q.ns].counts()
				out = append(out, recommendQuota(typ, util, q)...)
			}
		}
	}
	sortRecommendations(out)
	return out
}

// scopeFigures assembles a scope's figures from the aggregates; the
// caller holds statsDev.mu.
func (s *State) scopeFigures(sc *recScope, sets map[string]aggSet) scopeFigures {
	var bs aggSet
	for _, p := range sc.pools {
		bs = append(bs, sets[p]...)
	}
	f := scopeFigures{sum: bs.summary(s.now)}
	prios := map[int]bool{}
	for _, b := range bs {
		for p := range b.prios { // a set: order-free
			prios[p] = true
		}
		f.noLease += b.noLease
		f.ended += b.finished
		f.short += b.short
	}
	f.priorities = len(prios)
	f.waits, f.olderMean, f.recentMean = bs.waitHalves(s.now, s.seq)
	typical, samples := s.typicalFor(sc.t, sc.in)
	f.fragSamples = samples
	if len(typical) == 0 && sc.policy.Policy != LoadBalanced {
		return f
	}
	c := s.agg.dev.scope(s, sc.t, sc.id, sc.in)
	if len(typical) > 0 {
		f.frag = c.fragmentation(s, typical)
	}
	f.utilHi, f.utilLo, f.utilHosts, f.inUse = c.spread()
	return f
}

// waitHalves is the number of queue waits of the buckets (requests not
// refused at once: until placed, until they ended, or until now while
// pending) and the mean of the older half by Seq and of the rest, in
// seconds. maxSeq bounds the Seqs.
func (bs aggSet) waitHalves(now int64, maxSeq uint64) (int, float64, float64) {
	n := 0
	var total u128
	upTo := func(seq uint64) (int, u128) {
		k, sum := 0, u128{}
		for _, b := range bs {
			c, d := b.waited.upTo(seq)
			k += c
			sum = sum.plus(d)
			c, d = b.waiting.upTo(seq)
			k += c
			sum = sum.plus(mul64(uint64(c), uint64(now))).minus(d)
		}
		return k, sum
	}
	for _, b := range bs {
		n += b.waited.len() + b.waiting.len()
	}
	if n == 0 {
		return 0, 0, 0
	}
	_, total = upTo(maxSeq)
	half := n / 2
	var older u128
	if half > 0 {
		lo, hi := uint64(0), maxSeq
		for lo < hi {
			mid := lo + (hi-lo)/2
			if k, _ := upTo(mid); k >= half {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		_, older = upTo(lo)
	}
	return n, meanOf(older, half), meanOf(total.minus(older), n-half)
}

// meanOf is the mean in seconds of n durations (nanoseconds) summing to
// sum; 0 when n is 0.
func meanOf(sum u128, n int) float64 {
	if n == 0 {
		return 0
	}
	return sum.float() / float64(n) / 1e9
}

// sortRecommendations sorts by priority (high first), kind, pool, type and
// message.
func sortRecommendations(out []Recommendation) {
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
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Type != b.Type {
			return typeRank(a.Type) < typeRank(b.Type)
		}
		return a.Message < b.Message
	})
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

// recommendScope judges one policy scope.
func (s *State) recommendScope(sc *recScope, f *scopeFigures) []Recommendation {
	var out []Recommendation
	rec := func(kind RecommendationKind, prio RecommendationPriority, n int, msg string, ev map[string]float64) *Recommendation {
		out = append(out, Recommendation{Kind: kind, Type: sc.t, Pool: sc.pool, Message: msg, Evidence: ev, Priority: prio, Confidence: confidence(n)})
		return &out[len(out)-1]
	}
	name := scopeName(sc)
	pol := sc.policy.Policy
	sum := f.sum
	c := sum.counts
	decided := c.Decided()
	refusals := c.Failed + c.TimedOut
	var refusalRate, timeoutRate float64
	if decided > 0 {
		refusalRate = float64(refusals) / float64(decided)
		timeoutRate = float64(c.TimedOut) / float64(decided)
	}
	policyAdvised := false

	// Switch policy: fragmentation under a policy that does not pack.
	frag, fragSamples := f.frag, f.fragSamples
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
		timeoutRate >= RecommendTimeoutRateHigh && f.priorities > 1 {
		r := rec(KindSwitchPolicy, PriorityHigh, decided, fmt.Sprintf(
			"%.0f%% of %s requests timed out under %s while their priorities differ; switch to %s so the most important are served and may preempt",
			100*timeoutRate, name, pol, PriorityBased),
			map[string]float64{"timeout_rate": timeoutRate, "timed_out": float64(c.TimedOut), "decided": float64(decided), "distinct_priorities": float64(f.priorities)})
		r.Policy = PriorityBased
		policyAdvised = true
	}

	// Add capacity: refusals over the threshold, or queue waits growing.
	olderMean, recentMean := f.olderMean, f.recentMean
	growing := f.waits >= RecommendMinSamples && recentMean >= RecommendWaitMin.Seconds() &&
		recentMean >= RecommendWaitGrowth*olderMean
	refusing := decided >= RecommendMinSamples && refusalRate >= RecommendRefusalRateHigh
	capacityAdvised := refusing || growing
	if capacityAdvised {
		ev := map[string]float64{
			"refusal_rate": refusalRate, "failed": float64(c.Failed), "timed_out": float64(c.TimedOut), "decided": float64(decided),
			"wait_older_mean_s": olderMean, "wait_recent_mean_s": recentMean, "wait_samples": float64(f.waits),
		}
		var why []string
		if refusing {
			why = append(why, fmt.Sprintf("%.0f%% of requests were refused or timed out", 100*refusalRate))
		}
		if growing {
			why = append(why, fmt.Sprintf("queue waits grew from %.1fs to %.1fs on average", olderMean, recentMean))
		}
		prio, n := PriorityMedium, f.waits
		if refusing {
			prio, n = PriorityHigh, decided
		}
		rec(KindAddCapacity, prio, n, fmt.Sprintf("add %s capacity: %s", name, strings.Join(why, "; ")), ev)
	}

	// Rebalance: hot hosts under LoadBalanced.
	rebalanceAdvised := false
	if pol == LoadBalanced {
		hi, lo, hosts, inUse := f.utilHi, f.utilLo, f.utilHosts, f.inUse
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
	noLease, ended, short := f.noLease, f.ended, f.short
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

// drainPool is what recommendDrain reads of one pool's devices of a
// type: the unhealthy ones and the flaky ones (RecommendLostPerDevice or
// more retained lost allocations), each by ID, the allocations lost on
// the flaky ones and those held by the unhealthy ones.
type drainPool struct {
	unhealthy, flaky []string
	lostOnFlaky      int
	held             int
}

// drainPools gathers the drainPools of type t from the aggregates; the
// caller holds statsDev.mu.
func (s *State) drainPools(t DeviceType) map[string]*drainPool {
	byPool := map[string]*drainPool{}
	get := func(pool string) *drainPool {
		p := byPool[pool]
		if p == nil {
			p = &drainPool{}
			byPool[pool] = p
		}
		return p
	}
	for _, id := range sortedKeys(s.agg.dev.unhealthy[t]) {
		d := s.devices[id]
		p := get(d.Pool)
		p.unhealthy = append(p.unhealthy, id)
		p.held += len(d.Allocations)
	}
	for pool, f := range s.agg.flaky[t] { // filed by pool: order-free
		p := get(pool)
		p.lostOnFlaky = f.lost
		f.ids.Ascend(func(id string) bool {
			p.flaky = append(p.flaky, id)
			return true
		})
	}
	return byPool
}

// recommendDrain advises draining and replacing, per pool, the devices of
// type t that are unhealthy or keep losing allocations.
func recommendDrain(t DeviceType, byPool map[string]*drainPool) []Recommendation {
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
		r.Devices = mergeSorted(p.unhealthy, p.flaky)
		out = append(out, r)
	}
	return out
}

// mergeSorted is the union of two sorted lists of distinct IDs, sorted.
func mergeSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0] < b[0]:
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
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
