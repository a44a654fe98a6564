package cluster

import (
	"bytes"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestRestoreKeepsIDsAndIndexes saves a snapshot at a high index and
// restores it into a fresh cluster: the index goes on from above the
// saved one, new allocations do not collide with the restored ones, and
// two fresh clusters hand out different first allocation IDs.
func TestRestoreKeepsIDsAndIndexes(t *testing.T) {
	old := newTestCluster(t, nil)
	a := old.servers(1)[0]
	mustApply(t, a, staticHost("h1", gpu("g1", 40), gpu("g2", 40), gpu("g3", 40)))
	firstA := mustApply(t, a, gpuRequest(1))
	for range 40 {
		r := mustApply(t, a, gpuRequest(1))
		mustApply(t, a, &fsm.Release{AllocationID: r.Allocation.ID})
	}
	var backup bytes.Buffer
	saved, err := a.SnapshotSave(ctxT(t, 5*time.Second), &backup)
	if err != nil {
		t.Fatal(err)
	}
	if saved.Index < 80 {
		t.Fatalf("saved at index %d, want a high index", saved.Index)
	}

	fresh := newTestCluster(t, nil)
	b := fresh.servers(1)[0]
	mustApply(t, b, staticHost("h9", gpu("g9", 40)))
	if before := stateOf(t, b, func(*fsm.State) {}); before.Index >= saved.Index {
		t.Fatalf("the fresh cluster is at %d already, above the saved %d", before.Index, saved.Index)
	}
	if err := b.SnapshotRestore(ctxT(t, 10*time.Second), bytes.NewReader(backup.Bytes())); err != nil {
		t.Fatal(err)
	}
	meta := stateOf(t, b, func(*fsm.State) {})
	if meta.Index <= saved.Index || meta.AppliedIndex <= saved.Index {
		t.Fatalf("after the restore the index is %+v, not above the saved %d", meta, saved.Index)
	}
	last := meta.Index
	ids := map[string]bool{}
	for range 60 {
		r := mustApply(t, b, gpuRequest(1))
		if r.Index <= last {
			t.Fatalf("index went from %d to %d", last, r.Index)
		}
		last = r.Index
		if ids[r.Allocation.ID] {
			t.Fatalf("allocation id %s handed out twice", r.Allocation.ID)
		}
		ids[r.Allocation.ID] = true
		mustApply(t, b, &fsm.Release{AllocationID: r.Allocation.ID})
	}

	other := newTestCluster(t, nil)
	c := other.servers(1)[0]
	mustApply(t, c, staticHost("h1", gpu("g1", 40), gpu("g2", 40), gpu("g3", 40)))
	firstC := mustApply(t, c, gpuRequest(1))
	if firstA.Allocation.ID == firstC.Allocation.ID {
		t.Fatalf("two clusters handed out the same first allocation id %s", firstA.Allocation.ID)
	}
}
