package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// LocalConfig configures a cluster of nodes in this process (StartLocal).
type LocalConfig struct {
	// Servers is the number of Raft voters, 1 to 7, named s1, s2, ...
	// They bootstrap together.
	Servers int
	// Hosts are device hosts (gossip members with an inventory), started
	// after the servers and joined to them. Optional.
	Hosts []LocalHost
	// Dir holds the nodes' data directories (Dir/<node ID>). Empty makes a
	// temporary directory, removed by Close.
	Dir string
	// InMemory keeps the Raft state in memory (no disk, no fsync): nothing
	// survives a restart. Default: on disk, as a real server.
	InMemory bool
	// Fast shortens the timings of gossip, joins, reconcile, ticks and
	// host tracking for tests: a failed member is noticed within about a
	// second, a host lost for a second is marked down; a failed server
	// stays in the Raft configuration for an hour (tests restart them).
	// Raft keeps its own timing. Default: the timings of a real agent.
	Fast bool
	// Configure, when set, adjusts the configuration NodeConfig makes
	// for each node; StartLocal then sets the servers' BootstrapExpect and
	// the hosts' Inventory.
	Configure func(*Config)
	// HTTP, when set, makes the handler each node serves on a free port of
	// 127.0.0.1 (the HTTP API, from a package above this one), advertised
	// in gossip as the node's HTTP address.
	HTTP func(*Node) http.Handler
	// Version is reported by the nodes.
	Version string
	// Logger receives the nodes' logs; nil discards them.
	Logger hclog.Logger
}

// LocalHost is a device host of a local cluster.
type LocalHost struct {
	ID        string
	Inventory InventoryFunc
}

// LocalCluster is a cluster of nodes in this process on 127.0.0.1, for
// tests and tools (`dmsc bench -local`, `dmsc replay -local`). Nodes can
// be stopped, crashed and restarted one by one with their data and ports.
// All methods are safe for concurrent use.
type LocalCluster struct {
	cfg     LocalConfig
	dir     string
	tempDir bool
	conns   atomic.Int64
	serving sync.WaitGroup // the HTTP servers' Serve loops

	mu     sync.Mutex
	order  []string // node IDs, in the order they first started
	nodes  map[string]*localNode
	closed bool
}

// localNode is one node of a LocalCluster: its latest incarnation.
type localNode struct {
	cfg  Config // as started, with the ports in use
	node *Node
	srv  *http.Server // nil without LocalConfig.HTTP
	url  string
}

// Local cluster errors.
var (
	// ErrLocalConfig: the LocalConfig or a node's place in the cluster is
	// invalid.
	ErrLocalConfig = errors.New("local cluster: invalid configuration")
	// ErrLocalNotReady: the cluster did not elect a leader or get ready
	// before the context ended.
	ErrLocalNotReady = errors.New("local cluster: not ready")
)

// pollInterval is how often the local cluster's waits look again.
const pollInterval = 20 * time.Millisecond

// closeLeave bounds how long a node of a local cluster that Close stops
// waits for its gossip leave to go out: the whole cluster stops, so no
// peer needs to hear it.
const closeLeave = 50 * time.Millisecond

// StartLocal starts cfg.Servers servers, then cfg.Hosts, and waits until
// the servers agree on a ready leader and every node is ready (see
// WaitReady). On error, whatever was started is stopped again.
func StartLocal(ctx context.Context, cfg LocalConfig) (lc *LocalCluster, err error) {
	if cfg.Servers < 1 || cfg.Servers > 7 {
		return nil, fmt.Errorf("%w: 1 to 7 servers, not %d", ErrLocalConfig, cfg.Servers)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	lc = &LocalCluster{cfg: cfg, dir: cfg.Dir, nodes: map[string]*localNode{}}
	if lc.dir == "" && !cfg.InMemory {
		if lc.dir, err = os.MkdirTemp("", "dmsc-local-"); err != nil {
			return nil, err
		}
		lc.tempDir = true
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = lc.Close(cctx)
			lc = nil
		}
	}()
	for i := 1; i <= cfg.Servers; i++ {
		c := lc.NodeConfig(fmt.Sprintf("s%d", i), true)
		c.BootstrapExpect = cfg.Servers
		if _, err := lc.StartNode(ctx, c); err != nil {
			return lc, err
		}
	}
	for _, h := range cfg.Hosts {
		c := lc.NodeConfig(h.ID, false)
		c.Inventory = h.Inventory
		if _, err := lc.StartNode(ctx, c); err != nil {
			return lc, err
		}
	}
	return lc, lc.WaitReady(ctx)
}

// NodeConfig is the configuration of a new node of this cluster: on
// 127.0.0.1 with free ports, its data under the cluster's directory (or
// in memory), the cluster's timings, version and logger, joining the
// servers started so far, then changed by LocalConfig.Configure. A new
// server has BootstrapExpect 0: the leader adds it. A host (server false)
// needs an Inventory. Change what the test needs, then StartNode.
func (lc *LocalCluster) NodeConfig(id string, server bool) Config {
	c := Config{
		NodeID:            id,
		BindAddr:          "127.0.0.1",
		Server:            server,
		RetryJoinInterval: 100 * time.Millisecond,
		Version:           lc.cfg.Version,
		Logger:            lc.cfg.Logger.Named(id),
	}
	if !lc.cfg.InMemory {
		c.DataDir = filepath.Join(lc.dir, id)
	}
	if lc.cfg.Fast {
		c.ReconnectInterval = 200 * time.Millisecond
		c.TickInterval = 500 * time.Millisecond
		c.ReconcileInterval = 100 * time.Millisecond
		c.HostDownGrace = time.Second
		c.DeadServerGrace = time.Hour
		c.ServerStabilization = 500 * time.Millisecond
		c.GossipProbeInterval = 200 * time.Millisecond
		c.GossipSuspicionMult = 2
		c.InventoryInterval = 100 * time.Millisecond
	}
	lc.mu.Lock()
	for _, other := range lc.order {
		if ln := lc.nodes[other]; ln.cfg.Server {
			c.Join = append(c.Join, ln.gossipAddr())
		}
	}
	lc.mu.Unlock()
	if lc.cfg.Configure != nil {
		lc.cfg.Configure(&c)
	}
	return c
}

func (ln *localNode) gossipAddr() string {
	return net.JoinHostPort(ln.cfg.BindAddr, strconv.Itoa(ln.cfg.GossipPort))
}

// StartNode starts a new node with cfg (see NodeConfig) and, with
// LocalConfig.HTTP, its HTTP API. It does not wait for the node to join.
func (lc *LocalCluster) StartNode(ctx context.Context, cfg Config) (*Node, error) {
	lc.mu.Lock()
	_, exists := lc.nodes[cfg.NodeID]
	closed := lc.closed
	lc.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("%w: the cluster is closed", ErrLocalConfig)
	case exists:
		return nil, fmt.Errorf("%w: node %s exists (Restart starts it again)", ErrLocalConfig, cfg.NodeID)
	}
	ln, err := lc.start(ctx, cfg, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if err := lc.record(ln); err != nil {
		return nil, err
	}
	return ln.node, nil
}

// record makes ln the latest incarnation of its node; when Close ran
// meanwhile (and so missed it), it stops ln instead.
func (lc *LocalCluster) record(ln *localNode) error {
	id := ln.cfg.NodeID
	lc.mu.Lock()
	closed := lc.closed
	if !closed {
		if _, ok := lc.nodes[id]; !ok {
			lc.order = append(lc.order, id)
		}
		lc.nodes[id] = ln
	}
	lc.mu.Unlock()
	if closed {
		return errors.Join(fmt.Errorf("%w: the cluster is closed", ErrLocalConfig), lc.stopNode(context.Background(), ln, closeLeave))
	}
	return nil
}

// start starts a node with cfg and its HTTP API on httpAddr, and records
// the ports it got in the returned node's configuration.
func (lc *LocalCluster) start(ctx context.Context, cfg Config, httpAddr string) (*localNode, error) {
	ln := &localNode{}
	var hl net.Listener
	if lc.cfg.HTTP != nil {
		var err error
		if hl, err = net.Listen("tcp", httpAddr); err != nil {
			return nil, fmt.Errorf("http listener of %s: %w", cfg.NodeID, err)
		}
		cfg.HTTPAddr = hl.Addr().String()
		ln.url = "http://" + cfg.HTTPAddr
	}
	node, err := New(cfg)
	if err == nil {
		err = node.Start(ctx)
	}
	if err != nil {
		if hl != nil {
			hl.Close()
		}
		return nil, fmt.Errorf("start %s: %w", cfg.NodeID, err)
	}
	self := node.Self()
	cfg.RaftPort, cfg.RPCPort, cfg.GossipPort = portOf(self.RaftAddr), portOf(self.RPCAddr), portOf(self.GossipAddr)
	ln.cfg, ln.node = cfg, node
	if hl != nil {
		ln.srv = &http.Server{
			Handler:           lc.cfg.HTTP(node),
			ReadHeaderTimeout: 10 * time.Second,
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					lc.conns.Add(1)
				}
			},
		}
		lc.serving.Go(func() { _ = ln.srv.Serve(hl) })
	}
	return ln, nil
}

// portOf is the port of host:port, 0 for an empty address.
func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// get returns the node id, or an error when there is none.
func (lc *LocalCluster) get(id string) (*localNode, error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	ln, ok := lc.nodes[id]
	if !ok {
		return nil, fmt.Errorf("%w: no node %s", ErrLocalConfig, id)
	}
	return ln, nil
}

// Node returns the latest incarnation of node id, nil when there is none.
func (lc *LocalCluster) Node(id string) *Node {
	ln, err := lc.get(id)
	if err != nil {
		return nil
	}
	return ln.node
}

// Nodes returns every node, running or stopped, in the order they first
// started: the servers, then the hosts (then nodes added by StartNode).
func (lc *LocalCluster) Nodes() []*Node { return lc.list(func(*localNode) bool { return true }) }

// Servers returns the servers, running or stopped, s1 first.
func (lc *LocalCluster) Servers() []*Node {
	return lc.list(func(ln *localNode) bool { return ln.cfg.Server })
}

func (lc *LocalCluster) list(keep func(*localNode) bool) []*Node {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	var out []*Node
	for _, id := range lc.order {
		if ln := lc.nodes[id]; keep(ln) {
			out = append(out, ln.node)
		}
	}
	return out
}

// Config returns the configuration node id runs with, its ports
// resolved; the zero Config when there is no such node.
func (lc *LocalCluster) Config(id string) Config {
	ln, err := lc.get(id)
	if err != nil {
		return Config{}
	}
	return ln.cfg
}

// Addresses returns the base URLs of the servers' HTTP APIs
// ("http://127.0.0.1:port"), s1 first, none without LocalConfig.HTTP: a
// client's addresses. A node's own is in Node.Self().HTTPAddr.
func (lc *LocalCluster) Addresses() []string {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	var out []string
	for _, id := range lc.order {
		if ln := lc.nodes[id]; ln.cfg.Server && ln.url != "" {
			out = append(out, ln.url)
		}
	}
	return out
}

// Connections counts the HTTP connections the nodes have accepted.
func (lc *LocalCluster) Connections() int64 { return lc.conns.Load() }

// Leader returns the running node that leads, nil when none does.
func (lc *LocalCluster) Leader() *Node {
	for _, n := range lc.Servers() {
		if n.running() == nil && n.IsLeader() {
			return n
		}
	}
	return nil
}

// running returns the nodes among nodes that are running; all running
// servers when nodes is empty.
func (lc *LocalCluster) running(nodes []*Node) []*Node {
	if len(nodes) == 0 {
		nodes = lc.Servers()
	}
	return slices.DeleteFunc(slices.Clone(nodes), func(n *Node) bool { return n.running() != nil })
}

// WaitLeader waits until the nodes (all running servers when none are
// given) agree on a leader that is among them and ready, and returns it.
func (lc *LocalCluster) WaitLeader(ctx context.Context, nodes ...*Node) (*Node, error) {
	var leader *Node
	err := lc.poll(ctx, "a leader", func() error {
		var err error
		leader, err = agreedLeader(lc.running(nodes))
		return err
	})
	return leader, err
}

// agreedLeader is the leader the nodes agree on, if it is among them and
// ready.
func agreedLeader(nodes []*Node) (*Node, error) {
	if len(nodes) == 0 {
		return nil, errors.New("no server runs")
	}
	var leader *Node
	var id string
	for _, n := range nodes {
		l, ok := n.Leader()
		if !ok {
			return nil, fmt.Errorf("%s knows no leader", n.cfg.NodeID)
		}
		if id != "" && l.ID != id {
			return nil, fmt.Errorf("leaders disagree: %s and %s", id, l.ID)
		}
		id = l.ID
		if n.cfg.NodeID == id {
			leader = n
		}
	}
	if leader == nil {
		return nil, fmt.Errorf("leader %s is not among the nodes", id)
	}
	if !leader.leaderReady.Load() {
		return nil, fmt.Errorf("leader %s is not ready", id)
	}
	return leader, nil
}

// WaitReady waits until the running servers agree on a ready leader and
// every running node is ready (Node.Status): followers caught up with it,
// hosts in the gossip pool.
func (lc *LocalCluster) WaitReady(ctx context.Context) error {
	return lc.poll(ctx, "a ready cluster", func() error {
		if _, err := agreedLeader(lc.running(nil)); err != nil {
			return err
		}
		for _, n := range lc.running(lc.Nodes()) {
			if !n.Status().Ready {
				return fmt.Errorf("%s is not ready", n.cfg.NodeID)
			}
		}
		return nil
	})
}

// poll calls cond every pollInterval until it succeeds or ctx ends.
func (lc *LocalCluster) poll(ctx context.Context, what string, cond func() error) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for %s (%v): %w", ErrLocalNotReady, what, err, ctx.Err())
		case <-t.C:
		}
	}
}

// Stop stops node id gracefully (Node.Shutdown within ctx), its HTTP API
// first: open connections drop.
func (lc *LocalCluster) Stop(ctx context.Context, id string) error {
	ln, err := lc.get(id)
	if err != nil {
		return err
	}
	return lc.stopNode(ctx, ln, 0)
}

// stopNode closes ln's HTTP API and shuts the node down; a leave > 0
// bounds its gossip leave.
func (lc *LocalCluster) stopNode(ctx context.Context, ln *localNode, leave time.Duration) error {
	var errs []error
	if ln.srv != nil {
		errs = append(errs, ln.srv.Close())
	}
	if leave > 0 {
		errs = append(errs, ln.node.shutdown(ctx, false, min(leave, gossipTimeout(ctx))))
	} else {
		errs = append(errs, ln.node.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Crash stops node id as a killed process would end: no leadership
// transfer, no gossip leave; its HTTP API drops open connections.
func (lc *LocalCluster) Crash(id string) error {
	ln, err := lc.get(id)
	if err != nil {
		return err
	}
	var errs []error
	if ln.srv != nil {
		errs = append(errs, ln.srv.Close())
	}
	errs = append(errs, ln.node.Kill())
	return errors.Join(errs...)
}

// Restart starts stopped node id again with its data directory, ports
// and HTTP address, joining the other servers as a restarted agent's
// command line would, and returns the new incarnation. It retries while a
// port is still held, until ctx ends. An in-memory node comes back empty.
func (lc *LocalCluster) Restart(ctx context.Context, id string) (*Node, error) {
	ln, err := lc.get(id)
	if err != nil {
		return nil, err
	}
	if ln.node.running() == nil {
		return nil, fmt.Errorf("%w: node %s runs", ErrLocalConfig, id)
	}
	cfg := ln.cfg
	cfg.Join = nil
	lc.mu.Lock()
	for _, other := range lc.order {
		if o := lc.nodes[other]; other != id && o.cfg.Server {
			cfg.Join = append(cfg.Join, o.gossipAddr())
		}
	}
	lc.mu.Unlock()
	httpAddr := cfg.HTTPAddr
	var back *localNode
	err = lc.poll(ctx, "node "+id+" to start again", func() error {
		var serr error
		back, serr = lc.start(ctx, cfg, httpAddr)
		return serr // a port may still be held for a moment
	})
	if err != nil {
		return nil, err
	}
	if err := lc.record(back); err != nil {
		return nil, err
	}
	return back.node, nil
}

// Close stops every node and its HTTP API, and removes the temporary
// directory; no goroutine of the cluster is left. The whole cluster
// stops, so nodes neither hand over leadership nor wait long for their
// gossip leave. A second Close does nothing.
func (lc *LocalCluster) Close(ctx context.Context) error {
	lc.mu.Lock()
	if lc.closed {
		lc.mu.Unlock()
		return nil
	}
	lc.closed = true
	nodes := make([]*localNode, 0, len(lc.nodes))
	for _, id := range lc.order {
		nodes = append(nodes, lc.nodes[id])
	}
	lc.mu.Unlock()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, ln := range nodes {
		wg.Go(func() {
			if err := lc.stopNode(ctx, ln, closeLeave); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", ln.cfg.NodeID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	lc.serving.Wait()
	if lc.tempDir {
		if err := os.RemoveAll(lc.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
