package fsm

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
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

// TestHistoryCollision gives two IDs one index slot, as a hash collision
// would, and checks that both are found and trimmed.
func TestHistoryCollision(t *testing.T) {
	h := newHistory()
	h.add(histAlloc("x1", 1, false))
	// x2's slot is taken by x1's record when x2 comes.
	fake := maphash.String(h.seed, "x2")
	h.byHash[fake] = h.byHash[maphash.String(h.seed, "x1")]
	h.add(histAlloc("x2", 2, false))
	delete(h.byHash, fake)
	if len(h.collided) != 1 {
		t.Fatalf("collided holds %d, want x2", len(h.collided))
	}
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"x1", "x2"} {
		if a := h.get(id); a == nil || a.ID != id {
			t.Fatalf("%s not found: %+v", id, a)
		}
	}
	h.trim(3, Retention{MaxCount: 0, MaxAge: 1 << 40}, func(*Allocation) {})
	if h.len() != 0 || len(h.byHash)+len(h.collided) != 0 || h.get("x2") != nil {
		t.Fatalf("trimmed history keeps %d records, %d index entries", h.len(), len(h.byHash)+len(h.collided))
	}
	if err := h.check(); err != nil {
		t.Fatal(err)
	}
}
