package fsm

import (
	"cmp"
	"hash/maphash"
	"slices"
)

// histIndex finds a history record's number by its allocation's ID. It
// keeps a 64-bit hash of each ID beside the record's number; the ID read
// from the record decides, so hashes that collide only cost a look at
// each record. Nothing that decides or is serialized depends on it.
//
// Two levels, so that a restore, which files a million records at once,
// sorts one array instead of filling a map a record at a time (a cache
// miss each), and so that the index holds no pointers:
//   - sorted holds (hash, number) pairs in that order, some of them of
//     records trimmed since (stale counts them: trim leaves them, a look
//     up skips them);
//   - recent maps the hash of each ID added since sorted was made to its
//     number; collided holds, by ID, those whose hash recent held when
//     they came.
//
// Once recent holds a quarter of sorted's entries, or stale half of them
// (and either some thousands), the two are merged into a new sorted:
// every change costs O(1) amortised, and a look up O(log n).
type histIndex struct {
	sorted   []idRef
	stale    int
	recent   map[uint64]uint64
	collided map[string]uint64
	hash     func(id string) uint64
}

// idRef is a record's number and the hash of its allocation's ID.
type idRef struct{ hash, n uint64 }

func (a idRef) compare(b idRef) int {
	return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.n, b.n))
}

// histMergeMin is the fewest recent or stale entries a merge waits for.
const histMergeMin = 1 << 14

func newHistIndex() histIndex {
	seed := maphash.MakeSeed()
	return histIndex{
		recent: map[uint64]uint64{}, collided: map[string]uint64{},
		hash: func(id string) uint64 { return maphash.String(seed, id) },
	}
}

// len is how many records the index finds.
func (x *histIndex) len() int { return len(x.sorted) - x.stale + len(x.recent) + len(x.collided) }

// find returns the number of the record of allocation id, idOf reading
// the allocation ID of a record and first being the oldest number kept.
func (x *histIndex) find(id string, first uint64, idOf func(n uint64) []byte) (uint64, bool) {
	k := x.hash(id)
	if n, ok := x.recent[k]; ok && string(idOf(n)) == id {
		return n, true
	}
	if n, ok := x.collided[id]; ok {
		return n, true
	}
	i, _ := slices.BinarySearchFunc(x.sorted, idRef{hash: k}, idRef.compare)
	for ; i < len(x.sorted) && x.sorted[i].hash == k; i++ {
		if n := x.sorted[i].n; n >= first && string(idOf(n)) == id {
			return n, true
		}
	}
	return 0, false
}

// add indexes record n of allocation id, which the index does not find.
func (x *histIndex) add(id string, n, first uint64) {
	k := x.hash(id)
	if _, taken := x.recent[k]; taken {
		x.collided[id] = n
	} else {
		x.recent[k] = n
	}
	if len(x.recent)+len(x.collided) >= max(len(x.sorted)/4, histMergeMin) {
		x.merge(first)
	}
}

// remove forgets record n of allocation id, trimmed: first is now past
// it.
func (x *histIndex) remove(id string, n, first uint64) {
	if m, ok := x.collided[id]; ok && m == n {
		delete(x.collided, id)
		return
	}
	if k := x.hash(id); x.hasRecent(k, n) {
		delete(x.recent, k)
		return
	}
	x.stale++
	if x.stale >= max(len(x.sorted)/2, histMergeMin) {
		x.merge(first)
	}
}

func (x *histIndex) hasRecent(k, n uint64) bool {
	m, ok := x.recent[k]
	return ok && m == n
}

// merge makes sorted anew from the entries of records still kept (first
// and later) and the recent ones.
func (x *histIndex) merge(first uint64) {
	add := make([]idRef, 0, len(x.recent)+len(x.collided))
	for k, n := range x.recent { // sorted next: order-free
		add = append(add, idRef{hash: k, n: n})
	}
	for id, n := range x.collided {
		add = append(add, idRef{hash: x.hash(id), n: n})
	}
	slices.SortFunc(add, idRef.compare)
	out := make([]idRef, 0, len(x.sorted)-x.stale+len(add))
	i := 0
	for _, r := range x.sorted {
		if r.n < first {
			continue
		}
		for ; i < len(add) && add[i].compare(r) < 0; i++ {
			out = append(out, add[i])
		}
		out = append(out, r)
	}
	x.sorted = append(out, add[i:]...)
	x.stale = 0
	clear(x.recent)
	clear(x.collided)
}

// build indexes, at once, records first to first+len(hashes)-1, of
// allocations whose IDs hash to hashes (in their order), into an index
// that holds nothing yet: what a restore files. It returns the number of
// the first record whose ID an earlier record of them has (ok false when
// there is none), and indexes only the records before it.
func (x *histIndex) build(hashes []uint64, first uint64, idOf func(n uint64) []byte) (dup uint64, ok bool) {
	refs := make([]idRef, len(hashes))
	for i, k := range hashes {
		refs[i] = idRef{hash: k, n: first + uint64(i)}
	}
	refs = sortByHash(refs, make([]idRef, len(refs)))
	// Within a run of one hash (some records long at most), the records
	// come in order: one whose ID a record before it in the run has is a
	// repeat, the least such number the first.
	for i := 0; i < len(refs); {
		j := i + 1
		for j < len(refs) && refs[j].hash == refs[i].hash {
			j++
		}
		for b := i + 1; b < j; b++ {
			for a := i; a < b; a++ {
				if string(idOf(refs[a].n)) == string(idOf(refs[b].n)) && (!ok || refs[b].n < dup) {
					dup, ok = refs[b].n, true
				}
			}
		}
		i = j
	}
	if ok {
		refs = slices.DeleteFunc(refs, func(r idRef) bool { return r.n >= dup })
	}
	x.sorted = refs
	return dup, ok
}

// sortByHash sorts refs, which are in order of their numbers, by hash
// then number: a radix sort on the hash, 16 bits at a time, stable, so
// that refs of one hash keep their order. tmp is as long as refs; the
// sorted refs are in one of the two, returned.
func sortByHash(refs, tmp []idRef) []idRef {
	var counts [1 << 16]int
	for shift := 0; shift < 64; shift += 16 {
		clear(counts[:])
		for _, r := range refs {
			counts[uint16(r.hash>>shift)]++
		}
		at := 0
		for i, c := range counts {
			counts[i] = at
			at += c
		}
		for _, r := range refs {
			d := uint16(r.hash >> shift)
			tmp[counts[d]] = r
			counts[d]++
		}
		refs, tmp = tmp, refs
	}
	return refs
}

// check verifies that sorted is in order and stale counts what it holds
// of records before first.
func (x *histIndex) check(first uint64) bool {
	stale := 0
	for i, r := range x.sorted {
		if i > 0 && x.sorted[i-1].compare(r) >= 0 {
			return false
		}
		if r.n < first {
			stale++
		}
	}
	return stale == x.stale
}
