package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// apiError is an error the API layer raises itself, with its status.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// badRequest is a 400 for input the API cannot read.
func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: wire.CodeBadRequest, msg: fmt.Sprintf(format, args...)}
}

var errOverloaded = &apiError{
	status: http.StatusTooManyRequests, code: wire.CodeOverloaded,
	msg: "too many requests in flight; retry shortly",
}

// refusal is a write the state machine refused, with the allocation it
// recorded (a no_capacity refusal is kept in the history).
type refusal struct {
	err          error
	allocationID string
	requestID    string
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// statusOfCode is the HTTP status of each error code. A code not listed is
// a 500.
var statusOfCode = map[string]int{
	wire.CodeBadRequest:           http.StatusBadRequest,
	fsm.ErrInvalid.Code:           http.StatusBadRequest,
	fsm.ErrSnapshot.Code:          http.StatusBadRequest,
	fsm.ErrNotFound.Code:          http.StatusNotFound,
	wire.CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	fsm.ErrConflict.Code:          http.StatusConflict,
	fsm.ErrNotActive.Code:         http.StatusConflict,
	fsm.ErrNoCapacity.Code:        http.StatusConflict,
	fsm.ErrQuotaExceeded.Code:     http.StatusConflict,
	fsm.ErrRequestIDReused.Code:   http.StatusUnprocessableEntity,
	wire.CodeBodyTooLarge:         http.StatusRequestEntityTooLarge,
	wire.CodeOverloaded:           http.StatusTooManyRequests,
	cluster.ErrNoLeader.Code:      http.StatusServiceUnavailable,
	cluster.ErrNotLeader.Code:     http.StatusServiceUnavailable,
	cluster.ErrShutdown.Code:      http.StatusServiceUnavailable,
	cluster.ErrNotServer.Code:     http.StatusServiceUnavailable,
	cluster.ErrReplicaFailed.Code: http.StatusServiceUnavailable,
	cluster.ErrTimeout.Code:       http.StatusGatewayTimeout,
	fsm.ErrUnknownCommand.Code:    http.StatusInternalServerError,
	cluster.ErrConfig.Code:        http.StatusInternalServerError,
	wire.CodeInternal:             http.StatusInternalServerError,
	wire.CodeForbidden:            http.StatusForbidden,
	cluster.ErrStorage.Code:       http.StatusServiceUnavailable,
	wire.CodeFeatureUnavailable:   http.StatusConflict,
}

// errorBody turns any error into its status and JSON body.
func errorBody(err error) (int, wire.Error) {
	var (
		ae   *apiError
		fe   *fsm.Error
		mbe  *http.MaxBytesError
		body wire.Error
	)
	var ref *refusal
	if errors.As(err, &ref) {
		body.AllocationID, body.RequestID = ref.allocationID, ref.requestID
	}
	switch {
	case errors.As(err, &mbe):
		body.Code = wire.CodeBodyTooLarge
		body.Message = fmt.Sprintf("request body larger than %d bytes", mbe.Limit)
	case errors.As(err, &ae):
		body.Code, body.Message = ae.code, ae.msg
		body.Retryable = wire.RetryableCode(ae.code)
		if ae.status != 0 {
			return ae.status, body
		}
	case errors.As(err, &fe):
		body.Code, body.Message, body.WhyNot = fe.Code, err.Error(), whyNotToWire(fe.WhyNot)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		body.Code, body.Message = cluster.ErrTimeout.Code, cluster.ErrTimeout.Message+": "+err.Error()
	default:
		body.Code, body.Message = wire.CodeInternal, err.Error()
	}
	body.Retryable = wire.RetryableCode(body.Code)
	status, ok := statusOfCode[body.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	return status, body
}

// writeError answers an error and returns the status written.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) int {
	status, body := errorBody(err)
	if status >= 500 && !body.Retryable {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, r, status, wire.ErrorResponse{Error: body})
	return status
}

// writeJSON answers v as JSON, indented when the query asks ?pretty.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	if pretty(r) {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

// pretty reports whether the request asks for indented JSON (?pretty).
func pretty(r *http.Request) bool {
	return r != nil && r.URL.RawQuery != "" && r.URL.Query().Has("pretty")
}
