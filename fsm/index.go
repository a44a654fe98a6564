package fsm

import (
	"fmt"
	"sort"
	"strings"

	"github.com/google/btree"
)

// The index keeps placement off a linear scan. Devices that are alike in
// everything a filter looks at (type, pool, capabilities, labels,
// shareability) form a class; static filters run once per class. Each
// class keeps its schedulable devices with free capacity in ordered sets,
// so each policy finds its pick in O(classes · log n). The index is derived
// state: it is rebuilt on restore and never serialized.

const btreeDegree = 16

type freeKey struct {
	free float64
	id   string
}

func freeKeyLess(a, b freeKey) bool {
	if a.free != b.free {
		return a.free < b.free
	}
	return a.id < b.id
}

type class struct {
	key       string
	typ       DeviceType
	pool      string
	shareable bool
	caps      vec
	custom    map[string]string
	labels    map[string]string
	size      int
	// primary is the dimension shareable devices are ordered by.
	primary int
	// free holds schedulable devices with free capacity, by ID.
	free *btree.BTreeG[string]
	// byFree holds the same devices by free capacity on the type's
	// common scale, shareKey (shareable classes only).
	byFree *btree.BTreeG[freeKey]
	// hosts holds the hosts with at least one device in free.
	hosts    *btree.BTreeG[string]
	hostFree map[string]int
	// mark equals index.mark while the class is in the set a placement
	// is working with (a membership test without a map).
	mark uint64
	// freeVer counts changes to free; next remembers the last search for
	// the first free ID after another, valid while freeVer is unchanged.
	freeVer uint64
	next    nextFree
}

// nextFree is the answer to "the first ID in free after after" (ok false:
// there is none) when free was at version ver.
type nextFree struct {
	valid bool
	ver   uint64
	after string
	id    string
	ok    bool
}

func classKey(d *Device) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%t|%v|", d.Type, d.Pool, d.Shareable, d.Capabilities.vec())
	for _, k := range sortedKeys(d.Capabilities.Custom) {
		fmt.Fprintf(&b, "%q=%q,", k, d.Capabilities.Custom[k])
	}
	b.WriteByte('|')
	for _, k := range sortedKeys(d.Labels) {
		fmt.Fprintf(&b, "%q=%q,", k, d.Labels[k])
	}
	return b.String()
}

func newClass(key string, d *Device) *class {
	c := &class{
		key: key, typ: d.Type, pool: d.Pool, shareable: d.Shareable,
		caps: d.Capabilities.vec(), custom: d.Capabilities.Custom, labels: d.Labels,
		free:     btree.NewG(btreeDegree, func(a, b string) bool { return a < b }),
		hosts:    btree.NewG(btreeDegree, func(a, b string) bool { return a < b }),
		hostFree: map[string]int{},
	}
	c.primary = -1
	for _, i := range []int{1, 0, 2, 3} {
		if c.caps[i] > 0 {
			c.primary = i
			break
		}
	}
	if c.shareable {
		c.byFree = btree.NewG(btreeDegree, freeKeyLess)
	}
	return c
}

// hostLoad is a host's utilisation of one device type.
type hostLoad struct {
	n      int
	used   float64
	inTree bool
	key    loadKey
	// dirty is set while the host waits in index.loadDirty.
	dirty bool
	// devs are the host's devices of the type in ID order, while devsOK.
	devs   []*Device
	devsOK bool
}

// hostTypeDevices returns the devices of type t on h, in ID order. The
// list is kept until the host's inventory changes: callers must not
// change it.
func (s *State) hostTypeDevices(h *Host, t DeviceType) []*Device {
	l := s.hostLoadOf(h, t)
	if !l.devsOK {
		var devs []*Device
		for _, id := range h.Devices {
			if d := s.devices[id]; d.Type == t {
				devs = append(devs, d)
			}
		}
		l.devs, l.devsOK = devs, true
	}
	return l.devs
}

// hostDevicesChanged forgets a host's device lists after its inventory
// changed.
func (s *State) hostDevicesChanged(h *Host) {
	for _, l := range h.load { // order does not matter
		l.devs, l.devsOK = nil, false
	}
}

// dirtyLoad is a host whose place in the load order of a type is stale.
type dirtyLoad struct {
	h *Host
	t DeviceType
}

type loadKey struct {
	util float64
	host string
}

func loadKeyLess(a, b loadKey) bool {
	if a.util != b.util {
		return a.util < b.util
	}
	return a.host < b.host
}

// index is the derived lookup state.
type index struct {
	classes map[string]*class
	byType  map[DeviceType][]*class
	// load orders up hosts by utilisation, per type; read it through
	// loadTree, which first applies loadDirty.
	load      map[DeviceType]*btree.BTreeG[loadKey]
	loadDirty []dirtyLoad
	// norm is the largest device capacity per type and dimension.
	norm      map[DeviceType]vec
	normDirty bool
	// mark is the last value given to class.mark.
	mark uint64
	// fit caches fitting's verdicts per claimKey; nil when the classes
	// changed. A verdict depends only on the immutable class attributes.
	fit map[string][]*class
	// frag is FragmentationAware's cache of hosts and typical requests.
	frag fragCache
	// first is a reusable iterator for ID trees.
	first firstItem
}

// firstItem is a tree iterator that keeps the first item it is given; it
// is made once, as a closure made per search would be allocated.
type firstItem struct {
	id    string
	ok    bool
	visit func(string) bool
}

func newIndex() *index {
	idx := &index{
		classes: map[string]*class{},
		byType:  map[DeviceType][]*class{},
		load:    map[DeviceType]*btree.BTreeG[loadKey]{},
		norm:    map[DeviceType]vec{},
	}
	f := &idx.first
	f.visit = func(id string) bool {
		f.id, f.ok = id, true
		return false
	}
	return idx
}

// freeAfter is the first ID in c's free set after the given one (not
// empty); pivot is after+"\x00". While the set is unchanged, the answer
// for a later after that is still below the last answer is that answer:
// the RoundRobin cursor only moves forward, so most classes need no search.
func (s *State) freeAfter(c *class, after, pivot string) (string, bool) {
	n := &c.next
	if n.valid && n.ver == c.freeVer && n.after <= after && (!n.ok || after < n.id) {
		return n.id, n.ok
	}
	id, ok := s.firstFrom(c.free, pivot)
	*n = nextFree{valid: true, ver: c.freeVer, after: after, id: id, ok: ok}
	return id, ok
}

// firstFrom is the first ID in t at or after pivot.
func (s *State) firstFrom(t *btree.BTreeG[string], pivot string) (string, bool) {
	f := &s.idx.first
	f.id, f.ok = "", false
	t.AscendGreaterOrEqual(pivot, f.visit)
	return f.id, f.ok
}

// deviceUtil is the used fraction of a device.
func deviceUtil(d *Device) float64 {
	if !d.Shareable || d.cls.primary < 0 {
		if len(d.Allocations) > 0 {
			return 1
		}
		return 0
	}
	p := d.cls.primary
	return d.Used.vec()[p] / d.cls.caps[p]
}

// hasFree reports whether a device could take any allocation now.
func (s *State) hasFree(d *Device) bool {
	h := s.hosts[d.Host]
	if h == nil || !h.Up || d.Status != Available {
		return false
	}
	if !d.Shareable || d.cls.primary < 0 {
		return len(d.Allocations) == 0
	}
	// Free in any dimension: a share may ask for none of the primary one.
	free := d.cls.caps.sub(d.Used.vec())
	for i := range free {
		if free[i] > eps {
			return true
		}
	}
	return false
}

// addClassDevice puts a new device into its class.
func (s *State) addClassDevice(d *Device) {
	key := classKey(d)
	c := s.idx.classes[key]
	if c == nil {
		c = newClass(key, d)
		s.idx.classes[key] = c
		list := append(s.idx.byType[d.Type], c)
		sort.Slice(list, func(i, j int) bool { return list[i].key < list[j].key })
		s.idx.byType[d.Type] = list
		s.idx.normDirty = true
		s.idx.fit = nil
	}
	c.size++
	d.cls = c
}

// removeClassDevice takes a device (already unindexed) out of its class.
func (s *State) removeClassDevice(d *Device) {
	c := d.cls
	c.size--
	if c.size == 0 {
		delete(s.idx.classes, c.key)
		list := s.idx.byType[c.typ]
		for i, x := range list {
			if x == c {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(s.idx.byType, c.typ)
		} else {
			s.idx.byType[c.typ] = list
		}
		s.idx.normDirty = true
		s.idx.fit = nil
	}
	d.cls = nil
}

// unindex removes a device from the free sets and its host's load, before
// the device or its host changes.
func (s *State) unindex(d *Device) {
	s.markFragStale(d.Host)
	if d.indexed {
		c := d.cls
		c.free.Delete(d.ID)
		c.freeVer++
		if c.byFree != nil {
			c.byFree.Delete(freeKey{d.idxFree, d.ID})
		}
		c.hostFree[d.Host]--
		if c.hostFree[d.Host] <= 0 {
			delete(c.hostFree, d.Host)
			c.hosts.Delete(d.Host)
		}
		d.indexed = false
	}
	if h := s.hosts[d.Host]; h != nil {
		s.markLoadDirty(h, d.Type)
	}
}

// reindex adds a device back after a change.
func (s *State) reindex(d *Device) {
	s.markFragStale(d.Host)
	if h := s.hosts[d.Host]; h != nil {
		s.refreshLoad(h, d.Type)
	}
	if !s.hasFree(d) {
		return
	}
	c := d.cls
	if c.byFree != nil {
		d.idxFree = shareKey(d.Free().vec(), s.normOf(d.Type))
	}
	c.free.ReplaceOrInsert(d.ID)
	c.freeVer++
	if c.byFree != nil {
		c.byFree.ReplaceOrInsert(freeKey{d.idxFree, d.ID})
	}
	if c.hostFree[d.Host] == 0 {
		c.hosts.ReplaceOrInsert(d.Host)
	}
	c.hostFree[d.Host]++
	d.indexed = true
}

func (s *State) hostLoadOf(h *Host, t DeviceType) *hostLoad {
	if h.load == nil {
		h.load = map[DeviceType]*hostLoad{}
	}
	l := h.load[t]
	if l == nil {
		l = &hostLoad{}
		h.load[t] = l
	}
	return l
}

// refreshLoad recomputes a host's load for a type from its devices (sums
// are never carried along, so a restored state ranks hosts identically)
// and marks its place in the load order stale.
func (s *State) refreshLoad(h *Host, t DeviceType) {
	l := s.hostLoadOf(h, t)
	l.n, l.used = 0, 0
	for _, d := range s.hostTypeDevices(h, t) {
		l.n++
		l.used += deviceUtil(d)
	}
	s.markLoadDirty(h, t)
}

// markLoadDirty notes that a host's place in the load order of a type may
// be stale. The order is brought up to date when it is read (loadTree),
// so the allocations and releases in between cost no tree updates.
func (s *State) markLoadDirty(h *Host, t DeviceType) {
	l := s.hostLoadOf(h, t)
	if l.dirty {
		return
	}
	l.dirty = true
	s.idx.loadDirty = append(s.idx.loadDirty, dirtyLoad{h, t})
	if len(s.idx.loadDirty) > 4*len(s.hosts)+1024 {
		// Removed hosts wait here too: keep the list bounded.
		s.flushLoad()
	}
}

// flushLoad puts every host marked dirty back in the load order with its
// current load, or leaves it out if it was removed or is down.
func (s *State) flushLoad() {
	for _, x := range s.idx.loadDirty {
		l := x.h.load[x.t]
		l.dirty = false
		s.unloadHost(x.h, x.t, l)
		if s.hosts[x.h.ID] == x.h {
			s.loadHost(x.h, x.t, l)
		}
	}
	clear(s.idx.loadDirty)
	s.idx.loadDirty = s.idx.loadDirty[:0]
}

// loadTree is the order of up hosts with devices of type t by
// utilisation, least first; nil if there are none yet. Read it only
// through here.
func (s *State) loadTree(t DeviceType) *btree.BTreeG[loadKey] {
	if len(s.idx.loadDirty) > 0 {
		s.flushLoad()
	}
	return s.idx.load[t]
}

func (s *State) unloadHost(h *Host, t DeviceType, l *hostLoad) {
	if l.inTree {
		s.idx.load[t].Delete(l.key)
		l.inTree = false
	}
}

func (s *State) loadHost(h *Host, t DeviceType, l *hostLoad) {
	if !h.Up || l.n <= 0 {
		return
	}
	tree := s.idx.load[t]
	if tree == nil {
		tree = btree.NewG(btreeDegree, loadKeyLess)
		s.idx.load[t] = tree
	}
	l.key = loadKey{util: l.used / float64(l.n), host: h.ID}
	tree.ReplaceOrInsert(l.key)
	l.inTree = true
}

// normOf returns the largest device capacity per dimension for a type,
// used to put dimensions on one scale.
// commonScale is the largest capacity of each dimension among classes.
func commonScale(classes []*class) vec {
	var n vec
	for _, c := range classes {
		for i, x := range c.caps {
			if x > n[i] {
				n[i] = x
			}
		}
	}
	return n
}

func (s *State) normOf(t DeviceType) vec {
	if s.idx.normDirty {
		old := s.idx.norm
		s.idx.norm = map[DeviceType]vec{}
		for typ, list := range s.idx.byType {
			s.idx.norm[typ] = commonScale(list)
		}
		s.idx.normDirty = false
		for _, typ := range DeviceTypes {
			if s.idx.norm[typ] != old[typ] {
				s.rekeyShares(typ)
			}
		}
	}
	return s.idx.norm[t]
}

// shareKey is free capacity on the type's common scale: the sum over
// dimensions of free/norm, the measure BestFit and WorstFit rank by.
func shareKey(free, norm vec) float64 {
	k := 0.0
	for i, x := range free {
		if norm[i] > 0 && x > 0 {
			k += x / norm[i]
		}
	}
	return roundScore(k)
}

// rekeyShares recomputes the keys of a type's shareable devices after the
// type's common scale changed.
func (s *State) rekeyShares(t DeviceType) {
	norm := s.idx.norm[t]
	for _, c := range s.idx.byType[t] {
		if c.byFree == nil {
			continue
		}
		var ids []string
		c.byFree.Ascend(func(k freeKey) bool {
			ids = append(ids, k.id)
			return true
		})
		c.byFree.Clear(false)
		for _, id := range ids {
			d := s.devices[id]
			d.idxFree = shareKey(d.Free().vec(), norm)
			c.byFree.ReplaceOrInsert(freeKey{d.idxFree, id})
		}
	}
}

// markClasses marks the classes of a list, so that c.mark == the returned
// value tells whether c is in it, until the next call.
func (s *State) markClasses(list []*class) uint64 {
	s.idx.mark++
	for _, c := range list {
		c.mark = s.idx.mark
	}
	return s.idx.mark
}
