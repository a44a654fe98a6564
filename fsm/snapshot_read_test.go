package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"
)

// manyRecordsState is a state whose devices and history each take
// several of readSection's batches: 2 hosts of 300 GPUs, and 3 batches
// and some of allocations that ended (released, or lost with their host).
func manyRecordsState(t *testing.T) *State {
	h := newHarness(t)
	h.must(&SetRetention{Retention: Retention{MaxCount: 100000, MaxAge: 24 * time.Hour}})
	for _, id := range []string{"h1", "h2"} {
		var devs []DeviceSpec
		for i := range 300 {
			devs = append(devs, gpu(fmt.Sprintf("%s-g%03d", id, i), float64(16+i%5*16)))
		}
		h.must(host(id, devs...))
	}
	for i := range 3*sectionBatch + 17 {
		r := h.must(gpuReq(float64(8 + i%4*8)))
		if i%50 != 0 {
			h.must(&Release{AllocationID: r.Allocation.ID})
		}
	}
	h.must(gpuReq(8)) // still live
	if n := h.s.history.len(); n < 3*sectionBatch {
		t.Fatalf("history of %d entries: the test needs more than 3 batches", n)
	}
	return h.s
}

// withProcs runs f with GOMAXPROCS set to n, so that restores run with n
// decoders (sectionDecoders).
func withProcs(t *testing.T, n int, f func()) {
	t.Helper()
	prev := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(prev)
	if got := sectionDecoders(); got != min(n, 4) {
		t.Fatalf("%d decoders with GOMAXPROCS=%d", got, n)
	}
	f()
}

// TestRestoreDecodersAgree: whether one goroutine or several decode the
// records, a restored state writes the bytes of its original, has its
// digest, and reports the same statistics and recommendations.
func TestRestoreDecodersAgree(t *testing.T) {
	s := manyRecordsState(t)
	snap := s.SnapshotBytes()
	var digest bytes.Buffer
	if err := s.WriteDigest(&digest); err != nil {
		t.Fatal(err)
	}
	stats, recs := s.Stats(StatsFilter{}), s.Recommend("")
	if len(stats) == 0 {
		t.Fatal("no statistics: the test compares nothing")
	}
	for _, procs := range []int{1, 2, 4} {
		withProcs(t, procs, func() {
			r, err := Restore(bytes.NewReader(snap))
			if err != nil {
				t.Fatalf("%d decoders: %v", procs, err)
			}
			if !bytes.Equal(r.SnapshotBytes(), snap) {
				t.Fatalf("%d decoders: the restored state writes other bytes", procs)
			}
			var d bytes.Buffer
			if err := r.WriteDigest(&d); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(d.Bytes(), digest.Bytes()) {
				t.Fatalf("%d decoders: the restored state has another digest", procs)
			}
			if got := r.Stats(StatsFilter{}); !reflect.DeepEqual(got, stats) {
				t.Fatalf("%d decoders: statistics\n%+v\nwant\n%+v", procs, got, stats)
			}
			if got := r.Recommend(""); !reflect.DeepEqual(got, recs) {
				t.Fatalf("%d decoders: recommendations\n%+v\nwant\n%+v", procs, got, recs)
			}
		})
	}
}

// snapRecord is where one record of a format 2 snapshot lies: its length
// prefix starts at at, its bytes at body, and it ends at end.
type snapRecord struct{ at, body, end int }

// snapSections splits a format 2 snapshot into its sections' records:
// hosts, devices, live allocations, requests, history.
func snapSections(t *testing.T, snap []byte) [5][]snapRecord {
	t.Helper()
	at := 1
	uvarint := func() int {
		x, n := binary.Uvarint(snap[at:])
		if n <= 0 {
			t.Fatalf("no varint at %d", at)
		}
		at += n
		return int(x)
	}
	record := func() snapRecord {
		r := snapRecord{at: at}
		n := uvarint()
		r.body, r.end = at, at+n
		at = r.end
		return r
	}
	record() // head
	var out [5][]snapRecord
	for i := range out {
		for n := uvarint(); n > 0; n-- {
			out[i] = append(out[i], record())
		}
	}
	if at != len(snap) {
		t.Fatalf("sections end at %d of %d bytes", at, len(snap))
	}
	return out
}

// TestRestoreFirstErrorWins: a snapshot with faults in its history
// records, in one batch or in different ones, is refused with the error
// of the first fault in the stream's order, as reading, decoding and
// filing one record after the other would refuse it, and whatever the
// number of decoders; the goroutines have ended when Restore returns.
func TestRestoreFirstErrorWins(t *testing.T) {
	st := manyRecordsState(t)
	snap := st.SnapshotBytes()
	hist := snapSections(t, snap)[4]
	// ended is a live allocation's record as if it had ended.
	live := *st.allocs[sortedKeys(st.allocs)[0]]
	live.Status, live.EndedAt = Released, live.AllocatedAt+1
	var ended enc
	ended.alloc(&live)
	const (
		malformed = iota // a record that does not decode
		repeated         // a record with the ID of the one before
		liveID           // a record with the ID of a live allocation
		oversized        // a length beyond maxSnapshotRecord
		cutBody          // the snapshot ends a byte before the record does
		cutLength        // the snapshot ends inside the record's length
	)
	want := map[int]string{
		malformed: "malformed history record",
		repeated:  "bad history entry",
		liveID:    "bad history entry",
		oversized: fmt.Sprintf("history record of %d bytes", maxSnapshotRecord+1),
		cutBody:   "truncated history record",
		cutLength: "truncated",
	}
	// faulty writes the snapshot with the faults at the records given.
	faulty := func(faults map[int]int) []byte {
		out := bytes.Clone(snap[:hist[0].at])
		for k, r := range hist {
			body := snap[r.body:r.end]
			switch f, ok := faults[k]; {
			case !ok:
			case f == malformed:
				body = append([]byte{0xff, 0x7f}, body...) // an ID longer than the record
			case f == repeated:
				body = snap[hist[k-1].body:hist[k-1].end]
			case f == liveID:
				body = ended.b
			case f == oversized:
				out = binary.AppendUvarint(out, maxSnapshotRecord+1)
				continue
			case f == cutBody:
				out = binary.AppendUvarint(out, uint64(len(body)))
				return append(out, body[:len(body)-1]...)
			case f == cutLength:
				return append(out, 0x80|200) // 200 takes two bytes
			}
			out = binary.AppendUvarint(out, uint64(len(body)))
			out = append(out, body...)
		}
		return out
	}
	b := sectionBatch
	cases := []struct {
		faults map[int]int
		first  int // the fault whose error is expected
	}{
		{map[int]int{3: malformed}, malformed},
		{map[int]int{len(hist) - 1: malformed}, malformed},
		{map[int]int{2*b + 5: repeated}, repeated},
		{map[int]int{b: oversized}, oversized},
		{map[int]int{b + 41: cutBody}, cutBody},
		{map[int]int{2*b + 9: cutLength}, cutLength},
		{map[int]int{10: repeated, 2*b + 10: malformed}, repeated},
		{map[int]int{10: malformed, 2*b + 10: repeated}, malformed},
		{map[int]int{b + 1: repeated, b + 2: malformed}, repeated},
		{map[int]int{b - 1: malformed, b: repeated}, malformed},
		{map[int]int{b + 7: repeated, 2 * b: oversized}, repeated},
		{map[int]int{40: repeated, 2*b + 3: cutBody}, repeated},
		{map[int]int{b + 40: malformed, b + 41: cutBody}, malformed},
		{map[int]int{b - 2: repeated, b - 1: cutLength}, repeated},
		{map[int]int{7: liveID}, liveID},
		{map[int]int{b + 3: liveID, 2 * b: malformed}, liveID},
		{map[int]int{b + 3: liveID, b + 4: cutBody}, liveID},
		{map[int]int{10: malformed, 2*b + 1: liveID}, malformed},
		{map[int]int{b - 1: oversized, b: liveID}, oversized},
	}
	for _, c := range cases {
		bad := faulty(c.faults)
		wantErr := ErrSnapshot.Message + ": " + want[c.first]
		for _, procs := range []int{1, 2, 4} {
			withProcs(t, procs, func() {
				before := runtime.NumGoroutine()
				_, err := Restore(bytes.NewReader(bad))
				if err == nil || err.Error() != wantErr {
					t.Fatalf("faults %v, %d decoders: %v, want %q", c.faults, procs, err, wantErr)
				}
				// The goroutines have returned; wait for them to exit.
				for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
					if time.Now().After(deadline) {
						t.Fatalf("faults %v, %d decoders: %d goroutines after Restore returned, %d before", c.faults, procs, runtime.NumGoroutine(), before)
					}
					runtime.Gosched()
				}
			})
		}
	}
}
