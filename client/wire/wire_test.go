package wire

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{`"30s"`, 30 * time.Second, true},
		{`"1h30m"`, 90 * time.Minute, true},
		{`""`, 0, true},
		{`null`, 0, true},
		{`30`, 0, false},
		{`"30"`, 0, false},
		{`"soon"`, 0, false},
		{`{}`, 0, false},
	} {
		var d Duration
		err := json.Unmarshal([]byte(c.in), &d)
		if (err == nil) != c.ok || c.ok && d.Std() != c.want {
			t.Errorf("%s: %v, %v; want %v, ok %v", c.in, d.Std(), err, c.want, c.ok)
		}
	}
	b, err := json.Marshal(Retention{MaxCount: 1, MaxAge: Duration(36 * time.Hour)})
	if err != nil || string(b) != `{"max_count":1,"max_age":"36h0m0s"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
}

// TestRetryableCodes pins the retryable codes and checks that a code that
// says nothing was done is retryable too.
func TestRetryableCodes(t *testing.T) {
	all := []string{CodeBadRequest, CodeInvalid, CodeBadSnapshot, CodeNotFound, CodeMethodNotAllowed, CodeConflict,
		CodeNotActive, CodeNoCapacity, CodeRequestIDReused, CodeBodyTooLarge, CodeOverloaded, CodeNoLeader, CodeNotLeader, CodeShutdown,
		CodeNotServer, CodeTimeout, CodeInternal, CodeForbidden, CodeReplicaFailed, CodeStorageFailed, "lease_lost", ""}
	retryable := map[string]bool{CodeOverloaded: true, CodeNoLeader: true, CodeNotLeader: true, CodeShutdown: true, CodeNotServer: true, CodeTimeout: true, CodeReplicaFailed: true, CodeStorageFailed: true}
	notApplied := map[string]bool{CodeOverloaded: true, CodeNoLeader: true, CodeNotServer: true, CodeReplicaFailed: true}
	for _, code := range all {
		if got := RetryableCode(code); got != retryable[code] {
			t.Errorf("RetryableCode(%q) = %v, want %v", code, got, retryable[code])
		}
		if got := NotAppliedCode(code); got != notApplied[code] {
			t.Errorf("NotAppliedCode(%q) = %v, want %v", code, got, notApplied[code])
		}
		if NotAppliedCode(code) && !RetryableCode(code) {
			t.Errorf("%q says nothing was done but is not retryable", code)
		}
	}
}
