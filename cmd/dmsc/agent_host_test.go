package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/agentconfig"
)

// startAgent runs an agent in-process until the returned stop is called,
// and returns its log.
func startAgent(t *testing.T, args []string) (*logWatcher, func() error) {
	t.Helper()
	cfg, err := agentconfig.Load(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	logs := watchLog(pr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runAgent(ctx, func() {}, cfg, pw) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("agent %v did not stop within 30s", args)
			}
			pw.Close()
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return logs, stop
}

// A host agent with a devices file joins a server agent, and the server
// registers its inventory.
func TestAgentHostRegistersWithServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two agents")
	}
	var mu sync.Mutex
	nodes := map[string]*cluster.Node{}
	defaultHandler := apiHandler
	apiHandler = func(node *cluster.Node, cfg *agentconfig.Config, x httpExtras, logger hclog.Logger, logs api.LogSource) http.Handler {
		mu.Lock()
		nodes[cfg.NodeName] = node
		mu.Unlock()
		return defaultHandler(node, cfg, x, logger, logs)
	}
	t.Cleanup(func() { apiHandler = defaultHandler })

	deadline := time.Now().Add(60 * time.Second)
	serverLog, stopServer := startAgent(t, []string{"-dev", "-http-addr", "127.0.0.1:0", "-log-level", "debug"})
	gossip, ok := serverLog.find(regexp.MustCompile(`agent started: .*gossip=(\S+)`), deadline, nil)
	if !ok {
		t.Fatalf("server gossip address not logged:\n%s", serverLog.text())
	}
	example := filepath.Join("..", "..", "deploy", "devices.example.json")
	hostLog, stopHost := startAgent(t, []string{"-host", "-node", "gpu-node-1", "-join", gossip, "-devices", example,
		"-label", "rack=r7", "-bind", "127.0.0.1", "-raft-port", "0", "-rpc-port", "0", "-gossip-port", "0", "-http-addr", "127.0.0.1:0"})
	if _, ok := hostLog.find(regexp.MustCompile(`(agent started)`), deadline, nil); !ok {
		t.Fatalf("host did not start:\n%s", hostLog.text())
	}

	mu.Lock()
	server := nodes["dev"]
	mu.Unlock()
	for {
		var h fsm.Host
		var found bool
		_, err := server.Read(context.Background(), cluster.ReadOptions{}, func(s *fsm.State) { h, found = s.Host("gpu-node-1") })
		if err == nil && found && h.Up && len(h.Devices) == 6 {
			if h.Labels["rack"] != "r7" || h.Labels["zone"] != "eu-west-1a" {
				t.Fatalf("host labels = %v, want rack from the flag and zone from the file", h.Labels)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host not registered by the deadline (found %t, %+v, err %v)\nserver:\n%s\nhost:\n%s", found, h, err, serverLog.text(), hostLog.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := stopHost(); err != nil {
		t.Fatalf("host stop: %v", err)
	}
	if err := stopServer(); err != nil {
		t.Fatalf("server stop: %v", err)
	}
}
