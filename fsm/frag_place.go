package fsm

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"

	"github.com/google/btree"
)

// leastFragmenting is the FragmentationAware placer: the request goes to
// the host where the fragmentation rises least (see frag_cache.go for the
// rule and the cache that makes it fast).
type leastFragmenting struct{}

func (leastFragmenting) place(s *State, q *query) *placement {
	c := &s.idx.frag
	for attempt := 0; attempt < 2; attempt++ {
		c.sync(s)
		rq := c.compile(q.r, q.fits)
		t := rq.table
		c.syncTable(t, rq)
		var best *fragGroup
		var bestRank fragRank
		host := ""
		t.ranked.Ascend(func(e fragRank) bool {
			g := c.live(e.id, e.gen)
			if g == nil {
				return true
			}
			// Groups that tie on every score go to the lowest host ID.
			if best != nil && !e.ties(bestRank) {
				return false
			}
			if id, _ := g.hosts.Min(); best == nil || id < host {
				best, bestRank, host = g, e, id
			}
			return true
		})
		if best == nil {
			return nil
		}
		p, agrees := c.placeOn(s, q.r, rq, host, &t.res[best.id])
		if p == nil && agrees {
			// The host lacks the links a claim requires: the next host in
			// the order that has them.
			p, agrees = c.placeLinked(s, q.r, rq, t)
		}
		if p != nil || agrees {
			return p
		}
		// The cache disagrees with the state: drop it and place afresh.
		s.idx.frag = fragCache{}
	}
	return nil
}

// placeOn places the request on a host of a group by the group's
// outcome o, the picks made to read the host's topology (linkPicks). It
// returns nil and true when the host lacks the links a claim requires,
// nil and false when the cache disagrees with the state.
func (c *fragCache) placeOn(s *State, r *Request, rq *fragRequest, host string, o *fragOutcome) (*placement, bool) {
	picks := c.bestPicks[:0]
	for k := 0; k < o.n; k++ {
		picks = append(picks, o.pick(k))
	}
	c.bestPicks = picks
	fh := c.hosts[host]
	linked, ok := c.linkPicks(r, rq, fh.devs, &fh.span, picks)
	if !ok {
		return nil, true
	}
	p := s.assignPicks(r, host, fh.devs, linked, nil)
	return p, p != nil
}

// placeLinked is placeOn over the hosts in the order of the table (groups
// by score, the hosts of groups that tie by ID) until one has the links
// the request requires: nil and true when none has.
func (c *fragCache) placeLinked(s *State, r *Request, rq *fragRequest, t *fragTable) (*placement, bool) {
	type cand struct {
		host  string
		group int32
	}
	var tie []cand
	var tieRank fragRank
	var found *placement
	agrees := true
	try := func() bool {
		slices.SortFunc(tie, func(a, b cand) int { return strings.Compare(a.host, b.host) })
		for _, h := range tie {
			if found, agrees = c.placeOn(s, r, rq, h.host, &t.res[h.group]); found != nil || !agrees {
				return true
			}
		}
		tie = tie[:0]
		return false
	}
	t.ranked.Ascend(func(e fragRank) bool {
		g := c.live(e.id, e.gen)
		if g == nil {
			return true
		}
		if len(tie) > 0 && !e.ties(tieRank) && try() {
			return false
		}
		tieRank = e
		g.hosts.Ascend(func(id string) bool {
			tie = append(tie, cand{id, g.id})
			return true
		})
		return true
	})
	if found == nil && agrees && len(tie) > 0 {
		try()
	}
	return found, agrees
}

// hostOrder: a gang's parts go to the hosts with the least free capacity
// first, each placed on its host by the measure.
func (leastFragmenting) hostOrder() *hostOrder { return hostsLeastFree }

// onHost places the request on one host by the measure, with the
// overlay's changes applied.
func (leastFragmenting) onHost(s *State, h *Host, q *query, ov *overlay) []Assignment {
	c := &s.idx.frag
	c.sync(s)
	rq := c.compile(q.r, q.fits)
	var span fragSpans
	view := buildView(s, h, ov, &c.classes, nil, c.view[:0], &span)
	c.view = view
	fit, _ := c.evaluate(view, &span, rq, c.work.fragBoth(view, &span))
	if !fit {
		return nil
	}
	picks, ok := c.linkPicks(q.r, rq, view, &span, c.bestPicks)
	if !ok {
		return nil
	}
	if p := s.assignPicks(q.r, h.ID, view, picks, ov); p != nil {
		return p.assign
	}
	return nil
}

// assignPicks turns the picks of an evaluation (indexes into a view of
// the host, in claim order) into a placement, or nil when the state
// disagrees. The picks are judged with the overlay's changes applied, as
// the view was built.
func (s *State) assignPicks(r *Request, host string, view []fragDev, picks []int16, base *overlay) *placement {
	p := &placement{host: host}
	ov := base.clone()
	k := 0
	for i := range r.Claims {
		cl := &r.Claims[i]
		for n := 0; n < cl.Count; n++ {
			if k >= len(picks) || int(picks[k]) >= len(view) {
				return nil
			}
			d := view[picks[k]].d
			k++
			amt, whole := take(d.cls, cl)
			if d.Host != host || !s.fits(d, amt, whole, ov) {
				return nil
			}
			ov.add(d.ID, amt, 1)
			p.assign = append(p.assign, Assignment{DeviceID: d.ID, Claim: i, Amount: amt.resources()})
		}
	}
	return p
}

// fragRequest is a request, compiled for placement on the views.
type fragRequest struct {
	claims []fragClaim
	// choose is the claim whose device is chosen by the measure, or -1.
	choose int
	table  *fragTable
}

// compile turns a request and its fitting classes into a fragRequest and
// finds the table of its shape.
func (c *fragCache) compile(r *Request, fits [][]*class) *fragRequest {
	for _, list := range fits {
		for _, cl := range list {
			c.classes.id(cl)
		}
	}
	rq := &fragRequest{claims: make([]fragClaim, len(r.Claims)), choose: -1}
	b := c.keyBuf[:0]
	for i := range r.Claims {
		cl := &r.Claims[i]
		fc := fragClaim{typ: typeSlot(cl.Type), count: cl.Count, amt: cl.Amount.vec(), zero: cl.Amount.IsZero(), ok: make([]int8, len(c.classes.list))}
		for j := range fc.ok {
			fc.ok[j] = 2
		}
		for _, cls := range fits[i] {
			fc.ok[c.classes.ids[cls]] = 1
		}
		rq.claims[i] = fc
		if rq.choose < 0 && fc.typ == c.work.mtype {
			rq.choose = i
		}
		b = binary.AppendUvarint(b, uint64(fc.typ))
		b = binary.AppendUvarint(b, uint64(cl.Count))
		for _, x := range fc.amt {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		for j, v := range fc.ok {
			if v == 1 {
				b = binary.AppendUvarint(b, uint64(j)+1)
			}
		}
		b = append(b, 0)
	}
	if rq.choose >= 0 && r.Claims[rq.choose].Count != 1 {
		rq.choose = -1
	}
	c.keyBuf = b
	if c.keys == nil || len(c.keys) >= fragMaxKeys {
		c.keys = map[string]int32{}
		c.tables = nil
	}
	key, ok := c.keys[string(b)]
	if !ok {
		key = int32(len(c.keys))
		c.keys[string(b)] = key
	}
	if c.tables == nil {
		c.tables = map[int32]*fragTable{}
	}
	c.uses++
	t := c.tables[key]
	if t == nil {
		if len(c.tables) >= fragMaxTables {
			var oldest int32
			var used uint64 = math.MaxUint64
			for k, t := range c.tables { // the least recently used: IDs differ, no ties
				if t.used < used || t.used == used && k < oldest {
					oldest, used = k, t.used
				}
			}
			delete(c.tables, oldest)
		}
		t = &fragTable{ranked: btree.NewG(btreeDegree, fragRankLess)}
		c.tables[key] = t
	}
	t.used = c.uses
	rq.table = t
	return rq
}

// syncTable brings a table up to date: every group after a new workload
// (or when the table fell behind the births journal), else the groups
// born since it was last used.
func (c *fragCache) syncTable(t *fragTable, rq *fragRequest) {
	end := c.birthBase + uint64(len(c.births))
	switch {
	case t.epoch != c.epoch:
		t.epoch = c.epoch
		t.ranked.Clear(false)
		fallthrough
	case t.synced < c.birthBase:
		for _, g := range c.groupList {
			if g != nil && !g.freed {
				c.rankGroup(t, g, rq)
			}
		}
	default:
		for _, b := range c.births[t.synced-c.birthBase:] {
			if g := c.groupList[b.id]; g.gen == b.gen && !g.freed {
				c.rankGroup(t, g, rq)
			}
		}
	}
	t.synced = end
	// Keep the journal short: a table that falls behind scans the groups.
	if len(c.births) > 1024+2*len(c.groupList) {
		c.birthBase = end
		c.births = c.births[:0]
	}
}

// rankGroup evaluates the table's shape on a group, unless it was for this
// epoch and generation, and files the group when it can take the shape.
func (c *fragCache) rankGroup(t *fragTable, g *fragGroup, rq *fragRequest) {
	for int(g.id) >= len(t.res) {
		t.res = append(t.res, fragOutcome{})
	}
	o := &t.res[g.id]
	if o.epoch == c.epoch && o.gen == g.gen {
		return
	}
	o.epoch, o.gen = c.epoch, g.gen
	o.fit, o.fragScore = c.evaluate(g.devs, &g.span, rq, c.groupFrag(g))
	if o.fit {
		o.setPicks(c.bestPicks)
		t.ranked.ReplaceOrInsert(o.rank(g.id, g.gen))
	}
}

// evaluate places the request on a view whose fragmentation is before: it
// returns whether it fits, its score there, and (in c.bestPicks) the
// devices it takes, in claim order, as indexes into the view. Which device
// of a chosen claim is taken is decided by the exact fragmentation
// increase, then by what the host keeps of the request's types, then by
// view order.
func (c *fragCache) evaluate(devs []fragDev, span *fragSpans, rq *fragRequest, before fragAmount) (bool, fragScore) {
	w := c.work
	if len(devs) == 0 {
		return false, fragScore{}
	}
	// Cheap test first: enough candidate devices for each claim.
	for i := range rq.claims {
		fc := &rq.claims[i]
		n := 0
		for j := span[fc.typ][0]; j < span[fc.typ][1] && n < fc.count; j++ {
			if w.canTake(&devs[j], fc) {
				n++
			}
		}
		if n < fc.count {
			return false, fragScore{}
		}
	}
	c.scratch = append(c.scratch[:0], devs...)
	c.picks = c.picks[:0]
	last := len(rq.claims)
	if rq.choose >= 0 {
		last = rq.choose
	}
	for i := 0; i < last; i++ {
		if !c.takeBest(c.scratch, span, &rq.claims[i]) {
			return false, fragScore{}
		}
	}
	if rq.choose < 0 {
		c.bestPicks = append(c.bestPicks[:0], c.picks...)
		return true, c.score(c.scratch, span, rq, before)
	}
	fit := false
	var best fragScore
	base := len(c.picks)
	ch := &rq.claims[rq.choose]
	for j := span[ch.typ][0]; j < span[ch.typ][1]; j++ {
		if !w.canTake(&c.scratch[j], ch) || c.sameAsEarlier(c.scratch, span, int(j), ch) {
			continue
		}
		c.trial = append(c.trial[:0], c.scratch...)
		c.picks = append(c.picks[:base], j)
		c.trial[j].take(ch)
		ok := true
		for i := rq.choose + 1; i < len(rq.claims) && ok; i++ {
			ok = c.takeBest(c.trial, span, &rq.claims[i])
		}
		if !ok {
			continue
		}
		sc := c.score(c.trial, span, rq, before)
		if !fit || sc.delta < best.delta || (sc.delta == best.delta && sc.left < best.left) {
			fit, best = true, sc
			c.bestPicks = append(c.bestPicks[:0], c.picks...)
		}
	}
	return fit, best
}

// score is the score of a host left as devs, whose fragmentation was
// before.
func (c *fragCache) score(devs []fragDev, span *fragSpans, rq *fragRequest, before fragAmount) fragScore {
	after := c.work.fragBoth(devs, span)
	return fragScore{
		delta:  fragRound(after.frag - before.frag),
		single: fragRound(after.single - before.single),
		free:   fragRound(c.work.free(devs, span)),
		left:   leftover(devs, rq),
	}
}

// sameAsEarlier reports whether an earlier device that could take the
// claim is in the same state as devs[j], so choosing it would be alike.
func (c *fragCache) sameAsEarlier(devs []fragDev, span *fragSpans, j int, fc *fragClaim) bool {
	for i := int(span[fc.typ][0]); i < j; i++ {
		if devs[i].cls == devs[j].cls && devs[i].free == devs[j].free && devs[i].idle == devs[j].idle && c.work.canTake(&devs[i], fc) {
			return true
		}
	}
	return false
}

// takeBest takes the claim's devices from devs, least left over first (the
// earlier in the view among equals), and records them in c.picks.
func (c *fragCache) takeBest(devs []fragDev, span *fragSpans, fc *fragClaim) bool {
	for n := 0; n < fc.count; n++ {
		best := int16(-1)
		bestLeft := 0.0
		for i := span[fc.typ][0]; i < span[fc.typ][1]; i++ {
			if !c.work.canTake(&devs[i], fc) || c.picked(i, n) {
				continue
			}
			d := devs[i]
			d.take(fc)
			if l := d.left(); best < 0 || l < bestLeft {
				best, bestLeft = i, l
			}
		}
		if best < 0 {
			return false
		}
		devs[best].take(fc)
		c.picks = append(c.picks, best)
	}
	return true
}

// picked reports whether device i is among the last n picks (the devices
// the current claim already took).
func (c *fragCache) picked(i int16, n int) bool {
	for _, p := range c.picks[len(c.picks)-n:] {
		if p == i {
			return true
		}
	}
	return false
}

// leftover is the free capacity a host keeps in the types the request
// uses, each device counted as its free share.
func leftover(devs []fragDev, rq *fragRequest) float64 {
	sum := 0.0
	for i := range devs {
		for j := range rq.claims {
			if rq.claims[j].typ == devs[i].typ {
				sum += devs[i].left()
				break
			}
		}
	}
	return fragRound(sum)
}

// fragRound puts a measure on a 1e-9 grid, so float noise never decides
// between equal placements.
func fragRound(x float64) float64 { return math.Round(x*1e9) / 1e9 }
