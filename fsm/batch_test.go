package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestBatchAppliesAsItsCommands applies a random log to two replicas: one
// gets the allocation writes in runs of one to eight as Batch entries
// (encoded and decoded), the other gets the same commands one by one at
// the batch's index. A Batch must be nothing but its commands: the same
// result for each, the same events, the same snapshot bytes; and the
// state holds together after every batch.
func TestBatchAppliesAsItsCommands(t *testing.T) {
	seed := logSeed(t)
	n := 4000
	if testing.Short() {
		n = 1000
	}
	rng := rand.New(rand.NewSource(seed))
	g := newCmdGen(rng)
	g.extra = rand.New(rand.NewSource(seed ^ 0xba7c4))
	ids := rand.New(rand.NewSource(seed ^ 0x1d5))
	alone, batched := fsm.New(), fsm.New()
	alone.EnableEvents()
	batched.EnableEvents()
	view := observe(alone)

	var (
		idx     = uint64(1)
		run     []fsm.Command
		results []fsm.Result
		size    = 1 + rng.Intn(8)
		batches int
		inBatch int
	)
	flush := func(i int) {
		t.Helper()
		if len(run) == 0 {
			return
		}
		raw, err := fsm.Encode(&fsm.Batch{Commands: run})
		if err != nil {
			t.Fatalf("seed %d, command %d: encode batch: %v", seed, i, err)
		}
		c, err := fsm.Decode(raw)
		if err != nil {
			t.Fatalf("seed %d, command %d: decode batch: %v", seed, i, err)
		}
		if again, err := fsm.Encode(c); err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("seed %d, command %d: decode then encode changed the batch: %v", seed, i, err)
		}
		res := batched.Apply(idx, c)
		if res.Err != nil || res.Index != idx || len(res.Batch) != len(run) {
			t.Fatalf("seed %d, command %d: batch of %d at %d answered %+v", seed, i, len(run), idx, res)
		}
		for k := range run {
			if got, want := resultJSON(res.Batch[k]), resultJSON(results[k]); !bytes.Equal(got, want) {
				t.Fatalf("seed %d, command %d: command %d of the batch gave\n%s\nalone\n%s", seed, i, k, got, want)
			}
		}
		if got, want := eventsJSON(batched.TakeEvents()), eventsJSON(alone.TakeEvents()); got != want {
			t.Fatalf("seed %d, command %d: the batch made the events\n%s\nalone\n%s", seed, i, got, want)
		}
		if err := batched.CheckInvariants(); err != nil {
			t.Fatalf("seed %d, command %d: after a batch of %d: %v", seed, i, len(run), err)
		}
		batches++
		inBatch += len(run)
		if batches%64 == 0 && !bytes.Equal(batched.SnapshotBytes(), alone.SnapshotBytes()) {
			t.Fatalf("seed %d, command %d: the snapshots differ", seed, i)
		}
		run, results, size = run[:0], results[:0], 1+rng.Intn(8)
		idx++
	}
	for i := range n {
		st := g.next(alone, view)
		if a, ok := st.cmd.(*fsm.Allocate); ok && a.AllocationID == "" {
			a.AllocationID = randomUUID(ids)
		}
		if !fsm.Batchable(st.cmd) || st.unencodable {
			flush(i)
			res := alone.Apply(idx, st.cmd)
			if got := batched.Apply(idx, st.cmd); !bytes.Equal(resultJSON(got), resultJSON(res)) {
				t.Fatalf("seed %d, command %d: the replicas answer %s differently", seed, i, st.kind)
			}
			batched.TakeEvents()
			alone.TakeEvents()
			g.learn(&st, idx, res, alone)
			idx++
		} else {
			raw, err := fsm.Encode(st.cmd)
			if err != nil {
				t.Fatalf("seed %d, command %d: encode: %v", seed, i, err)
			}
			c, err := fsm.Decode(raw)
			if err != nil {
				t.Fatalf("seed %d, command %d: decode: %v", seed, i, err)
			}
			res := alone.Apply(idx, st.cmd)
			run, results = append(run, c), append(results, res)
			g.learn(&st, idx, res, alone)
			if len(run) == size {
				flush(i)
			}
		}
		view = observe(alone)
	}
	flush(n)
	if !bytes.Equal(batched.SnapshotBytes(), alone.SnapshotBytes()) {
		t.Fatalf("seed %d: the snapshots differ at the end", seed)
	}
	if batches < n/10 || inBatch < n/4 {
		t.Fatalf("seed %d: only %d batches of %d commands in %d", seed, batches, inBatch, n)
	}
	t.Logf("seed %d: %d commands, %d of them in %d batches", seed, n, inBatch, batches)
}

// A command a Batch may not hold, or an allocate without its allocation
// ID, is refused on its own; the others apply.
func TestBatchRefusesWhatItMayNotHold(t *testing.T) {
	p := newPopulated(t)
	b := &fsm.Batch{Commands: []fsm.Command{
		&fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}}},
		&fsm.Tick{},
		&fsm.Renew{AllocationID: p.active, TTL: time.Minute},
	}}
	res := p.s.Apply(p.idx+1, b)
	if res.Err != nil || len(res.Batch) != 3 {
		t.Fatalf("batch: %+v", res)
	}
	for k, want := range []error{fsm.ErrInvalid, fsm.ErrInvalid, nil} {
		if got := res.Batch[k].Err; !errors.Is(got, want) && got != want {
			t.Errorf("command %d: %v, want %v", k, got, want)
		}
		if res.Batch[k].Index != p.idx+1 {
			t.Errorf("command %d: index %d, want the batch's %d", k, res.Batch[k].Index, p.idx+1)
		}
	}
	if err := p.s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.Encode(&fsm.Batch{Commands: []fsm.Command{&fsm.Tick{}}}); !errors.Is(err, fsm.ErrInvalid) {
		t.Errorf("encoding a batch with a tick: %v, want ErrInvalid", err)
	}
	if _, err := fsm.Encode(&fsm.Batch{}); !errors.Is(err, fsm.ErrInvalid) {
		t.Errorf("encoding an empty batch: %v, want ErrInvalid", err)
	}
}

// Bytes that are not a well-formed Batch are refused, never read in part.
func TestDecodeBatchRefusesMalformed(t *testing.T) {
	release, err := fsm.Encode(&fsm.Release{AllocationID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	tick, err := fsm.Encode(&fsm.Tick{})
	if err != nil {
		t.Fatal(err)
	}
	good := fsm.EncodeBatch([][]byte{release, release})
	if c, err := fsm.Decode(good); err != nil || len(c.(*fsm.Batch).Commands) != 2 {
		t.Fatalf("a good batch: %v", err)
	}
	frame := func(count uint64, cmds ...[]byte) []byte {
		b := binary.AppendUvarint([]byte{byte(fsm.BatchType)}, count)
		for _, c := range cmds {
			b = binary.AppendUvarint(b, uint64(len(c)))
			b = append(b, c...)
		}
		return b
	}
	for name, raw := range map[string][]byte{
		"no count":              {byte(fsm.BatchType)},
		"no commands":           frame(0),
		"more than the limit":   frame(fsm.MaxBatchCommands+1, release),
		"fewer than it says":    frame(3, release, release),
		"bytes after the last":  append(frame(1, release), 0),
		"a length past the end": append(binary.AppendUvarint(frame(1, release), 500), 'x'),
		"a tick":                frame(1, tick),
		"a batch in a batch":    frame(1, good),
		"a bad command":         frame(1, []byte{byte(fsm.ReleaseType), '{'}),
	} {
		if _, err := fsm.Decode(raw); !errors.Is(err, fsm.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	unknown := frame(1, []byte{249, '{', '}'})
	if _, err := fsm.Decode(unknown); !errors.Is(err, fsm.ErrUnknownCommand) {
		t.Errorf("a command of an unknown type: %v, want ErrUnknownCommand", err)
	}
	since, ok := fsm.CommandSince(fsm.BatchType)
	if !ok || since != (fsm.Since{Level: 5, Version: "0.5.0"}) {
		t.Errorf("a batch needs %+v, want level 5 (0.5.0)", since)
	}
}

// The request ID of a command in a batch is remembered as when it comes
// alone: its retry, alone or in a later batch, gets the first answer.
func TestBatchRequestIDs(t *testing.T) {
	p := newPopulated(t)
	alloc := func(id string) *fsm.Allocate {
		a := &fsm.Allocate{AllocationID: "00000000-0000-4000-8000-0000000000" + id[1:] + "0", Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}}}
		fsm.SetRequestID(a, "req-"+id)
		return fsm.Stamp(a, p.s.Now().Add(time.Second)).(*fsm.Allocate)
	}
	first := p.s.Apply(p.idx+1, &fsm.Batch{Commands: []fsm.Command{alloc("a1"), alloc("a2")}})
	if first.Err != nil || first.Batch[0].Allocation == nil || first.Batch[1].Allocation == nil {
		t.Fatalf("first batch: %+v", first)
	}
	again := p.s.Apply(p.idx+2, &fsm.Batch{Commands: []fsm.Command{alloc("a3"), alloc("a2")}})
	if got := again.Batch[1]; got.Index != p.idx+1 || got.Allocation == nil || got.Allocation.ID != alloc("a2").AllocationID {
		t.Fatalf("retry of a2 in a later batch: %+v, want the first answer (index %d, a2)", got, p.idx+1)
	}
	if got := p.s.Apply(p.idx+3, alloc("a1")); got.Index != p.idx+1 || got.Allocation == nil || got.Allocation.ID != alloc("a1").AllocationID {
		t.Fatalf("retry of a1 alone: %+v, want the first answer", got)
	}
	if again.Batch[0].Index != p.idx+2 {
		t.Fatalf("a3: index %d, want %d", again.Batch[0].Index, p.idx+2)
	}
	if err := p.s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
