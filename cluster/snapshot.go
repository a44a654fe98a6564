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
func (n *Node) SnapshotSave(ctx context.Context, w io.Writer) (ReadMeta, error) {
	var data []byte
	meta, err := n.Read(ctx, ReadOptions{Consistent: true}, func(s *fsm.State) { data = s.SnapshotBytes() })
	if err != nil {
		return meta, err
	}
	if _, err := w.Write(data); err != nil {
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
	body, _, _ := SplitRaftSnapshot(data)
	if _, err := fsm.Restore(bytes.NewReader(body)); err != nil {
		return err
	}
	start := time.Now()
	for {
		var err error
		if n.IsLeader() {
			err = n.restoreLocal(ctx, body)
		} else if l, ok := n.Leader(); ok && l.RPCAddr != "" && l.ID != n.cfg.NodeID {
			err = n.rpc.Restore(n.toServer(ctx, l.ID), l.RPCAddr, bytes.NewReader(body))
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

// restoreLocal has Raft take the snapshot as the new state (it then sends
// it to the followers), and applies a tick so that the applied index passes
// the entries Raft adds around the restore.
func (n *Node) restoreLocal(ctx context.Context, body []byte) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	next := n.raft.LastIndex() + 1
	var b bytes.Buffer
	WriteRaftSnapshotHeader(&b, next, next)
	b.Write(body)
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(b.Len())}
	err := n.raftCall(ctx, func() raft.Future { return doneFuture{n.raft.Restore(meta, &b, timeout)} })
	if err != nil {
		return mapRaftErr(err)
	}
	n.log.Info("state restored from a snapshot", "bytes", len(body))
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
	if _, err := fsm.Restore(bytes.NewReader(data)); err != nil {
		return err
	}
	return n.restoreLocal(ctx, data)
}
