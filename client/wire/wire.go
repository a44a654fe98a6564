// Package wire holds the JSON bodies of the dmsc HTTP API: what clients
// send, what the server answers, the error envelope and codes, and the
// header names. It imports only the standard library, so that the Go SDK
// (package client) shares it with the server (package api) without
// depending on any of the server's code; the server converts between
// these types and its state machine's. Durations travel as Go duration
// strings ("30s", "1h30m"); times as RFC 3339 strings.
package wire

import (
	"encoding/json"
	"errors"
	"time"
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
	// HeaderForwarded is "true" on a write's answer from a server that is
	// not the leader (it forwarded the write): a client that can reach
	// the leader does better to write to it.
	HeaderForwarded = "X-Dmsc-Forwarded"
	// HeaderRequestID carries a write's request ID, both ways.
	HeaderRequestID = "X-Request-Id"
	// HeaderToken carries an ACL token's secret (request header); an
	// "Authorization: Bearer <secret>" header is the same.
	HeaderToken = "X-Dmsc-Token"
)

// Error codes (Error.Code). They are stable: clients match on them.
const (
	// CodeBadRequest: the API cannot read the request (malformed JSON,
	// unknown field, bad query parameter, bad request ID).
	CodeBadRequest = "bad_request"
	// CodeInvalid: the scheduler refused the values (unknown device type
	// or policy, count 0, negative duration, ...).
	CodeInvalid = "invalid_argument"
	// CodeBadSnapshot: an uploaded snapshot cannot be restored.
	CodeBadSnapshot = "bad_snapshot"
	// CodeNotFound: no such allocation, device, host, Raft server or route.
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed: the path exists with other methods.
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeConflict: the state forbids it.
	CodeConflict = "conflict"
	// CodeNotActive: the allocation is not active.
	CodeNotActive = "not_active"
	// CodeNoCapacity: nothing fits now, or before the request's deadline;
	// Error.WhyNot explains.
	CodeNoCapacity = "no_capacity"
	// CodeQuotaExceeded: the request would take its namespace past its
	// quota; Error.WhyNot.Quota names the limit.
	CodeQuotaExceeded = "quota_exceeded"
	// CodeRequestIDReused: the request ID was used before, in the same
	// namespace, for another request; a retry must send the same request.
	CodeRequestIDReused = "request_id_reused"
	// CodeBodyTooLarge: the body is over the route's cap.
	CodeBodyTooLarge = "body_too_large"
	// CodeOverloaded: too many requests in flight on the node. Retryable.
	CodeOverloaded = "overloaded"
	// CodeNoLeader: no leader was known in time. Retryable.
	CodeNoLeader = "no_leader"
	// CodeNotLeader: leadership moved during the request. Retryable.
	CodeNotLeader = "not_leader"
	// CodeShutdown: the node is shutting down. Retryable on another node.
	CodeShutdown = "shutdown"
	// CodeNotServer: the node is a host and holds no replica. Retryable
	// on another node.
	CodeNotServer = "not_server"
	// CodeReplicaFailed: this server's replica cannot be trusted: it
	// stopped at a corrupt or undecodable log entry, or its state differs
	// from the other servers'. Nothing was done; retryable on another
	// node.
	CodeReplicaFailed = "replica_failed"
	// CodeTimeout: the request ran out of time; the outcome of a write is
	// unknown. Retryable with the same request ID.
	CodeTimeout = "timeout"
	// CodeStorageFailed: the server cannot write its storage (a full
	// disk, a failed fsync) and refuses to answer from a replica it
	// cannot vouch for. Retryable on another node.
	CodeStorageFailed = "storage_failed"
	// CodeFeatureUnavailable: the write needs a newer dmsc than some
	// servers of the cluster run (a rolling upgrade in progress); the
	// message names them. Nothing was written. Upgrade them, then send it
	// again.
	CodeFeatureUnavailable = "feature_unavailable"
	// CodeInternal: a bug on the server.
	CodeInternal = "internal"
	// CodeForbidden: the caller is known but may not do this (a node
	// whose certificate's role does not allow the call).
	CodeForbidden = "forbidden"
	// CodeUnauthorized: with ACLs on, the request's token is unknown or
	// expired (HTTP 401). A request without a token is the anonymous
	// token's.
	CodeUnauthorized = "unauthorized"
	// CodePermissionDenied: with ACLs on, the request's token does not
	// grant the route's capability (HTTP 403).
	CodePermissionDenied = "permission_denied"

	// CodeUnsupportedMediaType: a write's body is not application/json
	// (application/octet-stream for a snapshot upload).
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeHostNotAllowed: the agent listens on a loopback address and the
	// request's Host header is not a loopback name (DNS rebinding).
	CodeHostNotAllowed = "host_not_allowed"
	// CodeCrossOrigin: a browser sent a write from another origin.
	CodeCrossOrigin = "cross_origin"
	// CodeBodyTimeout: the request body did not arrive in time.
	CodeBodyTimeout = "body_timeout"
)

// RetryableCode reports whether an error with this code may succeed if
// the same request is sent again, with the same request ID: to this node
// after a pause, or to another node. These are overloaded, no_leader,
// not_leader, shutdown, not_server, replica_failed, timeout and storage_failed; the
// server sets Error.Retryable from this list.
func RetryableCode(code string) bool {
	switch code {
	case CodeOverloaded, CodeNoLeader, CodeNotLeader, CodeShutdown, CodeNotServer, CodeTimeout, CodeReplicaFailed, CodeStorageFailed:
		return true
	}
	return false
}

// NotAppliedCode reports whether an error with this code says that the
// request was not carried out at all (overloaded, no_leader, not_server, replica_failed),
// so that even a write without a request ID may be sent again. The other
// retryable codes leave a write's outcome unknown.
func NotAppliedCode(code string) bool {
	switch code {
	case CodeOverloaded, CodeNoLeader, CodeNotServer, CodeReplicaFailed:
		return true
	}
	return false
}

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
	WhyNot *WhyNot `json:"why_not,omitempty"`
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

// Request is an allocation request: one or more claims that must all be
// satisfied on one host, at once.
type Request struct {
	Claims []Claim `json:"claims"`
	// Priority is 0..1000; higher is served first from the queue.
	Priority int `json:"priority,omitempty"`
	// Timeout is how long the request may wait in the queue; zero fails
	// at once when nothing fits.
	Timeout Duration `json:"timeout,omitempty"`
	// LeaseTTL makes the allocation expire unless renewed within it.
	LeaseTTL Duration `json:"lease_ttl,omitempty"`
	// Pool restricts every claim without a pool of its own.
	Pool   string        `json:"pool,omitempty"`
	Labels LabelSelector `json:"labels,omitzero"`
	// MaxHosts above 1 makes a gang: the first claim's devices over up to
	// MaxHosts hosts, at least MinPerHost on each (1 when 0), every other
	// claim whole on each; with Same, all hosts carry that host label
	// with one value (a rack, a zone). Placed whole or not at all.
	MaxHosts   int    `json:"max_hosts,omitempty"`
	MinPerHost int    `json:"min_per_host,omitempty"`
	Same       string `json:"same,omitempty"`
	// Host, when set, takes devices of that host only.
	Host string `json:"host,omitempty"`
}

// AllocateRequest is the body of POST /v1/allocations.
type AllocateRequest struct {
	Request
	// Namespace is the namespace the allocation belongs to ("default"
	// when empty); ?namespace= may name it instead.
	Namespace string `json:"namespace,omitempty"`
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
	Status    DeviceStatus `json:"status"`
	RequestID string       `json:"request_id,omitempty"`
}

// RegisterHostRequest is the body of PUT /v1/hosts/{id}: a host and its
// static devices. Registering again replaces the inventory.
type RegisterHostRequest struct {
	Address   string            `json:"address,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Devices   []DeviceSpec      `json:"devices"`
	RequestID string            `json:"request_id,omitempty"`
}

// PolicyRequest is the body of PUT /v1/policies/{type} and
// PUT /v1/pools/{pool}/policy.
type PolicyRequest struct {
	Policy        Policy `json:"policy"`
	PreemptionGap int    `json:"preemption_gap,omitempty"`
	RequestID     string `json:"request_id,omitempty"`
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
	Types map[DeviceType]PolicyConfig `json:"types"`
	Pools map[string]PolicyConfig     `json:"pools"`
}

// Allocation is an allocation as the API shows it.
type Allocation struct {
	ID        string `json:"id"`
	RequestID string `json:"request_id,omitempty"`
	// Namespace is the namespace the allocation belongs to.
	Namespace string      `json:"namespace"`
	Request   Request     `json:"request"`
	Status    AllocStatus `json:"status"`
	Policy    Policy      `json:"policy"`
	// Host is the allocation's host; a gang's first by ID, all of them
	// in Hosts.
	Host    string       `json:"host,omitempty"`
	Hosts   []string     `json:"hosts,omitempty"`
	Devices []Assignment `json:"devices,omitempty"`
	// Reserved, on a waiting gang, are the hosts held for it: their
	// devices of its first claim's type take no other work.
	// ExpectedStart is when the leases on them say enough will be free
	// (zero when unknown: a device it needs is held without a lease).
	Reserved      []string  `json:"reserved,omitempty"`
	ExpectedStart time.Time `json:"expected_start,omitzero"`
	Seq           uint64    `json:"seq"`
	CreateIndex   uint64    `json:"create_index"`
	ModifyIndex   uint64    `json:"modify_index"`
	// Times come from the leader's clock.
	RequestedAt    time.Time `json:"requested_at,omitzero"`
	AllocatedAt    time.Time `json:"allocated_at,omitzero"`
	EndedAt        time.Time `json:"ended_at,omitzero"`
	Deadline       time.Time `json:"deadline,omitzero"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
	PreemptedBy    string    `json:"preempted_by,omitempty"`
	Preempted      []string  `json:"preempted,omitempty"`
	// Preempting is set while an active allocation's borrowed devices are
	// reclaimed: it ends as preempted at the deadline unless it ends
	// first or the reclaiming request stops waiting.
	Preempting *Preempting `json:"preempting,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	WhyNot     *WhyNot     `json:"why_not,omitempty"`
}

// Preempting is the reclaim of an allocation's borrowed devices: the
// waiting request that reclaims them, and when the grace ends.
type Preempting struct {
	By       string    `json:"by"`
	Deadline time.Time `json:"deadline"`
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
	// InventoryHash is the hash of the inventory the host was last
	// registered with by the leader (empty for a host registered
	// through the API).
	InventoryHash string `json:"inventory_hash,omitempty"`
	// Drain is set while the host is drained.
	Drain *HostDrain `json:"drain,omitempty"`
}

// HostDrain is a host's drain: it takes no new work since Since; at
// Deadline (none when zero) the allocations still on it end as drained,
// and Ended says that happened.
type HostDrain struct {
	Since    time.Time `json:"since"`
	Deadline time.Time `json:"deadline,omitzero"`
	Ended    bool      `json:"ended,omitempty"`
}

// HostDrainRequest is the body of POST /v1/hosts/{id}/drain. Deadline is
// how long running allocations may keep their devices; empty waits for
// them to be released however long they run.
type HostDrainRequest struct {
	Deadline  Duration `json:"deadline,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
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
	// Reason says why a node is not ready (GET /v1/ready answering 503).
	Reason string `json:"reason,omitempty"`
	// Integrity says why a server's replica may not be read (it halted
	// at a log entry it could not apply, or its state differs from the
	// other servers'); Divergence describes the newest state hash
	// mismatch the server has seen between servers. Empty when sound.
	Integrity  string `json:"integrity,omitempty"`
	Divergence string `json:"divergence,omitempty"`
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
	// Status is "ok", or "failed" (HTTP 503) when this server's replica
	// failed its integrity check; Code is then replica_failed and Reason
	// says what happened and what to do.
	Status string `json:"status"`
	Node   string `json:"node"`
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Alarms lists what this node sees wrong elsewhere: a state
	// divergence between other servers.
	Alarms []string `json:"alarms,omitempty"`
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
	// FeatureLevel is a server's feature level: the command types it can
	// apply. A write of a newer type is refused (feature_unavailable)
	// until every server advertises its level. 0 for hosts and for
	// servers of a release before levels (level 1).
	FeatureLevel int `json:"feature_level,omitempty"`
	// Status is alive, failed or left.
	Status string `json:"status"`
	// Since is when the answering node saw the status change.
	Since  time.Time `json:"since,omitzero"`
	Leader bool      `json:"leader"`
	// Integrity is "halted" or "diverged" when the server advertises that
	// its replica failed its integrity check.
	Integrity string `json:"integrity,omitempty"`
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
// set at (GET /v1/cluster/raft), and the servers an operator removed,
// which the leader does not add back until they are readmitted.
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

// MaxBatch is the most requests one POST /v1/batch carries.
const MaxBatch = 128

// BatchRequest is the body of POST /v1/batch: several allocation writes
// sent in one HTTP exchange, each served as if it came alone.
type BatchRequest struct {
	Requests []BatchItem `json:"requests"`
}

// BatchItem is one request of a batch: a method and path of a route that
// may be batched (docs/api.md names them), with the query if any, its
// request ID and its JSON body.
type BatchItem struct {
	Method    string          `json:"method"`
	Path      string          `json:"path"`
	RequestID string          `json:"request_id,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
}

// BatchResponse answers a batch: one result per request, in order.
type BatchResponse struct {
	Responses []BatchResult `json:"responses"`
}

// BatchResult is the answer to one request of a batch: the status and
// body it would have had alone (an ErrorResponse at 400 or more), and the
// headers of a write's answer.
type BatchResult struct {
	Status    int             `json:"status"`
	Index     uint64          `json:"index,omitempty"`
	RequestID string          `json:"request_id,omitempty"`
	Body      json.RawMessage `json:"body"`
}
