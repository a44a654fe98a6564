package fsm

import (
	"errors"
	"strings"
	"testing"
)

// TestRestoreRefusesUnknownPolicy: a snapshot naming a policy (or type)
// this build does not know is refused, rather than placing by another.
func TestRestoreRefusesUnknownPolicy(t *testing.T) {
	h := newHarness(t)
	h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: WorstFit}})
	h.must(&SetPolicy{Pool: "batch", Config: PolicyConfig{Policy: RoundRobin}})
	// Format 1's JSON is edited; format 2 holds the same configuration
	// JSON (TestSnapshotFormats).
	snap := string(SnapshotV1Bytes(h.s))
	if _, err := Restore(strings.NewReader(snap)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(snap, `"WorstFit"`, `"Spread"`, 1),
		strings.Replace(snap, `"RoundRobin"`, `"Spread"`, 1),
		strings.Replace(snap, `"GPU":{"policy":"WorstFit"}`, `"TPU":{"policy":"WorstFit"}`, 1),
	} {
		if bad == snap {
			t.Fatalf("the snapshot did not change: %s", snap)
		}
		if _, err := Restore(strings.NewReader(bad)); !errors.Is(err, ErrSnapshot) {
			t.Errorf("restore of %s: %v, want ErrSnapshot", bad, err)
		}
	}
}

// TestServerRemoved: removals are recorded with the leader's time, kept in
// the snapshot, and lifted; readmitting a server that is not removed, and
// an empty ID, are refused.
func TestServerRemoved(t *testing.T) {
	h := newHarness(t)
	if len(h.s.SnapshotBytes()) == 0 || strings.Contains(string(h.s.SnapshotBytes()), "removed_servers") {
		t.Fatal("a state without removals writes removed_servers")
	}
	h.must(&SetServerRemoved{ServerID: "s4", Removed: true})
	at := h.now
	h.must(&SetServerRemoved{ServerID: "s4", Removed: true}) // again: no change
	if got := h.s.RemovedServers(); len(got) != 1 || got[0] != (RemovedServer{ID: "s4", Since: at}) || !h.s.ServerRemoved("s4") {
		t.Fatalf("removed %+v", got)
	}
	s2, err := Restore(strings.NewReader(string(h.s.SnapshotBytes())))
	if err != nil || !s2.ServerRemoved("s4") {
		t.Fatalf("restore: %v, removed %v", err, s2.RemovedServers())
	}
	for _, c := range []*SetServerRemoved{{ServerID: "s5"}, {ServerID: "", Removed: true}} {
		before := string(h.s.SnapshotBytes())
		if r := h.apply(c); r.Err == nil {
			t.Fatalf("%+v accepted", c)
		}
		if string(h.s.SnapshotBytes()) != before {
			t.Fatalf("%+v changed the state", c)
		}
	}
	h.must(&SetServerRemoved{ServerID: "s4"})
	if h.s.ServerRemoved("s4") || len(h.s.RemovedServers()) != 0 {
		t.Fatalf("s4 still removed: %v", h.s.RemovedServers())
	}
}
