package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// Read runs fn on the local replica under a read lock, after the waits
// opts asks for, and says how fresh the state was. fn must not keep
// references to the state or call back into the node. Hosts have no
// replica: ErrNotServer.
//
// A blocking query (MinIndex > 0) that reaches its Wait is not an error:
// fn runs on the state as it is and ReadMeta.Index tells the caller nothing
// changed. A consistent read without a leader for NoLeaderHold fails with
// the retryable ErrNoLeader.
func (n *Node) Read(ctx context.Context, opts ReadOptions, fn func(*fsm.State)) (ReadMeta, error) {
	if n.raft == nil {
		return ReadMeta{}, ErrNotServer
	}
	if err := n.running(); err != nil {
		return ReadMeta{}, err
	}
	if p := n.replicaProblem(); p != "" {
		return ReadMeta{}, clusterErr(ErrReplicaFailed, p)
	}
	if opts.MinIndex > 0 {
		wait := opts.Wait
		if wait <= 0 {
			wait = DefaultWait
		}
		wait = min(wait, MaxWait)
		wctx, cancel := context.WithTimeout(ctx, wait)
		stop := context.AfterFunc(n.baseCtx, cancel)
		_ = n.fsm.WaitModified(wctx, opts.MinIndex)
		stop()
		cancel()
		if err := ctx.Err(); err != nil {
			return ReadMeta{}, fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		if err := n.running(); err != nil {
			return ReadMeta{}, err
		}
	}
	consistent := opts.Consistent
	if !consistent && opts.MaxStale > 0 && !n.IsLeader() {
		lc := n.lastContact()
		_, known := n.Leader()
		consistent = !known || lc < 0 || lc > opts.MaxStale
	}
	if consistent {
		if err := n.readBarrier(ctx); err != nil {
			return ReadMeta{}, err
		}
	} else if err := n.stores.health.err(); err != nil {
		// This replica may have stopped advancing when its log could
		// not be written: it cannot vouch for a read.
		return ReadMeta{}, err
	}
	applied, modified := n.fsm.Read(fn)
	return n.readMeta(applied, modified), nil
}

func (n *Node) readMeta(applied, modified uint64) ReadMeta {
	m := ReadMeta{Index: modified, AppliedIndex: applied, LastContact: n.lastContact()}
	if l, ok := n.Leader(); ok {
		m.KnownLeader, m.Leader = true, l.ID
	}
	return m
}

// readBarrier makes the local replica linearizable for one read: it gets a
// read index (the leader's commit index, taken before the leader confirmed
// with a quorum that it still leads) and waits until this replica has
// applied it. It holds up to NoLeaderHold while no leader answers.
func (n *Node) readBarrier(ctx context.Context) error {
	start := time.Now()
	for {
		idx, err := n.readIndex(ctx)
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
			err := n.fsm.WaitApplied(wctx, idx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					applied, _ := n.fsm.Indexes()
					return clusterErr(ErrTimeout, fmt.Sprintf("this node did not catch up to the read index %d within %v (applied %d)", idx, n.cfg.RequestTimeout, applied))
				}
				return fmt.Errorf("%w: %w", ErrTimeout, err)
			}
			return nil
		}
		if errors.Is(err, ErrTimeout) && ctx.Err() == nil {
			// The leader did not answer within RequestTimeout.
			return err
		}
		if !IsRetryable(err) || errors.Is(err, ErrShutdown) && n.running() != nil {
			return err
		}
		if time.Since(start) >= n.cfg.NoLeaderHold {
			return clusterErr(ErrNoLeader, err.Error())
		}
		if !n.sleepCtx(ctx, 20*time.Millisecond) {
			if n.running() != nil {
				return ErrShutdown
			}
			return fmt.Errorf("%w: %w", clusterErr(ErrNoLeader, err.Error()), ctx.Err())
		}
	}
}

// readIndex returns a read index from the leader: locally when leading,
// over the node RPC otherwise.
func (n *Node) readIndex(ctx context.Context) (uint64, error) {
	if n.IsLeader() {
		return n.leaderReadIndex(ctx)
	}
	l, ok := n.Leader()
	if !ok || l.RPCAddr == "" || l.ID == n.cfg.NodeID {
		return 0, clusterErr(ErrNoLeader, "no leader known")
	}
	fctx, cancel := n.forwardCtx(ctx, l.ID)
	defer cancel()
	idx, err := n.rpc.ReadIndex(n.toServer(fctx, l.ID), l.RPCAddr)
	if err != nil && ctx.Err() == nil && errors.Is(fctx.Err(), context.DeadlineExceeded) {
		return 0, clusterErr(ErrTimeout, fmt.Sprintf("the leader %s did not answer a read index within %v", l.ID, n.forwardTimeout()))
	}
	if errors.Is(err, transport.ErrUnreachable) {
		return 0, clusterErr(ErrNoLeader, err.Error())
	}
	return idx, err
}

// leaderReadIndex captures the commit index, then confirms leadership with
// a quorum. Any entry committed before the read began is at or below the
// captured index; confirming afterwards proves no other leader could have
// committed more meanwhile.
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	if n.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	if !n.leaderReady.Load() {
		return 0, clusterErr(ErrNoLeader, "the leader has not applied its barrier yet")
	}
	idx := n.raft.CommitIndex()
	vctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	if err := n.raftCall(vctx, n.raft.VerifyLeader); err != nil {
		return 0, mapRaftErr(err)
	}
	return idx, nil
}

// RPCReadIndex serves a follower's read index request.
func (n *Node) RPCReadIndex(ctx context.Context) (uint64, error) {
	if n.raft == nil {
		return 0, ErrNotServer
	}
	if err := n.running(); err != nil {
		return 0, err
	}
	if !n.IsLeader() {
		return 0, ErrNotLeader
	}
	return n.leaderReadIndex(ctx)
}
