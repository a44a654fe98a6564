package cluster

import (
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// StoreFaultEnv names a file for tests: while it exists, every write to
// this server's Raft log, stable and snapshot stores fails with ENOSPC, as
// on a full disk. Never set it in production.
const StoreFaultEnv = "DMSC_TEST_STORE_FAULT_FILE"

// storeHealth records the last write error of each store, cleared by the
// next write of that store that succeeds.
type storeHealth struct {
	log hclog.Logger

	mu    sync.Mutex
	fault string // StoreFaultEnv's file, or ""
	fails map[string]storeFailure
}

type storeFailure struct {
	err   error
	since time.Time
}

func newStoreHealth(log hclog.Logger) *storeHealth {
	h := &storeHealth{log: log, fails: map[string]storeFailure{}, fault: os.Getenv(StoreFaultEnv)}
	if h.fault != "" {
		log.Warn("test fault injection is on: store writes fail while the file exists", "file", h.fault)
	}
	return h
}

// setFault sets the test fault's file (tests set it on a running node).
func (h *storeHealth) setFault(path string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fault = path
}

// injected returns the test fault, if on.
func (h *storeHealth) injected() error {
	h.mu.Lock()
	fault := h.fault
	h.mu.Unlock()
	if fault == "" {
		return nil
	}
	if _, err := os.Stat(fault); err == nil {
		return &os.PathError{Op: "write", Path: fault, Err: syscall.ENOSPC}
	}
	return nil
}

// done records the outcome of a write to store and passes err on.
func (h *storeHealth) done(store string, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, failing := h.fails[store]
	switch {
	case err == nil && failing:
		delete(h.fails, store)
		h.log.Info("store writes succeed again", "store", store, "failed_for", time.Since(f.since).Round(time.Millisecond))
	case err != nil && !failing:
		h.fails[store] = storeFailure{err: err, since: time.Now()}
		h.log.Error("store write failed; this server is not ready until a write succeeds", "store", store, "error", err)
	case err != nil:
		f.err = err
		h.fails[store] = f
	}
	return err
}

// failure describes the first failing store, or "" when all are healthy.
func (h *storeHealth) failure() string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, store := range []string{"log", "stable", "snapshot"} {
		if f, ok := h.fails[store]; ok {
			return fmt.Sprintf("the %s store cannot be written since %s: %v", store, f.since.UTC().Format(time.RFC3339), f.err)
		}
	}
	return ""
}

// err is ErrStorage with the failure, or nil.
func (h *storeHealth) err() error {
	if why := h.failure(); why != "" {
		return clusterErr(ErrStorage, why)
	}
	return nil
}

func (h *storeHealth) write(store string, f func() error) error {
	if err := h.injected(); err != nil {
		return h.done(store, err)
	}
	return h.done(store, f())
}

// healthLogStore records the log store's write errors.
type healthLogStore struct {
	raft.LogStore
	h *storeHealth
}

func (s healthLogStore) StoreLog(l *raft.Log) error {
	return s.h.write("log", func() error { return s.LogStore.StoreLog(l) })
}

func (s healthLogStore) StoreLogs(logs []*raft.Log) error {
	return s.h.write("log", func() error { return s.LogStore.StoreLogs(logs) })
}

func (s healthLogStore) DeleteRange(min, max uint64) error {
	return s.h.write("log", func() error { return s.LogStore.DeleteRange(min, max) })
}

// healthStableStore records the stable store's write errors.
type healthStableStore struct {
	raft.StableStore
	h *storeHealth
}

func (s healthStableStore) Set(k, v []byte) error {
	return s.h.write("stable", func() error { return s.StableStore.Set(k, v) })
}

func (s healthStableStore) SetUint64(k []byte, v uint64) error {
	return s.h.write("stable", func() error { return s.StableStore.SetUint64(k, v) })
}

// healthSnapshotStore records failures to write a snapshot.
type healthSnapshotStore struct {
	raft.SnapshotStore
	h *storeHealth
}

func (s healthSnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	if err := s.h.injected(); err != nil {
		return nil, s.h.done("snapshot", err)
	}
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, s.h.done("snapshot", err)
	}
	return &healthSink{SnapshotSink: sink, h: s.h}, nil
}

type healthSink struct {
	raft.SnapshotSink
	h      *storeHealth
	failed bool
}

func (s *healthSink) Write(p []byte) (int, error) {
	if err := s.h.injected(); err != nil {
		s.failed = true
		return 0, s.h.done("snapshot", err)
	}
	n, err := s.SnapshotSink.Write(p)
	if err != nil {
		s.failed = true
		s.h.done("snapshot", err)
	}
	return n, err
}

func (s *healthSink) Close() error {
	err := s.SnapshotSink.Close()
	if err != nil || !s.failed {
		s.h.done("snapshot", err)
	}
	return err
}

var _ io.Writer = (*healthSink)(nil)
