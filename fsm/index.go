package fsm

import (
	"sort"
	"strconv"

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
	// common scale (shareable classes only).
	byFree *btree.BTreeG[freeKey]
	// onHost counts, per host, the host's devices in free; ranks file the
	// hosts with some, per host rank in use (hostindex.go).
	onHost map[string]*classHost
	ranks  [maxHostRanks]*rankShelves
	// mark equals the query's mark while the class passes the static
	// filters of a claim of the query; claims has bit i set for claim i.
	mark   uint64
	claims uint32
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

// classKey names the class of d: what its devices share, written as
// fmt wrote it first ("%s|%s|%t|%v|", then each custom value and label
// as %q=%q, by key). Keys order a type's classes, so a new way of
// writing them must give the same strings (TestClassKeyAsFmtWroteIt).
func classKey(d *Device) string {
	b := make([]byte, 0, 96)
	b = append(append(b, d.Type...), '|')
	b = append(append(b, d.Pool...), '|')
	b = append(strconv.AppendBool(b, d.Shareable), '|')
	b = append(d.Capabilities.vec().appendText(b), '|')
	quoted := func(m map[string]string) {
		for _, k := range sortedKeys(m) {
			b = strconv.AppendQuote(b, k)
			b = append(strconv.AppendQuote(append(b, '='), m[k]), ',')
		}
	}
	quoted(d.Capabilities.Custom)
	b = append(b, '|')
	quoted(d.Labels)
	return string(b)
}

func newClass(key string, d *Device) *class {
	c := &class{
		key: key, typ: d.Type, pool: d.Pool, shareable: d.Shareable,
		caps: d.Capabilities.vec(), custom: d.Capabilities.Custom, labels: d.Labels,
		free:   btree.NewG(btreeDegree, func(a, b string) bool { return a < b }),
		onHost: map[string]*classHost{},
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
	n    int
	used float64
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

// index is the derived lookup state.
type index struct {
	classes map[string]*class
	byType  map[DeviceType][]*class
	// hosts and dirtyHosts are the host index's records (hostindex.go).
	hosts      map[string]*hostEntry
	dirtyHosts []*hostEntry
	// norm is the largest device capacity per type and dimension.
	norm      map[DeviceType]vec
	normDirty bool
	// mark is the last value given to class.mark.
	mark uint64
	// fit caches fitting's verdicts per claimKey; nil when the classes
	// changed. A verdict depends only on the immutable class attributes.
	fit map[string][]*class
	// classVer counts changes to the set of classes.
	classVer uint64
	// frag is FragmentationAware's cache of hosts and typical requests.
	frag fragCache
	// Reusable tree visitors and scratch space.
	first     firstItem
	firstHost firstHostKey
	walk      []hostSource
	shelves   []int
	cands     []rankedDevice
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
		hosts:   map[string]*hostEntry{},
		norm:    map[DeviceType]vec{},
	}
	f := &idx.first
	f.visit = func(id string) bool {
		f.id, f.ok = id, true
		return false
	}
	fh := &idx.firstHost
	fh.visit = func(k hostKey) bool {
		fh.key, fh.ok = k, true
		return false
	}
	return idx
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
	if !s.open(d, nil) {
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
		s.idx.classVer++
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
		s.idx.classVer++
	}
	d.cls = nil
}

// unindex removes a device from the free sets, before the device or its
// host changes.
func (s *State) unindex(d *Device) {
	s.countUse(d, -1)
	delete(s.head.devices, d.ID)
	s.markFragStale(d.Host)
	s.markHostDirty(d.Host)
	s.agg.dev.note(d.Host, len(s.hosts))
	if !d.indexed {
		return
	}
	c := d.cls
	c.free.Delete(d.ID)
	c.freeVer++
	if c.byFree != nil {
		c.byFree.Delete(freeKey{d.idxFree, d.ID})
	}
	if ch := c.onHost[d.Host]; ch != nil {
		ch.n--
		if ch.n == 0 && ch.filed == 0 {
			delete(c.onHost, d.Host)
		}
	}
	d.indexed = false
}

// reindex adds a device back after a change.
func (s *State) reindex(d *Device) {
	s.countUse(d, 1)
	delete(s.head.devices, d.ID)
	s.markFragStale(d.Host)
	s.markHostDirty(d.Host)
	s.agg.dev.note(d.Host, len(s.hosts))
	if h := s.hosts[d.Host]; h != nil {
		s.refreshLoad(h, d.Type)
	}
	if !s.hasFree(d) {
		return
	}
	c := d.cls
	if c.byFree != nil {
		d.idxFree = onScale(d.Free().vec(), s.normOf(d.Type))
	}
	c.free.ReplaceOrInsert(d.ID)
	c.freeVer++
	if c.byFree != nil {
		c.byFree.ReplaceOrInsert(freeKey{d.idxFree, d.ID})
	}
	ch := c.onHost[d.Host]
	if ch == nil {
		ch = &classHost{}
		c.onHost[d.Host] = ch
	}
	ch.n++
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
// are never carried along, so a restored state ranks hosts identically).
func (s *State) refreshLoad(h *Host, t DeviceType) {
	l := s.hostLoadOf(h, t)
	l.n, l.used = 0, 0
	for _, d := range s.hostTypeDevices(h, t) {
		l.n++
		l.used += deviceUtil(d)
	}
}

// commonScale is the largest capacity of each dimension among classes:
// the scale that puts a type's dimensions on one footing.
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

// normOf returns a type's common scale.
func (s *State) normOf(t DeviceType) vec {
	s.syncNorms()
	return s.idx.norm[t]
}

// syncNorms recomputes the common scales after the classes changed; a
// scale that moved rekeys the type's shares and refiles every host.
func (s *State) syncNorms() {
	if !s.idx.normDirty {
		return
	}
	old := s.idx.norm
	s.idx.norm = map[DeviceType]vec{}
	for typ, list := range s.idx.byType {
		s.idx.norm[typ] = commonScale(list)
	}
	s.idx.normDirty = false
	moved := false
	for _, typ := range DeviceTypes {
		if s.idx.norm[typ] != old[typ] {
			s.rekeyShares(typ)
			moved = true
		}
	}
	if moved {
		s.markAllHostsDirty()
	}
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
			d.idxFree = onScale(d.Free().vec(), norm)
			c.byFree.ReplaceOrInsert(freeKey{d.idxFree, id})
		}
	}
}
