package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

// raftHarness feeds encoded, stamped commands to a RaftFSM as Raft would.
type raftHarness struct {
	t   *testing.T
	f   *RaftFSM
	idx uint64
	now int64
}

func newRaftHarness(t *testing.T) *raftHarness {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	return &raftHarness{t: t, f: NewRaftFSM(fsm.New()), now: start}
}

func (h *raftHarness) log(c fsm.Command) *raft.Log {
	h.t.Helper()
	h.idx++
	h.now += int64(time.Millisecond)
	fsm.Stamp(c, time.Unix(0, h.now))
	data, err := EncodeLogEntry(c)
	if err != nil {
		h.t.Fatal(err)
	}
	return &raft.Log{Index: h.idx, Term: 1, Type: raft.LogCommand, Data: data}
}

func (h *raftHarness) apply(cs ...fsm.Command) []fsm.Result {
	h.t.Helper()
	logs := make([]*raft.Log, len(cs))
	for i, c := range cs {
		logs[i] = h.log(c)
	}
	out := h.f.ApplyBatch(logs)
	res := make([]fsm.Result, len(out))
	for i, o := range out {
		res[i] = o.(fsm.Result)
	}
	return res
}

func TestRaftFSMIndexes(t *testing.T) {
	h := newRaftHarness(t)
	lease := gpuRequest(10)
	lease.Request.LeaseTTL = time.Second
	res := h.apply(staticHost("h1", gpu("g1", 40)), lease)
	if res[1].Err != nil || res[1].Allocation.Status != fsm.Active {
		t.Fatalf("allocate: %+v", res[1])
	}
	// A configuration entry advances the applied index only.
	h.idx++
	if out := h.f.ApplyBatch([]*raft.Log{{Index: h.idx, Type: raft.LogConfiguration}}); out[0] != nil {
		t.Fatalf("configuration entry answered %v", out[0])
	}

	type step struct {
		name    string
		cmd     func() fsm.Command
		advance time.Duration
		changes bool
	}
	steps := []step{
		{"quiet tick", func() fsm.Command { return &fsm.Tick{} }, 0, false},
		{"refused command", func() fsm.Command { return &fsm.Release{AllocationID: "nope"} }, 0, false},
		{"repeated request", func() fsm.Command { c := gpuRequest(1); c.RequestID = "r1"; return c }, 0, true},
		{"repeated request again", func() fsm.Command { c := gpuRequest(1); c.RequestID = "r1"; return c }, 0, false},
		{"refusal for capacity is recorded", func() fsm.Command { return gpuRequest(1000) }, 0, true},
		{"tick that expires a lease", func() fsm.Command { return &fsm.Tick{} }, 2 * time.Second, true},
	}
	for _, s := range steps {
		_, before := h.f.Indexes()
		h.now += int64(s.advance)
		h.apply(s.cmd())
		applied, after := h.f.Indexes()
		if applied != h.idx {
			t.Fatalf("%s: applied %d, want %d", s.name, applied, h.idx)
		}
		if changed := after != before; changed != s.changes || (s.changes && after != h.idx) {
			t.Errorf("%s: modified %d -> %d (index %d), want change=%v", s.name, before, after, h.idx, s.changes)
		}
	}
}

func TestRaftFSMSnapshotRoundTrip(t *testing.T) {
	h := newRaftHarness(t)
	h.apply(staticHost("h1", gpu("g1", 40), gpu("g2", 40)), gpuRequest(10), &fsm.Tick{})
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v, closed %v", err, sink.closed)
	}
	applied, modified := h.f.Indexes()

	g := NewRaftFSM(fsm.New())
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if a, m := g.Indexes(); a != applied || m != modified {
		t.Fatalf("restored indexes %d/%d, want %d/%d", a, m, applied, modified)
	}
	var want, got []byte
	h.f.Read(func(s *fsm.State) { want = s.SnapshotBytes() })
	g.Read(func(s *fsm.State) { got = s.SnapshotBytes() })
	if !bytes.Equal(want, got) {
		t.Fatal("restored state differs")
	}

	// A bare state snapshot (a backup) restores too, and the indexes of a
	// running replica never go back.
	body, _, _ := SplitRaftSnapshot(sink.Bytes())
	if !bytes.Equal(body, want) {
		t.Fatal("snapshot body is not the state's encoding")
	}
	h.apply(gpuRequest(10), gpuRequest(10))
	before, _ := h.f.Indexes()
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(body))); err != nil {
		t.Fatal(err)
	}
	if a, m := h.f.Indexes(); a != before || m != before {
		t.Fatalf("indexes after a backup restore %d/%d, want %d", a, m, before)
	}
	if err := h.f.Restore(io.NopCloser(bytes.NewReader([]byte("junk")))); !errors.Is(err, fsm.ErrSnapshot) {
		t.Fatalf("junk snapshot: %v", err)
	}
}

func TestRaftFSMUnknownCommandStopsTheNode(t *testing.T) {
	f := NewRaftFSM(fsm.New())
	out := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: wrapLogEntry([]byte{250, '{', '}'})})
	if res, ok := out.(fsm.Result); !ok || !errors.Is(res.Err, ErrReplicaFailed) {
		t.Fatalf("an unknown command answered %v", out)
	}
	h := f.Halt()
	if h == nil || h.Index != 1 || !errors.Is(h, fsm.ErrUnknownCommand) {
		t.Fatalf("halt: %v", h)
	}
	select {
	case <-f.Halted():
	default:
		t.Fatal("Halted not closed")
	}
	// The lock was released: the node can still be read while it stops.
	f.Read(func(*fsm.State) {})
}

func TestRaftFSMWaits(t *testing.T) {
	h := newRaftHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- h.f.WaitApplied(ctx, 2) }()
	go func() { done <- h.f.WaitModified(ctx, 1) }()
	h.apply(&fsm.Tick{})                   // index 1: quiet
	h.apply(staticHost("h1", gpu("g", 1))) // index 2: a change
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := h.f.WaitModified(short, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait for a change that never comes: %v", err)
	}
}

type memSink struct {
	bytes.Buffer
	closed bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// TestRaftFSMSnapshotIsOfItsMoment: Persist runs while commands apply
// (only the capture holds the lock), yet writes the state as it was when
// Snapshot was called, history included: commands applied meanwhile,
// which end allocations, place new ones and trim the history, are not in
// it.
func TestRaftFSMSnapshotIsOfItsMoment(t *testing.T) {
	h := newRaftHarness(t)
	h.apply(staticHost("h1", gpu("g1", 40), gpu("g2", 40)), &fsm.SetRetention{Retention: fsm.Retention{MaxCount: 3, MaxAge: time.Hour}})
	for range 5 {
		h.apply(gpuRequest(10), &fsm.Tick{})
	}
	var want []byte
	h.f.Read(func(s *fsm.State) { want = s.SnapshotBytes() })
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var releases []fsm.Command
	h.f.Read(func(s *fsm.State) {
		for _, a := range s.Live() {
			if a.Status == fsm.Active {
				releases = append(releases, &fsm.Release{AllocationID: a.ID})
			}
		}
		if s.HistoryLen() == 0 {
			t.Error("empty history: the test checks nothing of it")
		}
	})
	if len(releases) == 0 {
		t.Fatal("nothing to release: the test changes nothing")
	}
	// Persist runs beside the applies, as Raft runs it (the race
	// detector watches the history they share).
	sink := &memSink{}
	persisted := make(chan error, 1)
	go func() { persisted <- snap.Persist(sink) }()
	h.apply(releases...)
	for range 3 {
		h.apply(gpuRequest(10), &fsm.SetRetention{Retention: fsm.Retention{MaxCount: 1, MaxAge: time.Hour}}, gpuRequest(10))
	}
	if err := <-persisted; err != nil {
		t.Fatal(err)
	}
	if body, _, _ := SplitRaftSnapshot(sink.Bytes()); !bytes.Equal(body, want) {
		t.Fatal("the snapshot holds commands applied after it was taken")
	}
}
