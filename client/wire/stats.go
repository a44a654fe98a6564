package wire

// AllPools is the Pool of a Stats entry that totals every pool of a type
// (and the ?pool= value that keeps only those entries).
const AllPools = "*"

// Stats are the statistics of one device type in one pool, or in every
// pool (Pool == AllPools). Durations are in seconds.
type Stats struct {
	Type DeviceType `json:"type"`
	Pool string     `json:"pool"`
	// Policy is the policy in force: the pool's override or the type's.
	Policy PolicyConfig  `json:"policy"`
	Counts OutcomeCounts `json:"counts"`
	// SuccessRate is Successful / (Total - Pending); 0 when nothing is
	// decided.
	SuccessRate float64 `json:"success_rate"`
	// Duration runs from allocation to end (to now while active), over
	// every allocation that got devices.
	Duration DurationStats `json:"duration"`
	// QueueWait runs from request to allocation, over every allocation
	// that got devices.
	QueueWait DurationStats `json:"queue_wait"`
	// Utilisation is the mean used share of the schedulable devices, 0..1.
	Utilisation float64 `json:"utilisation"`
	// Fragmentation is the share of the schedulable free capacity that
	// the typical recent requests could not use, 0..1.
	Fragmentation float64      `json:"fragmentation"`
	Devices       DeviceCounts `json:"devices"`
}

// OutcomeCounts counts allocations by what became of them.
type OutcomeCounts struct {
	Total int `json:"total"`
	// Successful allocations got their devices at some point, whatever
	// happened after.
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

// DurationStats summarise a set of durations, in seconds (nearest-rank
// percentiles). All zero when Count is zero.
type DurationStats struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_s"`
	P50   float64 `json:"p50_s"`
	P95   float64 `json:"p95_s"`
}

// DeviceCounts count devices by status. Devices of a host that is down
// count as offline whatever their own status; InUse devices hold at least
// one active allocation.
type DeviceCounts struct {
	Total     int `json:"total"`
	Available int `json:"available"`
	Draining  int `json:"draining"`
	Unhealthy int `json:"unhealthy"`
	Offline   int `json:"offline"`
	InUse     int `json:"in_use"`
}

// PoolInfo describes a pool: the device types it holds, its devices by
// status and the policy in force for each type.
type PoolInfo struct {
	Name    string       `json:"name"`
	Types   []DeviceType `json:"types"`
	Devices DeviceCounts `json:"devices"`
	// Override is the pool's own policy; nil when each type's policy
	// applies.
	Override *PolicyConfig `json:"override,omitempty"`
	// Policies is the policy in force for each type the pool holds.
	Policies map[DeviceType]PolicyConfig `json:"policies"`
}

// RecommendationKind names what a recommendation advises.
type RecommendationKind string

// Recommendation kinds.
const (
	// KindSwitchPolicy: change the scope's policy (to
	// Recommendation.Policy).
	KindSwitchPolicy RecommendationKind = "switch_policy"
	// KindAddCapacity: add devices; requests are refused or wait longer.
	KindAddCapacity RecommendationKind = "add_capacity"
	// KindRebalance: load under LoadBalanced is uneven across hosts.
	KindRebalance RecommendationKind = "rebalance"
	// KindDrainUnhealthy: drain and repair or replace the listed devices.
	KindDrainUnhealthy RecommendationKind = "drain_unhealthy"
	// KindLongRunning: allocations run long without leases; set lease
	// TTLs.
	KindLongRunning RecommendationKind = "long_running"
	// KindShortRunning: most allocations are short; keep a warm pool.
	KindShortRunning RecommendationKind = "short_running"
	// KindKeepPolicy: nothing calls for a change of policy or capacity.
	KindKeepPolicy RecommendationKind = "keep_policy"
	// KindRaiseQuota: a namespace's requests are refused for its quota
	// while devices of the type sit idle (Recommendation.Namespace).
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

// NamespaceStats is one namespace's figures for one device type (GET
// /v1/stats/namespaces): its weight and entitlement (its part of the
// weights, in percent) against its part of the devices held now and of
// the recent usage (fair share on), its quota's max count and what it
// borrows past it, its outcomes and queue wait, and its refusals by
// reason ("no_capacity", "quota", "timed_out").
type NamespaceStats struct {
	Namespace      string         `json:"namespace"`
	Type           DeviceType     `json:"type"`
	Weight         float64        `json:"weight"`
	EntitlementPct float64        `json:"entitlement_pct"`
	Held           int            `json:"held"`
	SharePct       float64        `json:"share_pct"`
	RecentSharePct float64        `json:"recent_share_pct"`
	MaxCount       *int           `json:"max_count,omitempty"`
	Borrowing      int            `json:"borrowing,omitempty"`
	Counts         OutcomeCounts  `json:"counts"`
	QueueWait      DurationStats  `json:"queue_wait"`
	Refusals       map[string]int `json:"refusals"`
}
