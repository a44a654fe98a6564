package fsm

import "math"

// NamespaceStats is one namespace's figures for one device type: what it
// holds against what its weight entitles it to, how long its requests
// waited, and its refusals by reason. Like Stats, it is read-only and
// deterministic, and reads the aggregates kept as commands apply.
type NamespaceStats struct {
	Namespace string     `json:"namespace"`
	Type      DeviceType `json:"type"`
	// Weight is its fair-share weight (its quota's, 1 without);
	// EntitlementPct its part of the weights of every namespace listed
	// for the type, in percent.
	Weight         float64 `json:"weight"`
	EntitlementPct float64 `json:"entitlement_pct"`
	// Held is the devices of the type its active allocations hold (whole
	// or in part); SharePct its part of what all namespaces hold now, and
	// RecentSharePct of their usage decayed by the fair-share half-life
	// (0 while fair share is off).
	Held           int     `json:"held"`
	SharePct       float64 `json:"share_pct"`
	RecentSharePct float64 `json:"recent_share_pct"`
	// MaxCount is its quota's limit on the devices of the type in all
	// pools, when it has one; Borrowing how many it holds past it.
	MaxCount  *int `json:"max_count,omitempty"`
	Borrowing int  `json:"borrowing,omitempty"`
	// Counts and QueueWait are as in Stats, over its allocations of the
	// type in every pool.
	Counts    OutcomeCounts `json:"counts"`
	QueueWait DurationStats `json:"queue_wait"`
	// Refusals counts its requests that got no devices, by reason:
	// "no_capacity" (refused at once), "quota" (refused at once for its
	// quota) and "timed_out" (waited past the deadline).
	Refusals map[string]int `json:"refusals"`
}

// NamespaceStats returns the figures of every namespace with allocations
// of a type or a quota limit on it, by type (in DeviceTypes order, t alone when set)
// then namespace; only the namespaces listed are returned (nil: all),
// though entitlements and shares are parts of every namespace's.
func (s *State) NamespaceStats(t DeviceType, namespaces []string) []NamespaceStats {
	out := []NamespaceStats{}
	if t != "" && !t.Valid() {
		return out
	}
	defer s.beginRead()()
	want := map[string]bool{}
	for _, n := range namespaces {
		want[n] = true
	}
	var recent map[string]float64
	if s.fair != nil {
		recent = map[string]float64{}
	}
	for _, typ := range DeviceTypes {
		if t != "" && typ != t {
			continue
		}
		byNS := s.namespaceSets(typ)
		for ns, q := range s.quotas { // order-free: a set
			for _, l := range q.Limits {
				if _, ok := byNS[ns]; !ok && l.DeviceType == typ {
					byNS[ns] = nil
				}
			}
		}
		names := sortedKeys(byNS)
		var weights, held, recentSum float64
		for _, ns := range names { // in order: float sums depend on it
			weights += s.weightOf(ns)
			if u := s.use[useKey{ns: ns, typ: typ, pool: "*"}]; u != nil {
				held += float64(u.count)
			}
			if recent != nil {
				if d := s.fair.usage[fairKey{ns, typ}]; d != nil {
					recent[ns] = d.at(s.now, s.fair.halfLife)
					recentSum += recent[ns]
				}
			}
		}
		for _, ns := range names {
			if namespaces != nil && !want[ns] {
				continue
			}
			sum := byNS[ns].summary(s.now)
			n := NamespaceStats{Namespace: ns, Type: typ, Weight: s.weightOf(ns), EntitlementPct: pct(s.weightOf(ns), weights),
				Counts: sum.counts, QueueWait: sum.queueWait,
				Refusals: map[string]int{"no_capacity": sum.counts.Failed - sum.counts.OverQuota, "quota": sum.counts.OverQuota, "timed_out": sum.counts.TimedOut}}
			if u := s.use[useKey{ns: ns, typ: typ, pool: "*"}]; u != nil {
				n.Held = u.count
			}
			n.SharePct = pct(float64(n.Held), held)
			if recent != nil {
				n.RecentSharePct = pct(recent[ns], recentSum)
			}
			if q := s.quotas[ns]; q != nil {
				for _, l := range q.Limits {
					if l.DeviceType == typ && l.Pool == "" && l.MaxCount != nil {
						m := *l.MaxCount
						n.MaxCount, n.Borrowing = &m, max(0, n.Held-m)
					}
				}
			}
			out = append(out, n)
		}
	}
	return out
}

// namespaceSets gathers the buckets of type t by namespace, over every
// pool.
func (s *State) namespaceSets(t DeviceType) map[string]aggSet {
	byNS := map[string]aggSet{}
	for _, pools := range s.agg.buckets[t] { // order-free: sets summed
		for ns, b := range pools {
			byNS[ns] = append(byNS[ns], b)
		}
	}
	return byNS
}

// pct is part of whole in percent, 0 when whole is 0.
func pct(part, whole float64) float64 {
	if whole == 0 || math.IsNaN(whole) {
		return 0
	}
	return 100 * part / whole
}
