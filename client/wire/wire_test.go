package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
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

func TestAllocationOf(t *testing.T) {
	a := &fsm.Allocation{
		ID: "a", Status: fsm.Active, RequestedAt: 1e18, AllocatedAt: 1e18 + 5e9,
		Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}, Timeout: time.Minute},
	}
	w := AllocationOf(a)
	if got := w.AllocatedAt.Sub(w.RequestedAt); got != 5*time.Second || !w.EndedAt.IsZero() {
		t.Fatalf("times %+v", w)
	}
	if back := w.Request.FSM(); back.Timeout != time.Minute || back.Claims[0].Type != fsm.GPU {
		t.Fatalf("request round trip %+v", back)
	}
	b, _ := json.Marshal(w)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if _, ok := m["ended_at"]; ok {
		t.Fatalf("an unset time is sent: %s", b)
	}
	if m["request"].(map[string]any)["timeout"] != "1m0s" {
		t.Fatalf("timeout not a string: %s", b)
	}
}
