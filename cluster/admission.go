package cluster

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

// Servers are admitted on purpose, as Consul's autopilot and etcd's
// learners do: a live server gossip shows that is not in the Raft
// configuration is first asked over the node RPC who it is and how far
// it has caught up (with TLS on, only a peer with a server certificate
// for its name is heard), then added as a non-voter. It is made a voter
// once it has stayed healthy (answering, in the leader's term, within
// MaxTrailingLogs of the leader's log) for ServerStabilization. A server
// an operator removed (RemovePeer) is recorded in the replicated state
// (fsm.SetServerRemoved) and never added back until ReadmitPeer lifts
// that; it then comes back through the same admission.

// reconcileServers admits live servers (non-voters first, promoted when
// stable), removes servers an operator removed or that left for good at
// once, and failed ones after DeadServerGrace.
func (n *Node) reconcileServers(ctx context.Context, list []memberInfo, byID map[string]memberInfo, now time.Time) {
	cfg, _, err := n.configuration(ctx)
	if err != nil {
		return
	}
	var removed map[string]bool
	n.fsm.Read(func(s *fsm.State) {
		removed = map[string]bool{}
		for _, r := range s.RemovedServers() {
			removed[r.ID] = true
		}
	})
	inConfig := map[string]raft.Server{}
	var ids []string
	for _, s := range cfg.Servers {
		inConfig[string(s.ID)] = s
		ids = append(ids, string(s.ID))
	}
	sort.Strings(ids)
	for _, m := range list {
		if m.id == n.cfg.NodeID || !m.meta.server() || m.status != MemberAlive || m.meta.Leaving || m.meta.Raft == "" || removed[m.id] {
			delete(n.stableSince, m.id)
			continue
		}
		s, ok := inConfig[m.id]
		switch {
		case ok && string(s.Address) == m.meta.Raft && s.Suffrage == raft.Voter:
			delete(n.stableSince, m.id)
		case ok && string(s.Address) == m.meta.Raft:
			n.promoteWhenStable(ctx, m, now)
		case ok && s.Suffrage == raft.Voter:
			// A voter back at a new address keeps its vote.
			n.changeServer(ctx, m, "moving voter to its new address", n.raft.AddVoter)
		default:
			n.admit(ctx, m)
		}
	}
	for _, id := range ids {
		if id == n.cfg.NodeID {
			continue
		}
		m, ok := byID[id]
		if ok && m.status == MemberAlive && !m.meta.Leaving && !removed[id] {
			delete(n.serverMissing, id)
			continue
		}
		gone := removed[id] || ok && (m.status == MemberLeft || m.meta.Leaving)
		since := n.missingSince(n.serverMissing, id, m, ok, now)
		if !gone && now.Sub(since) < n.cfg.DeadServerGrace {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := n.removeServer(rctx, id); err != nil {
			n.log.Warn("removing server failed", "id", id, "error", err)
		} else {
			delete(n.serverMissing, id)
		}
		cancel()
	}
}

// serverHealth asks a server over the node RPC how far it has caught up,
// and reports whether it is healthy: it answers as a server, in the
// leader's term, within MaxTrailingLogs of the leader's log.
func (n *Node) serverHealth(ctx context.Context, m memberInfo) bool {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := n.rpc.Status(n.toServer(sctx, m.id), m.meta.RPC)
	if err != nil {
		n.log.Debug("server status failed", "id", m.id, "error", err)
		return false
	}
	return st.Server && st.ID == m.id && st.Term == n.raft.CurrentTerm() &&
		st.LastIndex+n.cfg.MaxTrailingLogs >= n.raft.LastIndex()
}

// admit adds a new server as a non-voter, once it answers as a server.
func (n *Node) admit(ctx context.Context, m memberInfo) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	st, err := n.rpc.Status(n.toServer(sctx, m.id), m.meta.RPC)
	cancel()
	if err != nil || !st.Server || st.ID != m.id {
		n.log.Warn("not admitting server: it did not answer as that server", "id", m.id, "error", err)
		return
	}
	n.changeServer(ctx, m, "admitting server as a non-voter", n.raft.AddNonvoter)
}

// promoteWhenStable makes a non-voter a voter once it has been healthy
// for ServerStabilization.
func (n *Node) promoteWhenStable(ctx context.Context, m memberInfo, now time.Time) {
	if !n.serverHealth(ctx, m) {
		delete(n.stableSince, m.id)
		return
	}
	since, ok := n.stableSince[m.id]
	if !ok {
		n.stableSince[m.id] = now
		return
	}
	if now.Sub(since) < n.cfg.ServerStabilization {
		return
	}
	if n.changeServer(ctx, m, "promoting stable server to voter", n.raft.AddVoter) {
		delete(n.stableSince, m.id)
	}
}

// changeServer adds (or re-adds) a server to the configuration with one
// of raft's AddVoter or AddNonvoter, and reports whether it was done.
func (n *Node) changeServer(ctx context.Context, m memberInfo, what string,
	add func(raft.ServerID, raft.ServerAddress, uint64, time.Duration) raft.IndexFuture) bool {
	n.log.Info(what, "id", m.id, "address", m.meta.Raft)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := n.raftCall(actx, func() raft.Future { return add(raft.ServerID(m.id), raft.ServerAddress(m.meta.Raft), 0, 0) })
	if err != nil {
		n.log.Warn(what+" failed", "id", m.id, "error", err)
		return false
	}
	return true
}

// removeByOperator records that an operator removed a server, so that the
// leader does not add it back, and removes it from the configuration;
// the leader only.
func (n *Node) removeByOperator(ctx context.Context, id string) error {
	cfg, _, err := n.configuration(ctx)
	if err != nil {
		return err
	}
	inConfig := false
	for _, s := range cfg.Servers {
		inConfig = inConfig || string(s.ID) == id
	}
	removed := false
	n.fsm.Read(func(s *fsm.State) { removed = s.ServerRemoved(id) })
	if !inConfig && !removed {
		return &fsm.Error{Code: fsm.ErrNotFound.Code, Message: "server " + id + " is not in the raft configuration"}
	}
	if !removed {
		res, err := n.applyLeader(ctx, &fsm.SetServerRemoved{ServerID: id, Removed: true})
		if err != nil {
			return err
		}
		if res.Err != nil {
			return res.Err
		}
	}
	if !inConfig {
		return nil
	}
	return n.removeServer(ctx, id)
}

// ReadmitPeer lifts an operator's removal of a server: the leader may add
// it again, first as a non-voter.
func (n *Node) ReadmitPeer(ctx context.Context, id string) error {
	if n.raft == nil {
		return ErrNotServer
	}
	res, err := n.Apply(ctx, &fsm.SetServerRemoved{ServerID: id})
	if err != nil {
		return err
	}
	return res.Err
}
