package cluster

import (
	"errors"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// Errors of the cluster layer. They are *fsm.Error values, so one error type
// with a stable code crosses every layer (the node RPC and the HTTP API
// answer the code verbatim); compare with errors.Is. IsRetryable says which
// ones a client should retry (with the same request ID) on this or another
// node.
var (
	// ErrNoLeader: no leader was known within Config.NoLeaderHold. Retryable.
	ErrNoLeader = &fsm.Error{Code: wire.CodeNoLeader, Message: "no cluster leader"}
	// ErrNotLeader: an operation that only the leader performs reached a
	// node that is not (or no longer) the leader. Retryable.
	ErrNotLeader = &fsm.Error{Code: wire.CodeNotLeader, Message: "node is not the leader"}
	// ErrShutdown: the node is shutting down or not started. Retryable on
	// another node.
	ErrShutdown = &fsm.Error{Code: wire.CodeShutdown, Message: "node is shut down"}
	// ErrTimeout: the context ended before the outcome was known; a write
	// may or may not have been applied. Retry with the same request ID.
	ErrTimeout = &fsm.Error{Code: wire.CodeTimeout, Message: "timed out; outcome unknown"}
	// ErrNotServer: the operation needs the replicated state, which a host
	// node does not hold. Retryable on a server.
	ErrNotServer = &fsm.Error{Code: wire.CodeNotServer, Message: "node is not a server"}
	// ErrHostToken: with ACLs on, a host's inventory came without a token
	// that may register it; the host is not registered.
	ErrHostToken = &fsm.Error{Code: wire.CodePermissionDenied, Message: "host token may not register this host"}
	// ErrReplicaFailed: this server's replica cannot be trusted: it
	// stopped at a log entry it could not apply (fail-stop), or its state
	// hash differs from the other servers' (integrity.go). It answers no
	// reads. Retryable on another node.
	ErrReplicaFailed = &fsm.Error{Code: wire.CodeReplicaFailed, Message: "this server's replica failed its integrity check"}
	// ErrStorage: this server could not write its Raft log, stable store
	// or a snapshot (a full disk, a failed fsync). It is not ready and
	// refuses reads of its replica, which may be behind, until a write
	// succeeds again. Retryable on another node.
	ErrStorage = &fsm.Error{Code: wire.CodeStorageFailed, Message: "this server cannot write its storage"}
	// ErrFeatureUnavailable: the command needs a feature level (a newer
	// dmsc) that not every server in the Raft configuration advertises
	// yet; the message names the servers that are too old. Nothing was
	// written. Not retryable as such: upgrade those servers first.
	ErrFeatureUnavailable = &fsm.Error{Code: wire.CodeFeatureUnavailable, Message: "not every server supports this command yet"}
	// ErrConfig: the configuration is invalid.
	ErrConfig = &fsm.Error{Code: "bad_config", Message: "invalid configuration"}
)

// ErrNeedsUpgrade: this server's log holds a command that a newer dmsc
// wrote; the server refuses to start until it is upgraded.
var ErrNeedsUpgrade = errors.New("this server is too old for its Raft log")

// IsRetryable reports whether err is a condition that a client may retry
// with the same request ID (wire.RetryableCode): no leader, leader lost,
// node shutting down, outcome unknown, or, on another node, a host's
// not_server.
func IsRetryable(err error) bool {
	var e *fsm.Error
	return errors.As(err, &e) && wire.RetryableCode(e.Code)
}

// clusterErr makes an instance of a sentinel with more detail.
func clusterErr(sentinel *fsm.Error, detail string) *fsm.Error {
	return &fsm.Error{Code: sentinel.Code, Message: sentinel.Message + ": " + detail}
}
