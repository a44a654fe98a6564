package client

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dmsc/dmsc/client/wire"
)

// APIError is an error answer of the API: the JSON error envelope with its
// HTTP status and the node that sent it. It matches the sentinels below
// by code through errors.Is:
//
//	if errors.Is(err, client.ErrNoCapacity) { ... }
type APIError struct {
	// Status is the HTTP status (0 on a sentinel).
	Status int
	// Code is the stable error code (no_capacity, not_found, ...).
	Code    string
	Message string
	// Retryable says the same request may succeed if sent again with the
	// same request ID; the client has already retried it as configured.
	Retryable bool
	// WhyNot explains a no_capacity refusal: what each filter removed.
	WhyNot *WhyNot
	// AllocationID names the allocation a refusal recorded in the history.
	AllocationID string
	// RequestID is the request ID of the refused write.
	RequestID string
	// Address is the node that answered.
	Address string
}

// Error says what went wrong, for humans.
func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Code
	}
	if e.Status == 0 {
		return msg
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", msg, e.Code, e.Status)
}

// Is matches any *APIError with the same code.
func (e *APIError) Is(target error) bool {
	t, ok := target.(*APIError)
	return ok && t.Code == e.Code
}

func sentinel(code, msg string) *APIError { return &APIError{Code: code, Message: msg} }

// Sentinel errors, one per error code of the API. Compare with errors.Is;
// the *APIError carries the details.
var (
	// ErrBadRequest: the API could not read the request (malformed JSON,
	// bad query parameter).
	ErrBadRequest = sentinel(wire.CodeBadRequest, "bad request")
	// ErrInvalid: the scheduler refused the values (unknown type or
	// policy, count 0, ...).
	ErrInvalid = sentinel(wire.CodeInvalid, "invalid argument")
	// ErrNotFound: no such allocation, device, host, server or route.
	ErrNotFound = sentinel(wire.CodeNotFound, "not found")
	// ErrConflict: the state forbids it (cancel an active allocation, ...).
	ErrConflict = sentinel(wire.CodeConflict, "conflict")
	// ErrNotActive: the allocation is not active (release or renew of an
	// ended or pending allocation).
	ErrNotActive = sentinel(wire.CodeNotActive, "allocation is not active")
	// ErrNoCapacity: nothing fits now (timeout 0) or before the request's
	// deadline; APIError.WhyNot explains.
	ErrNoCapacity = sentinel(wire.CodeNoCapacity, "no device fits the request")
	// ErrQuotaExceeded: the request would take its namespace past its
	// quota; APIError.WhyNot.Quota names the limit. Recorded in the
	// history as a failed allocation, as a refusal for capacity is.
	ErrQuotaExceeded = sentinel(wire.CodeQuotaExceeded, "the request would pass its namespace's quota")
	// ErrRequestIDReused: the request ID was used before, in the same
	// namespace, for another request; nothing was done.
	ErrRequestIDReused = sentinel(wire.CodeRequestIDReused, "request id used before for another request")
	// ErrBadSnapshot: an uploaded snapshot does not restore.
	ErrBadSnapshot = sentinel(wire.CodeBadSnapshot, "snapshot cannot be restored")
	// ErrTooLarge: the request body is over the route's cap.
	ErrTooLarge = sentinel(wire.CodeBodyTooLarge, "request body too large")
	// ErrForbidden: the caller may not do this (with TLS on, a write
	// that only a server's API takes, sent to a host's).
	ErrForbidden = sentinel(wire.CodeForbidden, "forbidden")
	// ErrUnauthorized: with ACLs on, the token is unknown or expired.
	ErrUnauthorized = sentinel(wire.CodeUnauthorized, "ACL token unknown or expired")
	// ErrPermissionDenied: with ACLs on, the token does not grant what the
	// call needs (the message names the capability).
	ErrPermissionDenied = sentinel(wire.CodePermissionDenied, "permission denied")
	// ErrMethodNotAllowed: the path exists with other methods.
	ErrMethodNotAllowed = sentinel(wire.CodeMethodNotAllowed, "method not allowed")
	// ErrOverloaded: the node has too many requests in flight. Retryable.
	ErrOverloaded = sentinel(wire.CodeOverloaded, "node overloaded")
	// ErrNoLeader: no leader was known in time. Retryable.
	ErrNoLeader = sentinel(wire.CodeNoLeader, "no cluster leader")
	// ErrNotLeader: leadership moved during the request. Retryable.
	ErrNotLeader = sentinel(wire.CodeNotLeader, "node is not the leader")
	// ErrShutdown: the node is shutting down. Retryable on another node.
	ErrShutdown = sentinel(wire.CodeShutdown, "node is shut down")
	// ErrNotServer: the node is a host and holds no replica. Retryable on
	// another node.
	ErrNotServer = sentinel(wire.CodeNotServer, "node is not a server")
	// ErrTimeout: the request ran out of time and the outcome of a write
	// is unknown; send it again with the same request ID. Retryable.
	ErrTimeout = sentinel(wire.CodeTimeout, "timed out; outcome unknown")
	// ErrStorage: the server cannot write its storage (a full disk) and
	// does not answer from its replica. Retryable on another node.
	ErrStorage = sentinel(wire.CodeStorageFailed, "server cannot write its storage")
	// ErrIndexTooOld: the event stream's index is older than the node's
	// buffer of events; read the state again and stream from its index.
	ErrIndexTooOld = sentinel(wire.CodeIndexTooOld, "events after that index are no longer buffered")
	// ErrFeatureUnavailable: the write needs a newer dmsc than some
	// servers run (a rolling upgrade in progress); nothing was written.
	ErrFeatureUnavailable = sentinel(wire.CodeFeatureUnavailable, "not every server supports this write yet")
	// ErrInternal: a bug on the server.
	ErrInternal = sentinel(wire.CodeInternal, "internal error")
	// ErrLeaseLost: a LeaseRenewer could not keep the lease (the
	// allocation ended or renewals failed until the lease ran out).
	ErrLeaseLost = sentinel("lease_lost", "allocation lease lost")
)

// retryableStatus are statuses worth another attempt whatever the body says.
func retryableStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// codeOfStatus names an error answer that came without the JSON envelope
// (a proxy in between, a crashed handler).
func codeOfStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return wire.CodeBadRequest
	case http.StatusUnauthorized:
		return wire.CodeUnauthorized
	case http.StatusForbidden:
		return wire.CodePermissionDenied
	case http.StatusNotFound:
		return wire.CodeNotFound
	case http.StatusMethodNotAllowed:
		return wire.CodeMethodNotAllowed
	case http.StatusConflict:
		return wire.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return wire.CodeBodyTooLarge
	case http.StatusTooManyRequests:
		return wire.CodeOverloaded
	case http.StatusServiceUnavailable:
		return wire.CodeNoLeader
	case http.StatusGatewayTimeout:
		return wire.CodeTimeout
	}
	return wire.CodeInternal
}

// IsRetryable reports whether err is worth sending again (with the same
// request ID) after the client gave up: a retryable API error or a
// connection failure.
func IsRetryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Retryable || retryableStatus(ae.Status)
	}
	var ce *ConnError
	return errors.As(err, &ce)
}

// ConnError is a failure to talk to a node: it refused the connection, the
// connection broke, or no answer came in time.
type ConnError struct {
	Address string
	Err     error
}

func (e *ConnError) Error() string { return e.Address + ": " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }
