package fsm

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Borrowing and reclaim, as Kueue's cohorts do. A namespace whose quota
// says Borrow may hold more than a MaxCount limit allows, on capacity
// nobody else uses: what it holds beyond the limit is borrowed. A
// namespace that owns capacity (its quota has a MaxCount limit on each
// type it asks for, and the request keeps it within its limits) and
// whose waiting request does not fit reclaims it: borrowed allocations
// are chosen, per host, lowest priority and most recently started first,
// the fewest that let the request fit on one host, as preemption chooses
// (preempt.go); each is marked Preempting, with a deadline its own
// namespace's grace away (Quota.ReclaimGrace). At the deadline the tick
// ends it as preempted and tries the reclaiming request first, before
// the rest of the queue. A victim that ends sooner frees its devices
// sooner; a reclaiming request that leaves the queue (placed, timed out,
// cancelled) spares the victims still in their grace.
//
// Which allocations are borrowed is worked out when a reclaim is looked
// for, not stored: for a borrowing namespace over a limit, its
// allocations under the limit, lowest priority and most recently started
// first, as long as what it would hold without those taken so far is
// still above the limit. Victims already in their grace are counted as
// gone, so two owners never reclaim the same excess twice.

// DefaultReclaimGrace is the grace of a borrowed allocation that is
// reclaimed when its namespace's quota gives none.
const DefaultReclaimGrace = 30 * time.Second

// Preempting marks an active allocation whose borrowed devices are
// reclaimed: By is the waiting request that reclaims them, Deadline
// (Unix nanoseconds) when the allocation ends as preempted unless it
// ends before or By stops waiting.
type Preempting struct {
	By       string `json:"by"`
	Deadline int64  `json:"deadline"`
}

// EventPreempting and EventSpared are the Allocation events of a reclaim:
// an allocation's grace began, or its reclaimer stopped waiting and the
// allocation keeps its devices.
const (
	EventPreempting = "preempting"
	EventSpared     = "spared"
)

// graceOf is the reclaim grace of ns's borrowed allocations.
func (s *State) graceOf(ns string) int64 {
	if q := s.quotas[ns]; q != nil && q.ReclaimGrace > 0 {
		return int64(q.ReclaimGrace)
	}
	return int64(DefaultReclaimGrace)
}

// borrowing reports whether some namespace holds more than one of its
// limits allows: the cheap test before a reclaim is looked for.
func (s *State) borrowing() bool {
	for ns, q := range s.quotas { // any order: only whether one is
		if !q.Borrow {
			continue
		}
		for _, l := range q.Limits {
			if l.MaxCount != nil && s.heldUnder(ns, l).count > *l.MaxCount {
				return true
			}
		}
	}
	return false
}

// owns reports whether ns's quota entitles r to reclaim: a MaxCount limit
// covers every claim's type (in the claim's pool or in all pools), and
// r keeps ns within every limit.
func (s *State) owns(ns string, r *Request) bool {
	q := s.quotas[ns]
	if q == nil || s.overQuota(ns, r, nil) != "" {
		return false
	}
	for i, c := range r.Claims {
		covered := false
		for _, l := range q.Limits {
			if l.MaxCount != nil && l.DeviceType == c.Type && (l.Pool == "" || l.Pool == r.claimPool(i)) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

// underLimit counts the assignments of a that fall under limit l, as the
// namespace's use counts them.
func (s *State) underLimit(a *Allocation, l QuotaLimit) int {
	n := 0
	for _, as := range a.Devices {
		if d := s.devices[as.DeviceID]; d.Type == l.DeviceType && (l.Pool == "" || d.Pool == l.Pool) {
			n++
		}
	}
	return n
}

// borrowedFor lists the borrowed allocations a request of ns may reclaim:
// those of other namespaces over a MaxCount limit on a type the request
// asks for, not already in their grace.
func (s *State) borrowedFor(ns string, r *Request) map[string]bool {
	asks := map[DeviceType]bool{}
	for _, c := range r.Claims {
		asks[c.Type] = true
	}
	byNS := map[string][]*Allocation{}
	for _, a := range s.allocs { // order-free: sorted below
		if a.Status == Active && a.Namespace != ns {
			if q := s.quotas[a.Namespace]; q != nil && q.Borrow {
				byNS[a.Namespace] = append(byNS[a.Namespace], a)
			}
		}
	}
	out := map[string]bool{}
	for _, m := range sortedKeys(byNS) {
		list := byNS[m]
		sort.Slice(list, func(i, j int) bool { return reclaimFirst(list[i], list[j]) })
		for _, l := range s.quotas[m].Limits {
			if l.MaxCount == nil || !asks[l.DeviceType] {
				continue
			}
			have := s.heldUnder(m, l).count
			for _, a := range list {
				if a.Preempting != nil {
					have -= s.underLimit(a, l)
				}
			}
			for _, a := range list {
				if have <= *l.MaxCount {
					break
				}
				if n := s.underLimit(a, l); a.Preempting == nil && n > 0 {
					out[a.ID] = true
					have -= n
				}
			}
		}
	}
	return out
}

// reclaimFirst orders borrowed allocations for reclaim: lowest priority
// first, then the most recently started, then the latest to arrive.
func reclaimFirst(a, b *Allocation) bool {
	if a.Request.Priority != b.Request.Priority {
		return a.Request.Priority < b.Request.Priority
	}
	if a.AllocatedAt != b.AllocatedAt {
		return a.AllocatedAt > b.AllocatedAt
	}
	return a.Seq > b.Seq
}

// reclaimFor starts the reclaim of borrowed capacity for a waiting
// request a that does not fit, when its namespace owns the capacity and
// it has no reclaim under way. It reports whether one began.
func (s *State) reclaimFor(a *Allocation, pc PolicyConfig) bool {
	if a.Status != Pending || len(s.reclaims[a.ID]) > 0 || !s.borrowing() || !s.owns(a.Namespace, &a.Request) {
		return false
	}
	cands := s.borrowedFor(a.Namespace, &a.Request)
	if len(cands) == 0 {
		return false
	}
	victims, p := s.preemptAmong(a, pc, victimRule{eligible: func(v *Allocation) bool { return cands[v.ID] }, first: reclaimFirst, byOrder: true})
	if p == nil || s.overQuota(a.Namespace, &a.Request, p) != "" {
		return false
	}
	for _, v := range victims {
		v.Preempting = &Preempting{By: a.ID, Deadline: s.now + s.graceOf(v.Namespace)}
		v.ModifyIndex = s.last
		s.timers.ReplaceOrInsert(timerKey{at: v.Preempting.Deadline, kind: reclaimTimer, id: v.ID})
		s.reclaims[a.ID] = insertSorted(s.reclaims[a.ID], v.ID)
		s.emitAlloc(v, EventPreempting)
	}
	return true
}

// reclaimDue ends a victim whose grace is over as preempted by its
// reclaimer and returns the reclaimer's id.
func (s *State) reclaimDue(v *Allocation) string {
	by := v.Preempting.By
	s.dropVictim(v)
	v.PreemptedBy = by
	s.endAllocation(v, Preempted, "reclaimed by "+by)
	if r := s.allocs[by]; r != nil {
		r.Preempted = append(r.Preempted, v.ID)
		r.ModifyIndex = s.last
	}
	return by
}

// dropVictim takes v out of its reclaim: no timer, no mark.
func (s *State) dropVictim(v *Allocation) {
	p := v.Preempting
	s.timers.Delete(timerKey{at: p.Deadline, kind: reclaimTimer, id: v.ID})
	if list := removeSorted(s.reclaims[p.By], v.ID); len(list) > 0 {
		s.reclaims[p.By] = list
	} else {
		delete(s.reclaims, p.By)
	}
	v.Preempting = nil
}

// spare ends the reclaim a waiting request a began, which no longer
// waits: its victims keep their devices.
func (s *State) spare(a *Allocation) {
	for _, id := range slices.Clone(s.reclaims[a.ID]) {
		s.spared = true
		v := s.allocs[id]
		s.dropVictim(v)
		v.ModifyIndex = s.last
		s.emitAlloc(v, EventSpared)
	}
}

// spareNamespace spares the victims of ns, whose quota no longer lets it
// borrow: what it holds past a limit is then over its quota, which ends
// nothing, as a lowered limit does.
func (s *State) spareNamespace(ns string) {
	var ids []string
	for id, a := range s.allocs { // order-free: sorted below
		if a.Namespace == ns && a.Preempting != nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		v := s.allocs[id]
		s.dropVictim(v)
		v.ModifyIndex = s.last
		s.spared = true
		s.emitAlloc(v, EventSpared)
	}
}

// tryReclaimers places, before the rest of the queue, the waiting
// requests whose victims just ended, in the order given.
func (s *State) tryReclaimers(ids []string) {
	for _, id := range ids {
		a := s.allocs[id]
		if a == nil || a.Status != Pending || a.Deadline <= s.now {
			continue
		}
		if p, _ := s.placeInQuota(a, s.requestPolicy(&a.Request)); p != nil {
			s.activate(a, p)
		}
	}
}

// checkReclaims: every victim in its grace is active and listed under its
// reclaimer, a waiting request of another namespace.
func (s *State) checkReclaims() error {
	n := 0
	for by, ids := range s.reclaims { // order-free: any failure fails
		r := s.allocs[by]
		if r == nil || r.Status != Pending {
			return fmt.Errorf("reclaim by %s, which does not wait", by)
		}
		for _, id := range ids {
			v := s.allocs[id]
			if v == nil || v.Status != Active || v.Preempting == nil || v.Preempting.By != by || v.Namespace == r.Namespace {
				return fmt.Errorf("reclaim by %s lists %s, which is not its victim", by, id)
			}
			if !s.timers.Has(timerKey{at: v.Preempting.Deadline, kind: reclaimTimer, id: id}) {
				return fmt.Errorf("victim %s has no reclaim timer", id)
			}
			n++
		}
	}
	for _, a := range s.allocs { // order-free: a count
		if a.Preempting != nil {
			n--
		}
	}
	if n != 0 {
		return fmt.Errorf("%d allocations preempting that no reclaim lists", -n)
	}
	return nil
}
