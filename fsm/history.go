package fsm

import (
	"hash/crc64"
	"maps"
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
// At about 1 KB a record (BytesPerHistoryRecord, BENCHMARKS.md "Memory")
// the history then takes at most some 100 MB of heap, whatever the
// write rate: the count bounds it even when a week holds far more.
var DefaultRetention = Retention{MaxCount: 100000, MaxAge: 7 * 24 * time.Hour}

// MaxRetentionCount is the most history entries that may be kept (some
// 10 GB of heap at BytesPerHistoryRecord).
const MaxRetentionCount = 10000000

// history holds ended allocations in the order they ended, and a digest
// of them: the sum of a hash of each record's snapshot encoding, kept as
// records enter and leave, so that hashing the state (WriteDigest) need
// not encode the history. History records never change once added.
type history struct {
	list   []histEntry
	head   int
	byID   map[string]*Allocation
	digest uint64
	rec    enc // reused to encode a record for its hash
	// shared is set while list's array may be read by a snapshot being
	// written (view): trim then leaves the array's entries alone, and
	// moves the kept ones to a new array soon, so that the dropped
	// records are not held for long. Atomic: readers of the state, under
	// a shared lock, capture snapshots concurrently.
	shared atomic.Bool
}

type histEntry struct {
	a    *Allocation
	hash uint64
}

func newHistory() *history { return &history{byID: map[string]*Allocation{}} }

func (h *history) add(a *Allocation) { h.addHashed(a, h.hash(a)) }

// addHashed adds a, whose record hashes to sum (recordHash of its
// snapshot encoding).
func (h *history) addHashed(a *Allocation, sum uint64) {
	h.list = append(h.list, histEntry{a: a, hash: sum})
	h.byID[a.ID] = a
	h.digest += sum
}

// hash is recordHash of a's snapshot encoding.
func (h *history) hash(a *Allocation) uint64 {
	h.rec.b = h.rec.b[:0]
	h.rec.alloc(a)
	return recordHash(h.rec.b)
}

// reserve makes room for n entries more, for a restore that knows how
// many may follow.
func (h *history) reserve(n int) {
	h.list = slices.Grow(h.list, n)
	byID := make(map[string]*Allocation, len(h.byID)+n)
	maps.Copy(byID, h.byID)
	h.byID = byID
}

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

func (h *history) get(id string) *Allocation { return h.byID[id] }

func (h *history) len() int { return len(h.list) - h.head }

// each calls f for every entry, oldest first, until f returns false.
func (h *history) each(f func(*Allocation) bool) {
	for _, e := range h.list[h.head:] {
		if !f(e.a) {
			return
		}
	}
}

// trim drops what the retention no longer keeps, telling dropped about
// each entry before it goes.
func (h *history) trim(now int64, r Retention, dropped func(*Allocation)) {
	cutoff := now - int64(r.MaxAge)
	for h.len() > 0 {
		e := h.list[h.head]
		if h.len() <= r.MaxCount && e.a.EndedAt >= cutoff {
			break
		}
		delete(h.byID, e.a.ID)
		h.digest -= e.hash
		if !h.shared.Load() {
			h.list[h.head] = histEntry{}
		}
		dropped(e.a)
		h.head++
	}
	if h.head > 1024 && (h.shared.Load() || h.head > len(h.list)/2) {
		h.list = append([]histEntry(nil), h.list[h.head:]...)
		h.head = 0
		h.shared.Store(false)
	}
}

// view returns the entries as they are now, without copying them: the
// history never changes them in place while they may be read (shared).
func (h *history) view() []histEntry {
	h.shared.Store(true)
	return h.list[h.head:len(h.list):len(h.list)]
}

// EachHistory calls f for every ended allocation, oldest first, until f
// returns false. f sees the state's own value: it must not keep or change
// it (Allocation.Clone gives a copy to keep). It copies nothing, so a
// reader can filter a large history cheaply under the read lock.
func (s *State) EachHistory(f func(*Allocation) bool) { s.history.each(f) }

// History returns ended allocations, oldest first.
func (s *State) History() []*Allocation {
	out := make([]*Allocation, 0, s.history.len())
	s.history.each(func(a *Allocation) bool {
		out = append(out, a.clone())
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

// key is where the entry is found: request IDs are scoped per namespace.
func (e *cacheEntry) key() string { return cacheKey(e.Namespace, e.RequestID) }

func cacheKey(ns, id string) string { return ns + "\x00" + id }

// requestCache keeps the entries oldest first in a ring that doubles when
// full, so entries are never copied as old ones are dropped.
type requestCache struct {
	ring []cacheEntry // length zero or a power of two
	// head is the sequence number of the oldest entry and n the number
	// of entries; entry q lives at ring[q&(len(ring)-1)].
	head int
	n    int
	byID map[string]int // sequence number
}

func newRequestCache() *requestCache { return &requestCache{byID: map[string]int{}} }

func (c *requestCache) at(q int) *cacheEntry { return &c.ring[q&(len(c.ring)-1)] }

func (c *requestCache) get(key string) (cacheEntry, bool) {
	q, ok := c.byID[key]
	if !ok {
		return cacheEntry{}, false
	}
	return *c.at(q), true
}

func (c *requestCache) put(e cacheEntry) {
	if c.n == len(c.ring) {
		ring := make([]cacheEntry, max(2*len(c.ring), 64))
		for q := c.head; q < c.head+c.n; q++ {
			ring[q&(len(ring)-1)] = *c.at(q)
		}
		c.ring = ring
	}
	q := c.head + c.n
	*c.at(q) = e
	c.n++
	c.byID[e.key()] = q
}

func (c *requestCache) trim(now int64) {
	cutoff := now - int64(requestCacheAge)
	for c.n > 0 {
		e := c.at(c.head)
		if c.n <= requestCacheCount && e.Time >= cutoff {
			break
		}
		delete(c.byID, e.key())
		*e = cacheEntry{}
		c.head++
		c.n--
	}
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
