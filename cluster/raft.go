package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// raftIOTimeout bounds one Raft RPC on the wire (and a connect).
const raftIOTimeout = 5 * time.Second

// raftStores are the log, stable and snapshot stores of a server.
type raftStores struct {
	logs   raft.LogStore
	stable raft.StableStore
	snaps  raft.SnapshotStore
	bolt   *raftboltdb.BoltStore // nil in memory
	health *storeHealth          // nil in memory
}

func (n *Node) openStores() (*raftStores, error) {
	if n.cfg.DataDir == "" {
		mem := raft.NewInmemStore()
		return &raftStores{logs: mem, stable: mem, snaps: raft.NewInmemSnapshotStore()}, nil
	}
	dir := filepath.Join(n.cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	// Damage found here stops the start with the file and the recovery
	// named (storecheck.go), before bbolt or Raft can panic on it.
	damaged := func(what string, err error) error {
		return fmt.Errorf("%w: %s: %w; %s", ErrStoreDamaged, what, err, storeAdvice(n.cfg.DataDir))
	}
	start := time.Now()
	if err := checkBoltFile(path); err != nil {
		return nil, damaged(path, err)
	}
	var bolt *raftboltdb.BoltStore
	if err := guard(func() (err error) {
		bolt, err = raftboltdb.New(raftboltdb.Options{Path: path})
		return err
	}); err != nil {
		return nil, damaged(path, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, n.cfg.SnapshotRetain, n.log.Named("snapshot"))
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	if err := checkRaftState(bolt, snaps); err != nil {
		bolt.Close()
		var h *HaltError
		if errors.As(err, &h) {
			// The log holds a command of a newer dmsc: not damage, and
			// resync would bring it back.
			h.Version = n.cfg.Version
			return nil, fmt.Errorf("%w: %w", ErrNeedsUpgrade, h)
		}
		return nil, damaged(dir, err)
	}
	n.log.Debug("raft state on disk checked", "path", dir, "took", time.Since(start))
	// Writes are watched for failures (a full disk): storehealth.go.
	h := newStoreHealth(n.log.Named("store"))
	logs, err := raft.NewLogCache(512, healthLogStore{bolt, h})
	if err != nil {
		bolt.Close()
		return nil, err
	}
	return &raftStores{logs: logs, stable: healthStableStore{bolt, h}, snaps: healthSnapshotStore{snaps, h}, bolt: bolt, health: h}, nil
}

func (s *raftStores) close() error {
	if s == nil || s.bolt == nil {
		return nil
	}
	return s.bolt.Close()
}

func (n *Node) raftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(n.cfg.NodeID)
	c.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	c.ElectionTimeout = n.cfg.ElectionTimeout
	c.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	c.CommitTimeout = n.cfg.CommitTimeout
	c.SnapshotThreshold = n.cfg.SnapshotThreshold
	c.SnapshotInterval = n.cfg.SnapshotInterval
	c.TrailingLogs = n.cfg.TrailingLogs
	// Buffered, so that the writes of a batch proposed together
	// (WriteGroup) are all waiting when the leader loop next takes what
	// is there. An apply left in the buffer is still answered: by the
	// leader loop, or with ErrNotLeader by the follower and candidate
	// loops; and shutdown waits for every operation issued to be
	// answered before it stops Raft (raftCall).
	c.BatchApplyCh = true
	// A server removed while it was away keeps running and is added back
	// by the leader when gossip shows it alive again.
	c.ShutdownOnRemove = false
	c.Logger = n.log.Named("raft")
	c.NotifyCh = n.leaderNotify
	return c
}

// raftStream is the Raft transport's stream layer: TCP on the Raft port,
// with TLS when tls is set (tls.go). It remembers the connections it
// accepted so that closing it ends them (the raft library leaves inbound
// connections to the peer).
type raftStream struct {
	ln  net.Listener
	adv net.Addr
	tls *raftTLS // nil: plain TCP

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newRaftStream(ln net.Listener, adv net.Addr, t *raftTLS) *raftStream {
	return &raftStream{ln: ln, adv: adv, tls: t, conns: map[net.Conn]struct{}{}}
}

func (s *raftStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, raw: c, s: s}
	if s.tls != nil {
		tc.Conn = &tlsServerConn{Conn: tls.Server(c, s.tls.accept)}
	}
	s.conns[tc] = struct{}{}
	return tc, nil
}

func (s *raftStream) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.(*trackedConn).raw.Close()
	}
	return s.ln.Close()
}

func (s *raftStream) Addr() net.Addr { return s.adv }

func (s *raftStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.tls != nil {
		return dialTLS(string(address), timeout, s.tls.dial)
	}
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", string(address))
}

// trackedConn is an accepted connection (over TLS or not); raw is its
// TCP connection, closed at once when the stream closes.
type trackedConn struct {
	net.Conn
	raw  net.Conn
	s    *raftStream
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}
