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
	snap := string(h.s.SnapshotBytes())
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
