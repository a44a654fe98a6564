package fsm

import "fmt"

// Error is the typed error every refused command returns. Code is stable and
// shared by every layer (the HTTP API answers it verbatim); Message is for
// humans; WhyNot is set when a request was refused for lack of capacity.
//
// Errors made with errf match their sentinel through errors.Is, both by
// Unwrap and by Is, so a cached error rebuilt from a snapshot still matches.
type Error struct {
	Code    string  `json:"code"`
	Message string  `json:"message,omitempty"`
	WhyNot  *WhyNot `json:"why_not,omitempty"`
}

// Sentinel errors. Compare with errors.Is.
var (
	ErrInvalid    = &Error{Code: "invalid_argument", Message: "invalid argument"}
	ErrNotFound   = &Error{Code: "not_found", Message: "not found"}
	ErrConflict   = &Error{Code: "conflict", Message: "conflict"}
	ErrNoCapacity = &Error{Code: "no_capacity", Message: "no device fits the request"}
	// ErrQuotaExceeded: the request would take its namespace past its
	// quota (quota.go); the why-not names the limit.
	ErrQuotaExceeded  = &Error{Code: "quota_exceeded", Message: "the request would pass its namespace's quota"}
	ErrNotActive      = &Error{Code: "not_active", Message: "allocation is not active"}
	ErrUnknownCommand = &Error{Code: "unknown_command", Message: "unknown command type"}
	ErrSnapshot       = &Error{Code: "bad_snapshot", Message: "snapshot cannot be restored"}
	// ErrRequestIDReused refuses a request ID seen before with another
	// command or body: a retry must be the same request.
	ErrRequestIDReused = &Error{Code: "request_id_reused", Message: "request id used before for another request"}
	// ErrInconsistent: the replica's derived state no longer matches what
	// it derives from (State.Fault); the replica must stop.
	ErrInconsistent = &Error{Code: "inconsistent_state", Message: "the replica's state does not hold together"}
)

var sentinels = map[string]*Error{}

func init() {
	for _, e := range []*Error{ErrInvalid, ErrNotFound, ErrConflict, ErrNoCapacity, ErrQuotaExceeded, ErrNotActive, ErrUnknownCommand, ErrSnapshot, ErrRequestIDReused, ErrInconsistent} {
		sentinels[e.Code] = e
	}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message
}

// Unwrap returns the sentinel this error is an instance of.
func (e *Error) Unwrap() error {
	if s, ok := sentinels[e.Code]; ok && s != e {
		return s
	}
	return nil
}

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// errf makes an instance of a sentinel with a specific message.
func errf(sentinel *Error, format string, args ...any) *Error {
	return &Error{Code: sentinel.Code, Message: sentinel.Message + ": " + fmt.Sprintf(format, args...)}
}
