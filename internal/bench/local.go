package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/cluster"
)

// LocalConfig configures a cluster started in this process.
type LocalConfig struct {
	// Servers is the number of Raft voters (1, 3 or 5).
	Servers int
	// Dir holds the nodes' data directories; empty makes a temporary
	// directory, removed by Close.
	Dir string
	// InMemory keeps the Raft log in memory (no disk, no fsync): the cost
	// of storage left out. Default: on disk, as a real server.
	InMemory bool
	// Version is reported by the nodes.
	Version string
	// Logger receives the nodes' logs; nil discards them.
	Logger hclog.Logger
}

// LocalCluster is a cluster of servers in this process, each with its
// HTTP API on a free port of 127.0.0.1.
type LocalCluster struct {
	// Addresses are the nodes' HTTP API base URLs.
	Addresses []string

	nodes   []*cluster.Node
	servers []*http.Server
	tempDir string
	conns   atomic.Int64
}

// Connections counts the HTTP connections the nodes have accepted.
func (lc *LocalCluster) Connections() int64 { return lc.conns.Load() }

// StartLocal starts cfg.Servers servers on 127.0.0.1 and waits until they
// have elected a leader and every node is ready. On error, whatever was
// started is shut down.
func StartLocal(ctx context.Context, cfg LocalConfig) (lc *LocalCluster, err error) {
	if cfg.Servers < 1 || cfg.Servers > 7 {
		return nil, fmt.Errorf("bench: a local cluster has 1 to 7 servers, not %d", cfg.Servers)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	lc = &LocalCluster{}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = lc.Close(cctx)
			lc = nil
		}
	}()
	dir := cfg.Dir
	if dir == "" && !cfg.InMemory {
		if dir, err = os.MkdirTemp("", "dmsc-bench-"); err != nil {
			return lc, err
		}
		lc.tempDir = dir
	}
	var join []string
	for i := 1; i <= cfg.Servers; i++ {
		id := fmt.Sprintf("bench-s%d", i)
		cc := cluster.Config{
			NodeID:            id,
			BindAddr:          "127.0.0.1",
			Server:            true,
			BootstrapExpect:   cfg.Servers,
			Join:              join,
			RetryJoinInterval: 100 * time.Millisecond,
			Version:           cfg.Version,
			Logger:            cfg.Logger.Named(id),
		}
		if !cfg.InMemory {
			cc.DataDir = filepath.Join(dir, id)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return lc, err
		}
		cc.HTTPAddr = ln.Addr().String()
		node, err := cluster.New(cc)
		if err != nil {
			ln.Close()
			return lc, err
		}
		if err := node.Start(ctx); err != nil {
			ln.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = node.Shutdown(sctx)
			cancel()
			return lc, fmt.Errorf("start %s: %w", id, err)
		}
		srv := &http.Server{
			Handler:           api.New(node, api.Options{Version: cfg.Version, Role: "server", Logger: cfg.Logger.Named(id + ".http")}),
			ReadHeaderTimeout: 10 * time.Second,
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					lc.conns.Add(1)
				}
			},
		}
		go func() { _ = srv.Serve(ln) }()
		lc.nodes = append(lc.nodes, node)
		lc.servers = append(lc.servers, srv)
		lc.Addresses = append(lc.Addresses, "http://"+ln.Addr().String())
		if i == 1 {
			join = []string{node.Self().GossipAddr}
		}
	}
	return lc, lc.waitReady(ctx)
}

// leader returns the node that leads, or nil.
func (lc *LocalCluster) leader() *cluster.Node {
	for _, n := range lc.nodes {
		if n.IsLeader() {
			return n
		}
	}
	return nil
}

// waitReady polls until every node is ready and they agree on a leader.
func (lc *LocalCluster) waitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		var leader string
		ready := true
		for _, n := range lc.nodes {
			st := n.Status()
			if !st.Ready || (leader != "" && st.Leader != leader) {
				ready = false
				break
			}
			leader = st.Leader
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: the local cluster did not become ready: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops the HTTP APIs and the nodes and removes the temporary
// directory.
func (lc *LocalCluster) Close(ctx context.Context) error {
	var errs []error
	for _, s := range lc.servers {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range lc.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Shutdown(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if lc.tempDir != "" {
		if err := os.RemoveAll(lc.tempDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
