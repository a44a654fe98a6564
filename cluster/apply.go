package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// Apply replicates a write and returns the state machine's answer. Any
// server (or host) accepts it: a follower forwards it to the leader. The
// leader stamps the time. A command without a request ID gets one, and a
// write whose outcome is unknown (leadership lost mid-apply, forwarding
// failed) is retried with the same ID, so it is applied at most once.
//
// The error is nil when the command was applied; the state machine's own
// refusal (no capacity, not found, ...) is then in Result.Err. A non-nil
// error is a cluster condition: ErrNoLeader after NoLeaderHold without a
// usable leader, ErrTimeout when ctx ended (or NoLeaderHold passed) with the
// outcome unknown, ErrShutdown; all retryable (IsRetryable) with the same
// request ID. The command's request ID is set on return, so a caller can
// retry elsewhere with it.
func (n *Node) Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if err := n.running(); err != nil {
		return fsm.Result{}, err
	}
	if err := notBatch(cmd); err != nil {
		return fsm.Result{}, err
	}
	if fsm.RequestIDOf(cmd) == "" {
		fsm.SetRequestID(cmd, uuid.NewString())
	}
	// A command of a newer feature level is refused here when this
	// server sees a server too old for it; the leader checks again.
	if err := n.checkFeature(ctx, cmd); err != nil {
		return fsm.Result{}, err
	}
	if a, ok := cmd.(*fsm.Allocate); ok && a.AllocationID == "" {
		// Drawn here, once, not from the log index: a restored snapshot
		// holds allocations of another cluster's indexes. A retry of this
		// call keeps the ID; a retry through another node draws another,
		// and the request-ID cache still answers it with the first.
		a.AllocationID = uuid.NewString()
	}
	var (
		failingSince time.Time
		unknown      bool // an attempt may have been applied
		lastErr      error
		backoff      = 10 * time.Millisecond
	)
	for {
		res, err, retry, maybe := n.applyOnce(ctx, cmd)
		if !retry {
			return res, err
		}
		unknown = unknown || maybe
		lastErr = err
		now := time.Now()
		if failingSince.IsZero() {
			failingSince = now
		}
		if now.Sub(failingSince) >= n.cfg.NoLeaderHold {
			if unknown {
				return fsm.Result{}, clusterErr(ErrTimeout, lastErr.Error())
			}
			return fsm.Result{}, clusterErr(ErrNoLeader, lastErr.Error())
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if unknown {
				return fsm.Result{}, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
			}
			return fsm.Result{}, fmt.Errorf("%w: %w", clusterErr(ErrNoLeader, lastErr.Error()), ctx.Err())
		case <-n.shutdownCh:
			t.Stop()
			return fsm.Result{}, ErrShutdown
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// applyOnce makes one attempt: apply here when leading, else forward to the
// leader (servers) or to any server (hosts). retry says the attempt failed
// for a cluster reason worth retrying; maybe says it might have been
// applied all the same.
func (n *Node) applyOnce(ctx context.Context, cmd fsm.Command) (res fsm.Result, err error, retry, maybe bool) {
	var target, leaderID string
	switch {
	case n.raft != nil && n.raft.State() == raft.Leader:
		res, err = n.applyLeader(ctx, cmd)
		return classify(res, err)
	case n.raft != nil:
		l, ok := n.Leader()
		if !ok || l.ID == n.cfg.NodeID || l.RPCAddr == "" {
			return res, clusterErr(ErrNoLeader, "no leader known"), true, false
		}
		target, leaderID = l.RPCAddr, l.ID
	default:
		servers := n.aliveServers()
		if len(servers) == 0 {
			return res, clusterErr(ErrNoLeader, "no server known"), true, false
		}
		target = servers[int(n.nextServer.Add(1)%uint64(len(servers)))]
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return res, err, false, false
	}
	fctx, cancel := n.forwardCtx(ctx, leaderID)
	defer cancel()
	resp, err := n.rpc.Apply(n.toServer(fctx, leaderID), target, transport.ApplyRequest{Command: data, LeaderOnly: n.raft != nil})
	if err != nil {
		if leaderID != "" && ctx.Err() == nil && errors.Is(fctx.Err(), context.DeadlineExceeded) {
			// The leader this node still believes in did not answer in
			// RequestTimeout: answer now (the caller retries with the
			// same request ID) rather than hold the caller while it is
			// frozen or cut off.
			return res, clusterErr(ErrTimeout, fmt.Sprintf("the leader %s did not answer within %v", leaderID, n.forwardTimeout())), false, true
		}
		if errors.Is(err, transport.ErrUnreachable) {
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err()), false, true
			}
			return res, err, true, true
		}
		if errors.Is(err, ErrShutdown) {
			// The remote node is going away; another will lead.
			return res, err, true, true
		}
		return classify(res, err)
	}
	return resp.Result(), nil, false, false
}

// forwardTimeout bounds one forwarded write or read index.
func (n *Node) forwardTimeout() time.Duration { return min(n.cfg.RPCTimeout, n.cfg.RequestTimeout) }

// forwardCtx bounds one call to another node by RequestTimeout (at most
// RPCTimeout) and, when the call goes to the leader, ends it as soon as
// this node sees another leader (or none): a frozen or cut-off leader does
// not hold the call. An end by a leader change is a cancel; one by the
// deadline is context.DeadlineExceeded.
func (n *Node) forwardCtx(ctx context.Context, leaderID string) (context.Context, context.CancelFunc) {
	fctx, cancel := context.WithTimeout(ctx, n.forwardTimeout())
	if n.raft == nil || leaderID == "" {
		return fctx, cancel
	}
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
				if _, id := n.raft.LeaderWithID(); string(id) != leaderID {
					cancel()
					return
				}
			}
		}
	}()
	return fctx, cancel
}

// classify sorts an attempt's error into retryable or final.
func classify(res fsm.Result, err error) (fsm.Result, error, bool, bool) {
	switch {
	case err == nil:
		return res, nil, false, false
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader):
		return res, err, true, false
	case errors.Is(err, ErrTimeout):
		// A remote leader's apply timed out or lost leadership; ours too.
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return res, err, false, true
		}
		return res, err, true, true
	case errors.Is(err, ErrShutdown):
		return res, err, false, true
	}
	return res, err, false, false
}

// applyLeader stamps the command with the leader's clock, proposes it, and
// waits for the state machine's answer. Only the leader calls it.
func (n *Node) applyLeader(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	if err := n.checkFeature(ctx, cmd); err != nil {
		return fsm.Result{}, err
	}
	fsm.Stamp(cmd, time.Now())
	payload, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	enqueue := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		enqueue = max(time.Until(dl), time.Millisecond)
	}
	res, err, grouped := n.applyGrouped(ctx, cmd, payload, enqueue)
	if grouped {
		return res, err
	}
	var f raft.ApplyFuture
	data := wrapCommand(cmd, payload)
	if err := n.raftCall(ctx, func() raft.Future { f = n.raft.Apply(data, enqueue); return f }); err != nil {
		return fsm.Result{}, mapRaftErr(err)
	}
	return entryResult(f, -1)
}

// entryResult is the state machine's answer to an applied entry: the
// whole entry's (pos < 0), or that of the command at pos in a Batch. An
// entry a halted replica refused has one answer for all its commands.
func entryResult(f raft.ApplyFuture, pos int) (fsm.Result, error) {
	res, ok := f.Response().(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("unexpected apply response %T", f.Response())
	}
	if pos < 0 || res.Err != nil {
		return res, nil
	}
	if pos >= len(res.Batch) {
		return fsm.Result{}, fmt.Errorf("batch entry %d answered %d results, none for command %d", res.Index, len(res.Batch), pos)
	}
	return res.Batch[pos], nil
}

// notBatch refuses an fsm.Batch as a write: only the leader's WriteGroup
// makes one, of the writes it was given.
func notBatch(cmd fsm.Command) error {
	if _, ok := cmd.(*fsm.Batch); ok {
		return &fsm.Error{Code: fsm.ErrInvalid.Code, Message: "a batch entry is not a write of its own: send its writes (POST /v1/batch)"}
	}
	return nil
}

// RPCApply serves a forwarded write.
func (n *Node) RPCApply(ctx context.Context, req transport.ApplyRequest) (transport.ApplyResponse, error) {
	if err := n.running(); err != nil {
		return transport.ApplyResponse{}, err
	}
	cmd, err := fsm.Decode(req.Command)
	if err != nil {
		return transport.ApplyResponse{}, err
	}
	if err := notBatch(cmd); err != nil {
		return transport.ApplyResponse{}, err
	}
	var res fsm.Result
	switch {
	case n.raft == nil:
		return transport.ApplyResponse{}, ErrNotServer
	case !req.LeaderOnly:
		res, err = n.Apply(ctx, cmd)
	case n.raft.State() != raft.Leader:
		return transport.ApplyResponse{}, ErrNotLeader
	default:
		res, err = n.applyLeader(ctx, cmd)
	}
	if err != nil {
		return transport.ApplyResponse{}, err
	}
	return transport.NewApplyResponse(res), nil
}

// RemovePeer removes a server from the Raft configuration (a dead server
// an operator gives up on, or this one leaving). Forwarded to the leader;
// a leader removing itself hands leadership over first.
func (n *Node) RemovePeer(ctx context.Context, id string) error {
	if n.raft == nil {
		return ErrNotServer
	}
	if err := n.running(); err != nil {
		return err
	}
	if id == "" {
		return &fsm.Error{Code: fsm.ErrInvalid.Code, Message: "server id is empty"}
	}
	deadline := time.Now().Add(n.cfg.NoLeaderHold)
	for {
		err := n.removePeerOnce(ctx, id)
		if err == nil || !IsRetryable(err) || errors.Is(err, ErrShutdown) {
			return err
		}
		if time.Now().After(deadline) {
			return err
		}
		if !n.sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
	}
}

func (n *Node) removePeerOnce(ctx context.Context, id string) error {
	if n.IsLeader() {
		if id == n.cfg.NodeID {
			n.transferLeadership(ctx)
			if n.IsLeader() {
				return &fsm.Error{Code: fsm.ErrConflict.Code, Message: "the leader cannot remove itself: no other voter can take over"}
			}
		} else {
			return n.removeByOperator(ctx, id)
		}
	}
	l, ok := n.Leader()
	if !ok || l.RPCAddr == "" || l.ID == n.cfg.NodeID {
		return clusterErr(ErrNoLeader, "no leader known")
	}
	err := n.rpc.RemovePeer(n.toServer(ctx, l.ID), l.RPCAddr, id)
	if errors.Is(err, transport.ErrUnreachable) {
		return clusterErr(ErrNoLeader, err.Error())
	}
	return err
}

// removeServer removes a server from the configuration; the leader only.
func (n *Node) removeServer(ctx context.Context, id string) error {
	cfg, index, err := n.configuration(ctx)
	if err != nil {
		return err
	}
	found := false
	for _, s := range cfg.Servers {
		found = found || string(s.ID) == id
	}
	if !found {
		return &fsm.Error{Code: fsm.ErrNotFound.Code, Message: "server " + id + " is not in the raft configuration"}
	}
	n.log.Info("removing server from the raft configuration", "id", id)
	return mapRaftErr(n.raftCall(ctx, func() raft.Future { return n.raft.RemoveServer(raft.ServerID(id), index, 0) }))
}

// RPCRemovePeer serves RemovePeer on the leader.
func (n *Node) RPCRemovePeer(ctx context.Context, id string) error {
	if n.raft == nil {
		return ErrNotServer
	}
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == n.cfg.NodeID {
		return clusterErr(ErrNotLeader, "the leader cannot remove itself; ask it to leave")
	}
	return n.removeByOperator(ctx, id)
}

func (n *Node) sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-n.shutdownCh:
		return false
	}
}
