package fsm

import "slices"

// Placement runs the filter chain (filter.go), then the placer of the
// request's policy (policy.go) ranks what passed. Preferred labels split
// the first claim's fitting classes into tiers, tried most preferred first.

type placement struct {
	host   string
	assign []Assignment
	// hosts, for a gang, are all its hosts by ID (host is the first).
	hosts []string
}

// placer is how a policy ranks what passed the filters.
type placer interface {
	// place finds the host and devices for a query, or nil.
	place(s *State, q *query) *placement
	// onHost places the query on one host, with the overlay's changes
	// applied (what preemption would free), or nil.
	onHost(s *State, h *Host, q *query, ov *overlay) []Assignment
	// hostOrder is the order a gang's parts try hosts in (gang.go).
	hostOrder() *hostOrder
}

// query is a request on its way through placement: the classes that pass
// each claim's static filters, marked on the classes for a quick test.
type query struct {
	r    *Request
	fits [][]*class
	mark uint64
	// need is how many free devices of the first claim's type a host must
	// have to take the request.
	need int
}

func (s *State) newQuery(r *Request, fits [][]*class) *query {
	q := &query{r: r, fits: fits}
	s.idx.mark++
	q.mark = s.idx.mark
	for i, list := range fits {
		for _, c := range list {
			if c.mark != q.mark {
				c.mark, c.claims = q.mark, 0
			}
			c.claims |= 1 << i
		}
	}
	q.need = needOf(r)
	return q
}

// needOf is how many free devices of the first claim's type a host must
// have to take r: claims of that type that take whole devices need
// devices of their own; claims that may take shares can share them, so
// only the largest of those counts.
func needOf(r *Request) int {
	whole, share := 0, 0
	for _, cl := range r.Claims {
		if cl.Type != r.Claims[0].Type {
			continue
		}
		if cl.Amount.IsZero() {
			whole += cl.Count
		} else {
			share = max(share, cl.Count)
		}
	}
	return whole + share
}

// passes reports whether class c passes claim i's static filters.
func (q *query) passes(c *class, i int) bool { return c.mark == q.mark && c.claims&(1<<i) != 0 }

// place finds where a request goes under a policy, or nil. ov, for a
// waiting gang with a reservation, opens its reserved devices to it (nil
// otherwise).
func (s *State) place(r *Request, pc PolicyConfig, ov *overlay) *placement {
	fits := s.fitting(r)
	for _, f := range fits {
		if len(f) == 0 {
			return nil
		}
	}
	if r.IsGang() {
		return s.placeGang(r, pc, fits, ov)
	}
	pl := definition(pc.Policy).place
	for _, tier := range tiers(fits[0], &r.Labels) {
		fits[0] = tier
		q := s.newQuery(r, fits)
		if r.Host != "" {
			// Held to one host: the policy places on it alone.
			if h := s.hosts[r.Host]; h != nil {
				if assign := pl.onHost(s, h, q, ov); assign != nil {
					return &placement{host: h.ID, assign: assign}
				}
			}
			continue
		}
		if p := pl.place(s, q); p != nil {
			return p
		}
	}
	return nil
}

// inOrder walks hosts in a host order and places the request on the first
// host that can take it, each claim taking the host's fitting devices in
// the device order. With global set, a one-device request takes the first
// fitting device of the whole cluster in the device order instead.
type inOrder struct {
	hosts   *hostOrder
	devices *deviceOrder
	global  bool
}

func (o inOrder) place(s *State, q *query) *placement {
	if o.global && len(q.r.Claims) == 1 && q.r.Claims[0].Count == 1 {
		cl := &q.r.Claims[0]
		d := o.devices.first(s, q.fits[0], cl)
		if d == nil {
			return nil
		}
		amt, _ := take(d.cls, cl)
		return &placement{host: d.Host, assign: []Assignment{{DeviceID: d.ID, Claim: 0, Amount: amt.resources()}}}
	}
	var found *placement
	s.eachHost(o.hosts, q, q.need, func(h *Host) bool {
		if assign := o.onHost(s, h, q, nil); assign != nil {
			found = &placement{host: h.ID, assign: assign}
			return true
		}
		return false
	})
	return found
}

func (o inOrder) hostOrder() *hostOrder { return o.hosts }

// onHost picks devices on h for every claim in order, each claim taking
// the first of the host's fitting devices in the device order; nil when
// the host cannot take the request.
func (o inOrder) onHost(s *State, h *Host, q *query, ov *overlay) []Assignment {
	assign, _ := s.takeOnHost(h, q, o.devices, ov)
	return assign
}

// takeOnHost picks devices on h for every claim in order, each claim
// taking the first of the host's fitting devices in the device order
// (ties by ID), as the devices' topology allows and prefers (topology.go). It returns nil if the host cannot take the request, and
// the overlay that adds what it took to ov.
func (s *State) takeOnHost(h *Host, q *query, order *deviceOrder, ov *overlay) ([]Assignment, *overlay) {
	if h == nil || !h.Schedulable() {
		return nil, nil
	}
	// local is ov plus what this host took so far. It is copied from ov
	// when the host first takes something: a host that fails its first
	// claim costs no copy.
	local, copied := ov, false
	var assign []Assignment
	var numas []int // of the GPUs taken, for the CPU and memory claims
	cands := s.idx.cands[:0]
	defer func() { s.idx.cands = cands[:0] }()
	for i := range q.r.Claims {
		cl := &q.r.Claims[i]
		cands = cands[:0]
		for _, d := range s.hostTypeDevices(h, cl.Type) {
			if !q.passes(d.cls, i) {
				continue
			}
			if amt, whole := take(d.cls, cl); s.fits(d, amt, whole, local) {
				cands = append(cands, rankedDevice{d: d, key: order.key(s, d, cl, local)})
			}
		}
		if len(cands) < cl.Count {
			return nil, nil
		}
		slices.SortFunc(cands, rankedLess)
		if cl.Type == CPU || cl.Type == Memory {
			nearNUMA(cands, numas)
		}
		pick := cands[:cl.Count]
		if cl.Count > 1 || cl.Topology != "" {
			if pick = linked(cands, cl.Count, cl.Topology == TopologyNVLink); pick == nil {
				return nil, nil
			}
		}
		if !copied {
			local, copied = ov.clone(), true
		}
		for _, c := range pick {
			amt, _ := take(c.d.cls, cl)
			local.add(c.d.ID, amt, 1)
			assign = append(assign, Assignment{DeviceID: c.d.ID, Claim: i, Amount: amt.resources()})
			if t := c.d.Topology; cl.Type == GPU && t != nil && t.NUMA != nil && !slices.Contains(numas, *t.NUMA) {
				numas = append(numas, *t.NUMA)
			}
		}
	}
	return assign, local
}

// rankedDevice is a candidate device and its key in a device order.
type rankedDevice struct {
	d   *Device
	key float64
}

// rankedLess orders candidates by key, then ID: device IDs are unique, so
// the order is total.
func rankedLess(a, b rankedDevice) int {
	switch {
	case a.key != b.key:
		if a.key < b.key {
			return -1
		}
		return 1
	case a.d.ID < b.d.ID:
		return -1
	case a.d.ID > b.d.ID:
		return 1
	}
	return 0
}

// overlay changes the apparent use of devices without touching the state:
// what a placement has already taken (positive) or what preemption
// would free (negative).
type overlay struct {
	used map[string]vec
	n    map[string]int
	// own, when set, is the waiting gang this placement is for: the
	// devices reserved for it are open to it (gang.go).
	own string
}

func newOverlay() *overlay { return &overlay{used: map[string]vec{}, n: map[string]int{}} }

func (o *overlay) add(id string, amt vec, n int) {
	o.used[id] = o.used[id].add(amt)
	o.n[id] += n
}

func (o *overlay) clone() *overlay {
	c := newOverlay()
	if o != nil {
		c.own = o.own
		for k, v := range o.used {
			c.used[k] = v
		}
		for k, v := range o.n {
			c.n[k] = v
		}
	}
	return c
}

// freeScore is a device's free capacity on the type's common scale.
func (s *State) freeScore(d *Device, ov *overlay) float64 {
	return freeOnScale(d, ov, s.normOf(d.Type))
}

// freeOnScale is a device's free capacity, with the overlay's changes
// applied, on its type's common scale norm; 0 for a whole device that is
// taken.
func freeOnScale(d *Device, ov *overlay, norm vec) float64 {
	used, n := d.Used.vec(), len(d.Allocations)
	if ov != nil {
		used = used.add(ov.used[d.ID])
		n += ov.n[d.ID]
	}
	if !d.cls.shareable && n > 0 {
		return 0
	}
	return onScale(d.cls.caps.sub(used), norm)
}
