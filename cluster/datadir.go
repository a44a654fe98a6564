package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFileName is the file in a data directory that an agent holds an
// exclusive lock on while it runs.
const LockFileName = "agent.lock"

// ErrDataDirInUse is the error of a start on a data directory another
// agent holds. It wraps ErrConfig.
var ErrDataDirInUse = fmt.Errorf("%w: data directory in use", ErrConfig)

// dataDirLock is the lock of a data directory (datadir_unix.go).
type dataDirLock struct {
	f *os.File
}

// lockDataDir takes the data directory's lock without waiting: a second
// agent on a directory in use (whose Raft store, snapshots, keyring and
// audit log this one would share) fails at once, naming the directory and
// the holder's process ID, instead of waiting in bbolt's own lock.
func lockDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := tryLock(f); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "process " + strconv.Itoa(pid)
			}
		}
		f.Close()
		if errors.Is(err, errLockHeld) {
			return nil, fmt.Errorf("%w: %s is used by %s (it holds %s); stop that agent or choose another -data-dir",
				ErrDataDirInUse, dir, holder, path)
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dataDirLock{f: f}, nil
}

// release drops the lock. The file stays: removing it could let a third
// agent lock a new file while a second still holds the old one.
func (l *dataDirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = unlock(l.f)
	l.f.Close()
	l.f = nil
}

var errLockHeld = errors.New("lock held")

// CheckDataDirFree reports ErrDataDirInUse when an agent runs on dir (it
// takes the lock and gives it back at once).
func CheckDataDirFree(dir string) error {
	l, err := lockDataDir(dir)
	if err != nil {
		return err
	}
	l.release()
	return nil
}
