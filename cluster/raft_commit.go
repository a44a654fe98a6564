package cluster

import (
	"sync"

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
// It also fences the heartbeat handler, which the network transport calls
// on its own connection goroutines, apart from Raft's loops: a heartbeat
// that reached it just before Raft stopped could otherwise still write
// the term to the stable store after the node closed it, and Raft panics
// on a store that fails. Close waits for the heartbeats being handled and
// refuses later ones, so the stores close only after.
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
}

func newCommitBoundTransport(t *raft.NetworkTransport) *commitBoundTransport {
	c := &commitBoundTransport{NetworkTransport: t, out: make(chan raft.RPC), stop: make(chan struct{})}
	c.done.Add(1)
	go c.forward()
	return c
}

// Consumer returns the requests for Raft, AppendEntries bounded.
func (c *commitBoundTransport) Consumer() <-chan raft.RPC { return c.out }

func (c *commitBoundTransport) forward() {
	defer c.done.Done()
	in := c.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			if req, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
				boundCommit(req)
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

// boundCommit lowers a request's commit index to the last entry it
// carries.
func boundCommit(req *raft.AppendEntriesRequest) {
	if last := req.PrevLogEntry + uint64(len(req.Entries)); req.LeaderCommitIndex > last {
		req.LeaderCommitIndex = last
	}
}

// SetHeartbeatHandler hands Raft's heartbeat handler to the network
// transport, fenced by Close.
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
		cb(rpc)
	})
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
