// Package cluster runs a dmsc node: Raft and its storage over the
// scheduler state (RaftFSM adapts an fsm.State to Raft), memberlist
// gossip, membership reconcile, leader forwarding, consistent and blocking
// reads, and the leader's ticks and host tracking; StartLocal runs a whole
// cluster of nodes in one process, for tests and tools. It sits between
// the node-to-node RPC (package transport) below and the HTTP API
// (package api) above. See DESIGN.md in this directory.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// Node is one running dmsc agent: a server (Raft voter with the replicated
// state) or a host (gossip member with devices), or a server with devices.
// All methods are safe for concurrent use.
type Node struct {
	cfg Config
	log hclog.Logger

	mu      sync.Mutex
	started bool
	stopped bool

	shutdownCh chan struct{}
	// baseCtx ends when the node shuts down.
	baseCtx    context.Context
	cancelBase context.CancelFunc
	wg         sync.WaitGroup // background loops

	raftAddr, rpcAddr, gossipAddr string

	// Server parts; nil on hosts. raftMu guards raftClosed: see raftCall.
	raftMu       sync.RWMutex
	raftClosed   bool
	fsm          *RaftFSM
	raft         *raft.Raft
	raftTrans    *commitBoundTransport
	stores       *raftStores
	leaderNotify chan bool
	raftDone     chan struct{} // closed when Raft has shut down
	// leaderReady is set while this node leads and has applied its first
	// command of the term (the barrier): then its commit index covers every
	// entry of earlier terms, and reads and duties may start.
	leaderReady atomic.Bool
	// integ: fail-stop and the state hash comparison (integrity.go).
	integ integrity

	rpcSrv *transport.RPCServer
	rpc    *transport.RPCClient

	// dirLock is held on DataDir while the node runs (datadir.go).
	dirLock *dataDirLock

	ml      *memberlist.Memberlist
	members *members
	leaving atomic.Bool
	// gossipKeys is the gossip encryption keyring (keyring.go).
	gossipKeys gossipKeyring

	// Host inventory (nodes with Config.Inventory).
	invMu   sync.Mutex
	inv     transport.InventoryResponse
	invHash string
	// invServed counts the inventory requests this host answered.
	invServed atomic.Uint64

	// Leader-only bookkeeping, touched by the reconcile loop alone.
	serverMissing map[string]time.Time
	stableSince   map[string]time.Time
	hostMissing   map[string]time.Time
	hostRetry     map[string]time.Time

	nextServer atomic.Uint64 // round robin of a host forwarding writes

	tokens tokenCache // tokens a host resolved through a server (acl_resolve.go)

	// skipFeatureGate: the TestSkipFeatureGateEnv knob (upgrade.go).
	skipFeatureGate bool
	// noBatchEntries, for tests only, keeps the writes of a WriteGroup
	// in entries of their own, as when a server is older than
	// fsm.BatchType.
	noBatchEntries bool
}

// New checks the configuration and returns a node that is not started.
func New(cfg Config) (*Node, error) {
	cfg.Join = append([]string(nil), cfg.Join...)
	cfg.fillDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:        cfg,
		log:        cfg.Logger.Named("cluster"),
		shutdownCh: make(chan struct{}),
		members:    newMembers(),
		integ:      newIntegrity(),
	}
	n.members.serversOnly = cfg.ServersOnlyMembers && !cfg.Server
	n.members.self = cfg.NodeID
	n.baseCtx, n.cancelBase = context.WithCancel(context.Background())
	n.rpc = n.newRPCClient()
	n.readUpgradeTestKnobs()
	return n, nil
}

// Start opens the stores, starts Raft (servers), the node RPC listener and
// gossip, and joins the cluster in the background (retrying every
// RetryJoinInterval). It returns once the node is listening; use
// WaitForLeader to wait for the cluster to be usable. A node is started
// once; after Shutdown make a new one. On error everything opened is
// closed again.
func (n *Node) Start(ctx context.Context) (err error) {
	n.mu.Lock()
	if n.started || n.stopped {
		n.mu.Unlock()
		return clusterErr(ErrShutdown, "node already started or stopped")
	}
	n.started = true
	n.mu.Unlock()
	defer func() {
		if err != nil {
			n.closeAll(context.Background())
		}
	}()

	if n.cfg.DataDir != "" {
		if n.dirLock, err = lockDataDir(n.cfg.DataDir); err != nil {
			return err
		}
	}
	if n.cfg.Inventory != nil {
		if err := n.refreshInventory(); err != nil {
			return err
		}
	}
	rpcLn, err := net.Listen("tcp", net.JoinHostPort(n.cfg.BindAddr, strconv.Itoa(n.cfg.RPCPort)))
	if err != nil {
		return fmt.Errorf("rpc listener: %w", err)
	}
	n.rpcAddr = net.JoinHostPort(n.cfg.AdvertiseAddr, strconv.Itoa(rpcLn.Addr().(*net.TCPAddr).Port))
	if n.cfg.Server {
		if err := n.startRaft(); err != nil {
			rpcLn.Close()
			return err
		}
	}
	n.rpcSrv = transport.ServeRPCWith(n.baseCtx, rpcLn, n, n.log.Named("rpc"), n.rpcServerOptions())
	if err := n.startGossip(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n.goLoop(n.joinLoop)
	n.goLoop(n.reconnectLoop)
	if n.cfg.Server {
		n.goLoop(n.monitorLeadership)
		n.goLoop(n.bootstrapLoop)
		n.goLoop(n.integrityLoop)
	}
	if n.cfg.Inventory != nil {
		n.goLoop(n.inventoryLoop)
	}
	n.log.Info("node started", "id", n.cfg.NodeID, "server", n.cfg.Server, "host", n.cfg.Inventory != nil,
		"rpc", n.rpcAddr, "raft", n.raftAddr, "gossip", n.gossipAddr)
	return nil
}

func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

func (n *Node) startRaft() error {
	stores, err := n.openStores()
	if err != nil {
		return err
	}
	n.stores = stores
	ln, err := net.Listen("tcp", net.JoinHostPort(n.cfg.BindAddr, strconv.Itoa(n.cfg.RaftPort)))
	if err != nil {
		return fmt.Errorf("raft listener: %w", err)
	}
	adv := &net.TCPAddr{IP: net.ParseIP(n.cfg.AdvertiseAddr), Port: ln.Addr().(*net.TCPAddr).Port}
	n.raftAddr = adv.String()
	n.raftTrans = newCommitBoundTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  newRaftStream(ln, adv, n.raftTLS()),
		MaxPool: 3,
		Timeout: raftIOTimeout,
		Logger:  n.log.Named("raft-net"),
	}), n.log.Named("raft-net"))
	n.fsm = NewRaftFSM(fsm.New())
	n.fsm.version = n.cfg.Version
	n.setupIntegrity()
	n.leaderNotify = make(chan bool, 16)
	if err := n.recoverPeers(stores); err != nil {
		return err
	}
	existing, err := raft.HasExistingState(stores.logs, stores.stable, stores.snaps)
	if err != nil {
		return fmt.Errorf("read raft state: %w", err)
	}
	r, err := raft.NewRaft(n.raftConfig(), n.fsm, stores.logs, stores.stable, stores.snaps, n.raftTrans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	n.raftTrans.setReplica(&replicaView{
		term: r.CurrentTerm, applied: r.AppliedIndex,
		following: func() bool { return r.State() == raft.Follower },
		header: raft.RPCHeader{
			ProtocolVersion: n.raftConfig().ProtocolVersion,
			ID:              []byte(n.cfg.NodeID),
			Addr:            n.raftTrans.EncodePeer(raft.ServerID(n.cfg.NodeID), raft.ServerAddress(n.raftAddr)),
		},
	})
	n.watchLeader()
	if existing {
		if err := markMember(n.cfg.DataDir); n.cfg.DataDir != "" && err != nil {
			n.log.Warn("could not write the member marker", "error", err)
		}
	}
	if !existing && n.wasMember() {
		n.log.Info("this server has been part of a cluster and has no Raft state (resync): it waits for the leader to add it back, never bootstraps")
	}
	if !existing && n.cfg.BootstrapExpect == 1 && !n.wasMember() {
		cfg := raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.raftAddr),
		}}}
		if err := r.BootstrapCluster(cfg).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	return nil
}

func (n *Node) localMeta() []byte {
	m := nodeMeta{RPC: n.rpcAddr, HTTP: n.cfg.HTTPAddr, Version: n.cfg.Version, Leaving: n.leaving.Load()}
	switch {
	case n.cfg.Server && n.cfg.Inventory != nil:
		m.Role = "sh"
	case n.cfg.Server:
		m.Role = "s"
	default:
		m.Role = "h"
	}
	if n.cfg.Server {
		m.Level = fsm.FeatureLevel()
		m.Raft = n.raftAddr
		m.Expect = n.cfg.BootstrapExpect
		m.StateHash, m.Integrity = n.integrityMeta()
	}
	if n.cfg.Inventory != nil {
		n.invMu.Lock()
		m.Inv = n.invHash
		n.invMu.Unlock()
	}
	b, _ := json.Marshal(m)
	return b
}

func (n *Node) startGossip() error {
	c := memberlist.DefaultLANConfig()
	c.Name = n.cfg.NodeID
	c.BindAddr = n.cfg.BindAddr
	c.BindPort = n.cfg.GossipPort
	c.AdvertiseAddr = n.cfg.AdvertiseAddr
	c.AdvertisePort = n.cfg.GossipPort
	if n.cfg.GossipProbeInterval > 0 {
		c.ProbeInterval = n.cfg.GossipProbeInterval
		if c.ProbeTimeout > c.ProbeInterval/2 {
			c.ProbeTimeout = c.ProbeInterval / 2
		}
		c.GossipInterval = min(c.GossipInterval, c.ProbeInterval/2)
		// Keep the LAN profile's ratio (30 s at a 1 s probe interval).
		c.GossipToTheDeadTime = 30 * c.ProbeInterval
	}
	if n.cfg.GossipSuspicionMult > 0 {
		c.SuspicionMult = n.cfg.GossipSuspicionMult
	}
	if n.cfg.GossipProbeTimeout > 0 {
		c.ProbeTimeout = min(n.cfg.GossipProbeTimeout, c.ProbeInterval/2)
	}
	if n.cfg.GossipRetransmitMult > 0 {
		c.RetransmitMult = n.cfg.GossipRetransmitMult
	}
	c.EnableCompression = !n.cfg.GossipNoCompression
	c.DisableTcpPings = n.cfg.GossipNoTCPPings
	// A node restarted on another address may take its name back once
	// the old incarnation is known dead.
	c.DeadNodeReclaimTime = 30 * time.Second
	if err := n.setupKeyring(c); err != nil {
		return err
	}
	c.Delegate = metaDelegate{meta: n.localMeta}
	c.Events = n.members
	if n.cfg.GossipKeep != nil && !n.cfg.Server {
		c.Alive = keepFilter{self: n.cfg.NodeID, keep: n.cfg.GossipKeep}
	}
	c.Logger = n.cfg.Logger.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	if n.cfg.GossipTransport != nil {
		t, err := n.cfg.GossipTransport(n.cfg.BindAddr, n.cfg.GossipPort)
		if err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
		c.Transport = t
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		if c.Transport != nil {
			_ = c.Transport.Shutdown()
		}
		return fmt.Errorf("gossip: %w", err)
	}
	n.ml = ml
	n.gossipAddr = net.JoinHostPort(n.cfg.AdvertiseAddr, strconv.Itoa(int(ml.LocalNode().Port)))
	return nil
}

// joinLoop joins the configured addresses, retrying until one answers.
func (n *Node) joinLoop() {
	if len(n.cfg.Join) == 0 {
		return
	}
	for {
		k, err := n.join()
		if k > 0 {
			n.log.Info("joined the cluster", "contacted", k)
			return
		}
		n.log.Warn("join failed; retrying", "addresses", n.cfg.Join, "error", err, "in", n.cfg.RetryJoinInterval)
		if !n.sleep(n.cfg.RetryJoinInterval) {
			return
		}
	}
}

// join contacts the configured addresses. A server contacts them all. A
// host needs one: every node it contacts sends it the whole membership, a
// cost to that node and to the host that grows with the pool, so it tries
// them one at a time, from an address its name picks, so that hosts
// spread over the servers.
func (n *Node) join() (int, error) {
	if n.cfg.Server {
		return n.ml.Join(n.cfg.Join)
	}
	h := fnv.New32a()
	h.Write([]byte(n.cfg.NodeID))
	first := int(h.Sum32() % uint32(len(n.cfg.Join)))
	var errs []error
	for i := range n.cfg.Join {
		k, err := n.ml.Join([]string{n.cfg.Join[(first+i)%len(n.cfg.Join)]})
		if k > 0 {
			return k, nil
		}
		errs = append(errs, err)
	}
	return 0, errors.Join(errs...)
}

// reconnectMax bounds the addresses one reconnect round tries (a joining
// attempt to an unreachable address can take memberlist's TCP timeout).
const reconnectMax = 3

// reconnectLoop tries to rejoin failed members, and the configured Join
// addresses when this node is alone or (a host) sees no server. Memberlist
// alone never contacts a member again once it is declared dead.
func (n *Node) reconnectLoop() {
	for round := 0; n.sleep(n.cfg.ReconnectInterval); round++ {
		var failed []string
		for _, m := range n.members.list() {
			if m.id != n.cfg.NodeID && m.status == MemberFailed {
				failed = append(failed, m.addr)
			}
		}
		var addrs []string
		for i := 0; i < len(failed) && len(addrs) < reconnectMax; i++ {
			addrs = append(addrs, failed[(round*reconnectMax+i)%len(failed)])
		}
		lonely := n.ml.NumMembers() <= 1 || (n.raft == nil && len(n.aliveServers()) == 0)
		if lonely {
			addrs = append(addrs, n.cfg.Join...)
		}
		if len(addrs) == 0 {
			continue
		}
		if k, err := n.ml.Join(addrs); k > 0 {
			n.log.Debug("reconnected", "contacted", k)
		} else {
			n.log.Debug("reconnect failed", "addresses", addrs, "error", err)
		}
	}
}

// sleep waits d or until shutdown; false on shutdown.
func (n *Node) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.shutdownCh:
		return false
	}
}

// running returns ErrShutdown unless the node is started and not stopped.
func (n *Node) running() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.started || n.stopped {
		return ErrShutdown
	}
	return nil
}

// Self describes this node as gossip advertises it, with the addresses in
// use (ports resolved when configured as 0).
func (n *Node) Self() Member {
	m := Member{
		ID: n.cfg.NodeID, Server: n.cfg.Server, Host: n.cfg.Inventory != nil,
		GossipAddr: n.gossipAddr, RaftAddr: n.raftAddr, RPCAddr: n.rpcAddr, HTTPAddr: n.cfg.HTTPAddr,
		Version: n.cfg.Version, Status: MemberAlive, Leader: n.IsLeader(),
	}
	if n.cfg.Server {
		m.FeatureLevel = fsm.FeatureLevel()
	}
	if info, ok := n.members.get(n.cfg.NodeID); ok {
		m.Since = info.since
	}
	return m
}

// Members lists the nodes gossip knows, servers and hosts, alive or not,
// sorted by ID.
func (n *Node) Members() []Member {
	leader, _ := n.Leader()
	list := n.members.list()
	out := make([]Member, 0, len(list))
	for _, m := range list {
		e := m.export()
		e.Leader = e.Server && e.ID == leader.ID
		out = append(out, e)
	}
	return out
}

// Leader returns the current leader as this node knows it. A host knows
// no leader.
func (n *Node) Leader() (LeaderInfo, bool) {
	if n.raft == nil {
		return LeaderInfo{}, false
	}
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return LeaderInfo{}, false
	}
	l := LeaderInfo{ID: string(id), RaftAddr: string(addr)}
	if string(id) == n.cfg.NodeID {
		l.RPCAddr, l.HTTPAddr = n.rpcAddr, n.cfg.HTTPAddr
	} else if m, ok := n.members.get(string(id)); ok {
		l.RPCAddr, l.HTTPAddr = m.meta.RPC, m.meta.HTTP
	}
	return l, true
}

// IsLeader reports whether this node is the Raft leader.
func (n *Node) IsLeader() bool {
	return n.raft != nil && n.raft.State() == raft.Leader
}

// WaitForLeader waits until a leader is known (and, on the leader itself,
// until it has taken up its duties). A host waits until it sees a server
// in gossip.
func (n *Node) WaitForLeader(ctx context.Context) error {
	for {
		if err := n.running(); err != nil {
			return err
		}
		if n.raft == nil {
			if len(n.aliveServers()) > 0 {
				return nil
			}
		} else if l, ok := n.Leader(); ok && (l.ID != n.cfg.NodeID || n.leaderReady.Load()) {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", clusterErr(ErrNoLeader, "waiting for a leader"), ctx.Err())
		case <-n.shutdownCh:
			t.Stop()
			return ErrShutdown
		case <-t.C:
		}
	}
}

// aliveServers lists the RPC addresses of live servers other than this node.
func (n *Node) aliveServers() []string {
	var out []string
	for _, m := range n.members.list() {
		if m.id != n.cfg.NodeID && m.status == MemberAlive && m.meta.server() && !m.meta.Leaving && m.meta.RPC != "" {
			out = append(out, m.meta.RPC)
		}
	}
	return out
}

// Status summarises the node for health and readiness checks.
func (n *Node) Status() Status {
	s := Status{ID: n.cfg.NodeID, Server: n.cfg.Server, Host: n.cfg.Inventory != nil}
	if n.running() != nil {
		s.State = "Shutdown"
		return s
	}
	if n.raft == nil {
		s.Ready = n.ml != nil && n.ml.NumMembers() > 1
		return s
	}
	s.State = n.raft.State().String()
	s.Integrity = n.replicaProblem()
	if d := n.Divergence(); d != nil {
		s.Divergence = d.String()
	}
	if s.Integrity != "" {
		return s // not ready
	}
	if l, ok := n.Leader(); ok {
		s.Leader, s.KnownLeader = l.ID, true
	}
	s.CommitIndex = n.raft.CommitIndex()
	s.AppliedIndex, _ = n.fsm.Indexes()
	s.Term = n.raft.CurrentTerm()
	s.HostRegistrations = n.fsm.CommandsApplied(fsm.RegisterHostType)
	s.LastContact = n.lastContact()
	// A commit index of 0 is one no leader has sent yet (heartbeats do
	// not carry it): a restarted follower's replica may still be empty.
	caughtUp := s.CommitIndex > 0 && s.CommitIndex <= s.AppliedIndex+ReadyLag
	if n.IsLeader() {
		s.Ready = n.leaderReady.Load()
	} else {
		s.Ready = s.KnownLeader && caughtUp && s.LastContact >= 0 && s.LastContact < 10*n.cfg.HeartbeatTimeout
	}
	if why := n.stores.health.failure(); why != "" {
		s.Ready, s.Reason = false, why
	}
	return s
}

// lastContact is the time since the leader was last heard from: 0 on the
// leader, -1 when never.
func (n *Node) lastContact() time.Duration {
	if n.IsLeader() {
		return 0
	}
	lc := n.raft.LastContact()
	if lc.IsZero() {
		return -1
	}
	return time.Since(lc)
}

// RaftConfiguration returns the latest Raft configuration this server
// knows. ErrNotServer on hosts.
func (n *Node) RaftConfiguration() (RaftConfiguration, error) {
	if n.raft == nil {
		return RaftConfiguration{}, ErrNotServer
	}
	if err := n.running(); err != nil {
		return RaftConfiguration{}, err
	}
	ctx, cancel := context.WithTimeout(n.baseCtx, 5*time.Second)
	defer cancel()
	cfg, index, err := n.configuration(ctx)
	if err != nil {
		return RaftConfiguration{}, err
	}
	_, leader := n.raft.LeaderWithID()
	out := RaftConfiguration{Index: index}
	for _, s := range cfg.Servers {
		out.Servers = append(out.Servers, RaftServer{
			ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter, Leader: s.ID == leader,
		})
	}
	n.fsm.Read(func(s *fsm.State) {
		for _, r := range s.RemovedServers() {
			out.Removed = append(out.Removed, RemovedServer{ID: r.ID, Since: time.Unix(0, r.Since).UTC()})
		}
	})
	return out, nil
}

// Leave announces that this node leaves the cluster for good (a server is
// removed from the Raft configuration at once, a host is marked down at
// once), then shuts down.
func (n *Node) Leave(ctx context.Context) error {
	if err := n.running(); err != nil {
		return err
	}
	n.leaving.Store(true)
	if err := n.ml.UpdateNode(gossipTimeout(ctx)); err != nil {
		n.log.Warn("announcing departure failed", "error", err)
	}
	if n.raft != nil {
		n.transferLeadership(ctx)
		if err := n.RemovePeer(ctx, n.cfg.NodeID); err != nil && !errors.Is(err, fsm.ErrNotFound) {
			n.log.Warn("could not leave the raft configuration; the leader will remove this server", "error", err)
		}
	}
	return n.Shutdown(ctx)
}

func gossipTimeout(ctx context.Context) time.Duration {
	d := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		d = max(time.Until(dl), 10*time.Millisecond)
	}
	return d
}

// transferLeadership hands leadership to another voter when this node
// leads and has one; it waits for the transfer within ctx.
func (n *Node) transferLeadership(ctx context.Context) {
	if !n.IsLeader() {
		return
	}
	cfg, _, err := n.configuration(ctx)
	if err != nil {
		return
	}
	others := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.NodeID {
			others++
		}
	}
	if others == 0 {
		return
	}
	if err := n.raftCall(ctx, n.raft.LeadershipTransfer); err != nil {
		n.log.Warn("leadership transfer failed", "error", err)
		return
	}
	n.log.Info("leadership transferred")
}

// Shutdown stops the node: a leader first hands leadership to another
// server, then the node leaves gossip (peers see it as gone but a server
// stays in the Raft configuration, expected back), and Raft and the stores
// are closed. No goroutine is left. ctx bounds the graceful part; closing
// always completes. Safe to call more than once.
func (n *Node) Shutdown(ctx context.Context) error {
	return n.shutdown(ctx, true, gossipTimeout(ctx))
}

// shutdown is Shutdown, with the leadership transfer optional (not worth
// it when every server stops) and the wait for the gossip leave bounded
// by leave.
func (n *Node) shutdown(ctx context.Context, transfer bool, leave time.Duration) error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	started := n.started
	n.mu.Unlock()
	if started && transfer && n.raft != nil {
		tctx, cancel := context.WithTimeout(ctx, transferTimeout)
		n.transferLeadership(tctx)
		cancel()
	}
	if started && n.ml != nil {
		if err := n.ml.Leave(leave); err != nil {
			n.log.Warn("gossip leave", "error", err)
		}
	}
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	err := n.closeAll(ctx)
	n.log.Info("node stopped", "id", n.cfg.NodeID)
	return err
}

// Kill stops the node as a killed process ends: no leadership transfer,
// no gossip leave, so the other nodes learn of it by failure detection.
// Simulated hosts and in-process tests use it; a stopped node does nothing.
func (n *Node) Kill() error {
	if n.running() != nil {
		return nil
	}
	return n.closeAll(context.Background())
}

// closeAll stops every part that was started, in dependency order.
func (n *Node) closeAll(ctx context.Context) error {
	n.mu.Lock()
	n.stopped = true
	select {
	case <-n.shutdownCh:
	default:
		close(n.shutdownCh)
	}
	n.mu.Unlock()
	n.cancelBase()
	if n.fsm != nil {
		n.fsm.Events().Close() // event streams end
	}
	var errs []error
	if n.rpcSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Second {
			cancel()
			sctx, cancel = context.WithDeadline(context.Background(), dl)
		}
		_ = n.rpcSrv.Shutdown(sctx)
		cancel()
	}
	if !waitTimeout(n.wg.Wait, loopsStopTimeout) {
		n.log.Error("shutdown: background loops did not stop in time; going on without them", "waited", loopsStopTimeout)
	}
	raftStopped := true
	if n.raft != nil {
		raftStopped = n.shutdownRaft()
	}
	if n.ml != nil {
		if err := n.ml.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("gossip shutdown: %w", err))
		}
	}
	if n.raftTrans != nil {
		n.raftTrans.CloseStreams()
		n.raftTrans.Close()
	}
	if !raftStopped {
		// The transport is closed now, which ends Raft's network waits;
		// give it one more moment.
		raftStopped = waitTimeout(func() { <-n.raftDone }, time.Second)
	}
	if !raftStopped {
		// Its store stays open and the data directory locked: the
		// process is expected to exit.
		n.log.Error("shutdown: raft did not stop; leaving its store open and the data directory locked")
		errs = append(errs, clusterErr(ErrTimeout, "raft did not stop within the shutdown deadline"))
		n.rpc.Close()
		return errors.Join(errs...)
	}
	if err := n.stores.close(); err != nil {
		errs = append(errs, fmt.Errorf("close raft store: %w", err))
	}
	n.rpc.Close()
	n.dirLock.release()
	return errors.Join(errs...)
}

// Bounds of the steps of a shutdown, so that it ends within 10 s
// whatever Raft is doing: the leadership transfer, the background loops,
// and Raft's own shutdown (whose future waits for every Raft goroutine,
// some of which may wait on a peer that does not answer).
const (
	transferTimeout     = 2 * time.Second
	loopsStopTimeout    = time.Second
	raftShutdownTimeout = 3 * time.Second
)

// shutdownRaft stops Raft within raftShutdownTimeout and reports whether
// it stopped. It first takes raftMu (see raftCall), so no operation is
// left unanswered; a wait that does not end is cut short and logged.
func (n *Node) shutdownRaft() bool {
	n.raftDone = make(chan struct{})
	go func() {
		defer close(n.raftDone)
		n.raftMu.Lock()
		n.raftClosed = true
		n.raftMu.Unlock()
		if err := n.raft.Shutdown().Error(); err != nil {
			n.log.Warn("raft shutdown", "error", err)
		}
	}()
	if waitTimeout(func() { <-n.raftDone }, raftShutdownTimeout) {
		return true
	}
	n.log.Error("shutdown: raft did not stop in time; closing its transport to cut it short", "waited", raftShutdownTimeout)
	return false
}

// waitTimeout runs wait and reports whether it returned within d. A wait
// that does not return is left running.
func waitTimeout(wait func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// raftCall issues a Raft operation and waits for its answer within ctx.
// Raft answers every operation it has taken, but one still queued in one of
// its buffered channels when it shuts down is never answered; so the wait
// runs in a goroutine that holds raftMu, and closeAll takes raftMu before
// shutting Raft down: every operation issued is answered first, no waiter
// is left behind. The wait is bounded by Raft's timeouts.
func (n *Node) raftCall(ctx context.Context, issue func() raft.Future) error {
	f, err := n.raftIssue(issue)
	if err != nil {
		return err
	}
	select {
	case err := <-n.raftWait(f):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// raftIssue issues a Raft operation holding raftMu for reading, which
// raftWait lets go once the operation is answered (see raftCall).
func (n *Node) raftIssue(issue func() raft.Future) (raft.Future, error) {
	n.raftMu.RLock()
	if n.raftClosed {
		n.raftMu.RUnlock()
		return nil, raft.ErrRaftShutdown
	}
	return issue(), nil
}

// raftWait waits for an operation raftIssue issued, in a goroutine, and
// returns the channel its answer comes on.
func (n *Node) raftWait(f raft.Future) <-chan error {
	done := make(chan error, 1)
	n.raftAwait(f, func(err error) { done <- err })
	return done
}

// raftAwait is raftWait that hands the answer to then.
func (n *Node) raftAwait(f raft.Future, then func(error)) {
	go func() {
		defer n.raftMu.RUnlock()
		then(f.Error())
	}()
}

// configuration returns the latest Raft configuration and its index.
func (n *Node) configuration(ctx context.Context) (raft.Configuration, uint64, error) {
	var f raft.ConfigurationFuture
	if err := n.raftCall(ctx, func() raft.Future { f = n.raft.GetConfiguration(); return f }); err != nil {
		return raft.Configuration{}, 0, mapRaftErr(err)
	}
	return f.Configuration(), f.Index(), nil
}

// mapRaftErr turns raft's errors into the cluster's.
func mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return clusterErr(ErrNotLeader, err.Error())
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore):
		return clusterErr(ErrTimeout, err.Error())
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return clusterErr(ErrNoLeader, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}
