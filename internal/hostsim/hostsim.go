// Package hostsim runs many simulated device hosts in one process, so that
// a cluster's behaviour with many hosts can be measured on one machine
// (BENCHMARKS.md "Hosts at scale"). Each simulated host is a real
// cluster.Node with an inventory: its own memberlist member, node RPC
// endpoint, inventory hash in gossip, ACL token and TLS certificate when
// configured; the servers cannot tell it from a host agent. A host keeps
// only the servers and a few neighbours in its gossip membership, so
// that N hosts in one process cost N, not N², while the servers see the
// whole pool. Hosts can be killed (as a killed process ends: no gossip
// leave), restarted on the same ports, and given a new inventory. See
// DESIGN.md in this directory.
package hostsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/bench"
	"github.com/dmsc/dmsc/internal/certs"
)

// ErrUnknownHost: no simulated host has that ID.
var ErrUnknownHost = errors.New("hostsim: no such host")

// Config configures a simulation. Zero durations take the agent's
// defaults (cluster.Config).
type Config struct {
	// Hosts is how many hosts to run, named Prefix00000, Prefix00001, ...
	Hosts  int
	Prefix string
	// GPUsPerHost is each host's GPU count (the bench's synthetic models:
	// bench.HostDevices). Default 8.
	GPUsPerHost int
	// Join lists the servers' gossip addresses.
	Join []string
	// BindAddr is the IP every host listens on. Default 127.0.0.1.
	BindAddr string
	// Parallel is how many hosts start at once (default 16), and
	// StartRate, when positive, how many start per second: every join
	// is gossiped to every member, so a pool that grows faster than its
	// members digest the news drops messages and suspects healthy nodes.
	Parallel  int
	StartRate float64

	// Gossip and agent timing of every host, as the agent's flags of the
	// same names, and the gossip knobs of cluster.Config. Thousands of
	// hosts in one process need slower, lighter gossip than an agent's
	// defaults (DESIGN.md).
	GossipProbeInterval  time.Duration
	GossipSuspicionMult  int
	GossipProbeTimeout   time.Duration
	GossipRetransmitMult int
	GossipNoCompression  bool
	GossipNoTCPPings     bool
	// GossipPeers is how many of the other simulated hosts each host
	// keeps in its gossip membership: its neighbours in name order, half
	// on either side, wrapping around (cluster.Config.GossipKeep); 0
	// keeps them all, as N machines would. The servers are always kept,
	// and keep every host. DESIGN.md says why.
	GossipPeers       int
	RetryJoinInterval time.Duration
	ReconnectInterval time.Duration
	InventoryInterval time.Duration

	// EncryptKey is the gossip key, ACLToken the token every host sends
	// with its inventory (its policy must allow host_register for these
	// hosts, e.g. "*"), and TLS, when set, gives host id its certificate
	// store (role host, node id).
	EncryptKey []byte
	ACLEnabled bool
	ACLToken   string
	TLS        func(id string) (*certs.Store, error)

	Version string
	// Logger receives every host's log, each named by its host ID. Nil
	// discards them.
	Logger hclog.Logger
}

// Sim is a running simulation. All methods are safe for concurrent use.
type Sim struct {
	cfg    Config
	ids    []string
	hosts  map[string]*host
	fabric *fabric
}

// host is one simulated host: its configuration (ports fixed after the
// first start, so that a restart comes back at the same address, as an
// agent with fixed ports does), its current node (nil while killed) and
// its inventory generation.
type host struct {
	index int
	gen   atomic.Int64
	mu    sync.Mutex // guards cfg and node
	cfg   cluster.Config
	node  *cluster.Node
}

// Start starts cfg.Hosts hosts, cfg.Parallel at a time, and returns once
// every one listens and has begun to join (registration by the leader
// follows). Once ctx ends it starts no more. On error (a host's, or the
// end of ctx) it returns it with the simulation of the hosts that did
// start, which the caller closes (Close), or leaves to the process's end
// as dmsc sim-hosts does: thousands of hosts take minutes to stop one by
// one on a busy machine.
func Start(ctx context.Context, cfg Config) (*Sim, error) {
	if cfg.Hosts < 1 {
		return nil, fmt.Errorf("hostsim: %d hosts: %w", cfg.Hosts, cluster.ErrConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "sim-h"
	}
	if cfg.GPUsPerHost <= 0 {
		cfg.GPUsPerHost = 8
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Sim{cfg: cfg, hosts: make(map[string]*host, cfg.Hosts), fabric: newFabric()}
	for i := range cfg.Hosts {
		id := fmt.Sprintf("%s%05d", cfg.Prefix, i)
		h := &host{index: i}
		c, err := s.nodeConfig(id, h)
		if err != nil {
			return nil, err
		}
		h.cfg = c
		s.ids = append(s.ids, id)
		s.hosts[id] = h
	}
	sem := make(chan struct{}, cfg.Parallel)
	errs := make([]error, len(s.ids))
	var wg sync.WaitGroup
	var pace <-chan time.Time
	if cfg.StartRate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / cfg.StartRate))
		defer t.Stop()
		pace = t.C
	}
	for i, id := range s.ids {
		if pace != nil && i > 0 {
			select {
			case <-pace:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil { // the rest are not started
			errs[i] = fmt.Errorf("hostsim: %d of %d hosts started: %w", i, len(s.ids), ctx.Err())
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.start(ctx, id)
		})
	}
	wg.Wait()
	return s, errors.Join(errs...)
}

// nodeConfig is the node configuration of host id.
func (s *Sim) nodeConfig(id string, h *host) (cluster.Config, error) {
	c := cluster.Config{
		NodeID:               id,
		BindAddr:             s.cfg.BindAddr,
		Join:                 s.cfg.Join,
		RetryJoinInterval:    s.cfg.RetryJoinInterval,
		ReconnectInterval:    s.cfg.ReconnectInterval,
		GossipProbeInterval:  s.cfg.GossipProbeInterval,
		GossipSuspicionMult:  s.cfg.GossipSuspicionMult,
		GossipProbeTimeout:   s.cfg.GossipProbeTimeout,
		GossipRetransmitMult: s.cfg.GossipRetransmitMult,
		GossipNoCompression:  s.cfg.GossipNoCompression,
		GossipNoTCPPings:     s.cfg.GossipNoTCPPings,
		InventoryInterval:    s.cfg.InventoryInterval,
		EncryptKey:           s.cfg.EncryptKey,
		ACLEnabled:           s.cfg.ACLEnabled,
		ACLToken:             s.cfg.ACLToken,
		Version:              s.cfg.Version,
		Logger:               s.cfg.Logger.Named(id),
		Inventory:            h.inventory(id, s.cfg.GPUsPerHost),
		GossipTransport:      s.fabric.listen,
		ServersOnlyMembers:   true,
	}
	if s.cfg.GossipPeers > 0 && s.cfg.GossipPeers < s.cfg.Hosts-1 {
		c.GossipKeep = s.neighbours(h.index)
	}
	if s.cfg.TLS != nil {
		st, err := s.cfg.TLS(id)
		if err != nil {
			return c, fmt.Errorf("hostsim: certificate of %s: %w", id, err)
		}
		c.TLS = st
	}
	return c, nil
}

// neighbours is whether a member is one of the GossipPeers hosts of this
// simulation nearest to host i in name order, counted around the ring of
// its hosts: a relation both hosts agree on, so that each is probed by
// the hosts it probes.
func (s *Sim) neighbours(i int) func(name string) bool {
	n, half := s.cfg.Hosts, s.cfg.GossipPeers/2
	return func(name string) bool {
		rest, ok := strings.CutPrefix(name, s.cfg.Prefix)
		if !ok {
			return false
		}
		j, err := strconv.Atoi(rest)
		if err != nil || j < 0 || j >= n || j == i {
			return false
		}
		d := (j - i + n) % n
		return min(d, n-d) <= max(half, 1)
	}
}

// inventory is host h's InventoryFunc: the bench's synthetic GPUs, and a
// label with the inventory generation (Change bumps it).
func (h *host) inventory(id string, gpus int) cluster.InventoryFunc {
	devices := make([]fsm.DeviceSpec, 0, gpus)
	for _, d := range bench.HostDevices(id, h.index, gpus) {
		devices = append(devices, api.DeviceSpecFromWire(d))
	}
	return func() (fsm.HostSpec, []fsm.DeviceSpec, error) {
		spec := fsm.HostSpec{ID: id, Labels: map[string]string{"sim.generation": strconv.FormatInt(h.gen.Load(), 10)}}
		return spec, slices.Clone(devices), nil
	}
}

// start starts host id's node with its configuration; a host that ran
// before gets the ports it had.
func (s *Sim) start(ctx context.Context, id string) error {
	h := s.hosts[id]
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.node != nil {
		return nil
	}
	n, err := cluster.New(h.cfg)
	if err != nil {
		return fmt.Errorf("hostsim: %s: %w", id, err)
	}
	if err := n.Start(ctx); err != nil {
		return fmt.Errorf("hostsim: start %s: %w", id, err)
	}
	self := n.Self()
	h.cfg.RPCPort, h.cfg.GossipPort = portOf(self.RPCAddr), portOf(self.GossipAddr)
	h.node = n
	return nil
}

// Running lists the IDs of the hosts that run.
func (s *Sim) Running() []string { return s.filter(true) }

// Killed lists the IDs of the hosts that were killed and not restarted.
func (s *Sim) Killed() []string { return s.filter(false) }

func (s *Sim) filter(running bool) []string {
	var out []string
	for _, id := range s.ids {
		h := s.hosts[id]
		h.mu.Lock()
		up := h.node != nil
		h.mu.Unlock()
		if up == running {
			out = append(out, id)
		}
	}
	return out
}

func (s *Sim) get(id string) (*host, error) {
	h, ok := s.hosts[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownHost, id)
	}
	return h, nil
}

// Dropped counts the gossip packets between simulated hosts that were
// dropped because the receiver's queue was full (transport.go).
func (s *Sim) Dropped() uint64 { return s.fabric.dropped.Load() }

// Kill stops host id as a killed agent ends: it leaves nothing in gossip,
// the servers learn of it by failure detection. Killing a killed host
// does nothing.
func (s *Sim) Kill(id string) error {
	h, err := s.get(id)
	if err != nil {
		return err
	}
	h.mu.Lock()
	n := h.node
	h.node = nil
	h.mu.Unlock()
	if n == nil {
		return nil
	}
	return n.Kill()
}

// Restart starts killed host id again on its ports, retrying while a port
// is still held, until ctx ends. Restarting a running host does nothing.
func (s *Sim) Restart(ctx context.Context, id string) error {
	if _, err := s.get(id); err != nil {
		return err
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := s.start(ctx, id)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// Change gives running host id a new inventory (its generation label
// changes) and has it read it at once: its new hash goes out in gossip and
// the leader registers it again.
func (s *Sim) Change(id string) error {
	h, err := s.get(id)
	if err != nil {
		return err
	}
	h.gen.Add(1)
	h.mu.Lock()
	n := h.node
	h.mu.Unlock()
	if n == nil {
		return nil // read when it starts again
	}
	return n.RefreshInventory()
}

// Close kills every host (no gossip leave: the process ends) and waits
// for their goroutines to end. Closing a nil Sim (what Start returns on a
// bad configuration) does nothing.
func (s *Sim) Close() {
	if s == nil {
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, id := range s.ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = s.Kill(id)
		})
	}
	wg.Wait()
}

// Churn is what Run does to the hosts while it runs.
type Churn struct {
	// KillsPerSecond hosts are killed each second, each restarted after
	// Down (default 10 s); ChangesPerSecond running hosts get a new
	// inventory each second. Hosts are drawn from Seed.
	KillsPerSecond   float64
	Down             time.Duration
	ChangesPerSecond float64
	Seed             uint64
}

// ChurnCounts counts what a churn did.
type ChurnCounts struct {
	Kills, Restarts, Changes int
	Errors                   int
}

// Churn kills, restarts and changes hosts at the rates of c until ctx
// ends, then restarts the hosts it killed, and returns the counts.
func (s *Sim) Churn(ctx context.Context, c Churn) ChurnCounts {
	if c.Down <= 0 {
		c.Down = 10 * time.Second
	}
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	var (
		mu     sync.Mutex
		counts ChurnCounts
		wg     sync.WaitGroup
	)
	count := func(f func(*ChurnCounts)) {
		mu.Lock()
		f(&counts)
		mu.Unlock()
	}
	var killDebt, changeDebt float64
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-t.C:
			// By the time passed, not the ticks: a starved process
			// misses ticks.
			elapsed := now.Sub(last).Seconds()
			last = now
			killDebt += c.KillsPerSecond * elapsed
			changeDebt += c.ChangesPerSecond * elapsed
		}
		running := s.Running()
		for ; killDebt >= 1 && len(running) > 0; killDebt-- {
			i := rng.IntN(len(running))
			id := running[i]
			running = slices.Delete(running, i, i+1)
			if err := s.Kill(id); err != nil {
				count(func(c *ChurnCounts) { c.Errors++ })
				continue
			}
			count(func(c *ChurnCounts) { c.Kills++ })
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(context.Background(), c.Down+time.Minute)
				defer cancel()
				timer := time.NewTimer(c.Down)
				defer timer.Stop()
				select {
				case <-ctx.Done():
				case <-timer.C:
				}
				if err := s.Restart(rctx, id); err != nil {
					count(func(c *ChurnCounts) { c.Errors++ })
					return
				}
				count(func(c *ChurnCounts) { c.Restarts++ })
			})
		}
		for ; changeDebt >= 1 && len(running) > 0; changeDebt-- {
			if err := s.Change(running[rng.IntN(len(running))]); err != nil {
				count(func(c *ChurnCounts) { c.Errors++ })
				continue
			}
			count(func(c *ChurnCounts) { c.Changes++ })
		}
	}
	wg.Wait()
	return counts
}

// portOf is the port of a host:port address (0 when there is none).
func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(p)
	return port
}
