package fsm

import (
	"bytes"
	"fmt"
	"hash/crc64"
	"math/rand/v2"
	"slices"
	"testing"
)

// histAlloc is an ended allocation of ID id, on a device unless none.
func histAlloc(id string, ended int64, none bool) *Allocation {
	a := &Allocation{
		ID: id, Namespace: DefaultNamespace, Status: Released, EndedAt: ended,
		Request: Request{Claims: []Claim{{Type: "GPU", Count: 1}}},
	}
	if !none {
		a.Devices = []Assignment{{DeviceID: "dev-" + id}}
	}
	return a
}

// viewBytes is what a snapshot would write of a history view's records.
func viewBytes(v histView) []byte {
	var b []byte
	for _, e := range v.list {
		b = append(b, v.record(e)...)
	}
	return b
}

// TestHistoryRecords adds and trims records at random and checks that
// the history finds what it keeps and nothing else, releases the chunks
// of trimmed records, holds together (check), and that a view taken on
// the way reads the same bytes however the history changes after.
func TestHistoryRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := newHistory()
	var views []histView
	var viewed [][]byte
	dropped := 0
	for i := range 20000 {
		h.add(histAlloc(fmt.Sprintf("a%05d", i), int64(i), i%7 == 0))
		if rng.IntN(100) == 0 {
			keep := rng.IntN(3000)
			h.trim(int64(i), Retention{MaxCount: keep, MaxAge: 1 << 40}, func(a *Allocation) {
				if want := fmt.Sprintf("a%05d", dropped); a.ID != want {
					t.Fatalf("dropped %s, want %s", a.ID, want)
				}
				dropped++
			})
		}
		if rng.IntN(500) == 0 {
			v := h.view()
			views = append(views, v)
			viewed = append(viewed, viewBytes(v))
		}
	}
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		id := fmt.Sprintf("a%05d", i)
		a := h.get(id)
		if kept := i >= dropped; kept != (a != nil) || kept && (a.ID != id || a.EndedAt != int64(i)) {
			t.Fatalf("%s: kept %t, got %+v", id, kept, a)
		}
	}
	// Each chunk holds at least a few hundred of these small records.
	if len(h.chunks) > h.len()/100+2 {
		t.Errorf("%d chunks for %d records", len(h.chunks), h.len())
	}
	for i, v := range views {
		if !bytes.Equal(viewBytes(v), viewed[i]) {
			t.Fatalf("view %d reads other bytes after the history changed", i)
		}
	}
}

// TestHistoryIndexCollisions adds and trims records at random under a
// hash of the IDs that collides often (64 values), through the index's
// merges and compactions, and checks after each step that what is kept
// is found, at its number, and what was trimmed is not.
func TestHistoryIndexCollisions(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	h := newHistory()
	h.idx.hash = func(id string) uint64 { return uint64(crc64.Checksum([]byte(id), crcTable) % 64) }
	numbers := map[string]uint64{}
	next, dropped := 0, 0
	total := 6 * histMergeMin
	merged, stale := false, false
	for next < total {
		for range 1 + rng.IntN(200) {
			id := fmt.Sprintf("c%06d", next)
			numbers[id] = h.next()
			h.add(histAlloc(id, int64(next), next%5 == 0))
			next++
		}
		if rng.IntN(4) == 0 {
			h.trim(int64(next), Retention{MaxCount: histMergeMin + rng.IntN(2*histMergeMin), MaxAge: 1 << 40}, func(a *Allocation) {
				delete(numbers, a.ID)
				dropped++
			})
		}
		for range 20 {
			id := fmt.Sprintf("c%06d", rng.IntN(next))
			n, ok := h.find(id)
			if want, kept := numbers[id]; ok != kept || ok && n != want {
				t.Fatalf("find(%s) = %d, %t; want %d, %t", id, n, ok, want, kept)
			}
		}
		merged = merged || len(h.idx.sorted) > 0
		stale = stale || h.idx.stale > 0
	}
	if dropped == 0 || !merged || !stale {
		t.Fatalf("the test trimmed %d, merged %t, left stale entries %t: it must do all three", dropped, merged, stale)
	}
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
	for id, want := range numbers {
		if n, ok := h.find(id); !ok || n != want {
			t.Fatalf("find(%s) = %d, %t; want %d", id, n, ok, want)
		}
	}
}

// TestHistoryIndexBuild files records as a restore does, their IDs all
// hashing alike, and checks that the first record whose ID came before
// is the one reported, that the records before it are found at their
// numbers, and that those from it on are left out.
func TestHistoryIndexBuild(t *testing.T) {
	for _, repeatAt := range []int{-1, 1, 7, 299} {
		h := newHistory()
		h.idx.hash = func(string) uint64 { return 42 }
		var hashes []uint64
		var enc enc
		ids := make([]string, 300)
		for i := range ids {
			ids[i] = fmt.Sprintf("b%03d", i)
			if i == repeatAt || i == 250 && repeatAt >= 0 {
				ids[i] = ids[i/2] // 250 repeats too
			}
			enc.b = enc.b[:0]
			a := histAlloc(ids[i], int64(i), false)
			dev := enc.alloc(a)
			h.file(enc.b, recordHash(enc.b), dev, a.EndedAt)
			hashes = append(hashes, h.idx.hash(ids[i]))
		}
		dup, ok := h.indexFiled(hashes)
		first := len(ids)
		if repeatAt >= 0 {
			first = min(repeatAt, 250)
		}
		if ok != (repeatAt >= 0) || ok && dup != uint64(first) {
			t.Fatalf("repeat at %d: dup %d, %t; want %d", repeatAt, dup, ok, first)
		}
		for i, id := range ids {
			n, found := h.find(id)
			if i < first && (!found || n != uint64(slices.Index(ids, id))) {
				t.Fatalf("repeat at %d: find(%s) = %d, %t; want %d", repeatAt, id, n, found, i)
			}
			if i >= first && found && n >= uint64(first) {
				t.Fatalf("repeat at %d: record %d of %s indexed", repeatAt, n, id)
			}
		}
		if !ok {
			if err := h.check(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
