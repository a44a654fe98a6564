// Package wire defines the JSON bodies of the dmsc HTTP API: what clients
// send, what the server answers, the error envelope and the header names.
// It depends on nothing but the scheduler's model (package fsm), so a
// client can share it with the server. Durations travel as Go duration
// strings ("30s", "1h30m"); times as RFC 3339 strings.
package wire

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// Response headers.
const (
	// HeaderIndex is the state index a read saw (use it as ?index= of a
	// blocking query) or the log index of a write.
	HeaderIndex = "X-Dmsc-Index"
	// HeaderLastContact is the time in milliseconds since the answering
	// node last heard from the leader: 0 on the leader, -1 when never.
	HeaderLastContact = "X-Dmsc-Last-Contact"
	// HeaderKnownLeader is "true" when the answering node knows a leader.
	HeaderKnownLeader = "X-Dmsc-Known-Leader"
	// HeaderRequestID carries a write's request ID, both ways.
	HeaderRequestID = "X-Request-Id"
)

// Error codes of the API layer. The other codes are those of fsm.Error and
// of the cluster package (no_leader, timeout, ...), passed on verbatim.
const (
	CodeBadRequest       = "bad_request"
	CodeBodyTooLarge     = "body_too_large"
	CodeOverloaded       = "overloaded"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInternal         = "internal"
)

// ErrorResponse is the body of every answer with a status of 400 or more.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// Error says what went wrong.
type Error struct {
	// Code is stable: clients match on it.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Retryable says the same request may succeed if sent again (with the
	// same request ID), to this node or another.
	Retryable bool `json:"retryable"`
	// WhyNot explains a no_capacity refusal.
	WhyNot *fsm.WhyNot `json:"why_not,omitempty"`
	// AllocationID names the allocation a refusal recorded (no_capacity).
	AllocationID string `json:"allocation_id,omitempty"`
	// RequestID is the request ID of a refused write.
	RequestID string `json:"request_id,omitempty"`
}

// Duration is a time.Duration that travels as a Go duration string.
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// errDurationFormat is the answer to a duration that is not a string.
var errDurationFormat = errors.New(`a duration is a string such as "30s" or "1h30m"`)

// UnmarshalJSON reads a duration string; "" is zero.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errDurationFormat
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Std returns the duration as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Request is an allocation request: fsm.Request with durations as strings.
type Request struct {
	Claims   []fsm.Claim       `json:"claims"`
	Priority int               `json:"priority,omitempty"`
	Timeout  Duration          `json:"timeout,omitempty"`
	LeaseTTL Duration          `json:"lease_ttl,omitempty"`
	Pool     string            `json:"pool,omitempty"`
	Labels   fsm.LabelSelector `json:"labels,omitzero"`
}

// RequestOf converts a scheduler request.
func RequestOf(r fsm.Request) Request {
	return Request{
		Claims: r.Claims, Priority: r.Priority, Timeout: Duration(r.Timeout),
		LeaseTTL: Duration(r.LeaseTTL), Pool: r.Pool, Labels: r.Labels,
	}
}

// FSM converts the request for the scheduler.
func (r Request) FSM() fsm.Request {
	return fsm.Request{
		Claims: r.Claims, Priority: r.Priority, Timeout: r.Timeout.Std(),
		LeaseTTL: r.LeaseTTL.Std(), Pool: r.Pool, Labels: r.Labels,
	}
}

// AllocateRequest is the body of POST /v1/allocations.
type AllocateRequest struct {
	Request
	// RequestID makes the request idempotent: sending it again returns the
	// first answer. Optional; the X-Request-Id header may carry it instead.
	RequestID string `json:"request_id,omitempty"`
	// Wait blocks until the request is placed or refused (at most its
	// timeout), like ?wait=true.
	Wait bool `json:"wait,omitempty"`
}

// RenewRequest is the body of POST /v1/allocations/{id}/renew.
type RenewRequest struct {
	// TTL extends the lease from now; empty uses the request's lease TTL.
	TTL       Duration `json:"ttl,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
}

// WriteRequest is the optional body of writes that take no arguments
// (release, cancel, delete host, drain, undrain).
type WriteRequest struct {
	RequestID string `json:"request_id,omitempty"`
}

// DeviceStatusRequest is the body of POST /v1/devices/{id}/status.
type DeviceStatusRequest struct {
	// Status is available, draining or unhealthy.
	Status    fsm.DeviceStatus `json:"status"`
	RequestID string           `json:"request_id,omitempty"`
}

// RegisterHostRequest is the body of PUT /v1/hosts/{id}: a host and its
// static devices. Registering again replaces the inventory.
type RegisterHostRequest struct {
	Address   string            `json:"address,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Devices   []fsm.DeviceSpec  `json:"devices"`
	RequestID string            `json:"request_id,omitempty"`
}

// PolicyRequest is the body of PUT /v1/policies/{type} and
// PUT /v1/pools/{pool}/policy.
type PolicyRequest struct {
	Policy        fsm.Policy `json:"policy"`
	PreemptionGap int        `json:"preemption_gap,omitempty"`
	RequestID     string     `json:"request_id,omitempty"`
}

// RetentionRequest is the body of PUT /v1/retention.
type RetentionRequest struct {
	MaxCount  int      `json:"max_count"`
	MaxAge    Duration `json:"max_age"`
	RequestID string   `json:"request_id,omitempty"`
}

// Retention is the history retention in force.
type Retention struct {
	MaxCount int      `json:"max_count"`
	MaxAge   Duration `json:"max_age"`
}

// Policies are the policies in force: one per device type (defaults
// included) and the per-pool overrides.
type Policies struct {
	Types map[fsm.DeviceType]fsm.PolicyConfig `json:"types"`
	Pools map[string]fsm.PolicyConfig         `json:"pools"`
}

// Allocation is an allocation as the API shows it.
type Allocation struct {
	ID          string           `json:"id"`
	RequestID   string           `json:"request_id,omitempty"`
	Request     Request          `json:"request"`
	Status      fsm.AllocStatus  `json:"status"`
	Policy      fsm.Policy       `json:"policy"`
	Host        string           `json:"host,omitempty"`
	Devices     []fsm.Assignment `json:"devices,omitempty"`
	Seq         uint64           `json:"seq"`
	CreateIndex uint64           `json:"create_index"`
	ModifyIndex uint64           `json:"modify_index"`
	// Times come from the leader's clock.
	RequestedAt    time.Time   `json:"requested_at,omitzero"`
	AllocatedAt    time.Time   `json:"allocated_at,omitzero"`
	EndedAt        time.Time   `json:"ended_at,omitzero"`
	Deadline       time.Time   `json:"deadline,omitzero"`
	LeaseExpiresAt time.Time   `json:"lease_expires_at,omitzero"`
	PreemptedBy    string      `json:"preempted_by,omitempty"`
	Preempted      []string    `json:"preempted,omitempty"`
	Reason         string      `json:"reason,omitempty"`
	WhyNot         *fsm.WhyNot `json:"why_not,omitempty"`
}

// unixTime converts Unix nanoseconds, zero staying zero.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// AllocationOf converts a scheduler allocation.
func AllocationOf(a *fsm.Allocation) Allocation {
	return Allocation{
		ID: a.ID, RequestID: a.RequestID, Request: RequestOf(a.Request), Status: a.Status, Policy: a.Policy,
		Host: a.Host, Devices: a.Devices, Seq: a.Seq, CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex,
		RequestedAt: unixTime(a.RequestedAt), AllocatedAt: unixTime(a.AllocatedAt), EndedAt: unixTime(a.EndedAt),
		Deadline: unixTime(a.Deadline), LeaseExpiresAt: unixTime(a.LeaseExpiresAt),
		PreemptedBy: a.PreemptedBy, Preempted: a.Preempted, Reason: a.Reason, WhyNot: a.WhyNot,
	}
}

// AllocationList is a page of allocations. Next is the token of the next
// page (pass it as ?next=), empty on the last page.
type AllocationList struct {
	Allocations []Allocation `json:"allocations"`
	Next        string       `json:"next,omitempty"`
}

// Host is a host as the API shows it.
type Host struct {
	ID      string            `json:"id"`
	Address string            `json:"address,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Up      bool              `json:"up"`
	// Since is when the host last went up or down.
	Since time.Time `json:"since,omitzero"`
	// Devices are the IDs of the host's devices, sorted.
	Devices []string `json:"devices"`
}

// HostOf converts a scheduler host.
func HostOf(h fsm.Host) Host {
	devices := h.Devices
	if devices == nil {
		devices = []string{}
	}
	return Host{ID: h.ID, Address: h.Address, Labels: h.Labels, Up: h.Up, Since: unixTime(h.Since), Devices: devices}
}

// NodeStatus is a node's health summary (GET /v1/ready, /v1/agent/self).
type NodeStatus struct {
	ID     string `json:"id"`
	Server bool   `json:"server"`
	Host   bool   `json:"host"`
	// State is the Raft state: Leader, Follower, Candidate or Shutdown
	// (empty on hosts).
	State       string `json:"state,omitempty"`
	Leader      string `json:"leader,omitempty"`
	KnownLeader bool   `json:"known_leader"`
	// LastContact is the time since the leader was last heard from; a
	// negative value means never.
	LastContact  Duration `json:"last_contact"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Term         uint64   `json:"term"`
	Ready        bool     `json:"ready"`
}

// AgentSelf describes the answering agent (GET /v1/agent/self).
type AgentSelf struct {
	Version string `json:"version"`
	// Role is server, host, server+host or dev.
	Role string `json:"role"`
	// Member is the node as gossip advertises it.
	Member Member     `json:"member"`
	Status NodeStatus `json:"status"`
	// Config is a summary of the agent's configuration.
	Config map[string]any `json:"config,omitempty"`
}

// Health is the body of GET /v1/health.
type Health struct {
	Status string `json:"status"`
	Node   string `json:"node"`
}

// WriteResult answers a write that has no object to return.
type WriteResult struct {
	Index     uint64 `json:"index"`
	RequestID string `json:"request_id,omitempty"`
}

// Member is a node of the gossip pool (GET /v1/cluster/members).
type Member struct {
	ID string `json:"id"`
	// Server and Host tell the node's roles (a server may carry devices).
	Server bool `json:"server"`
	Host   bool `json:"host"`
	// Addresses are host:port; RaftAddr is empty for hosts, HTTPAddr when
	// the node did not advertise one.
	GossipAddr string `json:"gossip_addr"`
	RaftAddr   string `json:"raft_addr,omitempty"`
	RPCAddr    string `json:"rpc_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
	Version    string `json:"version"`
	// Status is alive, failed or left.
	Status string `json:"status"`
	// Since is when the answering node saw the status change.
	Since  time.Time `json:"since,omitzero"`
	Leader bool      `json:"leader"`
}

// Leader names the Raft leader (GET /v1/cluster/leader).
type Leader struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	RPCAddr  string `json:"rpc_addr,omitempty"`
	HTTPAddr string `json:"http_addr,omitempty"`
}

// RaftServer is one server of the Raft configuration.
type RaftServer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
}

// RaftConfiguration is the Raft configuration and the log index it was
// set at (GET /v1/cluster/raft).
type RaftConfiguration struct {
	Index   uint64       `json:"index"`
	Servers []RaftServer `json:"servers"`
}
