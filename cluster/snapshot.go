package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// SnapshotSave writes the replicated state as of a consistent read: the
// scheduler snapshot encoding, the input of SnapshotRestore.
// Only the capture (CaptureSnapshot) runs under the state's read lock;
// the history is encoded as it is written to w.
func (n *Node) SnapshotSave(ctx context.Context, w io.Writer) (ReadMeta, error) {
	var (
		view *fsm.SnapshotView
		cerr error
	)
	meta, err := n.Read(ctx, ReadOptions{Consistent: true}, func(s *fsm.State) { view, cerr = s.CaptureSnapshot() })
	if err == nil {
		err = cerr
	}
	if err != nil {
		return meta, err
	}
	if _, err := view.WriteTo(w); err != nil {
		return meta, fmt.Errorf("write snapshot: %w", err)
	}
	return meta, nil
}

// SnapshotRestore replaces the whole replicated state with a snapshot
// written by SnapshotSave (disaster recovery). The snapshot is checked
// before anything changes; the restore runs on the leader (forwarded).
func (n *Node) SnapshotRestore(ctx context.Context, r io.Reader) error {
	if n.raft == nil {
		return ErrNotServer
	}
	if err := n.running(); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(r, transport.MaxRestoreBytes+1))
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	if len(data) > transport.MaxRestoreBytes {
		return &fsm.Error{Code: fsm.ErrSnapshot.Code, Message: "snapshot larger than the restore limit"}
	}
	body, floor, err := checkSnapshot(data)
	if err != nil {
		return err
	}
	start := time.Now()
	for {
		var err error
		if n.IsLeader() {
			err = n.restoreLocal(ctx, body, floor)
		} else if l, ok := n.Leader(); ok && l.RPCAddr != "" && l.ID != n.cfg.NodeID {
			// The whole snapshot, header included: the leader reads the
			// index floor from it too.
			err = n.rpc.Restore(n.toServer(ctx, l.ID), l.RPCAddr, bytes.NewReader(data))
		} else {
			err = clusterErr(ErrNoLeader, "no leader known")
		}
		if err == nil || !IsRetryable(err) || time.Since(start) > n.cfg.NoLeaderHold {
			return err
		}
		if !n.sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
	}
}

// checkSnapshot decodes a snapshot (a State snapshot, with or without
// RaftFSM's header) and returns the State part and the highest log index
// it records: the index of the last command the saved state applied, or
// the header's indexes when higher.
func checkSnapshot(data []byte) (body []byte, floor uint64, err error) {
	body, applied, modified := SplitRaftSnapshot(data)
	st, err := fsm.Restore(bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	return body, max(st.LastIndex(), applied, modified), nil
}

// restoreSkip is how far past max(floor, last index) a restore places the
// snapshot's index, so that entries the leader appends between reading its
// last index and Raft taking the snapshot cannot move it.
const restoreSkip = 64

// restoreLocal has Raft take the snapshot as the new state (it then sends
// it to the followers), and applies a tick so that the applied index passes
// the entries Raft adds around the restore.
//
// The snapshot takes an index above both this cluster's last index and
// floor, the highest index the saved state knew: hashicorp/raft places a
// user snapshot at max(meta.Index, last index)+1 and leaves a hole in the
// log below it. So indexes (X-Dmsc-Index, create and modify indexes,
// blocking queries' ?index) never go back across a restore, even into a
// fresh cluster whose log is shorter than the one the snapshot came from.
func (n *Node) restoreLocal(ctx context.Context, body []byte, floor uint64) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	at := max(floor, n.raft.LastIndex()) + restoreSkip
	var b bytes.Buffer
	WriteRaftSnapshotHeader(&b, at, at)
	b.Write(body)
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: at - 1, Size: int64(b.Len())}
	err := n.raftCall(ctx, func() raft.Future { return doneFuture{n.raft.Restore(meta, &b, timeout)} })
	if err != nil {
		return mapRaftErr(err)
	}
	n.log.Info("state restored from a snapshot", "bytes", len(body), "index", at, "saved_index", floor)
	_, err = n.applyLeader(ctx, &fsm.Tick{})
	return err
}

// doneFuture is the answer of a Raft operation that has already completed.
type doneFuture struct{ err error }

func (f doneFuture) Error() error { return f.err }

// RPCRestore serves a restore forwarded to the leader.
func (n *Node) RPCRestore(ctx context.Context, snapshot io.Reader) error {
	if n.raft == nil {
		return ErrNotServer
	}
	data, err := io.ReadAll(snapshot)
	if err != nil {
		return &fsm.Error{Code: fsm.ErrSnapshot.Code, Message: "read snapshot: " + err.Error()}
	}
	body, floor, err := checkSnapshot(data)
	if err != nil {
		return err
	}
	return n.restoreLocal(ctx, body, floor)
}
