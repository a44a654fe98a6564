package fsm

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Quotas: what a namespace's active allocations may hold (SetQuota). A
// quota is a list of limits, each on one device type in one pool or in
// all pools together: how many devices (whole or in part) and how much of
// each amount (memory, compute units, storage, bandwidth). A request is
// placed only if, with what it takes, its namespace stays within every
// limit; the check is part of placement, in the same command, so two
// requests can never pass it together on one free slot.
//
// What a namespace holds (its use) is kept per (namespace, type, pool)
// and per (namespace, type) beside the device index: unindex takes a
// device's allocations out of it and reindex puts them back, so a device
// whose pool changes moves its use along, and a restore, which reindexes
// every device, rebuilds it from the allocations alone. Amounts are kept
// in millionths, as integers: sums then do not depend on the order they
// were made in, which a restored replica does not share with one that
// applied the log.

// reasonOverQuota is the Reason of a request refused for its quota.
const reasonOverQuota = "quota exceeded"

// MaxQuotaLimits bounds the limits of one quota.
const MaxQuotaLimits = 64

// MaxQuotaCount bounds a limit's device count.
const MaxQuotaCount = 1 << 20

// QuotaLimit bounds what a namespace holds of one device type, in one
// pool or, with Pool empty, in all pools together.
type QuotaLimit struct {
	DeviceType DeviceType `json:"type"`
	Pool       string     `json:"pool,omitempty"`
	// MaxCount bounds the devices held, whole or in part; nil: no bound.
	MaxCount *int `json:"max_count,omitempty"`
	// MaxAmount bounds each amount that is set (above zero); an exclusive
	// device held counts its whole capacity.
	MaxAmount Resources `json:"max_amount"`
}

// Quota is a namespace's limits, in (type, pool) order.
type Quota struct {
	Namespace string       `json:"namespace"`
	Limits    []QuotaLimit `json:"limits"`
	// Weight is the namespace's fair-share weight (fairshare.go); 0 is 1.
	Weight float64 `json:"weight,omitempty"`
	// Borrow lets the namespace hold more than its MaxCount limits (its
	// amount limits still bind) on capacity no one else uses; a namespace within its quota reclaims it,
	// after ReclaimGrace (0: DefaultReclaimGrace) (reclaim.go).
	Borrow       bool          `json:"borrow,omitempty"`
	ReclaimGrace time.Duration `json:"reclaim_grace,omitempty"`
	// ModifyIndex is the index of the command that set it.
	ModifyIndex uint64 `json:"modify_index"`
}

// SetQuota sets a namespace's quota (Quota.Namespace), replacing the one
// before, or with Delete removes it. Raising a limit re-examines the
// queue; lowering one below what the namespace holds ends nothing, but
// no more is placed until its use is below.
type SetQuota struct {
	Meta
	Quota  Quota `json:"quota"`
	Delete bool  `json:"delete,omitempty"`
}

func (*SetQuota) Type() CommandType { return SetQuotaType }

// validQuota checks a quota's shape: a valid namespace, limits of known
// types, valid pools, each bounding something, none repeated.
func validQuota(q *Quota, del bool) *Error {
	if !ValidNamespace(q.Namespace) {
		return errf(ErrInvalid, "quota namespace %q is not 1 to %d letters, digits, '-' or '_'", q.Namespace, MaxNamespaceLength)
	}
	if del {
		return nil
	}
	if len(q.Limits) > MaxQuotaLimits || (len(q.Limits) == 0 && q.Weight == 0) {
		return errf(ErrInvalid, "a quota has a weight or 1 to %d limits, not %d", MaxQuotaLimits, len(q.Limits))
	}
	if !(q.Weight >= 0 && q.Weight <= MaxWeight) { // NaN fails too
		return errf(ErrInvalid, "weight %g out of [0, %g]", q.Weight, MaxWeight)
	}
	if q.ReclaimGrace < 0 || q.ReclaimGrace > MaxDuration {
		return errf(ErrInvalid, "reclaim grace %v out of [0, %v]", q.ReclaimGrace, MaxDuration)
	}
	if q.ReclaimGrace != 0 && !q.Borrow {
		return errf(ErrInvalid, "a reclaim grace goes with borrow")
	}
	seen := map[[2]string]bool{}
	for i, l := range q.Limits {
		switch {
		case !l.DeviceType.Valid():
			return errf(ErrInvalid, "limit %d: unknown device type %q", i, l.DeviceType)
		case l.Pool != "" && !ValidID(l.Pool):
			return errf(ErrInvalid, "limit %d: pool %q is not a valid id", i, l.Pool)
		case l.MaxCount != nil && (*l.MaxCount < 0 || *l.MaxCount > MaxQuotaCount):
			return errf(ErrInvalid, "limit %d: max count %d out of 0..%d", i, *l.MaxCount, MaxQuotaCount)
		case !l.MaxAmount.valid():
			return errf(ErrInvalid, "limit %d: an amount is negative, infinite or NaN", i)
		case l.MaxCount == nil && l.MaxAmount == (Resources{}):
			return errf(ErrInvalid, "limit %d: bounds nothing (give a max count or an amount)", i)
		case seen[[2]string{string(l.DeviceType), l.Pool}]:
			return errf(ErrInvalid, "limit %d: a second limit on %s", i, limitName(l))
		}
		seen[[2]string{string(l.DeviceType), l.Pool}] = true
	}
	return nil
}

func limitName(l QuotaLimit) string {
	if l.Pool == "" {
		return string(l.DeviceType)
	}
	return fmt.Sprintf("%s in pool %s", l.DeviceType, l.Pool)
}

func (s *State) setQuota(idx uint64, c *SetQuota) Result {
	if err := validQuota(&c.Quota, c.Delete); err != nil {
		return Result{Err: err}
	}
	ns := c.Quota.Namespace
	if c.Delete {
		if s.quotas[ns] == nil {
			return Result{Err: errf(ErrNotFound, "no quota for namespace %s", ns)}
		}
		delete(s.quotas, ns)
		s.spareNamespace(ns)
		s.kickQueue()
		return Result{}
	}
	q := copyQuota(c.Quota)
	q.ModifyIndex = idx
	slices.SortFunc(q.Limits, func(a, b QuotaLimit) int {
		return strings.Compare(string(a.DeviceType)+"\x00"+a.Pool, string(b.DeviceType)+"\x00"+b.Pool)
	})
	s.quotas[ns] = &q
	if !q.Borrow {
		s.spareNamespace(ns)
	}
	s.kickQueue()
	return Result{}
}

func copyQuota(q Quota) Quota {
	q.Limits = slices.Clone(q.Limits)
	for i, l := range q.Limits {
		if l.MaxCount != nil {
			n := *l.MaxCount
			q.Limits[i].MaxCount = &n
		}
	}
	return q
}

// QuotaOf returns a namespace's quota, or false when it has none.
func (s *State) QuotaOf(ns string) (Quota, bool) {
	q := s.quotas[ns]
	if q == nil {
		return Quota{}, false
	}
	return copyQuota(*q), true
}

// Quotas returns every quota, by namespace.
func (s *State) Quotas() []Quota {
	out := make([]Quota, 0, len(s.quotas))
	for _, ns := range sortedKeys(s.quotas) {
		out = append(out, copyQuota(*s.quotas[ns]))
	}
	return out
}

// useKey names what a namespace holds of a type in a pool; pool "*" is
// every pool of the type together.
type useKey struct {
	ns   string
	typ  DeviceType
	pool string
}

// held is what a namespace holds under one useKey: devices, and amounts
// in millionths.
type held struct {
	count  int
	amount [numDims]int64
}

func (h *held) add(o held, sign int) {
	h.count += sign * o.count
	for i := range h.amount {
		h.amount[i] += int64(sign) * o.amount[i]
	}
}

// micro is an amount in millionths, rounded: the unit of use.
func micro(v float64) int64 { return int64(math.Round(v * 1e6)) }

func microOf(r Resources) (m [numDims]int64) {
	for i, v := range r.vec() {
		m[i] = micro(v)
	}
	return m
}

// countUse adds (sign 1) or takes away (-1) the use of the allocations
// on d, in d's type and pool. unindex and reindex call it, each only once
// in turn (d.useCounted).
func (s *State) countUse(d *Device, sign int) {
	if (sign > 0) == d.useCounted {
		return
	}
	d.useCounted = sign > 0
	for _, id := range d.Allocations {
		a := s.allocs[id]
		if a == nil {
			continue
		}
		for _, as := range a.Devices {
			if as.DeviceID != d.ID {
				continue
			}
			h := held{count: 1, amount: microOf(as.Amount)}
			for _, pool := range [2]string{d.Pool, "*"} {
				k := useKey{ns: a.Namespace, typ: d.Type, pool: pool}
				u := s.use[k]
				if u == nil {
					u = &held{}
					s.use[k] = u
				}
				u.add(h, sign)
				if pool == "*" {
					s.noteHeld(a.Namespace, d.Type, u.count)
				}
				if *u == (held{}) {
					delete(s.use, k)
				}
			}
		}
	}
}

// heldUnder is what ns holds under a limit.
func (s *State) heldUnder(ns string, l QuotaLimit) held {
	pool := l.Pool
	if pool == "" {
		pool = "*"
	}
	if u := s.use[useKey{ns: ns, typ: l.DeviceType, pool: pool}]; u != nil {
		return *u
	}
	return held{}
}

// quotaExceeded says which limit of ns's quota a request would pass: with
// p nil, by what is known before placement (the claims' counts, their
// pools when they name one, the amounts of shares); with p, by what p
// takes. "" when none.
func (s *State) quotaExceeded(ns string, r *Request, p *placement) string {
	q := s.quotas[ns]
	return s.passes(ns, r, p, q != nil && q.Borrow)
}

// overQuota is quotaExceeded without borrowing: which limit of ns's quota
// r would pass, max counts included.
func (s *State) overQuota(ns string, r *Request, p *placement) string {
	return s.passes(ns, r, p, false)
}

// passes says which limit of ns's quota r would pass, leaving the max
// counts out when the namespace borrows (past them is borrowing,
// reclaim.go; the amounts still bind).
func (s *State) passes(ns string, r *Request, p *placement, borrowing bool) string {
	q := s.quotas[ns]
	if q == nil {
		return ""
	}
	for _, l := range q.Limits {
		if borrowing {
			l.MaxCount = nil
		}
		var more held
		if p == nil {
			for i, c := range r.Claims {
				if c.Type != l.DeviceType || (l.Pool != "" && r.claimPool(i) != l.Pool) {
					continue
				}
				more.count += c.Count
				if c.Amount != (Resources{}) {
					for k, v := range microOf(c.Amount) {
						more.amount[k] += int64(c.Count) * v
					}
				}
			}
		} else {
			for _, as := range p.assign {
				d := s.devices[as.DeviceID]
				if d.Type != l.DeviceType || (l.Pool != "" && d.Pool != l.Pool) {
					continue
				}
				more.add(held{count: 1, amount: microOf(as.Amount)}, 1)
			}
		}
		if more == (held{}) {
			continue
		}
		if why := overLimit(l, s.heldUnder(ns, l), more); why != "" {
			return fmt.Sprintf("namespace %s is at its quota: %s", ns, why)
		}
	}
	return ""
}

// overLimit says how have plus more passes limit l, or "".
func overLimit(l QuotaLimit, have, more held) string {
	if l.MaxCount != nil && have.count+more.count > *l.MaxCount {
		return fmt.Sprintf("%s, %d of %d devices held, %d more asked", limitName(l), have.count, *l.MaxCount, more.count)
	}
	for i, v := range l.MaxAmount.vec() {
		if v > 0 && have.amount[i]+more.amount[i] > micro(v) {
			return fmt.Sprintf("%s, %s %g of %g held, %g more asked", limitName(l), dimNames[i],
				float64(have.amount[i])/1e6, v, float64(more.amount[i])/1e6)
		}
	}
	return ""
}

// placeInQuota places allocation a's request as place does, if its
// namespace's quota lets it take what the placement takes; otherwise it
// says which limit.
func (s *State) placeInQuota(a *Allocation, pc PolicyConfig) (*placement, string) {
	ns, r := a.Namespace, &a.Request
	if why := s.quotaExceeded(ns, r, nil); why != "" {
		return nil, why
	}
	p := s.place(r, pc, ownOverlay(a))
	if p == nil {
		p = s.placeAhead(a, pc)
	}
	if p == nil {
		return nil, ""
	}
	if why := s.quotaExceeded(ns, r, p); why != "" {
		return nil, why
	}
	return p, ""
}

// QuotaUse is what a namespace holds under one limit of its quota.
type QuotaUse struct {
	Limit  QuotaLimit `json:"limit"`
	Count  int        `json:"count"`
	Amount Resources  `json:"amount"`
}

// QuotaStatus is a namespace's quota with what it holds under each limit.
func (s *State) QuotaStatus(ns string) ([]QuotaUse, bool) {
	q := s.quotas[ns]
	if q == nil {
		return nil, false
	}
	out := make([]QuotaUse, 0, len(q.Limits))
	for _, l := range copyQuota(*q).Limits {
		h := s.heldUnder(ns, l)
		var v vec
		for i, m := range h.amount {
			v[i] = float64(m) / 1e6
		}
		out = append(out, QuotaUse{Limit: l, Count: h.count, Amount: v.resources()})
	}
	return out, true
}

// restoreQuotas loads the quotas of a snapshot's configuration.
func (s *State) restoreQuotas(qs []Quota) error {
	for i := range qs {
		q := &qs[i]
		if err := validQuota(q, false); err != nil {
			return fmt.Errorf("%w: quota %d: %v", ErrSnapshot, i, err)
		}
		if s.quotas[q.Namespace] != nil || (i > 0 && qs[i-1].Namespace >= q.Namespace) {
			return fmt.Errorf("%w: quotas out of order at %q", ErrSnapshot, q.Namespace)
		}
		c := copyQuota(*q)
		s.quotas[q.Namespace] = &c
	}
	return nil
}

// checkQuotaUse recomputes the use from the devices and their
// allocations and compares it with what is kept.
func (s *State) checkQuotaUse() error {
	want := map[useKey]held{}
	for _, d := range s.devices {
		for _, id := range d.Allocations {
			a := s.allocs[id]
			if a == nil {
				continue
			}
			for _, as := range a.Devices {
				if as.DeviceID != d.ID {
					continue
				}
				for _, pool := range [2]string{d.Pool, "*"} {
					k := useKey{ns: a.Namespace, typ: d.Type, pool: pool}
					h := want[k]
					h.add(held{count: 1, amount: microOf(as.Amount)}, 1)
					want[k] = h
				}
			}
		}
	}
	if len(want) != len(s.use) {
		return fmt.Errorf("quota use: %d keys kept, %d recomputed", len(s.use), len(want))
	}
	for _, k := range sortedUseKeys(want) {
		if u := s.use[k]; u == nil || *u != want[k] {
			return fmt.Errorf("quota use of %s %s/%s: kept %+v, recomputed %+v", k.ns, k.typ, k.pool, u, want[k])
		}
	}
	return nil
}

func sortedUseKeys(m map[useKey]held) []useKey {
	keys := make([]useKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b useKey) int {
		return strings.Compare(a.ns+"\x00"+string(a.typ)+"\x00"+a.pool, b.ns+"\x00"+string(b.typ)+"\x00"+b.pool)
	})
	return keys
}
