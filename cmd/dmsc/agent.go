package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"
	sockaddr "github.com/hashicorp/go-sockaddr"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/agentconfig"
	"github.com/dmsc/dmsc/internal/inventory"
)

// shutdownTimeout bounds the graceful part of a shutdown (leadership
// transfer, leaving gossip, draining HTTP requests). The node bounds each
// of its own steps too (cluster.Node.Shutdown), and shutdownWatchdog ends
// the process when the whole shutdown has not finished in
// shutdownHardLimit: an agent always exits within 10 s of SIGTERM.
const (
	shutdownTimeout   = 8 * time.Second
	shutdownHardLimit = 9500 * time.Millisecond
)

// shutdownWatchdog exits the process with status 1 if it has not ended
// shutdownHardLimit after the call.
func shutdownWatchdog() {
	time.AfterFunc(shutdownHardLimit, func() {
		fmt.Fprintf(os.Stderr, "dmsc agent: shutdown did not finish within %v; exiting without it\n", shutdownHardLimit)
		os.Exit(1)
	})
}

// devLeaderTimeout bounds how long the dev agent waits to elect itself.
const devLeaderTimeout = time.Minute

// agentCommand is `dmsc agent`.
type agentCommand struct{ ui cli.Ui }

func (c *agentCommand) Synopsis() string {
	return "Run a dmsc agent: a server, a host, or a dev cluster"
}

func (c *agentCommand) Help() string {
	return strings.TrimSpace(`
Usage: dmsc agent [options]

  Runs a dmsc agent until it receives SIGINT or SIGTERM. SIGHUP reloads
  its TLS certificate files.

  Try dmsc on one machine (a one-node cluster with sample GPUs, storage
  removed on exit):

      dmsc agent -dev

  A server (3 or 5 per cluster; the same command for first start, restart
  and scale-up):

      dmsc agent -server -bootstrap-expect 3 -data-dir /var/lib/dmsc \
                 -join 10.0.0.11 -join 10.0.0.12 -join 10.0.0.13

  A host with devices from a file and/or discovered:

      dmsc agent -host -join 10.0.0.11 -devices /etc/dmsc/devices.json
      dmsc agent -host -join 10.0.0.11 -discover nvidia,cpu,memory

  With TLS, which every cluster outside one machine should have: make a
  CA once, a certificate per server and host, and give each agent the
  CA, its certificate and its key. Raft and the node RPC then take only
  mutual TLS from the cluster's nodes, and the HTTP API serves HTTPS:

      dmsc tls ca create
      dmsc tls cert create -server -node s1 -ip 10.0.0.11
      dmsc agent -server -node s1 ... -tls-ca-file dmsc-agent-ca.pem \
                 -tls-cert-file server-s1.pem -tls-key-file server-s1-key.pem

  Gossip encryption: give every agent the same key, made by 'dmsc
  operator keygen', with -encrypt or DMSC_ENCRYPT (a flag shows in the
  process list; prefer the environment or a config file). A node without
  the key is neither seen nor heard. The keyring is kept in
  <data-dir>/keyring (a host without -data-dir: -keyring-file) and wins
  over -encrypt on restart; rotate keys with 'dmsc operator keyring'.

  Settings come from config files (-config), DMSC_* environment variables
  and flags; a flag beats the environment, which beats a file. Examples are
  in deploy/server.hcl and deploy/host.hcl.

  The agent runs the Go garbage collector with GOGC=400 (less CPU per
  request for a larger heap) unless GOGC is set in its environment;
  GOMEMLIMIT caps the heap as usual.

Options:

`) + "\n" + agentconfig.Usage()
}

func (c *agentCommand) Run(args []string) int {
	cfg, err := agentconfig.Load(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		c.ui.Output(c.Help())
		return 0
	}
	if err != nil {
		c.ui.Error(err.Error())
		c.ui.Error("Run 'dmsc agent -h' for the list of settings.")
		return 1
	}
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Once shutdown begins, a second signal ends the process at once and
	// the watchdog ends it if the shutdown overruns.
	stopSignals := func() {
		stop()
		shutdownWatchdog()
	}
	if err := runAgent(ctx, stopSignals, cfg, os.Stderr); err != nil {
		c.ui.Error("dmsc agent: " + err.Error())
		return 1
	}
	return 0
}

// runAgent runs the agent until ctx ends (a signal), then shuts it down.
// stopSignals is called once shutdown begins, so that a second signal ends
// the process at once.
func runAgent(ctx context.Context, stopSignals func(), cfg *agentconfig.Config, logOut io.Writer) (err error) {
	logger := cfg.Logger(logOut)
	log := logger.Named("agent")
	raiseFileLimit(log)
	profileContention(cfg.EnableDebug)

	tlsStore, err := cfg.LoadTLS()
	if err != nil {
		return err
	}
	stopReload := reloadOnHUP(ctx, tlsStore, log)
	defer stopReload()

	dataDir := cfg.DataDir
	if cfg.Dev && dataDir == "" {
		dir, err := os.MkdirTemp("", "dmsc-dev-")
		if err != nil {
			return fmt.Errorf("dev data directory: %w", err)
		}
		defer func() {
			if rmErr := os.RemoveAll(dir); rmErr != nil {
				log.Error("could not remove the dev data directory", "path", dir, "error", rmErr)
				return
			}
			log.Info("removed the dev data directory", "path", dir)
		}()
		dataDir = dir
	}

	var inv cluster.InventoryFunc
	if cfg.Host {
		inv = hostInventory(cfg, log)
		host, devices, err := inv()
		if err != nil {
			return fmt.Errorf("device inventory: %w", err)
		}
		log.Info("device inventory", "host", host.ID, "devices", describeInventory(devices))
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP API: %w", err)
	}
	defer ln.Close()
	httpAddr := ln.Addr().String()

	cc := cfg.ClusterConfig(dataDir, inv, version, logger)
	cc.HTTPAddr = advertisedHTTPAddr(cfg, httpAddr)
	cc.TLS = tlsStore
	node, err := cluster.New(cc)
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = node.Shutdown(shutdownCtx)
		return fmt.Errorf("start: %w", err)
	}

	auditor, closeAudit, err := openAudit(cfg, dataDir, logger.Named("audit"))
	if err != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = node.Shutdown(shutdownCtx)
		return err
	}
	defer closeAudit()
	var extraReady atomic.Bool
	extraReady.Store(!cfg.Dev)
	srv := newHTTPServer(apiHandler(node, cfg, httpExtras{
		ready: extraReady.Load, loopbackOnly: isLoopbackListener(ln), snapshotDir: dataDir, auditor: auditor,
	}, logger.Named("http"), logger), logger.Named("http"))
	serveErr := make(chan error, 1)
	httpLn := limitListener(ln, cfg, tlsStore != nil, logger.Named("http"))
	go func() { serveErr <- srv.Serve(httpsListener(httpLn, tlsStore, cfg)) }()

	self := node.Self()
	log.Info("agent started", "node", self.ID, "role", roleOf(cfg), "version", version,
		"gossip", self.GossipAddr, "rpc", self.RPCAddr, "raft", self.RaftAddr, "data_dir", dataDir)
	log.Info("HTTP API listening", "address", httpAddr, "https", tlsStore != nil)

	runCtx, cancelRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if cfg.Dev {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := registerSample(runCtx, node, log, httpAddr, cfg.ACLEnabled); err != nil {
				if runCtx.Err() == nil {
					log.Error("could not register the sample inventory", "error", err)
				}
				return
			}
			extraReady.Store(true)
		}()
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", "signal")
	case <-node.Failed():
		// Fail-stop: the replica met a log entry it cannot apply.
		var halt *cluster.HaltError
		if errors.As(node.FailErr(), &halt) && halt.NeedsUpgrade() != nil {
			// A newer dmsc wrote it: resync would fetch it again.
			err = fmt.Errorf("this server stopped: %w; install the dmsc version it names on this server and start it again", node.FailErr())
			log.Error("shutting down", "reason", "replica failed", "error", node.FailErr())
			break
		}
		err = fmt.Errorf("this server stopped: %w; stop it and run `dmsc operator raft resync -data-dir %s -node %s -address <another server>`, "+
			"then start it again, to fetch the state from the other servers (or restore a snapshot)", node.FailErr(), dataDir, cfg.NodeName)
		log.Error("shutting down", "reason", "replica failed", "error", node.FailErr())
	case err = <-serveErr:
		log.Error("HTTP API stopped", "error", err)
		err = fmt.Errorf("HTTP API: %w", err)
	}
	stopSignals()
	cancelRun()
	wg.Wait()

	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if herr := srv.Shutdown(shutdownCtx); herr != nil {
		log.Warn("HTTP API did not drain in time", "error", herr)
	}
	if nerr := node.Shutdown(shutdownCtx); nerr != nil {
		log.Error("node shutdown", "error", nerr)
		if err == nil {
			err = fmt.Errorf("shutdown: %w", nerr)
		}
	}
	if err == nil {
		log.Info("agent stopped")
	}
	return err
}

// advertisedHTTPAddr is the HTTP address other nodes and clients can use:
// the listener's, with an unspecified IP (0.0.0.0, ::) replaced by the
// advertise address, the bind address, or the first private IP.
func advertisedHTTPAddr(cfg *agentconfig.Config, listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return listen
	}
	for _, candidate := range []string{cfg.AdvertiseAddr, cfg.BindAddr} {
		if ip := net.ParseIP(candidate); ip != nil && !ip.IsUnspecified() {
			return net.JoinHostPort(candidate, port)
		}
	}
	if priv, err := sockaddr.GetPrivateIP(); err == nil && priv != "" {
		return net.JoinHostPort(priv, port)
	}
	return listen
}

func roleOf(cfg *agentconfig.Config) string {
	switch {
	case cfg.Dev:
		return "dev"
	case cfg.Server && cfg.Host:
		return "server+host"
	case cfg.Server:
		return "server"
	}
	return "host"
}

// registerSample waits for the dev node to lead, registers the sample
// inventory as several hosts, and tells the user what to try next.
func registerSample(ctx context.Context, node *cluster.Node, log hclog.Logger, httpAddr string, acl bool) error {
	waitCtx, cancel := context.WithTimeout(ctx, devLeaderTimeout)
	defer cancel()
	if err := node.WaitForLeader(waitCtx); err != nil {
		return fmt.Errorf("no leader: %w", err)
	}
	var hosts []string
	var devices []fsm.DeviceSpec
	for _, inv := range inventory.Sample() {
		cmd := inv.Register()
		cmd.RequestID = "dev-sample-" + inv.Host.ID
		res, err := node.Apply(ctx, cmd)
		if err == nil {
			err = res.Err
		}
		if err != nil {
			return fmt.Errorf("register %s: %w", inv.Host.ID, err)
		}
		hosts = append(hosts, inv.Host.ID)
		devices = append(devices, inv.Devices...)
	}
	log.Info("dev cluster ready", "hosts", strings.Join(hosts, ","), "devices", describeInventory(devices))
	if acl {
		log.Info(fmt.Sprintf("ACLs are on: from another terminal, export DMSC_ADDR=http://%s; dmsc acl bootstrap (once: it prints the management token's secret); export DMSC_TOKEN=<secret ID>; then dmsc alloc -type GPU -memory-gb 16", httpAddr))
		return nil
	}
	log.Info(fmt.Sprintf("try it from another terminal: export DMSC_ADDR=http://%s; dmsc alloc -type GPU -memory-gb 16; dmsc stats; dmsc recommend -type GPU", httpAddr))
	log.Info(fmt.Sprintf("web UI: http://%s/ui", httpAddr))
	return nil
}
