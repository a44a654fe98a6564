package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestCheckRaftStateHoleBelowSnapshot: after a snapshot installed from the
// leader, Raft leaves the log with a hole below the snapshot's index (it
// compacts only what its trailing logs allow). That is no damage; a hole
// above the newest snapshot is.
func TestCheckRaftStateHoleBelowSnapshot(t *testing.T) {
	cases := []struct {
		name      string
		logs      [][2]uint64 // ranges of stored entries
		snapshot  uint64
		wantError string
	}{
		{name: "hole below the snapshot", logs: [][2]uint64{{61, 92}}, snapshot: 302},
		{name: "hole below, log past the snapshot", logs: [][2]uint64{{61, 92}, {303, 310}}, snapshot: 302},
		{name: "hole above the snapshot", logs: [][2]uint64{{20, 40}, {45, 60}}, snapshot: 30, wantError: "log entry 41 cannot be read"},
		{name: "no snapshot, hole", logs: [][2]uint64{{1, 10}, {12, 20}}, wantError: "log entry 11 cannot be read"},
		{name: "contiguous", logs: [][2]uint64{{1, 50}}, snapshot: 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs := raft.NewInmemStore()
			for _, r := range c.logs {
				for i := r[0]; i <= r[1]; i++ {
					if err := logs.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogNoop}); err != nil {
						t.Fatal(err)
					}
				}
			}
			snaps := raft.NewInmemSnapshotStore()
			if c.snapshot > 0 {
				sink, err := snaps.Create(raft.SnapshotVersionMax, c.snapshot, 1, raft.Configuration{}, 1, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := sink.Write([]byte("{}")); err != nil {
					t.Fatal(err)
				}
				if err := sink.Close(); err != nil {
					t.Fatal(err)
				}
			}
			err := checkRaftState(logs, snaps)
			switch {
			case c.wantError == "" && err != nil:
				t.Fatalf("damage reported: %v", err)
			case c.wantError != "" && (err == nil || !strings.Contains(err.Error(), c.wantError)):
				t.Fatalf("got %v, want an error with %q", err, c.wantError)
			}
		})
	}
}
