package cluster

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

func TestLogEntryEnvelope(t *testing.T) {
	good, err := EncodeLogEntry(fsm.Stamp(&fsm.Tick{}, time.Unix(1, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := DecodeLogEntry(good); err != nil || c.Type() != fsm.TickType {
		t.Fatalf("decode: %v %v", c, err)
	}
	bare, _ := fsm.Encode(&fsm.Tick{})
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x10
	for name, data := range map[string][]byte{
		"empty":           nil,
		"short":           good[:3],
		"no envelope":     bare,
		"flipped bit":     flipped,
		"truncated":       good[:len(good)-1],
		"bad format byte": append([]byte{0x01}, good[1:]...),
	} {
		if _, err := DecodeLogEntry(data); !errors.Is(err, ErrCorruptEntry) {
			t.Errorf("%s: %v, want ErrCorruptEntry", name, err)
		}
	}
	// A good envelope around a bad command is the command's error.
	if _, err := DecodeLogEntry(wrapLogEntry([]byte{byte(fsm.AllocateType), '{'})); !errors.Is(err, fsm.ErrInvalid) {
		t.Errorf("bad payload: %v", err)
	}
}

// A corrupt entry halts the FSM: it and every later entry answer
// ErrReplicaFailed, the applied index stays before it, and no snapshot is
// taken.
func TestRaftFSMCorruptEntryHalts(t *testing.T) {
	h := newRaftHarness(t)
	h.apply(staticHost("h1", gpu("g1", 40)))
	bad := h.log(gpuRequest(1))
	bad.Data[len(bad.Data)-6] ^= 0xff
	after := h.log(&fsm.Tick{})
	out := h.f.ApplyBatch([]*raft.Log{bad, after})
	for i, o := range out {
		if res := o.(fsm.Result); !errors.Is(res.Err, ErrReplicaFailed) {
			t.Fatalf("entry %d answered %+v", i, res)
		}
	}
	if applied, _ := h.f.Indexes(); applied != 1 {
		t.Fatalf("applied %d after a corrupt entry at 2", applied)
	}
	if halt := h.f.Halt(); halt == nil || halt.Index != 2 || !errors.Is(halt, ErrCorruptEntry) {
		t.Fatalf("halt %v", halt)
	}
	if _, err := h.f.Snapshot(); !errors.Is(err, ErrReplicaFailed) {
		t.Fatalf("snapshot of a halted FSM: %v", err)
	}
	// A later batch is refused too.
	if res := h.f.Apply(h.log(&fsm.Tick{})).(fsm.Result); !errors.Is(res.Err, ErrReplicaFailed) {
		t.Fatalf("later entry: %+v", res)
	}
}

// Checkpoints fall at the same indexes on a replica that applied the log
// and one restored from a snapshot, with the same hashes.
func TestCheckpointsDeterministic(t *testing.T) {
	a := newRaftHarness(t)
	var got []Checkpoint
	a.f.SetStateHashInterval(10, func(cp Checkpoint) { got = append(got, cp) })
	a.apply(staticHost("h1", gpu("g1", 40), gpu("g2", 40)))
	var logs []*raft.Log
	for i := 0; i < 40; i++ {
		logs = append(logs, a.log(gpuRequest(1)))
	}
	// Indexes 2..14 now, the rest after a snapshot of b at 14.
	a.f.ApplyBatch(logs[:13])
	snap, err := a.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	b := NewRaftFSM(fsm.New())
	var gotB []Checkpoint
	b.SetStateHashInterval(10, func(cp Checkpoint) { gotB = append(gotB, cp) })
	if err := b.Restore(io.NopCloser(&sink.Buffer)); err != nil {
		t.Fatal(err)
	}
	// A gap in the indexes (a no-op entry Raft keeps to itself) at 30.
	rest := logs[13:]
	for _, l := range rest {
		if l.Index >= 30 {
			l.Index++
		}
	}
	a.f.ApplyBatch(rest)
	b.ApplyBatch(rest)
	if len(got) != 4 || got[0].Index != 10 || got[1].Index != 20 || got[2].Index != 31 || got[3].Index != 40 {
		t.Fatalf("checkpoints of a: %v", got)
	}
	if fmt.Sprint(gotB) != fmt.Sprint(got[1:]) {
		t.Fatalf("checkpoints of b %v, of a %v", gotB, got)
	}
	if len(a.f.Checkpoints()) != 4 {
		t.Fatalf("kept %v", a.f.Checkpoints())
	}
}

func TestCompareCheckpoints(t *testing.T) {
	cp := func(i uint64, h string) Checkpoint { return Checkpoint{Index: i, Hash: h} }
	mine := []Checkpoint{cp(10, "a"), cp(20, "b")}
	if d := compareCheckpoints("s1", mine, map[string][]Checkpoint{"s2": {cp(20, "b")}, "s3": {cp(10, "a")}}); d != nil {
		t.Fatalf("agreeing: %v", d)
	}
	if d := compareCheckpoints("s1", mine, map[string][]Checkpoint{"s2": {cp(30, "x")}}); d != nil {
		t.Fatalf("nothing shared: %v", d)
	}
	d := compareCheckpoints("s1", mine, map[string][]Checkpoint{"s2": {cp(20, "b")}, "s3": {cp(20, "c")}})
	if d == nil || d.Index != 20 || fmt.Sprint(d.Divergent) != "[s3]" {
		t.Fatalf("s3 differs: %v", d)
	}
	d = compareCheckpoints("s1", mine, map[string][]Checkpoint{"s2": {cp(20, "c")}, "s3": {cp(20, "c")}})
	if d == nil || fmt.Sprint(d.Divergent) != "[s1]" {
		t.Fatalf("s1 differs: %v", d)
	}
	// s2 is ahead and agrees at 20; s3 differed at 10 and has not
	// advertised 20 yet: the mismatch stands.
	d = compareCheckpoints("s1", mine, map[string][]Checkpoint{"s2": {cp(10, "a"), cp(20, "b")}, "s3": {cp(10, "x")}})
	if d == nil || d.Index != 10 || fmt.Sprint(d.Divergent) != "[s3]" {
		t.Fatalf("older mismatch hidden by a newer agreement: %v", d)
	}
	// s3 agreed at 20 (resynced): settled.
	if d := compareCheckpoints("s1", mine, map[string][]Checkpoint{"s2": {cp(20, "b")}, "s3": {cp(10, "x"), cp(20, "b")}}); d != nil {
		t.Fatalf("settled mismatch: %v", d)
	}
	d = compareCheckpoints("s1", mine, map[string][]Checkpoint{"s2": {cp(20, "c")}})
	if d == nil || len(d.Divergent) != 0 {
		t.Fatalf("two servers, undecided: %v", d)
	}
	if c, ok := parseCheckpoint(cp(7, "ab").String()); !ok || c != cp(7, "ab") {
		t.Fatalf("round trip: %v", c)
	}
}

// BenchmarkStateHash hashes a state of 100,000 devices (1,000 hosts of
// 100 GPUs) and 10,000 allocations: the cost of one checkpoint, paid
// every StateHashInterval entries on every replica.
func BenchmarkStateHash(b *testing.B) {
	h := newRaftHarness(&testing.T{})
	for i := range 1000 {
		devs := make([]fsm.DeviceSpec, 100)
		for j := range devs {
			devs[j] = gpu(fmt.Sprintf("h%d-g%d", i, j), 80)
		}
		h.apply(staticHost(fmt.Sprintf("h%d", i), devs...))
	}
	for range 100 {
		cs := make([]fsm.Command, 100)
		for j := range cs {
			cs[j] = gpuRequest(10)
		}
		h.apply(cs...)
	}
	b.ResetTimer()
	for range b.N {
		h.f.StateHash()
	}
}
