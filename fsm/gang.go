package fsm

import (
	"slices"
	"strings"
)

// Gangs. A request with MaxHosts above 1 is a gang: its first claim's
// Count devices may be split over up to MaxHosts hosts, each host taking
// at least MinPerHost of them (1 when 0) and every other claim of the
// request whole (the per-host companions of the split claim: CPU cores,
// memory). With Same, every host of the gang carries that host label
// with one value. A gang is placed whole, in one command, or not at all:
// nothing is ever held for part of it, so two gangs cannot deadlock.
//
// Where the parts go follows the policy's nature (policyDef.gang):
//   - packers (FirstFit, RoundRobin, BestFit, PriorityBased,
//     FragmentationAware) use the fewest hosts: the largest part first,
//     each on the first host in the policy's host order that can take
//     it, so BestFit fills the fullest hosts; each host then takes the
//     minimum and the rest fills the hosts in the order chosen;
//   - spreaders (WorstFit, LoadBalanced) split the gang evenly over as
//     many hosts as it may use (MaxHosts, at most Count / MinPerHost),
//     the first hosts in the policy's order that take an even part; when
//     no even split fits they place as the packers do.
//
// On each host the policy's own placer picks the devices (placer.onHost),
// as it would for a one-host request of that part. Hosts come from the
// host index's shelves (a part of k devices reads the hosts with at
// least k free), so the cost does not grow with the cluster. With Same,
// the hosts that can take a part are grouped by the label's value and
// the best domain's placement wins: the fewest hosts for a packer (the
// most for a spreader), then the hosts that come first in the policy's
// order, then the lower value.
//
// A gang that waits reserves capacity as it frees (Slurm's backfill with
// reservations): the first waiting gang of each device type, in queue
// order, holds the hosts it will run on, and their devices of that type
// take no other work until it is placed, leaves the queue, or another
// gang comes before it (reserve.go).

// IsGang reports whether the request may span several hosts.
func (r *Request) IsGang() bool { return r.MaxHosts > 1 }

// minPerHost is the fewest devices of the first claim a gang's host takes.
func (r *Request) minPerHost() int { return max(r.MinPerHost, 1) }

// validateGang checks the gang fields of a request whose claims are valid.
func validateGang(r *Request) *Error {
	switch {
	case r.MaxHosts < 0 || r.MaxHosts > MaxClaimCount:
		return errf(ErrInvalid, "max_hosts %d out of 0..%d", r.MaxHosts, MaxClaimCount)
	case r.MaxHosts <= 1 && (r.MinPerHost != 0 || r.Same != ""):
		return errf(ErrInvalid, "min_per_host and same go with max_hosts above 1")
	case r.MinPerHost < 0 || r.MinPerHost > r.Claims[0].Count:
		return errf(ErrInvalid, "min_per_host %d out of 0..%d (the first claim's count)", r.MinPerHost, r.Claims[0].Count)
	case r.Same != "" && !validLabelKey(r.Same):
		return errf(ErrInvalid, "same %q is not a label key of 1 to %d letters, digits or -_.:@+=/", r.Same, MaxIDLength)
	case r.Host != "" && !ValidID(r.Host):
		return errf(ErrInvalid, "host %q is not a host id", r.Host)
	case r.Host != "" && r.IsGang():
		return errf(ErrInvalid, "a gang over several hosts cannot be held to host %q", r.Host)
	}
	return nil
}

// validLabelKey reports whether s may name a host label in a request.
func validLabelKey(s string) bool {
	if s == "" || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:@+=/", c) >= 0) {
			return false
		}
	}
	return true
}

// gangShape is how a policy spreads a gang over hosts.
type gangShape uint8

const (
	// gangPacks: the fewest hosts, the largest parts first.
	gangPacks gangShape = iota
	// gangSpreads: as many hosts as the gang may use, even parts.
	gangSpreads
)

// gangQuery is a gang on its way through placement: the whole request's
// query (its fitting classes) and the queries of one host's part, by the
// part's size.
type gangQuery struct {
	q     *query
	n, k  int // the first claim's count; the most hosts
	min   int // the fewest of the first claim's devices on a host
	parts map[int]*query
	// ov is the overlay every host is judged with: the gang's own
	// reservation (own), and what preemption would free.
	ov *overlay
}

func (s *State) newGangQuery(r *Request, fits [][]*class, ov *overlay) *gangQuery {
	return &gangQuery{q: s.newQuery(r, fits), n: r.Claims[0].Count, k: r.MaxHosts, min: r.minPerHost(),
		parts: map[int]*query{}, ov: ov}
}

// part is the query of one host's part: k devices of the first claim and
// every other claim whole.
func (g *gangQuery) part(k int) *query {
	if p := g.parts[k]; p != nil {
		return p
	}
	r := *g.q.r
	r.Claims = slices.Clone(r.Claims)
	r.Claims[0].Count = k
	r.MaxHosts, r.MinPerHost, r.Same = 0, 0, ""
	p := *g.q // the classes and their marks are the whole request's
	p.r = &r
	p.need = needOf(&r)
	g.parts[k] = &p
	return &p
}

// gangPart is one host's part of a gang.
type gangPart struct {
	h      *Host
	n      int
	assign []Assignment
}

// hostSeq visits candidate hosts for a part of need devices, in the
// policy's order, until visit returns true; it reports whether one did.
// A seq may offer hosts with fewer than need free devices: visit checks.
type hostSeq func(need int, visit func(*Host) bool) bool

// placeGang places a gang under a policy, or returns nil. own is the
// gang's allocation ID when it waits with a reservation ("" otherwise).
func (s *State) placeGang(r *Request, pc PolicyConfig, fits [][]*class, ov *overlay) *placement {
	g := s.newGangQuery(r, fits, ov)
	def := definition(pc.Policy)
	order := def.place.hostOrder()
	own := s.reservedHosts(ov)
	if r.Same == "" {
		seq := func(need int, visit func(*Host) bool) bool {
			for _, h := range own {
				if visit(h) {
					return true
				}
			}
			return s.eachHost(order, g.q, need, visit)
		}
		return gangPlacement(s.gangParts(g, def, seq, s.maxFree(order, g.q.fits[0], g.n)))
	}
	// One domain: the hosts that could take a part, by the label's value.
	domains := s.gangDomains(g, order, own)
	var best []gangPart
	for _, dom := range domains {
		list := dom.hosts
		seq := func(_ int, visit func(*Host) bool) bool {
			for _, h := range list {
				if visit(h) {
					return true
				}
			}
			return false
		}
		if parts := s.gangParts(g, def, seq, dom.most); parts != nil && (best == nil || s.betterGang(def, order, g, parts, best)) {
			best = parts
		}
	}
	return gangPlacement(best)
}

// gangParts places the parts by the policy's shape over the hosts of seq;
// most bounds the devices one host may take.
func (s *State) gangParts(g *gangQuery, def *policyDef, seq hostSeq, most int) []gangPart {
	if def.gang == gangSpreads {
		if parts := s.gangSpread(g, def.place, seq); parts != nil {
			return parts
		}
	}
	return s.gangPack(g, def.place, seq, most)
}

// gangPack chooses hosts as the largest part first, each on the first
// host of seq that takes it, until they can take the gang together; then
// each takes the minimum per host and the rest goes to the hosts in the
// order chosen, as much as each can take (sizeParts). Taking the largest
// parts first uses the fewest hosts there are; nil when the gang does
// not fit on MaxHosts of them.
func (s *State) gangPack(g *gangQuery, pl placer, seq hostSeq, most int) []gangPart {
	var parts []gangPart
	sum := 0
	for sum < g.n {
		if len(parts) == g.k {
			return nil
		}
		var got *gangPart
		for c := max(min(g.n-sum, most), g.min); c >= g.min && got == nil; c-- {
			seq(c, func(h *Host) bool {
				if usedHost(parts, h) {
					return false
				}
				if a := pl.onHost(s, h, g.part(c), g.ov); a != nil {
					got = &gangPart{h: h, n: c, assign: a}
					return true
				}
				return false
			})
		}
		if got == nil {
			return nil
		}
		parts = append(parts, *got)
		sum += got.n
	}
	return s.sizeParts(g, pl, parts, g.ov)
}

// sizeParts sizes parts that could take at least the gang together: each
// takes the minimum per host, and what is left goes to the parts in
// order, each up to what it could take; a part whose size changed is
// placed again on its host. nil when the parts are too many for the
// minimum (then no fewer hosts could take the gang either).
func (s *State) sizeParts(g *gangQuery, pl placer, parts []gangPart, ov *overlay) []gangPart {
	if len(parts)*g.min > g.n {
		return nil
	}
	extra := g.n - len(parts)*g.min
	for i := range parts {
		size := g.min + min(parts[i].n-g.min, extra)
		extra -= size - g.min
		if size != parts[i].n {
			a := pl.onHost(s, parts[i].h, g.part(size), ov)
			if a == nil {
				return nil // fewer devices fit where more did: not reached
			}
			parts[i].n, parts[i].assign = size, a
		}
	}
	return parts
}

// gangSpread splits the gang evenly over as many hosts as it may use,
// the first hosts of seq that take an even part (one more device on the
// first hosts when the split is not exact); nil when too few do.
func (s *State) gangSpread(g *gangQuery, pl placer, seq hostSeq) []gangPart {
	j := min(g.k, g.n/g.min)
	if j < 2 {
		return nil
	}
	base, extra := g.n/j, g.n%j
	var parts []gangPart
	bigger := 0
	seq(base, func(h *Host) bool {
		if usedHost(parts, h) {
			return false
		}
		if bigger < extra {
			if a := pl.onHost(s, h, g.part(base+1), g.ov); a != nil {
				parts = append(parts, gangPart{h: h, n: base + 1, assign: a})
				bigger++
				return len(parts) == j
			}
		}
		if len(parts)-bigger < j-extra {
			if a := pl.onHost(s, h, g.part(base), g.ov); a != nil {
				parts = append(parts, gangPart{h: h, n: base, assign: a})
			}
		}
		return len(parts) == j
	})
	if len(parts) < j {
		return nil
	}
	return parts
}

func usedHost(parts []gangPart, h *Host) bool {
	for _, p := range parts {
		if p.h == h {
			return true
		}
	}
	return false
}

// gangPlacement turns parts into a placement: the hosts sorted by ID, the
// first of them the allocation's host; the assignments part by part.
func gangPlacement(parts []gangPart) *placement {
	if parts == nil {
		return nil
	}
	p := &placement{}
	for _, part := range parts {
		p.hosts = append(p.hosts, part.h.ID)
		p.assign = append(p.assign, part.assign...)
	}
	slices.Sort(p.hosts)
	p.host = p.hosts[0]
	return p
}

// gangDomain is the hosts of one value of a gang's Same label that could
// take a part, in the policy's host order, and the most devices one of
// them has free.
type gangDomain struct {
	value string
	hosts []*Host
	most  int
}

// gangDomains lists the domains of a gang with Same, by value: every
// host that carries the label and has at least the minimum part free
// (from the host index), and the gang's own reserved hosts.
func (s *State) gangDomains(g *gangQuery, order *hostOrder, own []*Host) []gangDomain {
	byValue := map[string]*gangDomain{}
	seen := map[*Host]bool{}
	add := func(h *Host) bool {
		v, ok := h.Labels[g.q.r.Same]
		if !ok || seen[h] {
			return false
		}
		seen[h] = true
		d := byValue[v]
		if d == nil {
			d = &gangDomain{value: v}
			byValue[v] = d
		}
		d.hosts = append(d.hosts, h)
		d.most = max(d.most, s.freeFor(g, h))
		return false
	}
	for _, h := range own {
		add(h)
	}
	s.eachHost(order, g.q, g.min, add)
	out := make([]gangDomain, 0, len(byValue))
	for _, v := range sortedKeys(byValue) {
		d := byValue[v]
		s.sortHosts(order, g.q.r.Claims[0].Type, d.hosts)
		out = append(out, *d)
	}
	return out
}

// freeFor counts the devices on h that pass the first claim's filters
// and could take it now, at most the gang's count.
func (s *State) freeFor(g *gangQuery, h *Host) int {
	cl := &g.q.r.Claims[0]
	n := 0
	for _, d := range s.hostTypeDevices(h, cl.Type) {
		if g.q.passes(d.cls, 0) {
			if amt, whole := take(d.cls, cl); s.fits(d, amt, whole, g.ov) {
				n++
			}
		}
	}
	return min(n, g.n)
}

// betterGang reports whether placement a beats b (of other domains): for
// a packer the fewer hosts, for a spreader the more; then the hosts
// that come first in the policy's order, part by part.
func (s *State) betterGang(def *policyDef, order *hostOrder, g *gangQuery, a, b []gangPart) bool {
	if len(a) != len(b) {
		return (len(a) < len(b)) == (def.gang == gangPacks)
	}
	t := g.q.r.Claims[0].Type
	for i := range a {
		ka, kb := s.hostSortKey(order, t, a[i].h), s.hostSortKey(order, t, b[i].h)
		if ka != kb {
			return hostKeyLess(ka, kb)
		}
	}
	return false
}

// hostSortKey is a host's key in a host order for type t (the index must
// be flushed); a cursor order puts the hosts after the cursor's first.
func (s *State) hostSortKey(o *hostOrder, t DeviceType, h *Host) hostKey {
	k := hostKey{id: h.ID}
	if e := s.idx.hosts[h.ID]; e != nil {
		k.k = o.rank.key(&e.figs, t)
	}
	if o.fromCursor {
		if cur := s.devices[s.cursors[t]]; cur != nil && h.ID <= cur.Host {
			k.k = 1
		}
	}
	return k
}

// sortHosts sorts hosts in a host order for type t.
func (s *State) sortHosts(o *hostOrder, t DeviceType, hosts []*Host) {
	s.flushHosts()
	slices.SortFunc(hosts, func(a, b *Host) int {
		ka, kb := s.hostSortKey(o, t, a), s.hostSortKey(o, t, b)
		switch {
		case hostKeyLess(ka, kb):
			return -1
		case hostKeyLess(kb, ka):
			return 1
		}
		return 0
	})
}

// eachHost visits, in a host order, the hosts the index files with at
// least need free devices of a class that passes the first claim's
// static filters, until visit returns true; it reports whether one did.
func (s *State) eachHost(o *hostOrder, q *query, need int, visit func(*Host) bool) bool {
	s.flushHosts()
	if o.fromCursor {
		if cur := s.devices[s.cursors[q.r.Claims[0].Type]]; cur != nil {
			from := &hostKey{id: cur.Host + "\x00"}
			return s.walkHosts(o.rank, q.fits[0], need, from, nil, visit) ||
				s.walkHosts(o.rank, q.fits[0], need, nil, from, visit)
		}
	}
	return s.walkHosts(o.rank, q.fits[0], need, nil, nil, visit)
}

// maxFree bounds how many devices of the classes one host has free, at
// most limit: the highest shelf with a host on it in the order's rank.
func (s *State) maxFree(o *hostOrder, classes []*class, limit int) int {
	if limit <= 8 {
		return limit
	}
	s.flushHosts()
	for sh := numShelves - 1; sh > 8; sh-- {
		for _, c := range classes {
			if s.shelf(c, o.rank, sh).Len() > 0 {
				return min(limit, shelfMax(sh))
			}
		}
	}
	return 8
}

// eachGangHost visits, by ID, the hosts that can take work a gang of r
// may use, with the value of its Same label ("" without Same); it
// returns how many hosts lack the label.
func (s *State) eachGangHost(r *Request, visit func(h *Host, domain string)) (unlabelled int) {
	for _, id := range sortedKeys(s.hosts) {
		h := s.hosts[id]
		if !h.Schedulable() {
			continue
		}
		dom := ""
		if r.Same != "" {
			v, ok := h.Labels[r.Same]
			if !ok {
				unlabelled++
				continue
			}
			dom = v
		}
		visit(h, dom)
	}
	return unlabelled
}
