package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

func TestConsistentReadOnFollowerSeesEveryAcknowledgedWrite(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	fs := followers(leader, nodes...)
	var devs []fsm.DeviceSpec
	for i := 0; i < 30; i++ {
		devs = append(devs, gpu(fmt.Sprintf("g%02d", i), 40))
	}
	mustApply(t, leader, staticHost("h1", devs...))
	for i := 0; i < 30; i++ {
		res := mustApply(t, leader, gpuRequest(1))
		var found bool
		meta, err := fs[i%2].Read(ctxT(t, 5*time.Second), ReadOptions{Consistent: true}, func(s *fsm.State) {
			_, found = s.Allocation(res.Allocation.ID)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !found || meta.AppliedIndex < res.Index {
			t.Fatalf("write %d at index %d not visible to a consistent read at %+v", i, res.Index, meta)
		}
		if !meta.KnownLeader || meta.Leader != leader.cfg.NodeID {
			t.Fatalf("meta %+v", meta)
		}
	}
}

func TestBlockingQuery(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	f := followers(leader, nodes...)[0]
	reg := mustApply(t, leader, staticHost("h1", gpu("g1", 40)))
	var meta ReadMeta
	poll(t, 5*time.Second, "registration on the follower", func() error {
		meta = stateOf(t, f, func(*fsm.State) {})
		if meta.Index < reg.Index {
			return fmt.Errorf("index %d", meta.Index)
		}
		return nil
	})

	// Nothing changes: the query returns at its wait, with the same index,
	// although ticks keep being applied.
	start := time.Now()
	m2, err := f.Read(ctxT(t, 5*time.Second), ReadOptions{MinIndex: meta.Index, Wait: 1200 * time.Millisecond}, func(*fsm.State) {})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second || m2.Index != meta.Index {
		t.Fatalf("quiet blocking query returned after %v at index %d (was %d)", d, m2.Index, meta.Index)
	}
	if m2.AppliedIndex <= meta.AppliedIndex {
		t.Fatalf("no tick applied while waiting: applied %d, was %d", m2.AppliedIndex, meta.AppliedIndex)
	}

	// A change wakes it promptly.
	type answer struct {
		meta  ReadMeta
		found bool
		err   error
		at    time.Time
	}
	done := make(chan answer, 1)
	var id string
	go func() {
		var a answer
		a.meta, a.err = f.Read(ctxT(t, 10*time.Second), ReadOptions{MinIndex: m2.Index, Wait: 8 * time.Second}, func(s *fsm.State) {
			a.found = len(s.Live()) == 1
		})
		a.at = time.Now()
		done <- a
	}()
	time.Sleep(100 * time.Millisecond)
	res := mustApply(t, leader, gpuRequest(1))
	applied := time.Now()
	id = res.Allocation.ID
	a := <-done
	if a.err != nil || !a.found || a.meta.Index < res.Index {
		t.Fatalf("blocking query woke with %+v, write %s at %d", a, id, res.Index)
	}
	if lag := a.at.Sub(applied); lag > 2*time.Second {
		t.Fatalf("blocking query woke %v after the write", lag)
	}
}

func TestNoLeaderIsRetryableAndBounded(t *testing.T) {
	tc := newTestCluster(t, func(c *Config) { c.NoLeaderHold = 700 * time.Millisecond })
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("g1", 40)))
	survivor := followers(leader, nodes...)[0]
	for _, n := range nodes {
		if n != survivor {
			tc.crash(n.cfg.NodeID)
		}
	}
	start := time.Now()
	_, err := survivor.Apply(ctxT(t, 10*time.Second), gpuRequest(1))
	if !IsRetryable(err) {
		t.Fatalf("write without a quorum: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("write held %v", d)
	}
	_, err = survivor.Read(ctxT(t, 10*time.Second), ReadOptions{Consistent: true}, func(*fsm.State) {})
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("consistent read without a leader: %v", err)
	}
	_, err = survivor.Read(ctxT(t, 10*time.Second), ReadOptions{MaxStale: 50 * time.Millisecond}, func(*fsm.State) {})
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("bounded-staleness read without a leader: %v", err)
	}
	// The local replica still answers a plain read, saying it is stale.
	poll(t, 5*time.Second, "stale metadata", func() error {
		meta, err := survivor.Read(ctxT(t, time.Second), ReadOptions{}, func(*fsm.State) {})
		if err != nil {
			return err
		}
		if meta.KnownLeader || meta.LastContact < 100*time.Millisecond {
			return fmt.Errorf("meta %+v", meta)
		}
		return nil
	})
}

func TestSnapshotSaveAndRestore(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	f := followers(leader, nodes...)[0]
	mustApply(t, leader, staticHost("h1", gpu("g1", 40), gpu("g2", 40)))
	kept := mustApply(t, leader, gpuRequest(1))

	var backup bytes.Buffer
	saved, err := f.SnapshotSave(ctxT(t, 5*time.Second), &backup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.Restore(bytes.NewReader(backup.Bytes())); err != nil {
		t.Fatalf("backup does not restore: %v", err)
	}
	later := mustApply(t, leader, gpuRequest(1))

	if err := f.SnapshotRestore(ctxT(t, 5*time.Second), bytes.NewReader([]byte("{not a snapshot"))); !errors.Is(err, fsm.ErrSnapshot) {
		t.Fatalf("bad snapshot: %v", err)
	}
	if err := f.SnapshotRestore(ctxT(t, 10*time.Second), bytes.NewReader(backup.Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		poll(t, 10*time.Second, "restored state on "+n.cfg.NodeID, func() error {
			var hasKept, hasLater bool
			meta := stateOf(t, n, func(s *fsm.State) {
				_, hasKept = s.Allocation(kept.Allocation.ID)
				_, hasLater = s.Allocation(later.Allocation.ID)
			})
			if !hasKept || hasLater {
				return fmt.Errorf("kept=%v later=%v", hasKept, hasLater)
			}
			if meta.Index <= saved.Index || meta.AppliedIndex <= later.Index {
				return fmt.Errorf("indexes went back: %+v, saved at %+v", meta, saved)
			}
			return nil
		})
	}
	waitSame(t, nodes...)
	mustApply(t, f, gpuRequest(1))
}
