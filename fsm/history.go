package fsm

import (
	"fmt"
	"hash/crc64"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// Retention bounds the history: an ended allocation is dropped when more
// than MaxCount are kept or when it ended more than MaxAge ago, and not
// before.
type Retention struct {
	MaxCount int           `json:"max_count"`
	MaxAge   time.Duration `json:"max_age"`
}

// DefaultRetention keeps a week or 100,000 allocations, whichever is less.
// At some 750 B a record (BytesPerHistoryRecord, BENCHMARKS.md "Memory")
// the history then takes at most some 75 MB of heap, whatever the
// write rate: the count bounds it even when a week holds far more.
var DefaultRetention = Retention{MaxCount: 100000, MaxAge: 7 * 24 * time.Hour}

// MaxRetentionCount is the most history entries that may be kept (some
// 7.5 GB of heap at BytesPerHistoryRecord).
const MaxRetentionCount = 10000000

// history holds ended allocations in the order they ended, each as its
// snapshot record (the encoding of snapcodec.go) rather than as an
// Allocation: the records lie one after another in large byte chunks, and
// the entries that find them, the index by ID and the digest hold no
// pointers, so the garbage collector has next to nothing to scan however
// long the history. A record is decoded when it is read (get, each, at).
// The digest is the sum of a hash of each record, kept as records enter
// and leave, so that hashing the state (WriteDigest) need not encode the
// history. History records never change once added.
type history struct {
	histRecords
	// used is how much of the last chunk holds records.
	used int
	// list holds the entries, oldest first from head; first is the
	// record number (how many records were added before it) of
	// list[head]. Record numbers never change as the history trims.
	list  []histEntry
	head  int
	first uint64
	// idx finds a record number by its allocation's ID.
	idx    histIndex
	digest uint64
	rec    enc // reused to encode a record
	// shared is set while the arrays of list and chunks may be read by a
	// snapshot being written (view): trim then leaves the chunks array's
	// elements alone, and moves both to new arrays soon, so that the
	// dropped chunks are not held for long. Atomic: readers of the state,
	// under a shared lock, capture snapshots concurrently.
	shared atomic.Bool
}

// histRecords holds the history's records: chunk number c (counted from
// the first the history made) is chunks[c-chunk0]. A chunk is made at its
// full length and a byte of it never changes once written.
type histRecords struct {
	chunks [][]byte
	chunk0 uint32
}

// histEntry is where a record lies, and what trim and the statistics read
// without decoding it.
type histEntry struct {
	chunk, off, n uint32
	// dev is where the record's first device ID starts in it; 0 when the
	// allocation got no devices.
	dev     uint32
	hash    uint64
	endedAt int64
}

// Chunks grow from histChunkMin to histChunkMax bytes, so that a short
// history takes little; a longer record takes a chunk of its own.
const (
	histChunkMin = 4 << 10
	histChunkMax = 1 << 20
)

func newHistory() *history { return &history{idx: newHistIndex()} }

// add adds a, encoding it. The history must not hold its ID: an ended
// allocation enters it once (a restore, which could offer one twice,
// files its records and checks them as it indexes them, indexFiled).
func (h *history) add(a *Allocation) {
	h.rec.b = h.rec.b[:0]
	dev := h.rec.alloc(a)
	h.idx.add(a.ID, h.next(), h.first)
	h.file(h.rec.b, recordHash(h.rec.b), dev, a.EndedAt)
}

// next is the number the next record will have.
func (h *history) next() uint64 { return h.first + uint64(h.len()) }

// file adds record b (copied), hashing to sum, its first device ID
// starting at dev, of an allocation that ended at endedAt, to the
// records, the entries and the digest; not to the index.
func (h *history) file(b []byte, sum uint64, dev int, endedAt int64) {
	if len(h.chunks) == 0 || len(b) > len(h.chunks[len(h.chunks)-1])-h.used {
		size := histChunkMin
		if len(h.chunks) > 0 {
			size = min(2*len(h.chunks[len(h.chunks)-1]), histChunkMax)
		}
		h.chunks = append(h.chunks, make([]byte, max(size, len(b))))
		h.used = 0
	}
	copy(h.chunks[len(h.chunks)-1][h.used:], b)
	h.list = append(h.list, histEntry{
		chunk: h.chunk0 + uint32(len(h.chunks)-1), off: uint32(h.used), n: uint32(len(b)),
		dev: uint32(dev), hash: sum, endedAt: endedAt,
	})
	h.used += len(b)
	h.digest += sum
}

// indexFiled indexes the records filed (file) into a history whose index
// holds nothing yet, their IDs hashing to hashes (histIndex.hash), in
// order. It returns the number of the first record whose ID one before
// it has (ok false: none): those from it on are left out of the index.
func (h *history) indexFiled(hashes []uint64) (dup uint64, ok bool) {
	return h.idx.build(hashes, h.first, h.idAt)
}

// idAt is the allocation ID record number n (kept) starts with.
func (h *history) idAt(n uint64) []byte { return idOf(h.record(h.entry(n))) }

// reserve makes room for n entries more, for a restore that knows how
// many may follow.
func (h *history) reserve(n int) { h.list = slices.Grow(h.list, n) }

// recordHash hashes an encoded record: CRC-64 with its bits mixed
// (SplitMix64's finalizer), so that sums of hashes of different records
// do not cancel out the way sums of CRCs can.
func recordHash(b []byte) uint64 {
	x := crc64.Checksum(b, crcTable)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

var crcTable = crc64.MakeTable(crc64.ECMA)

// record is the bytes of e's record.
func (r *histRecords) record(e histEntry) []byte {
	return r.chunks[e.chunk-r.chunk0][e.off : e.off+e.n]
}

// decode decodes e's record into a new Allocation, which the caller may
// keep. Every record decodes: it was encoded, or decoded whole, as it
// entered.
func (r *histRecords) decode(e histEntry) *Allocation {
	d := dec{b: r.record(e)}
	return d.alloc()
}

// idOf is the allocation ID a record starts with.
func idOf(rec []byte) []byte {
	d := dec{b: rec}
	return d.raw()
}

// entry is record number n's entry, n being kept.
func (h *history) entry(n uint64) histEntry { return h.list[h.head+int(n-h.first)] }

// kept reports whether record number n is still in the history.
func (h *history) kept(n uint64) bool { return n >= h.first }

// last is the number of the record added last.
func (h *history) last() uint64 { return h.first + uint64(h.len()) - 1 }

// find returns the record number of allocation id.
func (h *history) find(id string) (uint64, bool) { return h.idx.find(id, h.first, h.idAt) }

// has reports whether the history holds allocation id.
func (h *history) has(id string) bool {
	_, ok := h.find(id)
	return ok
}

// get returns allocation id, decoded afresh, or nil.
func (h *history) get(id string) *Allocation {
	n, ok := h.find(id)
	if !ok {
		return nil
	}
	return h.at(n)
}

// at returns record number n (kept), decoded afresh.
func (h *history) at(n uint64) *Allocation { return h.decode(h.entry(n)) }

func (h *history) len() int { return len(h.list) - h.head }

// each calls f for every entry, oldest first, decoded afresh, until f
// returns false.
func (h *history) each(f func(*Allocation) bool) {
	for _, e := range h.list[h.head:] {
		if !f(h.decode(e)) {
			return
		}
	}
}

// eachFirstDevice calls f with the number and first device ID of every
// record of an allocation that got devices, oldest first. The ID is the
// record's bytes: f must not keep it.
func (h *history) eachFirstDevice(f func(n uint64, dev []byte)) {
	for i, e := range h.list[h.head:] {
		if e.dev != 0 {
			f(h.first+uint64(i), idOf(h.record(e)[e.dev:]))
		}
	}
}

// trim drops what the retention no longer keeps, telling dropped about
// each entry (decoded afresh) before it goes.
func (h *history) trim(now int64, r Retention, dropped func(*Allocation)) {
	cutoff := now - int64(r.MaxAge)
	for h.len() > 0 {
		e := h.list[h.head]
		if h.len() <= r.MaxCount && e.endedAt >= cutoff {
			break
		}
		a := h.decode(e)
		h.digest -= e.hash
		h.head++
		h.first++
		h.idx.remove(a.ID, h.first-1, h.first)
		dropped(a)
	}
	// The chunks before the oldest record's go; the last stays, to take
	// the next records.
	drop := max(len(h.chunks)-1, 0)
	if h.len() > 0 {
		drop = min(drop, int(h.list[h.head].chunk-h.chunk0))
	}
	for range drop {
		if !h.shared.Load() {
			h.chunks[0] = nil
		}
		h.chunks = h.chunks[1:]
		h.chunk0++
	}
	if h.head > 1024 && (h.shared.Load() || h.head > len(h.list)/2) {
		h.list = append([]histEntry(nil), h.list[h.head:]...)
		h.chunks = append([][]byte(nil), h.chunks...)
		h.head = 0
		h.shared.Store(false)
	}
}

// histView is the history as a snapshot captured it: entries and the
// chunks their records lie in, which the history never changes in place
// while they may be read (shared).
type histView struct {
	histRecords
	list []histEntry
}

// view returns the history as it is now, without copying it.
func (h *history) view() histView {
	h.shared.Store(true)
	k := len(h.chunks)
	return histView{
		histRecords: histRecords{chunks: h.chunks[:k:k], chunk0: h.chunk0},
		list:        h.list[h.head:len(h.list):len(h.list)],
	}
}

// check verifies that the history holds together: every record decodes
// whole, hashes to its entry's hash and is found by its ID, its entry's
// EndedAt and first device are its own, and the digest is the sum of the
// hashes.
func (h *history) check() error {
	if h.idx.len() != h.len() || !h.idx.check(h.first) {
		return fmt.Errorf("history: %d records but %d indexed (%d stale, %d recent, %d collided), or the index is out of order", h.len(), h.idx.len(), h.idx.stale, len(h.idx.recent), len(h.idx.collided))
	}
	var sum uint64
	for i, e := range h.list[h.head:] {
		n := h.first + uint64(i)
		rec := h.record(e)
		d := dec{b: rec}
		a := d.alloc()
		if d.err != nil || len(d.b) != 0 {
			return fmt.Errorf("history record %d does not decode", n)
		}
		if recordHash(rec) != e.hash || a.EndedAt != e.endedAt {
			return fmt.Errorf("history record %d: entry does not match", n)
		}
		if len(a.Devices) > 0 != (e.dev != 0) || e.dev != 0 && (int(e.dev) >= len(rec) || string(idOf(rec[e.dev:])) != a.Devices[0].DeviceID) {
			return fmt.Errorf("history record %d: first device misplaced", n)
		}
		if m, ok := h.find(a.ID); !ok || m != n {
			return fmt.Errorf("history record %d: allocation %s not found by its ID", n, a.ID)
		}
		sum += e.hash
	}
	if sum != h.digest {
		return fmt.Errorf("history digest %x, records sum to %x", h.digest, sum)
	}
	return nil
}

// EachHistory calls f for every ended allocation, oldest first, until f
// returns false. Each is decoded from the history's record for the call:
// f may keep it. A reader can filter a large history under the read
// lock without copying what it does not keep.
func (s *State) EachHistory(f func(*Allocation) bool) { s.history.each(f) }

// History returns ended allocations, oldest first.
func (s *State) History() []*Allocation {
	out := make([]*Allocation, 0, s.history.len())
	s.history.each(func(a *Allocation) bool {
		out = append(out, a)
		return true
	})
	return out
}

// Request IDs are remembered this long and this many, whichever is less.
const (
	requestCacheAge   = 24 * time.Hour
	requestCacheCount = 1 << 18
)

// cacheEntry is the first result of a request ID in a namespace, and the
// digest of the command that gave it: a later command with the same ID
// must be the same command.
type cacheEntry struct {
	RequestID    string `json:"request_id"`
	Namespace    string `json:"namespace,omitempty"`
	Digest       string `json:"digest,omitempty"`
	Index        uint64 `json:"index"`
	Time         int64  `json:"time"`
	AllocationID string `json:"allocation_id,omitempty"`
	Err          *Error `json:"error,omitempty"`
}

// requestKey is where an entry is found: request IDs are scoped per
// namespace. A pair rather than one joined string, so that neither a
// lookup nor an insert builds a key.
type requestKey struct{ namespace, id string }

func (e *cacheEntry) key() requestKey { return requestKey{e.Namespace, e.RequestID} }

// requestCache keeps the entries oldest first in a ring that doubles when
// full, so entries are never copied as old ones are dropped. The digest
// is the sum of a hash of each entry's encoding, kept as entries enter
// and leave, so that hashing the state (WriteDigest) need not encode a
// quarter of a million of them.
type requestCache struct {
	ring []cacheEntry // length zero or a power of two
	// hashes[i] is the hash of ring[i].
	hashes []uint64
	// head is the sequence number of the oldest entry and n the number
	// of entries; entry q lives at ring[q&(len(ring)-1)].
	head   int
	n      int
	byID   map[requestKey]int // sequence number
	digest uint64
	rec    enc // reused to encode an entry for its hash
}

func newRequestCache() *requestCache { return &requestCache{byID: map[requestKey]int{}} }

func (c *requestCache) at(q int) *cacheEntry { return &c.ring[q&(len(c.ring)-1)] }

func (c *requestCache) get(key requestKey) (cacheEntry, bool) {
	q, ok := c.byID[key]
	if !ok {
		return cacheEntry{}, false
	}
	return *c.at(q), true
}

func (c *requestCache) put(e cacheEntry) {
	if c.n == len(c.ring) {
		size := max(2*len(c.ring), 64)
		ring, hashes := make([]cacheEntry, size), make([]uint64, size)
		for q := c.head; q < c.head+c.n; q++ {
			ring[q&(size-1)] = *c.at(q)
			hashes[q&(size-1)] = c.hashes[q&(len(c.ring)-1)]
		}
		c.ring, c.hashes = ring, hashes
	}
	q := c.head + c.n
	*c.at(q) = e
	h := c.hash(&e)
	c.hashes[q&(len(c.ring)-1)] = h
	c.digest += h
	c.n++
	c.byID[e.key()] = q
}

// hash is the hash of an entry's snapshot encoding.
func (c *requestCache) hash(e *cacheEntry) uint64 {
	c.rec.b = c.rec.b[:0]
	c.rec.cacheEntry(e)
	return recordHash(c.rec.b)
}

func (c *requestCache) trim(now int64) {
	cutoff := now - int64(requestCacheAge)
	for c.n > 0 {
		e := c.at(c.head)
		if c.n <= requestCacheCount && e.Time >= cutoff {
			break
		}
		delete(c.byID, e.key())
		c.digest -= c.hashes[c.head&(len(c.ring)-1)]
		*e = cacheEntry{}
		c.head++
		c.n--
	}
}

// check verifies that every entry is found by its key, hashes to its
// hash, and that the digest is the sum of the hashes.
func (c *requestCache) check() error {
	if len(c.byID) != c.n {
		return fmt.Errorf("request cache: %d entries but %d keys", c.n, len(c.byID))
	}
	var sum uint64
	for q := c.head; q < c.head+c.n; q++ {
		e := c.at(q)
		if got, ok := c.byID[e.key()]; !ok || got != q {
			return fmt.Errorf("request cache entry %d (%s) not found by its key", q, e.RequestID)
		}
		h := c.hashes[q&(len(c.ring)-1)]
		if c.hash(e) != h {
			return fmt.Errorf("request cache entry %d (%s): hash does not match", q, e.RequestID)
		}
		sum += h
	}
	if sum != c.digest {
		return fmt.Errorf("request cache digest %x, entries sum to %x", c.digest, sum)
	}
	return nil
}

// entries returns the entries, oldest first.
func (c *requestCache) entries() []cacheEntry {
	out := make([]cacheEntry, 0, c.n)
	for q := c.head; q < c.head+c.n; q++ {
		out = append(out, *c.at(q))
	}
	return out
}

// shapeWindowSize is how many recent requests describe the typical workload.
const shapeWindowSize = 1000

// Shape is the form of a request, without priority or timing: what the
// fragmentation-aware policy calls a typical task.
type Shape struct {
	Claims []Claim `json:"claims"`
}

func (sh Shape) key() string {
	var b []byte
	for _, c := range sh.Claims {
		b = append(append(b, c.Type...), '/')
		b = append(strconv.AppendInt(b, int64(c.Count), 10), '/')
		b = append(append(b, c.Pool...), '/')
		b = append(c.Capabilities.vec().appendText(b), '/')
		b = append(c.Amount.vec().appendText(b), ';')
		for _, k := range sortedKeys(c.Capabilities.Custom) {
			b = append(append(append(append(b, k...), '='), c.Capabilities.Custom[k]...), ',')
		}
	}
	return string(b)
}

// appendText appends v as fmt's %v writes it ("[1 0 80 0]"), which is
// what Shape keys were first written with.
func (v vec) appendText(b []byte) []byte {
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendFloat(b, x, 'g', -1, 64)
	}
	return append(b, ']')
}

// shapeWindow keeps the shapes of the last requests, oldest first.
type shapeWindow struct {
	list []Shape
}

func newShapeWindow() *shapeWindow { return &shapeWindow{} }

func (w *shapeWindow) add(r *Request) {
	sh := Shape{Claims: make([]Claim, len(r.Claims))}
	for i, c := range r.Claims {
		sh.Claims[i] = Claim{Type: c.Type, Count: c.Count, Pool: r.claimPool(i), Capabilities: c.Capabilities, Amount: c.Amount}
	}
	if r.IsGang() {
		// A gang counts as one host's part of an even split.
		sh.Claims[0].Count = max(r.minPerHost(), (r.Claims[0].Count+r.MaxHosts-1)/r.MaxHosts)
	}
	if len(w.list) >= shapeWindowSize {
		// Slide the window by reslicing; the buffer is renewed once per
		// window length, so an add costs O(1) amortized.
		w.list[0] = Shape{}
		w.list = w.list[1:]
	}
	if len(w.list) == cap(w.list) {
		w.list = append(make([]Shape, 0, len(w.list)+shapeWindowSize), w.list...)
	}
	w.list = append(w.list, sh)
}
