package cluster

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hashicorp/raft (v1.7.3) lets a follower that accepts an AppendEntries
// raise its commit index to min(LeaderCommitIndex, its own last index).
// The Raft paper bounds it by the index of the last entry the request
// carried (PrevLogEntry + len(Entries)): only those entries are known to
// match the leader's log. The difference matters when the follower holds
// entries past the matched prefix that no leader ever committed, written
// while it led in an older term: a request with no entries (sent by the
// new leader while the follower was frozen, and delivered when it wakes)
// then commits and applies them, and the replica diverges for good. The
// linearizability test caught exactly this after a freeze of the leader.
//
// commitBoundTransport applies the paper's bound to every AppendEntries
// request before Raft sees it. It costs nothing else: a request that
// carries entries up to the leader's commit index is unchanged, and one
// that carries none names the leader's last index as its previous entry
// once the follower has caught up.
//
// It also keeps a snapshot older than the replica's state from reaching
// Raft. hashicorp/raft installs any InstallSnapshot request of the
// current term, even one whose snapshot is older than what the replica
// has applied, and restarts applying from there: the state goes back in
// time while the applied index the node serves consistent reads by does
// not, and the entries after the snapshot may no longer be in the log
// (panic). Such a request comes late: a leader that sent a small
// snapshot to a frozen follower times out and closes the connection, but
// the request is whole in the follower's socket buffer and is served
// when it wakes, possibly after a newer snapshot sent on another
// connection. A request whose snapshot ends at or before the entry the
// replica applied last is answered here as installed (the replica holds
// that state and more), its data read and dropped. Each InstallSnapshot
// that goes to Raft is answered before the next request is handed on, so
// that the check sees what it installed.
//
// It also keeps a heartbeat that can change the node's term or role off
// the fast path. The network transport hands heartbeats to Raft's
// handler on its own connection goroutines, apart from Raft's main loop,
// and a heartbeat of a newer term makes the node a follower of that term
// there. A leader that is meanwhile writing clients' commands to its log
// (the leader loop reads the current term as it numbers them) then writes
// them under the new leader's term, at indexes where the new leader wrote
// others. Raft takes entries of the same index and term to be the same,
// so the new leader's entries never replace them, and they are applied
// on this replica once committed: the replica diverges for good. The
// linearizability test caught it after a leader was frozen and thawed
// (it wrote six of its own commands under the new term). So only a
// heartbeat that can change nothing takes the fast path: one of the
// node's current term while it follows, or of an older term (refused).
// Any other goes through the same channel as other requests and is
// handled by Raft's main loop, between the leader's log writes.
//
// It also fences the heartbeat handler: a heartbeat that reached it just
// before Raft stopped could otherwise still write the term to the stable
// store after the node closed it, and Raft panics on a store that fails.
// Close waits for the heartbeats being handled and refuses later ones,
// so the stores close only after.
type commitBoundTransport struct {
	*raft.NetworkTransport
	out  chan raft.RPC
	stop chan struct{}
	once sync.Once
	done sync.WaitGroup

	// hbMu is held for reading while a heartbeat is handled; hbClosed,
	// set under it for writing, refuses the later ones.
	hbMu     sync.RWMutex
	hbClosed bool

	// replica, once set (setReplica), tells where the local replica
	// stands; until then every request goes to Raft.
	replica atomic.Pointer[replicaView]
	log     hclog.Logger
}

// replicaView is what the transport needs of the local Raft: its term,
// whether it follows, the index of the last entry it applied, and the
// header of its answers.
type replicaView struct {
	term, applied func() uint64
	following     func() bool
	header        raft.RPCHeader
}

func newCommitBoundTransport(t *raft.NetworkTransport, log hclog.Logger) *commitBoundTransport {
	c := &commitBoundTransport{NetworkTransport: t, out: make(chan raft.RPC), stop: make(chan struct{}), log: log}
	c.done.Add(1)
	go c.forward()
	return c
}

// setReplica starts the check of InstallSnapshot requests against the
// local Raft.
func (c *commitBoundTransport) setReplica(v *replicaView) { c.replica.Store(v) }

// Consumer returns the requests for Raft: AppendEntries bounded, stale
// snapshots answered already.
func (c *commitBoundTransport) Consumer() <-chan raft.RPC { return c.out }

func (c *commitBoundTransport) forward() {
	defer c.done.Done()
	in := c.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			switch req := rpc.Command.(type) {
			case *raft.AppendEntriesRequest:
				boundCommit(req)
			case *raft.InstallSnapshotRequest:
				if c.staleSnapshot(req) {
					c.done.Add(1)
					go c.answerStale(rpc, req)
					continue
				}
				if !c.handOver(rpc) {
					return
				}
				continue
			}
			select {
			case c.out <- rpc:
			case <-c.stop:
				return
			}
		case <-c.stop:
			return
		}
	}
}

// staleSnapshot reports whether req's snapshot ends at or before the
// last entry the local replica applied (a request of an older term is
// left to Raft, which refuses it).
func (c *commitBoundTransport) staleSnapshot(req *raft.InstallSnapshotRequest) bool {
	v := c.replica.Load()
	return v != nil && req.Term >= v.term() && req.LastLogIndex <= v.applied()
}

// answerStale reads a stale snapshot's data to its end, so that the
// leader's write of it completes, and answers that it is installed.
func (c *commitBoundTransport) answerStale(rpc raft.RPC, req *raft.InstallSnapshotRequest) {
	defer c.done.Done()
	v := c.replica.Load()
	applied := v.applied()
	n, err := io.Copy(io.Discard, rpc.Reader)
	if err != nil {
		rpc.Respond(nil, err)
		return
	}
	c.log.Warn("answered a snapshot older than this replica's state without installing it",
		"snapshot_index", req.LastLogIndex, "snapshot_term", req.LastLogTerm, "applied_index", applied, "bytes", n)
	rpc.Respond(&raft.InstallSnapshotResponse{RPCHeader: v.header, Term: req.Term, Success: true}, nil)
}

// handOver gives an InstallSnapshot request to Raft and waits for its
// answer, which it passes on. False when the transport closed meanwhile.
func (c *commitBoundTransport) handOver(rpc raft.RPC) bool {
	answer := rpc.RespChan
	got := make(chan raft.RPCResponse, 1)
	rpc.RespChan = got
	select {
	case c.out <- rpc:
	case <-c.stop:
		return false
	}
	select {
	case resp := <-got:
		answer <- resp
		return true
	case <-c.stop:
		return false
	}
}

// boundCommit lowers a request's commit index to the last entry it
// carries.
func boundCommit(req *raft.AppendEntriesRequest) {
	if last := req.PrevLogEntry + uint64(len(req.Entries)); req.LeaderCommitIndex > last {
		req.LeaderCommitIndex = last
	}
}

// SetHeartbeatHandler hands Raft's heartbeat handler to the network
// transport, fenced by Close; a heartbeat that could change the node's
// term or role goes to Raft's main loop instead (fastHeartbeat).
func (c *commitBoundTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		c.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	c.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		c.hbMu.RLock()
		defer c.hbMu.RUnlock()
		if c.hbClosed {
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
		if !c.fastHeartbeat(rpc) {
			// The transport waits for the answer on rpc.RespChan, which
			// the main loop gives.
			select {
			case c.out <- rpc:
			case <-c.stop:
				rpc.Respond(nil, raft.ErrTransportShutdown)
			}
			return
		}
		cb(rpc)
	})
}

// fastHeartbeat reports whether a heartbeat may be handled on the
// transport's goroutine: it changes neither the node's term nor its role,
// being of an older term, or of the current one while the node follows.
// The node's term only grows and it becomes a candidate, let alone a
// leader, only in a newer term, so what is checked here still holds when
// Raft handles it (but for a node turning candidate in between, which
// writes no entries).
func (c *commitBoundTransport) fastHeartbeat(rpc raft.RPC) bool {
	v := c.replica.Load()
	req, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if v == nil || !ok {
		return false
	}
	term := v.term()
	return req.Term < term || req.Term == term && v.following()
}

// Close closes the transport, stops forwarding, and waits for the
// heartbeats being handled.
func (c *commitBoundTransport) Close() error {
	err := c.NetworkTransport.Close()
	c.once.Do(func() { close(c.stop) })
	c.done.Wait()
	c.hbMu.Lock()
	c.hbClosed = true
	c.hbMu.Unlock()
	return err
}
