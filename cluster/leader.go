package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// monitorLeadership starts the leader's duties when this server wins an
// election and stops them, waiting until they have stopped, when it loses.
func (n *Node) monitorLeadership() {
	var (
		stop context.CancelFunc
		done chan struct{}
	)
	stopDuties := func() {
		if stop != nil {
			stop()
			<-done
			stop, done = nil, nil
		}
	}
	for {
		select {
		case isLeader := <-n.leaderNotify:
			if !isLeader {
				if stop != nil {
					n.log.Info("leadership lost")
				}
				stopDuties()
				continue
			}
			if stop != nil {
				continue
			}
			ctx, cancel := context.WithCancel(n.baseCtx)
			stop, done = cancel, make(chan struct{})
			go func() {
				defer close(done)
				n.leaderLoop(ctx)
			}()
		case <-n.shutdownCh:
			stopDuties()
			return
		}
	}
}

// leaderLoop establishes leadership (a barrier, then a first tick whose
// application proves every earlier entry is applied here) and runs the
// duties until ctx ends. If leadership cannot be established it hands
// leadership to another server.
func (n *Node) leaderLoop(ctx context.Context) {
	defer n.leaderReady.Store(false)
	n.serverMissing = map[string]time.Time{}
	n.stableSince = map[string]time.Time{}
	n.hostMissing = map[string]time.Time{}
	n.hostRetry = map[string]time.Time{}
	for failures := 0; ; {
		err := n.establishLeadership(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		failures++
		n.log.Error("establishing leadership failed", "error", err, "attempt", failures)
		if failures >= 3 {
			n.log.Warn("giving up leadership")
			if err := n.raftCall(ctx, n.raft.LeadershipTransfer); err == nil {
				<-ctx.Done()
				return
			}
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	n.leaderReady.Store(true)
	n.log.Info("leader ready", "term", n.raft.CurrentTerm())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		n.tickLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		n.reconcileLoop(ctx)
	}()
	wg.Wait()
}

func (n *Node) establishLeadership(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.raftCall(bctx, func() raft.Future { return n.raft.Barrier(0) }); err != nil {
		return mapRaftErr(err)
	}
	// A tick reaches the state machine (a barrier does not): once it is
	// applied, the applied index covers the leader's commit index, which
	// consistent reads rely on.
	_, err := n.applyLeader(bctx, &fsm.Tick{})
	return err
}

// minTickGap keeps the tick loop from spinning on a deadline that is due.
const minTickGap = 5 * time.Millisecond

// tickLoop proposes a tick every TickInterval and whenever the state's next
// deadline (a lease expiry or a queued request's timeout) falls due.
func (n *Node) tickLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	last := time.Now()
	for {
		changed := n.fsm.Changed()
		next := last.Add(n.cfg.TickInterval)
		var (
			due time.Time
			has bool
		)
		n.fsm.Read(func(s *fsm.State) { due, has = s.NextDeadline() })
		if has && due.Before(next) {
			next = due
		}
		timer.Reset(max(time.Until(next), minTickGap))
		select {
		case <-ctx.Done():
			return
		case <-changed:
			// A command may have added an earlier deadline.
		case <-timer.C:
			if _, err := n.applyLeader(ctx, &fsm.Tick{}); err != nil && ctx.Err() == nil {
				n.log.Warn("tick failed", "error", err)
			}
			last = time.Now()
		}
	}
}

// reconcileLoop keeps the Raft configuration and the registered hosts in
// line with gossip, periodically and on every gossip event.
func (n *Node) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		n.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.members.events:
		}
	}
}

func (n *Node) reconcile(ctx context.Context) {
	now := time.Now()
	list := n.members.list()
	byID := make(map[string]memberInfo, len(list))
	for _, m := range list {
		byID[m.id] = m
	}
	n.reconcileServers(ctx, list, byID, now)
	n.reconcileHosts(ctx, list, byID, now)
}

// missingSince returns since when a node has been missing: when gossip
// reported it failed, or when this leader first noticed it absent.
func (n *Node) missingSince(seen map[string]time.Time, id string, m memberInfo, known bool, now time.Time) time.Time {
	since, ok := seen[id]
	if known && m.status != MemberAlive && (!ok || m.since.Before(since)) {
		since, ok = m.since, true
	}
	if !ok {
		since = now
	}
	seen[id] = since
	return since
}

// inventoryFetchers bounds concurrent inventory requests.
const inventoryFetchers = 8

// reconcileHosts registers the inventory of live hosts that are new,
// down, or changed, and marks down registered hosts gossip has lost for
// HostDownGrace (at once for a host that left for good). Only hosts with
// an address are managed this way; a host registered without one (static
// devices) is left alone.
func (n *Node) reconcileHosts(ctx context.Context, list []memberInfo, byID map[string]memberInfo, now time.Time) {
	var hosts []fsm.Host
	n.fsm.Read(func(s *fsm.State) { hosts = s.Hosts() })
	registered := make(map[string]fsm.Host, len(hosts))
	for _, h := range hosts {
		registered[h.ID] = h
	}

	var todo []memberInfo
	for _, m := range list {
		if !m.meta.host() || m.status != MemberAlive || m.meta.Leaving || m.meta.RPC == "" {
			continue
		}
		delete(n.hostMissing, m.id)
		// A live host registered up at the same address with the
		// inventory it advertises costs nothing, also to a new leader:
		// the replicated record holds the hash it was registered with,
		// and that registration passed the token and certificate checks.
		// Any difference goes through the full pull and check.
		h, ok := registered[m.id]
		if ok && h.Up && h.Address == m.meta.RPC && m.meta.Inv != "" && h.InventoryHash == m.meta.Inv {
			continue
		}
		if now.Before(n.hostRetry[m.id]) {
			continue
		}
		todo = append(todo, m)
	}
	type outcome struct {
		id  string
		err error
	}
	results := make([]outcome, len(todo))
	sem := make(chan struct{}, inventoryFetchers)
	var wg sync.WaitGroup
	for i, m := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = outcome{id: m.id, err: n.registerHost(ctx, m)}
		}()
	}
	wg.Wait()
	for _, r := range results {
		if errors.Is(r.err, errTopologyLater) {
			n.hostRetry[r.id] = now.Add(20 * n.cfg.ReconcileInterval)
			continue
		}
		if r.err != nil {
			if ctx.Err() == nil {
				n.log.Warn("registering host failed", "host", r.id, "error", r.err)
			}
			n.hostRetry[r.id] = now.Add(2 * n.cfg.ReconcileInterval)
			continue
		}
		delete(n.hostRetry, r.id)
	}

	for _, h := range hosts {
		if !h.Up || h.Address == "" {
			continue
		}
		m, ok := byID[h.ID]
		if ok && m.meta.host() && m.status == MemberAlive && !m.meta.Leaving {
			continue
		}
		gone := ok && (m.status == MemberLeft || m.meta.Leaving)
		since := n.missingSince(n.hostMissing, h.ID, m, ok, now)
		if !gone && now.Sub(since) < n.cfg.HostDownGrace {
			continue
		}
		n.log.Warn("marking host down", "host", h.ID, "missing_for", now.Sub(since).Round(time.Millisecond))
		res, err := n.applyLeader(ctx, &fsm.SetHostStatus{HostID: h.ID, Up: false})
		if err == nil {
			err = res.Err
		}
		if err != nil {
			if ctx.Err() == nil {
				n.log.Warn("marking host down failed", "host", h.ID, "error", err)
			}
		}
	}
}

// registerHost fetches a host's inventory and registers it through Raft
// with the inventory's hash, which the host record keeps.
func (n *Node) registerHost(ctx context.Context, m memberInfo) error {
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	inv, err := n.rpc.Inventory(toHost(fctx, m), m.meta.RPC)
	cancel()
	if err != nil {
		return err
	}
	if n.cfg.ACLEnabled {
		if err := n.checkHostToken(m.id, inv.Token); err != nil {
			return err
		}
	}
	hash := transport.InventoryHash(inv)
	spec := inv.Host
	spec.ID = m.id
	spec.Address = m.meta.RPC
	n.log.Info("registering host", "host", m.id, "devices", len(inv.Devices))
	cmd := &fsm.RegisterHost{Host: spec, Devices: inv.Devices, InventoryHash: hash}
	res, err := n.applyLeader(ctx, cmd)
	if errors.Is(err, ErrFeatureUnavailable) && stripTopology(cmd) {
		// A server of an earlier release would not keep the devices'
		// topology: register them without it, and with no hash, so that a
		// later reconcile registers them whole once every server can.
		n.log.Warn("registering host without its devices' topology until every server supports it", "host", m.id, "reason", err)
		cmd.InventoryHash = ""
		if res, err = n.applyLeader(ctx, cmd); err == nil && res.Err == nil {
			return errTopologyLater
		}
	}
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	return nil
}

// errTopologyLater: a host was registered without its devices' topology,
// which an older server would not keep; its registration is tried whole
// again after a longer wait.
var errTopologyLater = errors.New("registered without the devices' topology")

// stripTopology takes the topology off cmd's devices (copies of them) and
// reports whether any had one.
func stripTopology(cmd *fsm.RegisterHost) bool {
	had := false
	devs := make([]fsm.DeviceSpec, len(cmd.Devices))
	for i, d := range cmd.Devices {
		had = had || d.Topology != nil
		d.Topology = nil
		devs[i] = d
	}
	cmd.Devices = devs
	return had
}

// bootstrapLoop starts a new cluster once BootstrapExpect servers with the
// same expectation are in gossip, unless one of them already belongs to a
// cluster (then this server waits to be added by its leader).
func (n *Node) bootstrapLoop() {
	expect := n.cfg.BootstrapExpect
	if expect <= 1 || n.hasRaftConfig() || n.wasMember() {
		return
	}
	warned := false
	for {
		if n.hasRaftConfig() {
			return
		}
		var peers []memberInfo
		mismatch := false
		for _, m := range n.members.list() {
			if !m.meta.server() || m.status != MemberAlive || m.meta.Leaving || m.meta.Raft == "" {
				continue
			}
			switch m.meta.Expect {
			case expect:
				peers = append(peers, m)
			case 0:
			default:
				mismatch = true
				if !warned {
					n.log.Error("servers disagree on bootstrap-expect; not bootstrapping", "server", m.id, "theirs", m.meta.Expect, "ours", expect)
					warned = true
				}
			}
		}
		if !mismatch && len(peers) >= expect {
			switch n.peersHaveState(peers) {
			case stateFound:
				n.log.Info("found an existing cluster; waiting to be added by its leader")
				return
			case stateNone:
				cfg := raft.Configuration{}
				for _, p := range peers {
					cfg.Servers = append(cfg.Servers, raft.Server{
						Suffrage: raft.Voter, ID: raft.ServerID(p.id), Address: raft.ServerAddress(p.meta.Raft),
					})
				}
				n.log.Info("bootstrapping a new cluster", "servers", len(cfg.Servers))
				if err := n.raftCall(n.baseCtx, func() raft.Future { return n.raft.BootstrapCluster(cfg) }); err != nil {
					n.log.Warn("bootstrap", "error", err)
				}
				return
			}
		}
		if !n.sleep(200 * time.Millisecond) {
			return
		}
	}
}

type peerState int

const (
	stateUnknown peerState = iota
	stateNone
	stateFound
)

// peersHaveState asks every other peer whether it already has Raft state.
func (n *Node) peersHaveState(peers []memberInfo) peerState {
	for _, p := range peers {
		if p.id == n.cfg.NodeID {
			continue
		}
		ctx, cancel := context.WithTimeout(n.baseCtx, 2*time.Second)
		st, err := n.rpc.Status(n.toServer(ctx, p.id), p.meta.RPC)
		cancel()
		if err != nil {
			return stateUnknown
		}
		if st.HasState {
			return stateFound
		}
	}
	return stateNone
}

func (n *Node) hasRaftConfig() bool {
	cfg, _, err := n.configuration(n.baseCtx)
	return err == nil && len(cfg.Servers) > 0
}

// RPCStatus tells a starting server whether this node belongs to a
// cluster, and the leader how far this server has caught up.
func (n *Node) RPCStatus(ctx context.Context) (transport.StatusResponse, error) {
	st := transport.StatusResponse{ID: n.cfg.NodeID, Server: n.raft != nil}
	if n.raft != nil {
		st.HasState = n.raft.LastIndex() > 0 || n.hasRaftConfig()
		st.LastIndex, st.Term = n.raft.LastIndex(), n.raft.CurrentTerm()
		if l, ok := n.Leader(); ok {
			st.Leader = l.ID
		}
	}
	return st, nil
}
