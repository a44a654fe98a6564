package fsm

import (
	"bytes"
	"testing"
	"time"
)

// FuzzSnapshotRecord decodes arbitrary bytes as each kind of snapshot
// record. The decoder must never panic, and what it accepts whole must
// encode back to the same bytes: each value has one encoding, which is
// what makes snapshots of equal states byte-identical.
func FuzzSnapshotRecord(f *testing.F) {
	a := &Allocation{
		ID: "a1", RequestID: "r1", Namespace: DefaultNamespace, Status: Preempted, Policy: BestFit, Host: "h1",
		Request: Request{Claims: []Claim{{Type: GPU, Count: 2, Pool: "p", Capabilities: Capabilities{
			Resources: Resources{MemoryGB: 40}, Custom: map[string]string{"m": "a100", "n": "x|y"}}, Amount: Resources{ComputeUnits: 0.5}}},
			Priority: 7, Timeout: time.Minute, LeaseTTL: -1, Pool: "p", Labels: LabelSelector{Required: map[string]string{"z": "1"}, Forbidden: map[string]string{"bad": "*"}}},
		Devices: []Assignment{{DeviceID: "g1", Amount: Resources{MemoryGB: 1, BandwidthGbps: 2}}, {DeviceID: "g2", Claim: 1}},
		Seq:     3, CreateIndex: 4, ModifyIndex: 1 << 40, RequestedAt: -5, AllocatedAt: 6, EndedAt: 7, PreemptedBy: "a9",
		Preempted: []string{"a0"}, Reason: "preempted",
		WhyNot: &WhyNot{Devices: 3, Claims: []ClaimWhyNot{{Type: GPU, Count: 1, Removed: []Reason{{Reason: "busy", Count: 2}}}}, Summary: "no"},
	}
	d := &Device{DeviceSpec: DeviceSpec{ID: "g1", Type: GPU, Name: "n", Pool: "p", Capabilities: Capabilities{Resources: Resources{MemoryGB: 80, StorageGB: 1e9}},
		Labels: map[string]string{"a": "b"}, Shareable: true}, Host: "h1", Status: Draining, Used: Resources{MemoryGB: 1}, Allocations: []string{"a1", "a2"}}
	h := &Host{HostSpec: HostSpec{ID: "h1", Address: "10.0.0.1:1", Labels: map[string]string{"r": "1"}}, Up: true, Since: 9, Devices: []string{"g1"}, InventoryHash: "x"}
	c := &cacheEntry{RequestID: "r", Namespace: "n", Digest: "d", Index: 5, Time: 6, AllocationID: "a1", Err: &Error{Code: "c", Message: "m", WhyNot: a.WhyNot}}
	for kind, put := range []func(*enc){
		func(e *enc) { e.alloc(a) }, func(e *enc) { e.device(d) }, func(e *enc) { e.host(h) }, func(e *enc) { e.cacheEntry(c) },
	} {
		var e enc
		put(&e)
		f.Add(byte(kind), e.b)
	}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		d := dec{b: data, in: newInterner()}
		var e enc
		switch kind % 4 {
		case 0:
			v := d.alloc()
			e.alloc(v)
		case 1:
			v := d.device()
			e.device(v)
		case 2:
			v := d.host()
			e.host(v)
		case 3:
			v := d.cacheEntry()
			e.cacheEntry(&v)
		}
		if d.err != nil || len(d.b) != 0 {
			return
		}
		if !bytes.Equal(e.b, data) {
			t.Fatalf("record %x decodes, but encodes back as %x", data, e.b)
		}
	})
}

// TestSnapshotViewWhileTrimming: a captured snapshot writes the state of
// its moment while, beside it, thousands of records enter the history
// and leave it by retention (the history's list is shared with the view,
// then moved away from it).
func TestSnapshotViewWhileTrimming(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80), gpu("g2", 80)))
	h.must(&SetRetention{Retention: Retention{MaxCount: 200, MaxAge: time.Hour}})
	cycle := func() {
		r := h.must(gpuReq(10))
		h.must(&Release{AllocationID: r.Allocation.ID})
	}
	for range 300 {
		cycle()
	}
	want := h.s.SnapshotBytes()
	v, err := h.s.CaptureSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	done := make(chan error, 1)
	go func() { _, err := v.WriteTo(&got); done <- err }()
	for range 3000 {
		cycle()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("the view wrote another state than the one it captured")
	}
	if h.s.history.shared.Load() {
		t.Fatal("the history still shares its list after thousands of trims")
	}
}
