package cluster

import "time"

// ReadOptions choose how fresh a Read must be.
type ReadOptions struct {
	// Consistent makes the read linearizable: the node learns the leader's
	// commit index after the leader has confirmed its leadership with a
	// quorum, and reads once its own replica has applied that index.
	Consistent bool
	// MaxStale bounds staleness on a follower: when the last contact with
	// the leader is older, the read is made consistent instead. 0 accepts
	// any staleness (the default mode: the local replica as it is).
	MaxStale time.Duration
	// MinIndex and Wait make a blocking query: wait until the state's Index
	// is greater than MinIndex, or Wait has passed (capped at MaxWait;
	// DefaultWait when zero), then read.
	MinIndex uint64
	Wait     time.Duration
}

// Blocking query bounds.
const (
	DefaultWait = 5 * time.Minute
	MaxWait     = 10 * time.Minute
)

// ReadMeta says how fresh a read was.
type ReadMeta struct {
	// Index is the log index of the last command that changed the state
	// (ticks that expire nothing do not count). It only grows; use it as
	// the MinIndex of a blocking query. Served as X-Dmsc-Index.
	Index uint64
	// AppliedIndex is the log index of the last entry applied.
	AppliedIndex uint64
	// LastContact is the time since this node last heard from the leader
	// (0 on the leader itself).
	LastContact time.Duration
	// KnownLeader reports whether the node knows a leader.
	KnownLeader bool
	// Leader is the leader's node ID, empty when none is known.
	Leader string
}

// Role is what a node does in the cluster.
type Role string

// Roles.
const (
	RoleServer Role = "server"
	RoleHost   Role = "host"
)

// MemberStatus is a node's state as gossip sees it.
type MemberStatus string

// Member states.
const (
	MemberAlive MemberStatus = "alive"
	// MemberFailed: gossip declared the node dead (or it left without
	// saying it will not come back).
	MemberFailed MemberStatus = "failed"
	// MemberLeft: the node left the cluster for good (Leave).
	MemberLeft MemberStatus = "left"
)

// Member is a node of the gossip pool.
type Member struct {
	ID string `json:"id"`
	// Server and Host tell the node's roles (a server may also carry devices).
	Server bool `json:"server"`
	Host   bool `json:"host"`
	// GossipAddr, RaftAddr, RPCAddr and HTTPAddr are host:port; RaftAddr is
	// empty for hosts, HTTPAddr when the node did not advertise one.
	GossipAddr string `json:"gossip_addr"`
	RaftAddr   string `json:"raft_addr,omitempty"`
	RPCAddr    string `json:"rpc_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
	Version    string `json:"version"`
	// FeatureLevel is a server's feature level (fsm.FeatureLevel), 0 for
	// hosts and for servers of a release before levels.
	FeatureLevel int          `json:"feature_level,omitempty"`
	Status       MemberStatus `json:"status"`
	// Since is when this node last saw the status change.
	Since time.Time `json:"since"`
	// Integrity is "halted" or "diverged" when the server advertises that
	// its replica failed its integrity check, else empty.
	Integrity string `json:"integrity,omitempty"`
	// Leader reports whether the member is the Raft leader.
	Leader bool `json:"leader"`
}

// RaftServer is one server of the Raft configuration.
type RaftServer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
}

// RaftConfiguration is the Raft configuration and the index it was set at,
// and the servers an operator removed, which the leader does not add back.
type RaftConfiguration struct {
	Index   uint64          `json:"index"`
	Servers []RaftServer    `json:"servers"`
	Removed []RemovedServer `json:"removed,omitempty"`
}

// RemovedServer is a server an operator removed, and when.
type RemovedServer struct {
	ID    string    `json:"id"`
	Since time.Time `json:"since"`
}

// LeaderInfo names the leader.
type LeaderInfo struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	RPCAddr  string `json:"rpc_addr,omitempty"`
	HTTPAddr string `json:"http_addr,omitempty"`
}

// Status is a summary of the node for health and readiness checks.
type Status struct {
	ID     string `json:"id"`
	Server bool   `json:"server"`
	Host   bool   `json:"host"`
	// State is the Raft state: Leader, Follower, Candidate or Shutdown
	// (empty for hosts).
	State        string        `json:"state,omitempty"`
	Leader       string        `json:"leader,omitempty"`
	KnownLeader  bool          `json:"known_leader"`
	LastContact  time.Duration `json:"last_contact"`
	CommitIndex  uint64        `json:"commit_index"`
	AppliedIndex uint64        `json:"applied_index"`
	Term         uint64        `json:"term"`
	// HostRegistrations is how many RegisterHost commands this replica
	// has applied since its process started (log replay included).
	HostRegistrations uint64 `json:"host_registrations"`
	// Ready: a server knows a leader, has learnt a commit index from it
	// and applied it (within ReadyLag), and heard from the leader
	// recently; a host has joined the gossip pool.
	Ready bool `json:"ready"`
	// Integrity says why this server's replica may not be read: it halted
	// at a log entry it could not apply, or its state differs from the
	// other servers'. Empty when sound.
	Integrity string `json:"integrity,omitempty"`
	// Divergence describes the newest state hash mismatch this server has
	// seen between servers (itself or others); empty when none.
	Divergence string `json:"divergence,omitempty"`
	// Reason says why a server is not ready when it knows more than the
	// fields above tell (its storage cannot be written).
	Reason string `json:"reason,omitempty"`
}

// ReadyLag is how many committed entries a server may still have to apply
// and count as ready.
const ReadyLag = 64
