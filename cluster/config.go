package cluster

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/certs"
)

// Default ports. The HTTP API (not part of this package) uses 4646.
const (
	DefaultRPCPort    = 4647
	DefaultRaftPort   = 4648
	DefaultGossipPort = 4649
)

// InventoryFunc reports the host this node runs on and its devices. It is
// called when a server asks for the inventory and every InventoryInterval to
// notice changes. The host ID is always the node ID: an ID returned here is
// overwritten.
type InventoryFunc func() (fsm.HostSpec, []fsm.DeviceSpec, error)

// Config configures a Node. Zero durations and counts take their defaults
// (a LAN's timings: see DESIGN.md); a zero port means "any free port"
// (tests; agents pass the Default*Port constants), and DataDir "" keeps
// everything in memory (dev mode, tests).
type Config struct {
	// NodeID names the node in gossip and, for a server, in the Raft
	// configuration. It must be unique in the cluster and stable across
	// restarts. A host's ID in the scheduler state is its NodeID.
	NodeID string
	// DataDir holds the Raft log, stable store and snapshots. Empty keeps
	// them in memory: nothing survives a restart.
	DataDir string
	// BindAddr is the IP every listener binds ("0.0.0.0" for all).
	BindAddr string
	// AdvertiseAddr is the IP other nodes use to reach this one. Empty means
	// BindAddr when that is a specific address, else the first private IP.
	AdvertiseAddr string
	// RaftPort, RPCPort and GossipPort are the TCP ports of Raft, the
	// node-to-node RPC and memberlist (which also uses UDP on GossipPort).
	// 0 picks a free port; Self() reports the ports in use.
	RaftPort   int
	RPCPort    int
	GossipPort int
	// HTTPAddr is the address of this node's HTTP API, advertised in gossip
	// so that Members and Leader can report it. Optional.
	HTTPAddr string

	// Server makes the node a Raft voter holding the replicated state.
	Server bool
	// BootstrapExpect is the number of servers to wait for before the first
	// election of a new cluster (1 for a single-node dev cluster). 0 never
	// bootstraps: the server waits to be added by a running cluster. It is
	// ignored when the data directory already holds Raft state.
	BootstrapExpect int
	// Join lists gossip addresses (host:port) of nodes already in, or
	// starting, the cluster. Start keeps retrying every RetryJoinInterval
	// until one answers.
	Join              []string
	RetryJoinInterval time.Duration
	// ReconnectInterval is how often the node tries to rejoin members that
	// gossip declared failed (and the Join addresses when it sees no other
	// live member, or a host sees no server), so that the pool heals after
	// a partition or a restart of every server.
	ReconnectInterval time.Duration

	// Raft timing. Defaults suit a LAN: a lost leader is replaced in about
	// one second.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one (checked every SnapshotInterval). TrailingLogs are
	// kept after a snapshot so that slightly lagging followers can catch up
	// from the log instead of a snapshot install. SnapshotRetain is how many
	// snapshots stay on disk.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	SnapshotRetain    int
	// StateHashInterval: every this many applied entries each replica
	// hashes its state, and the servers compare the hashes at the same
	// index (statehash.go). Default 4096.
	StateHashInterval uint64

	// TickInterval is how often the leader proposes a tick (time passing)
	// when no deadline falls due sooner.
	TickInterval time.Duration
	// ReconcileInterval is how often the leader reconciles gossip with the
	// Raft configuration and the registered hosts (it also reacts to gossip
	// events at once).
	ReconcileInterval time.Duration
	// DeadServerGrace is how long a server may be failed in gossip before
	// the leader removes it from the Raft configuration. A server that
	// leaves with Leave is removed at once.
	DeadServerGrace time.Duration
	// ServerStabilization is how long a new server, added as a non-voter,
	// must stay healthy (alive, in the leader's term, within
	// MaxTrailingLogs of the leader's log) before it is made a voter.
	ServerStabilization time.Duration
	MaxTrailingLogs     uint64
	// HostDownGrace is how long a host may be gone from gossip before the
	// leader marks it down (devices offline, allocations lost).
	HostDownGrace time.Duration
	// NoLeaderHold bounds how long a write or consistent read waits for a
	// leader before it fails with the retryable ErrNoLeader.
	NoLeaderHold time.Duration
	// RPCTimeout bounds one call to another node (a forwarded write, a read
	// index); a forwarded call also ends early when the leader changes. A
	// write that timed out is retried with its request ID.
	RPCTimeout time.Duration
	// RequestTimeout is the server-side deadline of a wait on the leader:
	// one forwarded write, one read index, and catching up to a read
	// index. A leader that does not answer in time (frozen, cut off) gets
	// the caller a retryable ErrTimeout (504) instead of a hang; a leader
	// change seen meanwhile ends the wait at once and the write is retried
	// with the new leader. Default 2 x ElectionTimeout.
	RequestTimeout time.Duration

	// GossipProbeInterval and GossipSuspicionMult tune failure detection
	// (memberlist LAN defaults when zero: 1s and 4).
	GossipProbeInterval time.Duration
	GossipSuspicionMult int
	// GossipProbeTimeout is how long a probe waits for its ack (default
	// 500 ms, at most half the probe interval); GossipRetransmitMult
	// how many times each node passes a gossip message on, times
	// log10(members+1) (memberlist's default 4); GossipNoCompression
	// sends gossip uncompressed; GossipNoTCPPings leaves out the TCP ping
	// that follows a failed UDP probe. A process that runs thousands of
	// nodes (hostsim) needs them; an agent keeps the defaults.
	GossipProbeTimeout   time.Duration
	GossipRetransmitMult int
	GossipNoCompression  bool
	GossipNoTCPPings     bool
	// GossipTransport, when set, opens the node's memberlist transport on
	// BindAddr and GossipPort (0: a free port) instead of memberlist's
	// NetTransport. The host simulator's transport keeps its hosts'
	// traffic among themselves in its process; agents and servers leave it
	// nil.
	GossipTransport func(bindAddr string, port int) (memberlist.NodeAwareTransport, error)
	// ServersOnlyMembers makes a host that is not a server keep only
	// itself and the servers in its member list: the other hosts are
	// gossip members all the same, but it neither lists them nor
	// reconnects to them when they fail (the servers do). The host
	// simulator sets it: N hosts in one process would otherwise keep N²
	// member records besides memberlist's own N².
	ServersOnlyMembers bool
	// GossipKeep, when set on a node that is not a server, is asked of
	// every other member that is not a server whether the node keeps it
	// in its gossip membership at all (memberlist's AliveDelegate): one
	// it does not keep it neither probes nor gossips to, and news of it
	// is dropped unread. The servers and the node itself are always kept.
	// The host simulator gives each of its hosts a few neighbours this
	// way, so that N hosts in one process hold N·k members, not N²,
	// while the servers see the whole pool; agents leave it nil.
	GossipKeep func(name string) bool
	// EncryptKey turns on gossip encryption with this key (16, 24 or 32
	// bytes): members without it are neither seen nor heard. A keyring
	// file left by an earlier run wins over it (keyring.go).
	EncryptKey []byte
	// KeyringFile is where the gossip keyring persists; empty means
	// DataDir/keyring, or nowhere without a DataDir.
	KeyringFile string

	// Inventory makes the node a device host: it advertises the host role
	// and answers inventory requests. Required when Server is false; a
	// server may also carry devices.
	Inventory InventoryFunc
	// InventoryInterval is how often Inventory is re-read to notice changes.
	InventoryInterval time.Duration

	// ACLEnabled makes the leader register a host only when the ACL token
	// the host sends with its inventory exists, has not expired and may
	// register that host (a policy's host_register names it).
	ACLEnabled bool
	// ACLToken is this node's own token secret, sent with its inventory.
	ACLToken string
	// ACLTokenTTL is how long a node without a replica (a host) keeps a
	// token it resolved through a server (ResolveToken), and
	// ACLTokenNegativeTTL how long it keeps an answer that no such token
	// exists. A token deleted or changed on the servers is seen by a host
	// within ACLTokenTTL.
	ACLTokenTTL         time.Duration
	ACLTokenNegativeTTL time.Duration

	// TLS, when set, secures Raft and the node RPC with the cluster's
	// certificates (see DESIGN.md, "TLS"): both ports speak TLS only,
	// with mutual TLS, and every RPC call is authorized by the role in
	// its caller's certificate; the leader fetches a host's inventory
	// only from the node whose certificate names that host. Nil: plain
	// TCP and HTTP (dev mode, tests), for a private network only.
	TLS *certs.Store
	// TLSSkipVerifyIncoming (verify_incoming = false) accepts Raft and
	// RPC connections without a client certificate and authorizes
	// nothing: only for rolling TLS out over a running cluster.
	TLSSkipVerifyIncoming bool
	// TLSSkipVerifyServerHostname (verify_server_hostname = false)
	// accepts any certificate of the CA from the servers this node dials,
	// not only a server's one (with its node name where known).
	TLSSkipVerifyServerHostname bool

	// Version is advertised in gossip.
	Version string
	// Logger receives every log line of Raft, memberlist and the node.
	Logger hclog.Logger
}

// fillDefaults sets every zero duration and count to its default.
func (c *Config) fillDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.RetryJoinInterval, 2*time.Second)
	def(&c.ReconnectInterval, 10*time.Second)
	def(&c.HeartbeatTimeout, 500*time.Millisecond)
	def(&c.ElectionTimeout, 500*time.Millisecond)
	def(&c.LeaderLeaseTimeout, 250*time.Millisecond)
	def(&c.CommitTimeout, 20*time.Millisecond)
	def(&c.SnapshotInterval, 30*time.Second)
	def(&c.TickInterval, 5*time.Second)
	def(&c.ReconcileInterval, time.Second)
	def(&c.DeadServerGrace, 10*time.Minute)
	def(&c.ServerStabilization, 10*time.Second)
	def(&c.HostDownGrace, 30*time.Second)
	def(&c.NoLeaderHold, 5*time.Second)
	def(&c.RPCTimeout, 5*time.Second)
	def(&c.RequestTimeout, 2*c.ElectionTimeout)
	def(&c.InventoryInterval, 30*time.Second)
	def(&c.ACLTokenTTL, 30*time.Second)
	def(&c.ACLTokenNegativeTTL, 5*time.Second)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.StateHashInterval == 0 {
		c.StateHashInterval = 4096
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.MaxTrailingLogs == 0 {
		c.MaxTrailingLogs = 250
	}
	if c.SnapshotRetain <= 0 {
		c.SnapshotRetain = 2
	}
	if c.BindAddr == "" {
		c.BindAddr = "127.0.0.1"
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// validate checks the configuration after defaults are filled and resolves
// the advertise address.
func (c *Config) validate() error {
	if c.NodeID == "" {
		return fmt.Errorf("%w: node id is empty", ErrConfig)
	}
	if len(c.NodeID) > 128 || strings.ContainsAny(c.NodeID, " \t\r\n/") {
		return fmt.Errorf("%w: node id %q is longer than 128 bytes or has spaces or slashes", ErrConfig, c.NodeID)
	}
	if !c.Server && c.Inventory == nil {
		return fmt.Errorf("%w: a host node needs an inventory", ErrConfig)
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > 7 {
		return fmt.Errorf("%w: bootstrap-expect %d out of 0..7", ErrConfig, c.BootstrapExpect)
	}
	if !c.Server && c.BootstrapExpect != 0 {
		return fmt.Errorf("%w: bootstrap-expect needs a server", ErrConfig)
	}
	for _, p := range []int{c.RaftPort, c.RPCPort, c.GossipPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("%w: port %d out of range", ErrConfig, p)
		}
	}
	if c.ElectionTimeout < c.HeartbeatTimeout || c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return fmt.Errorf("%w: need leader lease <= heartbeat timeout <= election timeout", ErrConfig)
	}
	if err := c.validateEncryptKey(); err != nil {
		return err
	}
	if net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("%w: bind address %q is not an IP", ErrConfig, c.BindAddr)
	}
	if c.AdvertiseAddr == "" {
		if ip := net.ParseIP(c.BindAddr); !ip.IsUnspecified() {
			c.AdvertiseAddr = c.BindAddr
		} else {
			priv, err := sockaddr.GetPrivateIP()
			if err != nil || priv == "" {
				return fmt.Errorf("%w: no private IP to advertise; set the advertise address", ErrConfig)
			}
			c.AdvertiseAddr = priv
		}
	}
	if ip := net.ParseIP(c.AdvertiseAddr); ip == nil || ip.IsUnspecified() {
		return fmt.Errorf("%w: advertise address %q is not a usable IP", ErrConfig, c.AdvertiseAddr)
	}
	return nil
}
