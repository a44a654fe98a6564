package fsm

import (
	"math/bits"

	"github.com/google/btree"
)

// The host index serves requests placed host by host. For each class of
// devices it files the up hosts that have a free device of the class on
// shelves by how many free devices of the class's type the host has: shelf
// k (1 to 8) holds the hosts with at least k, and the shelves above hold
// the hosts with 9-16, 17-32, ... up to MaxDevicesPerHost. So a request
// that needs k free devices reads one shelf per class (k <= 8) and never
// visits a host with fewer. Each shelf is kept in every host rank
// (orders.go) a placement has asked for. A walk merges the shelves of the
// fitting classes in rank order, so the first host that takes the request
// is found after looking at a handful of hosts, however many there are.
//
// A host's figures (free capacity, utilisation and free devices per type)
// are recomputed from its devices, never carried as running sums, so a
// restored state files hosts exactly as the original. A change to a
// device marks its host dirty; the next walk refiles the dirty hosts
// first, so the allocations and releases in between cost no tree updates.

// hostFigures are what the host ranks read of a host.
type hostFigures struct {
	// free is the free capacity of the host's available devices, every
	// type on its common scale.
	free float64
	// util is the mean device utilisation per type (typeSlot).
	util [numTypes]float64
	// nfree counts, per type, the devices that could take some claim now.
	nfree [numTypes]int
}

// numTypes is the number of device types; typeSlot numbers them.
const numTypes = 8

var typeSlots = func() map[DeviceType]int {
	m := map[DeviceType]int{}
	for i, t := range DeviceTypes {
		m[t] = i
	}
	return m
}()

func typeSlot(t DeviceType) int { return typeSlots[t] }

// hostEntry is the host index's record of a host.
type hostEntry struct {
	id    string
	figs  hostFigures
	dirty bool
	// filed are the classes the host is filed under.
	filed []*class
}

// classHost is a host as one class sees it.
type classHost struct {
	// n counts the host's devices of the class in the class's free set.
	n int
	// filed is the count of free devices of the type the host is filed
	// with (0: not filed) and keys its key per rank slot.
	filed int
	keys  [maxHostRanks]float64
}

// hostKey orders a shelf: by key, then host ID.
type hostKey struct {
	k  float64
	id string
}

func hostKeyLess(a, b hostKey) bool {
	if a.k != b.k {
		return a.k < b.k
	}
	return a.id < b.id
}

// rankShelves are one rank's shelves of a class.
type rankShelves [numShelves]*btree.BTreeG[hostKey]

// Shelves 1 to 8 hold hosts with at least that many free devices; shelf
// 8+j (j >= 1) holds those with 8<<(j-1)+1 to 8<<j.
const numShelves = 18

// onShelf reports whether a host with n free devices is on shelf sh.
func onShelf(n, sh int) bool {
	if sh <= 8 {
		return n >= sh
	}
	return n > 8 && 8+bits.Len(uint(n-1)/8) == sh
}

// shelfMax is the most free devices a host on shelf sh may need to have
// for the shelf to be read.
func shelfMax(sh int) int {
	if sh <= 8 {
		return sh
	}
	return 8 << (sh - 8)
}

// shelvesFor lists the shelves that hold every host with at least need
// free devices (and, above 8, only a few with fewer).
func shelvesFor(need int, dst []int) []int {
	if need <= 8 {
		return append(dst, max(need, 1))
	}
	for sh := 9; sh < numShelves; sh++ {
		if shelfMax(sh) >= need {
			dst = append(dst, sh)
		}
	}
	return dst
}

// markHostDirty notes that a host's figures may have changed.
func (s *State) markHostDirty(id string) {
	e := s.idx.hosts[id]
	if e == nil {
		e = &hostEntry{id: id}
		s.idx.hosts[id] = e
	}
	if !e.dirty {
		e.dirty = true
		s.idx.dirtyHosts = append(s.idx.dirtyHosts, e)
	}
}

// markAllHostsDirty is for a change of a type's common scale, which moves
// every host's free capacity.
func (s *State) markAllHostsDirty() {
	for _, id := range sortedKeys(s.hosts) {
		s.markHostDirty(id)
	}
}

// flushHosts refiles the dirty hosts.
func (s *State) flushHosts() {
	s.syncNorms() // a change of scale marks every host dirty
	for len(s.idx.dirtyHosts) > 0 {
		dirty := s.idx.dirtyHosts
		s.idx.dirtyHosts = nil
		for _, e := range dirty {
			s.refile(e)
		}
	}
}

// refile recomputes a host's figures and files it under the classes it
// has free devices of, and under no others.
func (s *State) refile(e *hostEntry) {
	e.dirty = false
	old := e.filed
	e.filed = nil
	h := s.hosts[e.id]
	if h != nil && h.Schedulable() {
		e.figs = s.figuresOf(h)
		for _, id := range h.Devices {
			c := s.devices[id].cls
			if ch := c.onHost[e.id]; ch != nil && ch.n > 0 && !containsClass(e.filed, c) {
				e.filed = append(e.filed, c)
			}
		}
	}
	for _, c := range old {
		if !containsClass(e.filed, c) {
			c.unfile(e.id)
		}
	}
	for _, c := range e.filed {
		c.file(e)
	}
	if h == nil && len(e.filed) == 0 {
		delete(s.idx.hosts, e.id)
	}
}

// figuresOf computes a host's figures from its devices.
func (s *State) figuresOf(h *Host) hostFigures {
	var f hostFigures
	free := 0.0
	for _, id := range h.Devices {
		d := s.devices[id]
		if d.indexed {
			f.nfree[typeSlot(d.Type)]++
		}
		if d.Status == Available {
			free += s.freeScore(d, nil)
		}
	}
	f.free = roundScore(free)
	for t, l := range h.load { // filling an array by type: order does not matter
		if l.n > 0 {
			f.util[typeSlot(t)] = l.used / float64(l.n)
		}
	}
	return f
}

// file puts (or moves) a host on the class's shelves.
func (c *class) file(e *hostEntry) {
	ch := c.onHost[e.id]
	n := e.figs.nfree[typeSlot(c.typ)]
	for slot, rs := range c.ranks {
		if rs == nil {
			continue
		}
		k := hostRankList[slot].key(&e.figs, c.typ)
		old := hostKey{ch.keys[slot], e.id}
		for sh, t := range rs {
			if t == nil {
				continue
			}
			was, now := onShelf(ch.filed, sh), onShelf(n, sh)
			if was && now && old.k == k {
				continue
			}
			if was {
				t.Delete(old)
			}
			if now {
				t.ReplaceOrInsert(hostKey{k, e.id})
			}
		}
		ch.keys[slot] = k
	}
	ch.filed = n
}

// unfile takes a host off the class's shelves.
func (c *class) unfile(id string) {
	ch := c.onHost[id]
	if ch == nil {
		return
	}
	if ch.filed != 0 {
		for slot, rs := range c.ranks {
			if rs == nil {
				continue
			}
			for sh, t := range rs {
				if t != nil && onShelf(ch.filed, sh) {
					t.Delete(hostKey{ch.keys[slot], id})
				}
			}
		}
		ch.filed = 0
	}
	if ch.n == 0 {
		delete(c.onHost, id)
	}
}

// shelf returns a class's shelf in a rank, keeping the rank and building
// the shelf from the hosts the class holds if no walk asked for them
// before: a shelf is kept up to date only once it is read. The index
// must be flushed.
func (s *State) shelf(c *class, r *hostRank, sh int) *btree.BTreeG[hostKey] {
	rs := c.ranks[r.slot]
	if rs == nil {
		rs = &rankShelves{}
		c.ranks[r.slot] = rs
		for id, ch := range c.onHost { // keying a set: order does not matter
			if ch.filed != 0 {
				ch.keys[r.slot] = r.key(&s.idx.hosts[id].figs, c.typ)
			}
		}
	}
	if rs[sh] == nil {
		t := btree.NewG(btreeDegree, hostKeyLess)
		for id, ch := range c.onHost { // building a set: order does not matter
			if onShelf(ch.filed, sh) {
				t.ReplaceOrInsert(hostKey{ch.keys[r.slot], id})
			}
		}
		rs[sh] = t
	}
	return rs[sh]
}

// hostSource is one shelf of a walk, at its next host.
type hostSource struct {
	t    *btree.BTreeG[hostKey]
	head hostKey
	ok   bool
}

// walkHosts visits, in a rank's order, each host filed under one of the
// classes with at least need free devices of their type (above 8, a few
// with fewer), from key from
// (inclusive; nil: from the first) to key to (exclusive; nil: to the
// last), until visit returns true. It reports whether a visit did.
func (s *State) walkHosts(r *hostRank, classes []*class, need int, from, to *hostKey, visit func(h *Host) bool) bool {
	srcs := s.idx.walk[:0]
	shelves := shelvesFor(need, s.idx.shelves[:0])
	s.idx.shelves = shelves
	for _, c := range classes {
		for _, sh := range shelves {
			t := s.shelf(c, r, sh)
			if t.Len() == 0 {
				continue
			}
			src := hostSource{t: t}
			if from == nil {
				src.head, src.ok = t.Min()
			} else {
				src.head, src.ok = s.nextHost(t, *from)
			}
			if src.ok && (to == nil || hostKeyLess(src.head, *to)) {
				srcs = append(srcs, src)
			}
		}
	}
	s.idx.walk = srcs
	last := ""
	for {
		best := -1
		for i := range srcs {
			if srcs[i].ok && (best < 0 || hostKeyLess(srcs[i].head, srcs[best].head)) {
				best = i
			}
		}
		if best < 0 {
			return false
		}
		src := &srcs[best]
		id := src.head.id
		src.head, src.ok = s.nextHost(src.t, hostKey{src.head.k, id + "\x00"})
		if src.ok && to != nil && !hostKeyLess(src.head, *to) {
			src.ok = false
		}
		if id == last {
			continue // filed under two of the classes
		}
		last = id
		if visit(s.hosts[id]) {
			return true
		}
	}
}

// nextHost is the first key in t at or after from.
func (s *State) nextHost(t *btree.BTreeG[hostKey], from hostKey) (hostKey, bool) {
	f := &s.idx.firstHost
	f.key, f.ok = hostKey{}, false
	t.AscendGreaterOrEqual(from, f.visit)
	return f.key, f.ok
}

// firstHostKey is a reusable tree visitor that keeps the first key.
type firstHostKey struct {
	key   hostKey
	ok    bool
	visit func(hostKey) bool
}

func containsClass(list []*class, c *class) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}
