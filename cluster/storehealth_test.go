package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestStoreFailureNotReady makes a follower's store writes fail (as on a
// full disk): it goes not ready with the reason and refuses local reads,
// the cluster goes on writing, and once writes succeed again the follower
// is ready by itself with every acknowledged write.
func TestStoreFailureNotReady(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	f := followers(leader, nodes...)[0]
	mustApply(t, leader, staticHost("h1", gpu("g1", 40), gpu("g2", 40)))

	fault := filepath.Join(t.TempDir(), "full")
	if err := os.WriteFile(fault, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.stores.health.setFault(fault)
	var acked []string
	for range 5 {
		acked = append(acked, mustApply(t, leader, gpuRequest(1)).Allocation.ID)
		mustApply(t, leader, &fsm.Release{AllocationID: acked[len(acked)-1]})
	}
	poll(t, 10*time.Second, "the follower not ready", func() error {
		if st := f.Status(); st.Ready || !strings.Contains(st.Reason, "log store") {
			return errors.New("still ready: " + st.Reason)
		}
		return nil
	})
	if _, err := f.Read(ctxT(t, 5*time.Second), ReadOptions{}, func(*fsm.State) {}); !errors.Is(err, ErrStorage) || !IsRetryable(err) {
		t.Fatalf("local read on the failing follower: %v, want the retryable ErrStorage", err)
	}
	if err := os.Remove(fault); err != nil {
		t.Fatal(err)
	}
	acked = append(acked, mustApply(t, leader, gpuRequest(1)).Allocation.ID)
	poll(t, 15*time.Second, "the follower ready again", func() error {
		if st := f.Status(); !st.Ready {
			return errors.New("not ready: " + st.Reason)
		}
		return nil
	})
	waitSame(t, nodes...)
	stateOf(t, f, func(s *fsm.State) {
		for _, id := range acked {
			if _, ok := s.Allocation(id); !ok {
				t.Errorf("acknowledged allocation %s missing on the recovered follower", id)
			}
		}
	})
}
