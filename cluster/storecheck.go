package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/dmsc/dmsc/fsm"
)

// ErrStoreDamaged: the Raft state on disk (the log store or a snapshot)
// is damaged. The server refuses to start; the message names the file and
// the recovery.
var ErrStoreDamaged = errors.New("raft state on disk is damaged")

// storeAdvice is the recovery, for the messages of ErrStoreDamaged.
func storeAdvice(dataDir string) string {
	return "this server cannot start from it: run `dmsc operator raft resync -data-dir " + dataDir +
		" -node ID -address <another server>` to move it aside and fetch the state from the other servers, or restore a snapshot (see \"When things break\" in deploy/README.md)"
}

// guard runs fn and turns a panic or a memory fault in it into an error:
// bbolt panics (and faults on pages past the end of a truncated file) on
// some damaged files, and a check at startup must end in a clear error,
// not a crash loop.
func guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return fn()
}

// checkBoltFile reads every page of a bolt file reachable from its root
// and runs one small write, with panics turned into errors, so that a
// damaged file is found before Raft uses it.
func checkBoltFile(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return guard(func() error {
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer db.Close()
		err = db.View(func(tx *bolt.Tx) error {
			if size := tx.Size(); size > st.Size() {
				return fmt.Errorf("the file is %d bytes but its metadata says %d: it was truncated", st.Size(), size)
			}
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				return b.ForEach(func(k, v []byte) error { return nil })
			})
		})
		if err != nil {
			return err
		}
		// A write frees and allocates pages: a damaged freelist shows here.
		return db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("dmsc-check"))
			if err != nil {
				return err
			}
			return b.Put([]byte("checked"), []byte(time.Now().UTC().Format(time.RFC3339)))
		})
	})
}

// checkRaftState reads every entry of the log (each command's checksum)
// and the newest snapshot, and makes sure that the log goes on from the
// newest snapshot that can be read, so that Raft neither applies damage
// nor panics on a log it cannot find.
func checkRaftState(logs raft.LogStore, snaps raft.SnapshotStore) error {
	var first, last uint64
	err := guard(func() error {
		var err error
		if first, err = logs.FirstIndex(); err != nil {
			return err
		}
		last, err = logs.LastIndex()
		return err
	})
	if err != nil {
		return fmt.Errorf("log store: %w", err)
	}
	// The snapshots first: log entries at or below the newest readable one
	// are not needed, and after a snapshot is installed from the leader
	// Raft leaves the log with a hole below it (it compacts only up to
	// its trailing logs), which is no damage.
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	var usable uint64
	var bad []string
	for _, m := range metas {
		err := guard(func() error {
			_, rc, err := snaps.Open(m.ID) // checks the snapshot's CRC
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(io.Discard, rc)
			return err
		})
		if err == nil {
			usable = m.Index
			break
		}
		bad = append(bad, fmt.Sprintf("snapshot %s (index %d): %v", m.ID, m.Index, err))
	}
	if len(metas) > 0 && last > 0 && last > usable && first > usable+1 {
		return fmt.Errorf("%v; the log starts at %d and cannot replace it (the newest readable snapshot is at %d)", bad, first, usable)
	}
	if len(metas) > 0 && usable == 0 && last == 0 {
		return fmt.Errorf("%v; no snapshot can be read and the log is empty", bad)
	}
	for i := first; i <= last && last > 0; i++ {
		var l raft.Log
		err := guard(func() error { return logs.GetLog(i, &l) })
		switch {
		case errors.Is(err, raft.ErrLogNotFound) && i <= usable:
			continue // below the snapshot: not needed
		case err != nil:
			return fmt.Errorf("log entry %d cannot be read: %w", i, err)
		case l.Index != i:
			return fmt.Errorf("log entry %d is stored as index %d", i, l.Index)
		case l.Type == raft.LogCommand:
			if _, err := DecodeLogEntry(l.Data); err != nil {
				var nu *fsm.NeedsUpgradeError
				if errors.As(err, &nu) {
					// Not damage: a newer dmsc wrote it (openStores).
					return &HaltError{Index: i, Err: err}
				}
				return fmt.Errorf("log entry %d is corrupt: %w", i, err)
			}
		}
	}
	return nil
}
