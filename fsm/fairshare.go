package fsm

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Fair share (SetQueueConfig.FairShare): when it is on, the queue serves waiting
// requests by their namespace's share rather than by priority and arrival
// alone, as Slurm's fair-share factor does. A namespace's usage of a
// device type is the devices it held over time, decayed with a half-life:
// a device held an hour ago counts half as much as one held now when the
// half-life is an hour. Its score for a type is
//
//	(devices held now + decayed usage · ln 2 / half-life) / weight
//
// the decayed usage turned into "devices held on average lately", so that
// both terms are in devices; the weight is its quota's (1 without one).
// A namespace is below its share of a type when its score is under the
// share line: the score it would have if the devices held now and lately
// by the members (the namespaces that hold some, wait, or have a usage
// not yet decayed to zero) were split in proportion to their weights,
// Σ(held + recent) / Σ weight. When capacity
// frees, the waiting namespace below its share with the lowest score is
// tried first, with its next request (by priority, then arrival); a
// request placed raises its namespace's score at once, so one namespace
// does not take everything freed in one go. When no waiting namespace is
// below its share, the queue serves as without fair share, by priority
// then arrival, so fair share reorders only for a namespace that is owed.
// A request that does not fit is passed over for the next (backfill), as
// without fair share. fsm/DESIGN.md has a worked example.
//
// Time is the leader's stamp of each command only. The usage of each
// (namespace, type) is kept as a value at a time and the devices held
// since; countUse, at every change of what a namespace holds, first
// decays it to the command's time. Replicas apply the same float
// operations in the same order, and a snapshot carries the values, so a
// restored replica goes on with the same bits.

// DefaultHalfLife is the usage half-life when SetQueueConfig gives none.
const DefaultHalfLife = 7 * 24 * time.Hour

// MaxWeight bounds a namespace's fair-share weight.
const MaxWeight = 1e6

// fairShare is the fair-share state: the half-life and each namespace's
// usage per device type.
type fairShare struct {
	halfLife int64
	usage    map[fairKey]*decayed
}

type fairKey struct {
	ns  string
	typ DeviceType
}

// decayed is a usage: U device-seconds at time At, with Held devices
// held since.
type decayed struct {
	U    float64 `json:"u"`
	At   int64   `json:"at"`
	Held int     `json:"held"`
}

// at is the usage decayed to time t (≥ At).
func (d *decayed) at(t, halfLife int64) float64 {
	if t <= d.At {
		return d.U
	}
	f := math.Exp2(-float64(t-d.At) / float64(halfLife))
	return d.U*f + float64(d.Held)*(float64(halfLife)/1e9/math.Ln2)*(1-f)
}

// startFairShare turns fair share on, or changes its half-life (0:
// DefaultHalfLife): the usage so far decays at the old half-life, from
// now at the new one. It starts from what each namespace holds now.
func (s *State) startFairShare(halfLife time.Duration) {
	hl := int64(halfLife)
	if hl == 0 {
		hl = int64(DefaultHalfLife)
	}
	if s.fair == nil {
		s.fair = &fairShare{usage: map[fairKey]*decayed{}}
		for k, u := range s.use {
			if k.pool == "*" {
				s.fair.usage[fairKey{k.ns, k.typ}] = &decayed{At: s.now, Held: u.count}
			}
		}
	} else {
		for _, d := range s.fair.usage {
			d.U, d.At = d.at(s.now, s.fair.halfLife), max(d.At, s.now)
		}
	}
	s.fair.halfLife = hl
}

// noteHeld records that ns now holds held devices of type t (countUse,
// after a change): the usage is decayed to now with what was held before.
func (s *State) noteHeld(ns string, t DeviceType, held int) {
	if s.fair == nil {
		return
	}
	k := fairKey{ns, t}
	d := s.fair.usage[k]
	if d == nil {
		d = &decayed{At: s.now}
		s.fair.usage[k] = d
	}
	d.U, d.At = d.at(s.now, s.fair.halfLife), max(d.At, s.now)
	d.Held = held
}

// weightOf is a namespace's fair-share weight.
func (s *State) weightOf(ns string) float64 {
	if q := s.quotas[ns]; q != nil {
		return q.FairWeight()
	}
	return 1
}

// FairWeight is the quota's fair-share weight: Weight, or 1 when unset.
func (q *Quota) FairWeight() float64 {
	if q.Weight > 0 {
		return q.Weight
	}
	return 1
}

// fairScore is ns's score for type t now: devices held now and lately,
// per unit of weight.
func (s *State) fairScore(ns string, t DeviceType) float64 {
	var held, recent float64
	if u := s.use[useKey{ns: ns, typ: t, pool: "*"}]; u != nil {
		held = float64(u.count)
	}
	if d := s.fair.usage[fairKey{ns, t}]; d != nil {
		recent = d.at(s.now, s.fair.halfLife) * math.Ln2 / (float64(s.fair.halfLife) / 1e9)
	}
	return (held + recent) / s.weightOf(ns)
}

// fairOrder is the order kickQueue tries the waiting requests in under
// fair share: repeatedly the next request of the namespace with the
// lowest score, asking try of each; try says whether it was placed (its
// namespace's score then rises before the next pick).
func (s *State) fairOrder(keys []queueKey, try func(queueKey) bool) {
	byNS := map[string][]queueKey{}
	for _, k := range keys { // in queue order: priority, then arrival
		ns := s.allocs[k.id].Namespace
		byNS[ns] = append(byNS[ns], k)
	}
	names := sortedKeys(byNS)
	next := make([]int, len(names))
	// members(t) are the namespaces that hold devices of type t, wait,
	// or have a usage of t not yet decayed to zero, in order: those a
	// share of t is counted among.
	memo := map[DeviceType][]string{}
	members := func(t DeviceType) []string {
		if m, ok := memo[t]; ok {
			return m
		}
		set := map[string]bool{}
		for _, ns := range names {
			set[ns] = true
		}
		for k, d := range s.fair.usage {
			if k.typ == t && (d.Held > 0 || d.U > 0) {
				set[k.ns] = true
			}
		}
		memo[t] = sortedKeys(set)
		return memo[t]
	}
	for {
		// The namespaces below their share by the type of their next
		// request go first, the lowest score first; when none is, the
		// next requests are served as without fair share, by priority
		// then arrival.
		best, bestScore, below := -1, 0.0, false
		for i, ns := range names {
			// A request that ended during the pass (a gang placed on its
			// reservation, then preempted) is passed over. One placed
			// during it keeps its place, as it always has, and its turn
			// changes nothing: passing over it too would reorder the
			// namespaces and apply an existing log differently.
			for next[i] < len(byNS[ns]) && s.allocs[byNS[ns][next[i]].id] == nil {
				next[i]++
			}
			if next[i] == len(byNS[ns]) {
				continue
			}
			k := byNS[ns][next[i]]
			t := s.allocs[k.id].Request.Claims[0].Type
			sc := s.fairScore(ns, t)
			under := sc < s.fairMean(t, members(t))
			var better bool
			switch {
			case best < 0:
				better = true
			case under != below:
				better = under
			case under:
				better = sc < bestScore
			default:
				better = queueKeyLess(k, byNS[names[best]][next[best]])
			}
			if better {
				best, bestScore, below = i, sc, under
			}
		}
		if best < 0 {
			return
		}
		k := byNS[names[best]][next[best]]
		next[best]++
		try(k)
	}
}

// fairMean is the score a namespace has when it holds exactly its share
// of type t: the devices held now and lately by the members (those that
// hold some, wait, or used it lately), per unit of their weights
// together. A namespace whose score is below it is below its share.
func (s *State) fairMean(t DeviceType, members []string) float64 {
	var sum, weights float64
	for _, ns := range members { // in order: float sums depend on it
		sum += s.fairScore(ns, t) * s.weightOf(ns)
		weights += s.weightOf(ns)
	}
	if weights == 0 {
		return 0
	}
	return sum / weights
}

// FairShareUse is a namespace's fair-share figures for one device type.
type FairShareUse struct {
	Namespace string     `json:"namespace"`
	Type      DeviceType `json:"type"`
	Weight    float64    `json:"weight"`
	// Held is the devices held now; Recent the decayed usage as devices
	// held on average lately; Score is (Held + Recent) / Weight.
	Held   int     `json:"held"`
	Recent float64 `json:"recent"`
	Score  float64 `json:"score"`
}

// FairShare reports whether fair share is on, its half-life, and each
// namespace's figures per type, by namespace then type.
func (s *State) FairShare() (on bool, halfLife time.Duration, use []FairShareUse) {
	if s.fair == nil {
		return false, 0, nil
	}
	keys := make([]fairKey, 0, len(s.fair.usage))
	for k := range s.fair.usage {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b fairKey) int {
		return strings.Compare(a.ns+"\x00"+string(a.typ), b.ns+"\x00"+string(b.typ))
	})
	for _, k := range keys {
		d := s.fair.usage[k]
		u := FairShareUse{Namespace: k.ns, Type: k.typ, Weight: s.weightOf(k.ns), Held: d.Held,
			Recent: d.at(s.now, s.fair.halfLife) * math.Ln2 / (float64(s.fair.halfLife) / 1e9)}
		u.Score = (float64(u.Held) + u.Recent) / u.Weight
		use = append(use, u)
	}
	return true, time.Duration(s.fair.halfLife), use
}

// fairSnapshot is fair share in the snapshot's configuration.
type fairSnapshot struct {
	HalfLife int64        `json:"half_life"`
	Usage    []fairRecord `json:"usage"`
}

type fairRecord struct {
	Namespace string     `json:"namespace"`
	Type      DeviceType `json:"type"`
	decayed
}

func (s *State) fairSnapshot() *fairSnapshot {
	if s.fair == nil {
		return nil
	}
	out := &fairSnapshot{HalfLife: s.fair.halfLife, Usage: []fairRecord{}}
	for k, d := range s.fair.usage {
		out.Usage = append(out.Usage, fairRecord{Namespace: k.ns, Type: k.typ, decayed: *d})
	}
	slices.SortFunc(out.Usage, func(a, b fairRecord) int {
		return strings.Compare(a.Namespace+"\x00"+string(a.Type), b.Namespace+"\x00"+string(b.Type))
	})
	return out
}

func (s *State) restoreFairShare(f *fairSnapshot) error {
	if f == nil {
		return nil
	}
	if f.HalfLife <= 0 || f.HalfLife > int64(MaxDuration) {
		return fmt.Errorf("%w: fair-share half-life %d", ErrSnapshot, f.HalfLife)
	}
	s.fair = &fairShare{halfLife: f.HalfLife, usage: map[fairKey]*decayed{}}
	for i, r := range f.Usage {
		k := fairKey{r.Namespace, r.Type}
		bad := !ValidNamespace(r.Namespace) || !r.Type.Valid() || r.Held < 0 || r.At > s.now ||
			math.IsNaN(r.U) || math.IsInf(r.U, 0) || r.U < 0
		if bad || s.fair.usage[k] != nil || (i > 0 && f.Usage[i-1].Namespace+"\x00"+string(f.Usage[i-1].Type) >= r.Namespace+"\x00"+string(r.Type)) {
			return fmt.Errorf("%w: fair-share usage %d (%s %s)", ErrSnapshot, i, r.Namespace, r.Type)
		}
		d := r.decayed
		s.fair.usage[k] = &d
	}
	return nil
}

// checkFairShare: the devices each usage says are held are those held.
func (s *State) checkFairShare() error {
	if s.fair == nil {
		return nil
	}
	for k, d := range s.fair.usage {
		held := 0
		if u := s.use[useKey{ns: k.ns, typ: k.typ, pool: "*"}]; u != nil {
			held = u.count
		}
		if d.Held != held {
			return fmt.Errorf("fair share of %s %s: %d held by its usage, %d by the devices", k.ns, k.typ, d.Held, held)
		}
	}
	for k, u := range s.use {
		if k.pool == "*" && u.count > 0 && s.fair.usage[fairKey{k.ns, k.typ}] == nil {
			return fmt.Errorf("fair share: %s holds %d %s without a usage", k.ns, u.count, k.typ)
		}
	}
	return nil
}
