package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/events"
	"github.com/dmsc/dmsc/fsm"
)

// RaftFSM adapts an fsm.State to hashicorp/raft: it applies committed log
// entries in batches, writes and restores snapshots in the State's own
// encoding, and lets readers wait for an index to be applied (consistent
// reads, blocking queries). Package fsm knows nothing of Raft; this is
// where the two meet.
type RaftFSM struct {
	mu    sync.RWMutex
	state *fsm.State
	// applied is the index of the last log entry applied (a command or a
	// configuration change; Raft's no-op and barrier entries never reach
	// the FSM). modified is the index of the last command that changed the
	// state. Both are guarded by mu and only grow.
	applied  uint64
	modified uint64

	nmu     sync.Mutex
	advance chan struct{} // closed and replaced whenever applied grows

	// halt is the entry this replica could not apply (fail-stop): once
	// set, nothing more is applied and no snapshot is taken. Guarded by
	// mu; haltCh is closed when it is set.
	halt     *HaltError
	haltCh   chan struct{}
	haltOnce sync.Once

	// State hash checkpoints (integrity.go), guarded by mu: every
	// hashEvery applied entries the state's canonical snapshot is hashed.
	hashEvery    uint64
	hashNext     uint64
	checkpoints  []Checkpoint // the newest last, at most keepCheckpoints
	onCheckpoint func(Checkpoint)

	// fault, for tests only, may change a command before it is applied
	// (a replica made to diverge on purpose).
	fault func(index uint64, c fsm.Command)

	// version is this server's dmsc version, for HaltError.
	version string

	// applies counts the commands this replica applied, by type (since
	// the process started; not replicated, not in snapshots).
	applies [256]atomic.Uint64

	// events holds what the recent commands changed (the event stream),
	// published under mu as each entry applies.
	events *events.Buffer
}

// CommandsApplied returns how many commands of type t this replica has
// applied since it started (refused ones included; replayed log entries
// too).
func (f *RaftFSM) CommandsApplied(t fsm.CommandType) uint64 {
	return f.applies[uint8(t)].Load()
}

// HaltError is the log entry a replica could not apply. The replica stops
// there: applying the rest of the log without it would make it diverge.
type HaltError struct {
	Index uint64
	Err   error
	// Version is this server's dmsc version, for the message of an entry
	// that needs a newer one.
	Version string
}

func (e *HaltError) Error() string {
	if nu := e.NeedsUpgrade(); nu != nil {
		v := e.Version
		if v == "" {
			v = "dev"
		}
		what := fmt.Sprintf("command type %d", nu.Type)
		if nu.Format != 0 {
			what = fmt.Sprintf("entry format 0x%02x", nu.Format)
		}
		return fmt.Sprintf("log entry %d has %s, which %s; this server runs dmsc %s (feature level %d): upgrade this server",
			e.Index, what, nu.Needs(), v, fsm.FeatureLevel())
	}
	return fmt.Sprintf("log entry %d cannot be applied: %v", e.Index, e.Err)
}

// NeedsUpgrade returns the entry's needs when a newer dmsc wrote it (this
// server is too old for it), else nil.
func (e *HaltError) NeedsUpgrade() *fsm.NeedsUpgradeError {
	var nu *fsm.NeedsUpgradeError
	if errors.As(e.Err, &nu) {
		return nu
	}
	return nil
}

func (e *HaltError) Unwrap() error { return e.Err }

var (
	_ raft.BatchingFSM = (*RaftFSM)(nil)
	_ raft.FSM         = (*RaftFSM)(nil)
)

// NewRaftFSM wraps a state (usually fsm.New()).
func NewRaftFSM(s *fsm.State) *RaftFSM { return NewRaftFSMBuffering(s, events.DefaultSize) }

// NewRaftFSMBuffering is NewRaftFSM with a buffer of the latest n events.
func NewRaftFSMBuffering(s *fsm.State, n int) *RaftFSM {
	s.EnableEvents()
	return &RaftFSM{state: s, advance: make(chan struct{}), haltCh: make(chan struct{}),
		events: events.New(n, s.LastIndex(), events.DefaultSeal)}
}

// Events is the buffer of the events this replica's commands made.
func (f *RaftFSM) Events() *events.Buffer { return f.events }

// PublishLocal adds an event this server observed rather than applied (a
// leader change) at the index applied so far.
func (f *RaftFSM) PublishLocal(ev fsm.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev.Index = f.applied
	f.events.Publish(f.applied, []fsm.Event{ev})
}

// Halted is closed once the FSM has met an entry it cannot apply.
func (f *RaftFSM) Halted() <-chan struct{} { return f.haltCh }

// Halt returns the entry the FSM stopped at, or nil.
func (f *RaftFSM) Halt() *HaltError {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halt
}

// applyCommandLocked decodes and applies one command entry, publishing
// its events. An error (the entry does not decode, or the state no longer
// holds together after it: fsm.State.Fault) means the replica must halt
// there; what the entry changed is then never published.
func (f *RaftFSM) applyCommandLocked(l *raft.Log) (fsm.Result, error) {
	c, err := DecodeLogEntry(l.Data)
	if err != nil {
		return fsm.Result{}, err
	}
	if f.fault != nil {
		f.fault(l.Index, c)
	}
	f.applies[uint8(c.Type())].Add(1)
	if b, ok := c.(*fsm.Batch); ok {
		for _, sub := range b.Commands {
			f.applies[uint8(sub.Type())].Add(1)
		}
	}
	res, changed := f.state.ApplyChanged(l.Index, c)
	if err := f.state.Fault(); err != nil {
		f.state.TakeEvents()
		return fsm.Result{}, err
	}
	if changed {
		f.modified = l.Index
	}
	f.events.Publish(l.Index, f.state.TakeEvents())
	return res, nil
}

// Apply applies one log entry. Raft calls ApplyBatch instead; Apply is
// here for the raft.FSM interface and for tests.
func (f *RaftFSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order. Each command's answer is
// an fsm.Result; configuration entries answer nil. An entry that fails its
// checksum or does not decode (unknown command type, bad payload), or
// after which the state no longer holds together (fsm.State.Fault), halts
// the FSM (fail-stop): it answers ErrReplicaFailed for that entry and for
// every later one, its applied index stays before it, and Halted is
// closed so that the node stops Raft. Nothing is ever skipped.
func (f *RaftFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	f.mu.Lock()
	grew, halted := false, false
	for i, l := range logs {
		if f.halt == nil && l.Type == raft.LogCommand {
			res, err := f.applyCommandLocked(l)
			if err != nil {
				f.halt = &HaltError{Index: l.Index, Err: err, Version: f.version}
				halted = true
			}
			out[i] = res
		}
		if f.halt != nil {
			out[i] = fsm.Result{Index: l.Index, Err: clusterErr(ErrReplicaFailed, f.halt.Error())}
			continue
		}
		if l.Index > f.applied {
			f.applied = l.Index
			grew = true
			f.checkpointLocked()
		}
	}
	f.mu.Unlock()
	if halted {
		f.haltOnce.Do(func() { close(f.haltCh) })
	}
	if grew {
		f.notify()
	}
	return out
}

func (f *RaftFSM) notify() {
	f.nmu.Lock()
	close(f.advance)
	f.advance = make(chan struct{})
	f.nmu.Unlock()
}

// Read runs fn on the state under the read lock and returns the applied
// and modified indexes the state is at. fn must not keep the state.
func (f *RaftFSM) Read(fn func(*fsm.State)) (applied, modified uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
	return f.applied, f.modified
}

// Indexes returns the applied and modified indexes.
func (f *RaftFSM) Indexes() (applied, modified uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied, f.modified
}

// WaitApplied blocks until the entry at index idx (and all before it) is
// applied, or ctx ends.
func (f *RaftFSM) WaitApplied(ctx context.Context, idx uint64) error {
	return f.wait(ctx, func(applied, _ uint64) bool { return applied >= idx })
}

// WaitModified blocks until a command after index idx has changed the
// state, or ctx ends (a blocking query: ctx carries its wait).
func (f *RaftFSM) WaitModified(ctx context.Context, idx uint64) error {
	return f.wait(ctx, func(_, modified uint64) bool { return modified > idx })
}

func (f *RaftFSM) wait(ctx context.Context, done func(applied, modified uint64) bool) error {
	for {
		f.nmu.Lock()
		ch := f.advance
		f.nmu.Unlock()
		if done(f.Indexes()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// snapshotMagic starts a snapshot written by RaftFSM: the magic, then the
// applied and modified indexes (8 bytes each, big endian), then the State's
// snapshot. A stream without the magic is a bare State snapshot (a backup).
var snapshotMagic = []byte("DMSCFSM1")

const snapshotHeaderLen = 8 + 8 + 8

// RaftSnapshotHeaderLen is the length of the header WriteRaftSnapshotHeader
// writes.
const RaftSnapshotHeaderLen = snapshotHeaderLen

// Snapshot captures the state. Raft calls it between applies, and applies
// wait while it runs: under the read lock it only encodes what changes in
// place (hosts, devices, live allocations) and copies the lists of
// requests and history records (fsm.State.CaptureSnapshot); Persist
// encodes the history as it writes, while commands apply.
func (f *RaftFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halt != nil {
		// Raft counts the halted entries as applied: a snapshot now would
		// record a state that lacks them.
		return nil, clusterErr(ErrReplicaFailed, f.halt.Error())
	}
	view, err := f.state.CaptureSnapshot()
	if err != nil {
		return nil, err
	}
	var h bytes.Buffer
	WriteRaftSnapshotHeader(&h, f.applied, f.modified)
	return &raftSnapshot{header: h.Bytes(), view: view}, nil
}

// Restore replaces the state with a snapshot written by Snapshot, or with
// a bare State snapshot. It decodes as it reads; applies and readers wait
// only for the swap at the end.
func (f *RaftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<20)
	var applied, modified uint64
	if h, err := br.Peek(snapshotHeaderLen); err == nil && bytes.Equal(h[:len(snapshotMagic)], snapshotMagic) {
		_, applied, modified = SplitRaftSnapshot(h)
		if _, err := br.Discard(snapshotHeaderLen); err != nil {
			return &fsm.Error{Code: fsm.ErrSnapshot.Code, Message: fsm.ErrSnapshot.Message + ": read: " + err.Error()}
		}
	}
	s, err := fsm.Restore(br)
	if err != nil {
		return err
	}
	s.EnableEvents()
	f.mu.Lock()
	f.state = s
	if applied < f.applied {
		// A backup restored into a running cluster: the indexes must not
		// go back, and every reader should look again.
		applied, modified = f.applied, f.applied
	}
	if modified < f.modified {
		modified = f.modified
	}
	f.applied, f.modified = applied, modified
	f.restartCheckpointsLocked()
	f.events.Reset(applied)
	f.mu.Unlock()
	f.notify()
	return nil
}

// WriteRaftSnapshotHeader writes the header that SplitRaftSnapshot reads.
func WriteRaftSnapshotHeader(b *bytes.Buffer, applied, modified uint64) {
	b.Write(snapshotMagic)
	var idx [16]byte
	binary.BigEndian.PutUint64(idx[:8], applied)
	binary.BigEndian.PutUint64(idx[8:], modified)
	b.Write(idx[:])
}

// SplitRaftSnapshot separates a snapshot written by RaftFSM into the State
// snapshot and the indexes it was taken at. A bare State snapshot is
// returned as it is, with zero indexes.
func SplitRaftSnapshot(data []byte) (state []byte, applied, modified uint64) {
	if len(data) < snapshotHeaderLen || !bytes.Equal(data[:len(snapshotMagic)], snapshotMagic) {
		return data, 0, 0
	}
	h := data[len(snapshotMagic):snapshotHeaderLen]
	return data[snapshotHeaderLen:], binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])
}

type raftSnapshot struct {
	header []byte
	view   *fsm.SnapshotView
}

func (s *raftSnapshot) Persist(sink raft.SnapshotSink) error {
	_, err := sink.Write(s.header)
	if err == nil {
		_, err = s.view.WriteTo(sink)
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *raftSnapshot) Release() {}

// Changed returns a channel that is closed when the applied index next
// grows.
func (f *RaftFSM) Changed() <-chan struct{} {
	f.nmu.Lock()
	defer f.nmu.Unlock()
	return f.advance
}
