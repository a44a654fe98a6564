package fsm

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestHostDrain follows a host drain: new work avoids the host at once,
// running allocations keep their devices until released or until the
// deadline ends them as drained, and ending the drain opens the host
// again. The drain survives a snapshot.
func TestHostDrain(t *testing.T) {
	cases := []struct {
		name     string
		deadline time.Duration
		// wait is how long after the drain the test ticks.
		wait time.Duration
		want AllocStatus
	}{
		{name: "no deadline: the allocation runs on", deadline: 0, wait: time.Hour, want: Active},
		{name: "before the deadline", deadline: time.Minute, wait: 30 * time.Second, want: Active},
		{name: "deadline reached", deadline: time.Minute, wait: time.Minute, want: Drained},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.must(host("h1", gpu("g1", 80), gpu("g2", 80)))
			a := h.must(&Allocate{Request: polGPU(1)}).Allocation
			h.must(&DrainHost{HostID: "h1", Enable: true, Deadline: tc.deadline})

			// New work avoids the host at once, and says why.
			res := h.apply(&Allocate{Request: polGPU(1)})
			if res.Err == nil || res.Allocation == nil || res.Allocation.WhyNot == nil {
				t.Fatalf("allocate on a drained host: %+v", res)
			}
			if why := res.Allocation.WhyNot.Claims[0].Removed; len(why) == 0 || why[0].Reason != "host drained" {
				t.Fatalf("why-not %+v, want host drained", why)
			}
			h.advance(tc.wait)
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			got, _ := h.s.Allocation(a.ID)
			if got.Status != tc.want {
				t.Fatalf("allocation %s after %v, want %s (%s)", got.Status, tc.wait, tc.want, got.Reason)
			}
			hv := h.s.Hosts()[0]
			if hv.Drain == nil || hv.Drain.Ended != (tc.want == Drained) {
				t.Fatalf("host drain %+v", hv.Drain)
			}
			if tc.want == Drained && !strings.Contains(got.Reason, "drained") {
				t.Fatalf("reason %q", got.Reason)
			}

			// The drain survives a snapshot; replicas agree byte for byte.
			var b1 bytes.Buffer
			if err := h.s.Snapshot(&b1); err != nil {
				t.Fatal(err)
			}
			r, err := Restore(bytes.NewReader(b1.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			var b2 bytes.Buffer
			if err := r.Snapshot(&b2); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
				t.Fatal("restored state writes another snapshot")
			}
			if err := r.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			h.s = r

			// Ending the drain opens the host; a queued request is served.
			q := polGPU(1)
			q.Timeout = time.Hour
			if tc.want == Active {
				q.Claims[0].Count = 2
			}
			pending := h.must(&Allocate{Request: q}).Allocation
			if pending.Status != Pending {
				t.Fatalf("request on a drained host is %s", pending.Status)
			}
			if tc.want == Active {
				h.must(&Release{AllocationID: a.ID})
			}
			h.must(&DrainHost{HostID: "h1"})
			if got, _ := h.s.Allocation(pending.ID); got.Status != Active {
				t.Fatalf("queued request after the drain ended: %s", got.Status)
			}
			if h.s.Hosts()[0].Drain != nil {
				t.Fatal("drain kept after it ended")
			}
		})
	}
}

// TestHostDrainRefusals: a drain of an unknown host or with a deadline out
// of range changes nothing.
func TestHostDrainRefusals(t *testing.T) {
	for _, c := range []*DrainHost{
		{HostID: "nope", Enable: true},
		{HostID: "h1", Enable: true, Deadline: -time.Second},
		{HostID: "h1", Enable: true, Deadline: MaxDuration + 1},
	} {
		h := newHarness(t)
		h.must(host("h1", gpu("g1", 80)))
		if res := h.apply(c); res.Err == nil {
			t.Errorf("%+v accepted", c)
		}
		if h.s.Hosts()[0].Drain != nil {
			t.Errorf("%+v drained the host", c)
		}
	}
}
