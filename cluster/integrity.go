package cluster

import (
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// integrity is a server's view of its replica's health: the entry its FSM
// halted at (fail-stop), and the state hash comparison with its peers.
type integrity struct {
	mu sync.Mutex
	// halt is set once the FSM met an entry it could not apply; the node
	// has then stopped Raft and Failed is closed.
	halt     *HaltError
	failedCh chan struct{}
	// latest is this replica's newest checkpoint, advertised in gossip.
	latest Checkpoint
	// peers holds the recent checkpoints each peer advertised.
	peers map[string][]Checkpoint
	// divergence is the newest mismatch seen (nil: none); diverged is set,
	// for good, when this server is the divergent one.
	divergence *Divergence
	diverged   bool
	kick       chan struct{}
}

func newIntegrity() integrity {
	return integrity{failedCh: make(chan struct{}), peers: map[string][]Checkpoint{}, kick: make(chan struct{}, 1)}
}

// integrityCheckInterval is how often a server compares checkpoints.
const integrityCheckInterval = 500 * time.Millisecond

// DivergeEnv, for tests only, makes a server's FSM apply one command
// differently: the first Allocate at or after the index it holds gets one
// second added to its time. The replica then differs from the others
// while every entry passes its checksum.
const DivergeEnv = "DMSC_TEST_DIVERGE_AT"

// setupIntegrity wires the FSM's checkpoints (and the test fault) to the
// node. Called before Raft starts.
func (n *Node) setupIntegrity() {
	n.fsm.SetStateHashInterval(n.cfg.StateHashInterval, func(cp Checkpoint) {
		n.integ.mu.Lock()
		n.integ.latest = cp
		n.integ.mu.Unlock()
		select {
		case n.integ.kick <- struct{}{}:
		default:
		}
	})
	if at, err := strconv.ParseUint(os.Getenv(DivergeEnv), 10, 64); err == nil && at > 0 {
		n.log.Warn("test fault: this replica will apply one allocation differently", "from_index", at)
		done := false
		n.fsm.fault = func(idx uint64, c fsm.Command) {
			if a, ok := c.(*fsm.Allocate); ok && !done && idx >= at {
				done = true
				a.Time += int64(time.Second)
			}
		}
	}
}

// Failed is closed when this server has stopped because its replica
// cannot go on (an entry it could not apply); FailErr says why. The agent
// exits when it is closed.
func (n *Node) Failed() <-chan struct{} { return n.integ.failedCh }

// FailErr is why the node failed, or nil.
func (n *Node) FailErr() error {
	n.integ.mu.Lock()
	defer n.integ.mu.Unlock()
	if n.integ.halt == nil {
		return nil
	}
	return n.integ.halt
}

// replicaProblem says why this server's replica may not be read ("" when
// it may): it halted, or its state differs from the other servers'.
func (n *Node) replicaProblem() string {
	n.integ.mu.Lock()
	defer n.integ.mu.Unlock()
	switch {
	case n.integ.halt != nil && n.integ.halt.NeedsUpgrade() != nil:
		return n.integ.halt.Error()
	case n.integ.halt != nil:
		return n.integ.halt.Error() + "; " + resyncAdvice
	case n.integ.diverged && n.integ.divergence != nil:
		return "this server's state differs from the other servers': " + n.integ.divergence.String() + "; " + resyncAdvice
	}
	return ""
}

// Divergence returns the newest state hash mismatch this server has seen
// (nil: none).
func (n *Node) Divergence() *Divergence {
	n.integ.mu.Lock()
	defer n.integ.mu.Unlock()
	return n.integ.divergence
}

const resyncAdvice = "stop this server and run `dmsc operator raft resync -data-dir DIR -node ID -address <another server>` on it to fetch the state from the other servers, or restore a snapshot (see \"When things break\" in deploy/README.md)"

// integrityLoop stops the node when its FSM halts, advertises this
// replica's newest checkpoint and compares it with the peers'.
func (n *Node) integrityLoop() {
	t := time.NewTicker(integrityCheckInterval)
	defer t.Stop()
	advertised := Checkpoint{}
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-n.fsm.Halted():
			n.failStop()
			return
		case <-n.integ.kick:
		case <-t.C:
		}
		n.integ.mu.Lock()
		latest := n.integ.latest
		n.integ.mu.Unlock()
		if latest != advertised && n.ml != nil {
			advertised = latest
			if err := n.ml.UpdateNode(gossipTimeout(n.baseCtx)); err != nil {
				n.log.Debug("advertising the state hash", "error", err)
			}
		}
		if n.compareReplicas() && n.ml != nil {
			if err := n.ml.UpdateNode(gossipTimeout(n.baseCtx)); err != nil {
				n.log.Debug("advertising the divergence", "error", err)
			}
		}
	}
}

// failStop stops Raft after the FSM halted, so that this replica takes no
// part in the cluster with a state it cannot vouch for, and tells the
// agent (Failed).
func (n *Node) failStop() {
	h := n.fsm.Halt()
	if nu := h.NeedsUpgrade(); nu != nil {
		// A newer leader wrote a command this binary does not know (the
		// feature gate was bypassed, or this server joined after it was
		// written). Resync would not help: the same entry comes back.
		n.log.Error(h.Error()+"; this server stops",
			"index", h.Index, "command_type", int(nu.Type), "needs_level", nu.Level, "needs_version", nu.Version,
			"version", n.cfg.Version, "feature_level", fsm.FeatureLevel())
	} else {
		n.log.Error("log entry "+strconv.FormatUint(h.Index, 10)+" is corrupt or cannot be decoded; this server stops; "+resyncAdvice,
			"index", h.Index, "error", h.Err)
	}
	n.raftMu.Lock()
	n.raftClosed = true
	n.raftMu.Unlock()
	if err := n.raft.Shutdown().Error(); err != nil {
		n.log.Warn("raft shutdown", "error", err)
	}
	n.integ.mu.Lock()
	n.integ.halt = h
	close(n.integ.failedCh)
	n.integ.mu.Unlock()
}

// compareReplicas takes the peers' advertised checkpoints and compares
// them with this replica's. It reports whether this server has just found
// itself divergent (to be advertised).
func (n *Node) compareReplicas() bool {
	mine := n.fsm.Checkpoints()
	n.integ.mu.Lock()
	defer n.integ.mu.Unlock()
	alive := map[string]bool{}
	for _, m := range n.members.list() {
		if m.id == n.cfg.NodeID || !m.meta.server() || m.status != MemberAlive {
			continue
		}
		alive[m.id] = true
		cp, ok := parseCheckpoint(m.meta.StateHash)
		if !ok {
			continue
		}
		cps := n.integ.peers[m.id]
		switch {
		case len(cps) > 0 && cps[len(cps)-1] == cp:
			continue
		case len(cps) > 0 && cps[len(cps)-1].Index >= cp.Index:
			cps = nil // restarted or resynced: start over
		}
		cps = append(cps, cp)
		if len(cps) > keepCheckpoints {
			cps = cps[len(cps)-keepCheckpoints:]
		}
		n.integ.peers[m.id] = cps
	}
	for id := range n.integ.peers {
		if !alive[id] {
			delete(n.integ.peers, id)
		}
	}
	d := compareCheckpoints(n.cfg.NodeID, mine, n.integ.peers)
	old := n.integ.divergence
	if d == nil {
		if old != nil && !n.integ.diverged {
			n.log.Info("state hashes agree again", "index", mine[len(mine)-1].Index)
			n.integ.divergence = nil
		}
		return false
	}
	if old != nil && old.Index == d.Index {
		return false
	}
	d.Seen = time.Now()
	n.integ.divergence = d
	self := false
	for _, id := range d.Divergent {
		self = self || id == n.cfg.NodeID
	}
	if self && !n.integ.diverged {
		n.integ.diverged = true
		n.log.Error("this server's state differs from the other servers' at the same index; it stops answering reads; "+resyncAdvice,
			"index", d.Index, "divergence", d.String())
		return true
	}
	n.log.Error("state divergence between servers", "index", d.Index, "divergence", d.String())
	return false
}

// integrityMeta is what a server advertises in gossip: its newest
// checkpoint and, when its replica failed, "halted" or "diverged".
func (n *Node) integrityMeta() (stateHash, problem string) {
	n.integ.mu.Lock()
	defer n.integ.mu.Unlock()
	switch {
	case n.integ.halt != nil:
		problem = "halted"
	case n.integ.diverged:
		problem = "diverged"
	}
	return n.integ.latest.String(), problem
}
