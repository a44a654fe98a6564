package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// memberMarker is a file in the data directory that says this server has
// been part of a cluster: it then never bootstraps one, even with its Raft
// state gone (after a resync), and waits for the leader to add it back.
const memberMarker = "cluster-member"

// wasMember reports whether the data directory holds the member marker.
func (n *Node) wasMember() bool {
	if n.cfg.DataDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(n.cfg.DataDir, memberMarker))
	return err == nil
}

// markMember writes the member marker (once the server has Raft state).
func markMember(dataDir string) error {
	p := filepath.Join(dataDir, memberMarker)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	return os.WriteFile(p, []byte("this server has been part of a dmsc cluster: it never bootstraps a new one\n"), 0o600)
}

// ResyncDataDir moves a stopped server's Raft state (DataDir/raft: the log
// store and the snapshots) aside to DataDir/raft.corrupt-<time> and marks
// the directory as a cluster member's, keeping the node's identity and
// gossip keyring. Started again, the server comes back empty, never
// bootstraps, and is added back by the leader as a non-voter that catches
// up from a snapshot. It returns where the old state went.
func ResyncDataDir(dataDir string, now time.Time) (string, error) {
	lock, err := lockDataDir(dataDir) // the agent holds it while it runs
	if err != nil {
		return "", err
	}
	defer lock.release()
	raftDir := filepath.Join(dataDir, "raft")
	if _, err := os.Stat(raftDir); err != nil {
		return "", fmt.Errorf("no Raft state to move aside: %w", err)
	}
	db := filepath.Join(raftDir, "raft.db")
	if _, err := os.Stat(db); err == nil {
		// The agent holds the bolt file's lock while it runs.
		h, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
		switch {
		case errors.Is(err, bolt.ErrTimeout):
			return "", fmt.Errorf("%w: %s is locked; stop the agent first", ErrDataDirInUse, db)
		case err == nil:
			h.Close()
		}
	}
	aside := filepath.Join(dataDir, "raft.corrupt-"+now.UTC().Format("20060102T150405Z"))
	if err := os.Rename(raftDir, aside); err != nil {
		return "", fmt.Errorf("move the Raft state aside: %w", err)
	}
	if err := markMember(dataDir); err != nil {
		return aside, fmt.Errorf("write the member marker: %w", err)
	}
	return aside, nil
}
