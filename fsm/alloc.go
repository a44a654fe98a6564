package fsm

import (
	"crypto/sha1"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// allocNamespace derives allocation IDs from log indexes, so every replica
// names an allocation the same.
var allocNamespace = uuid.MustParse("6f0d6f9e-3c3a-4d0e-9b7e-8a1d4c2f5e10")

// allocIDFor is the ID of the allocation created at log index idx:
// uuid.NewSHA1(allocNamespace, decimal idx), computed without allocating
// a hasher.
func allocIDFor(idx uint64) string {
	var buf [len(allocNamespace) + 20]byte
	data := strconv.AppendUint(append(buf[:0], allocNamespace[:]...), idx, 10)
	sum := sha1.Sum(data)
	var u uuid.UUID
	copy(u[:], sum[:])
	u[6] = (u[6] & 0x0f) | 0x50 // version 5
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 4122 variant
	return u.String()
}

// Limits on a request.
const (
	MaxClaims     = 16
	MaxClaimCount = 256
	MaxDuration   = 366 * 24 * time.Hour
)

func validateRequest(r *Request) *Error {
	if len(r.Claims) == 0 {
		return errf(ErrInvalid, "request has no claims")
	}
	if len(r.Claims) > MaxClaims {
		return errf(ErrInvalid, "request has %d claims, more than %d", len(r.Claims), MaxClaims)
	}
	if r.Priority < 0 || r.Priority > MaxPriority {
		return errf(ErrInvalid, "priority %d out of 0..%d", r.Priority, MaxPriority)
	}
	if r.Timeout < 0 || r.Timeout > MaxDuration {
		return errf(ErrInvalid, "timeout %v out of 0..%v", r.Timeout, MaxDuration)
	}
	if r.LeaseTTL < 0 || r.LeaseTTL > MaxDuration {
		return errf(ErrInvalid, "lease ttl %v out of 0..%v", r.LeaseTTL, MaxDuration)
	}
	if r.Pool != "" && !ValidID(r.Pool) {
		return errf(ErrInvalid, "pool %q is not a valid id", r.Pool)
	}
	for i, c := range r.Claims {
		switch {
		case c.Pool != "" && !ValidID(c.Pool):
			return errf(ErrInvalid, "claim %d: pool %q is not a valid id", i, c.Pool)
		case !c.Type.Valid():
			return errf(ErrInvalid, "claim %d: unknown device type %q", i, c.Type)
		case c.Count < 1 || c.Count > MaxClaimCount:
			return errf(ErrInvalid, "claim %d: count %d out of 1..%d", i, c.Count, MaxClaimCount)
		case !c.Capabilities.Resources.valid():
			return errf(ErrInvalid, "claim %d: a capability is negative, infinite or NaN", i)
		case !c.Amount.valid():
			return errf(ErrInvalid, "claim %d: an amount is negative, infinite or NaN", i)
		case !validClaimTopology(c.Topology):
			return errf(ErrInvalid, "claim %d: topology %q is not %q or empty", i, c.Topology, TopologyNVLink)
		}
	}
	return validateGang(r)
}

func copyRequest(r Request) Request {
	r.Claims = append([]Claim(nil), r.Claims...)
	return r
}

func (s *State) allocate(idx uint64, c *Allocate) Result {
	ns := NamespaceOf(c)
	if !ValidNamespace(ns) {
		return Result{Err: errf(ErrInvalid, "namespace %q is not 1 to %d letters, digits, '-' or '_'", ns, MaxNamespaceLength)}
	}
	if err := validateRequest(&c.Request); err != nil {
		return Result{Err: err}
	}
	id := c.AllocationID
	if id == "" {
		id = allocIDFor(idx)
	} else if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return Result{Err: errf(ErrInvalid, "allocation id %q is not a canonical UUID", id)}
	}
	if s.lookup(id) != nil {
		return Result{Err: errf(ErrConflict, "allocation %s exists", id)}
	}
	s.seq++
	a := &Allocation{
		ID: id, RequestID: c.RequestID, Namespace: ns, Request: copyRequest(c.Request), Status: Pending,
		Seq: s.seq, CreateIndex: idx, ModifyIndex: idx, RequestedAt: s.now,
	}
	pc := s.requestPolicy(&a.Request)
	a.Policy = pc.Policy
	s.shapes.add(&a.Request)
	s.agg.dev.added++
	s.emitAlloc(a, EventCreated)

	p, overQuota := s.placeInQuota(a, pc)
	if p != nil {
		s.allocs[a.ID] = a
		s.activate(a, p)
		return Result{Allocation: a.clone()}
	}
	if overQuota == "" && s.preemptFor(a, pc) {
		// The victims may have freed more than the request took.
		s.kickQueue()
		return Result{Allocation: a.clone()}
	}
	why := s.whyNot(a)
	refusal, reason := ErrNoCapacity, "no capacity"
	if overQuota != "" {
		why.Quota, why.Summary = overQuota, overQuota
		refusal, reason = ErrQuotaExceeded, reasonOverQuota
	}
	a.WhyNot = why
	if a.Request.Timeout == 0 {
		a.Status = Failed
		a.EndedAt = s.now
		a.Reason = reason
		s.history.add(a)
		s.aggLiveEnter(a)
		s.emitAlloc(a, string(Failed))
		return Result{Allocation: a.clone(), Err: &Error{Code: refusal.Code, Message: why.Summary, WhyNot: why}}
	}
	a.Deadline = s.now + int64(a.Request.Timeout)
	s.allocs[a.ID] = a
	s.aggLiveEnter(a)
	s.queue.ReplaceOrInsert(queueKeyOf(a))
	if a.Request.IsGang() {
		s.gangs.ReplaceOrInsert(queueKeyOf(a))
	}
	s.timers.ReplaceOrInsert(timerKey{at: a.Deadline, kind: deadlineTimer, id: a.ID})
	s.emitAlloc(a, EventQueued)
	s.emitQueue(a, EventEnqueued)
	if overQuota == "" {
		s.reclaimFor(a, pc)
	}
	return Result{Allocation: a.clone()}
}

// whyNot explains why a cannot be placed now; the hosts reserved for
// gangs behind it are open to it, as to its placement (placeAhead).
func (s *State) whyNot(a *Allocation) (why *WhyNot) {
	if a.Request.IsGang() {
		return s.explainGang(a)
	}
	s.withOpen(s.gangsBehind(a), func() { why = s.explain(&a.Request) })
	return why
}

// activate gives a pending allocation the devices of a placement.
func (s *State) activate(a *Allocation, p *placement) {
	s.aggLiveLeave(a)
	dequeued := a.Status == Pending && a.Deadline != 0
	if a.Status == Pending {
		s.spare(a)
	}
	if dequeued {
		s.dequeue(a)
	}
	a.Host = p.host
	a.Hosts = p.hosts
	a.Devices = p.assign
	for _, as := range p.assign {
		d := s.devices[as.DeviceID]
		s.unindex(d)
		d.Used = d.Used.vec().add(as.Amount.vec()).resources()
		d.Allocations = insertSorted(d.Allocations, a.ID)
		s.reindex(d)
	}
	a.Status = Active
	a.AllocatedAt = s.now
	a.ModifyIndex = s.last
	a.WhyNot = nil
	a.Policy = s.requestPolicy(&a.Request).Policy
	if a.Request.LeaseTTL > 0 {
		a.LeaseExpiresAt = s.now + int64(a.Request.LeaseTTL)
		s.timers.ReplaceOrInsert(timerKey{at: a.LeaseExpiresAt, kind: leaseTimer, id: a.ID})
	}
	if definition(a.Policy).cursor {
		for _, as := range p.assign {
			if as.Claim == 0 {
				s.cursors[a.Request.Claims[0].Type] = as.DeviceID
			}
		}
	}
	s.aggLiveEnter(a)
	if dequeued {
		s.emitQueue(a, EventDequeued)
	}
	s.emitAlloc(a, EventPlaced)
}

// endAllocation moves a live allocation to a final status and frees what
// it held. It does not re-examine the queue; callers do.
func (s *State) endAllocation(a *Allocation, status AllocStatus, reason string) {
	s.aggLiveLeave(a)
	switch a.Status {
	case Active:
		if a.Preempting != nil {
			s.dropVictim(a)
		}
		for _, as := range a.Devices {
			d := s.devices[as.DeviceID]
			s.unindex(d)
			d.Allocations = removeSorted(d.Allocations, a.ID)
			if len(d.Allocations) == 0 {
				d.Used = Resources{}
			} else {
				d.Used = d.Used.vec().sub(as.Amount.vec()).resources()
			}
			s.reindex(d)
		}
		if a.LeaseExpiresAt != 0 {
			s.timers.Delete(timerKey{at: a.LeaseExpiresAt, kind: leaseTimer, id: a.ID})
		}
	case Pending:
		s.spare(a)
		s.dequeue(a)
	}
	wasQueued := a.Status == Pending
	a.Status = status
	a.Reason = reason
	a.EndedAt = s.now
	a.ModifyIndex = s.last
	delete(s.allocs, a.ID)
	s.history.add(a)
	s.aggEnded(a)
	if wasQueued {
		s.emitQueue(a, EventDequeued)
	}
	s.emitAlloc(a, string(status))
}

// dequeue takes a waiting allocation out of the queue, its deadline and
// its reservation.
func (s *State) dequeue(a *Allocation) {
	s.queue.Delete(queueKeyOf(a))
	if a.Deadline != 0 {
		s.timers.Delete(timerKey{at: a.Deadline, kind: deadlineTimer, id: a.ID})
	}
	if a.Request.IsGang() {
		s.gangs.Delete(queueKeyOf(a))
		s.unreserve(a)
	}
}

// notLive explains why a command in namespace ns cannot act on an
// allocation that is not live.
func (s *State) notLive(id, ns string) *Error {
	if a := s.history.get(id); a != nil && a.Namespace == ns {
		return errf(ErrNotActive, "allocation %s is %s", id, a.Status)
	}
	return errf(ErrNotFound, "allocation %s", id)
}

// liveIn returns the live allocation id of namespace ns (an allocation of
// another namespace is not found), or why there is none.
func (s *State) liveIn(id, ns string) (*Allocation, *Error) {
	a := s.allocs[id]
	if a == nil || a.Namespace != ns {
		return nil, s.notLive(id, ns)
	}
	return a, nil
}

func (s *State) release(c *Release) Result {
	a, err := s.liveIn(c.AllocationID, NamespaceOf(c))
	if err != nil {
		return Result{Err: err}
	}
	if a.Status != Active {
		return Result{Err: errf(ErrNotActive, "allocation %s is pending: cancel it instead", a.ID)}
	}
	s.endAllocation(a, Released, "released")
	s.kickQueue()
	return Result{Allocation: a.clone()}
}

func (s *State) renew(c *Renew) Result {
	a, err := s.liveIn(c.AllocationID, NamespaceOf(c))
	if err != nil {
		return Result{Err: err}
	}
	if a.Status != Active {
		return Result{Err: errf(ErrNotActive, "allocation %s is pending", a.ID)}
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = a.Request.LeaseTTL
	}
	if ttl <= 0 || ttl > MaxDuration {
		return Result{Err: errf(ErrInvalid, "lease ttl %v out of (0, %v]", ttl, MaxDuration)}
	}
	if a.LeaseExpiresAt != 0 {
		s.timers.Delete(timerKey{at: a.LeaseExpiresAt, kind: leaseTimer, id: a.ID})
	}
	a.LeaseExpiresAt = s.now + int64(ttl)
	a.ModifyIndex = s.last
	s.timers.ReplaceOrInsert(timerKey{at: a.LeaseExpiresAt, kind: leaseTimer, id: a.ID})
	s.emitAlloc(a, EventRenewed)
	return Result{Allocation: a.clone()}
}

func (s *State) cancel(c *Cancel) Result {
	a, err := s.liveIn(c.AllocationID, NamespaceOf(c))
	if err != nil {
		return Result{Err: err}
	}
	if a.Status != Pending {
		return Result{Err: errf(ErrConflict, "allocation %s is active: release it instead", a.ID)}
	}
	s.endAllocation(a, Cancelled, "cancelled")
	return Result{Allocation: a.clone()}
}

// preemptFor places a (new, or waiting in the queue) by preempting
// lower-priority work when its policy preempts and a set of victims
// lets it fit within its quota (preempt.go). It reports whether it did;
// the caller re-examines the queue, as the victims may have freed more
// than a took.
func (s *State) preemptFor(a *Allocation, pc PolicyConfig) bool {
	if !definition(pc.Policy).preempts {
		return false
	}
	victims, p := s.preempt(a, pc)
	if p == nil || s.quotaExceeded(a.Namespace, &a.Request, p) != "" {
		return false
	}
	s.allocs[a.ID] = a
	for _, v := range victims {
		v.PreemptedBy = a.ID
		s.endAllocation(v, Preempted, "preempted by "+a.ID)
		a.Preempted = append(a.Preempted, v.ID)
	}
	s.activate(a, p)
	return true
}

// kickQueue re-examines pending requests, highest priority first and FIFO
// within a priority (under fair share, by namespace share first:
// fairOrder), and places every one that fits now and whose deadline has
// not passed. With SetQueueConfig.PreemptWaiting, a request that does not
// fit may preempt as on arrival; what its victims freed beyond its needs
// goes to the queue in another pass, so each pass that preempts places
// one more request and the passes end.
func (s *State) kickQueue() {
	for s.kickQueueOnce() {
	}
}

// kickQueueOnce is one pass over the queue; it reports whether a request
// was placed by preemption.
func (s *State) kickQueueOnce() (preempted bool) {
	if s.queue.Len() == 0 {
		return false
	}
	keys := make([]queueKey, 0, s.queue.Len())
	s.queue.Ascend(func(k queueKey) bool {
		keys = append(keys, k)
		return true
	})
	try := func(k queueKey) bool {
		a := s.waitingAt(k)
		if a == nil || a.Deadline <= s.now {
			// No longer waiting (waitingAt), or past its deadline: the
			// client has given up; the next tick times it out. Placing
			// it now would leak the devices.
			return false
		}
		pc := s.requestPolicy(&a.Request)
		p, over := s.placeInQuota(a, pc)
		if p != nil {
			s.activate(a, p)
			s.gangLeftQueue(a)
			return true
		}
		if s.preemptWaiting && over == "" && s.preemptFor(a, pc) {
			preempted = true
			s.gangLeftQueue(a)
			return true
		}
		if over == "" {
			s.reclaimFor(a, pc)
		}
		return false
	}
	if s.fair != nil {
		s.fairOrder(keys, try)
		return preempted
	}
	for _, k := range keys {
		try(k)
	}
	return preempted
}

// waitingAt is the allocation of queue key k while it still waits, else
// nil. A pass over the queue lists its keys first, and a request can
// leave the queue during the pass without its own turn: a gang placed on
// its reservation when another request leaves the queue, and perhaps
// preempted later in the same pass by one of higher priority.
func (s *State) waitingAt(k queueKey) *Allocation {
	if a := s.allocs[k.id]; a != nil && a.Status == Pending {
		return a
	}
	return nil
}

// tick ends what is due: pending requests past their deadline time out,
// leases past their expiry expire. Freed capacity goes to the queue.
func (s *State) tick() {
	freed := false
	var reclaimers []string
	for {
		k, ok := s.timers.Min()
		if !ok || k.at > s.now {
			break
		}
		s.timers.DeleteMin()
		if k.kind == drainTimer {
			freed = s.drainDue(k) || freed
			continue
		}
		a := s.allocs[k.id]
		if a == nil {
			continue
		}
		switch {
		case k.kind == deadlineTimer && a.Status == Pending:
			s.endAllocation(a, TimedOut, "no capacity before the deadline")
		case k.kind == leaseTimer && a.Status == Active:
			s.endAllocation(a, Expired, "lease expired")
			freed = true
		case k.kind == reclaimTimer && a.Status == Active && a.Preempting != nil && a.Preempting.Deadline == k.at:
			reclaimers = append(reclaimers, s.reclaimDue(a))
			freed = true
		}
	}
	s.tryReclaimers(reclaimers)
	if freed {
		s.kickQueue()
	}
}

// NextDeadline is the earliest time a tick would change something.
func (s *State) NextDeadline() (time.Time, bool) {
	k, ok := s.timers.Min()
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, k.at), true
}

// queueKey orders the queue: priority high to low, then arrival.
type queueKey struct {
	prio int
	seq  uint64
	id   string
}

func queueKeyOf(a *Allocation) queueKey {
	return queueKey{prio: a.Request.Priority, seq: a.Seq, id: a.ID}
}

func queueKeyLess(a, b queueKey) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.id < b.id
}

const (
	deadlineTimer uint8 = iota
	leaseTimer
	// drainTimer's id is a host's.
	drainTimer
	// reclaimTimer ends a reclaimed allocation's grace (reclaim.go).
	reclaimTimer
)

type timerKey struct {
	at   int64
	kind uint8
	id   string
}

func timerKeyLess(a, b timerKey) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.id < b.id
}

// Queue returns the pending allocations in the order they are served.
func (s *State) Queue() []*Allocation {
	out := make([]*Allocation, 0, s.queue.Len())
	s.queue.Ascend(func(k queueKey) bool {
		a := s.allocs[k.id]
		c := a.clone()
		c.ExpectedStart = s.expectedStart(a)
		out = append(out, c)
		return true
	})
	return out
}

// Live returns the pending and active allocations, sorted by ID.
func (s *State) Live() []*Allocation {
	out := make([]*Allocation, 0, len(s.allocs))
	for _, id := range sortedKeys(s.allocs) {
		out = append(out, s.allocs[id].clone())
	}
	return out
}
