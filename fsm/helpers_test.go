package fsm

import (
	"fmt"
	"testing"
	"time"
)

// t0 is the leader time the tests start from.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// harness applies commands with increasing indexes and times.
type harness struct {
	t   testing.TB
	s   *State
	idx uint64
	now int64
}

func newHarness(t testing.TB) *harness { return &harness{t: t, s: New(), now: t0} }

// apply stamps and applies a command, advancing the clock by one ms.
func (h *harness) apply(c Command) Result {
	h.t.Helper()
	h.idx++
	h.now += int64(time.Millisecond)
	c.meta().Time = h.now
	return h.s.Apply(h.idx, c)
}

// advance moves the clock forward and ticks.
func (h *harness) advance(d time.Duration) {
	h.now += int64(d)
	h.apply(&Tick{})
}

func (h *harness) must(c Command) Result {
	h.t.Helper()
	r := h.apply(c)
	if r.Err != nil {
		h.t.Fatalf("%T: %v", c, r.Err)
	}
	if err := h.s.CheckInvariants(); err != nil {
		h.t.Fatalf("after %T: %v", c, err)
	}
	return r
}

func gpu(id string, memGB float64) DeviceSpec {
	return DeviceSpec{ID: id, Type: GPU, Name: fmt.Sprintf("gpu-%gg", memGB), Capabilities: Capabilities{Resources: Resources{MemoryGB: memGB, ComputeUnits: 100}}}
}

func host(id string, devs ...DeviceSpec) *RegisterHost {
	return &RegisterHost{Host: HostSpec{ID: id}, Devices: devs}
}

func gpuReq(memGB float64) *Allocate {
	return &Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 1, Capabilities: Capabilities{Resources: Resources{MemoryGB: memGB}}}}}}
}

func TestSmoke(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 16)))
	r := h.must(gpuReq(12))
	if got := r.Allocation.Devices[0].DeviceID; got != "g2" {
		t.Fatalf("BestFit picked %s, want g2", got)
	}
	h.must(&Release{AllocationID: r.Allocation.ID})
	snap := h.s.SnapshotBytes()
	s2, err := Restore(bytesReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(s2.SnapshotBytes()); got != string(snap) {
		t.Fatalf("restore changed snapshot:\n%s\n%s", snap, got)
	}
}
