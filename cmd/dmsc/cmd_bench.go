package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/bench"
)

// benchCommand is `dmsc bench`: a load generator.
type benchCommand struct {
	apiCommand
	// progress receives the progress lines; nil is standard error.
	progress io.Writer
}

func benchCommands(ui cli.Ui) map[string]cli.CommandFactory {
	return map[string]cli.CommandFactory{
		"bench":     func() (cli.Command, error) { return &benchCommand{apiCommand: apiCommand{ui: ui}}, nil },
		"sim-hosts": func() (cli.Command, error) { return &simHostsCommand{ui: ui}, nil },
	}
}

func (c *benchCommand) Synopsis() string {
	return "Measure a cluster's throughput and latency under load"
}

func (c *benchCommand) Help() string {
	return helpText(`
Usage: dmsc bench [options]

  Registers a synthetic inventory of GPU hosts (hosts named bench-h0000,
  ...; mixed models of 16, 40 and 80 GB), then runs -clients concurrent
  clients for -duration, each with one operation in flight, drawing
  operations from -mix:

    alloc  allocate one GPU, then release it (one operation)
    alloc4, alloc8
           the same with 4 or 8 GPUs of one host
    read   read an allocation the client holds, or a host's device list
    renew  renew the lease of an allocation the client holds

  A progress line is printed every second on stderr. At the end it prints
  throughput, latency percentiles of successful operations and errors by
  code; with -json one JSON object (ops_per_sec, latency_ms {p50, p95,
  p99, max, mean}, writes_per_sec, errors, clients, duration_s, nodes,
  by_op, by_request, ...). by_request times each HTTP request on its own
  (allocate, release, read, renew); writes_per_sec counts the successful
  writes (allocate, release, renew: one Raft entry each; with -batch
  the writes of one batch share an entry). It exits 1 when no operation
  succeeded.

  Against a running cluster it removes the hosts it registered at the
  end. With -spawn N it starts N agents of this binary as separate
  processes on 127.0.0.1 (each with a temporary data directory, the Raft
  log on disk with fsync, as in production), waits for a leader and stops
  them at the end; it then also reports the CPU the agents spent per
  write. With -local N it starts N servers in this process instead (data
  in a temporary directory); the process then runs the garbage collector
  as the agent does (GOGC=400 unless GOGC is set). Headline figures come
  from -spawn: with -local the servers and the clients share one process.
  Against servers on this machine the clients' connections come from
  127.0.0.1, 127.0.0.2, ..., 32 clients to an address, as from several
  machines, each within an agent's per-address limits.

      dmsc bench -spawn 3 -clients 64 -duration 30s
      dmsc bench -spawn 3 -mix alloc=50,alloc4=25,alloc8=25 -hosts 1250
      dmsc bench -address 10.0.0.11,10.0.0.12,10.0.0.13 -mix alloc=50,read=50`, `
-spawn=<n>
      Start a cluster of n agent processes instead of using -address.
      Default 0.

  -spawn-tls
      The spawned agents run with TLS on every port (certificates made
      for the run) and gossip encryption; the clients present a client
      certificate.

  -profile=<dir>
      With -spawn: save each agent's CPU profile over the middle half of
      the run, and its block, mutex and allocation profiles, into dir
      (<agent>-cpu.pprof, -block.pprof, -mutex.pprof, -allocs.pprof).

  -local=<n>
      Start a cluster of n servers in this process instead of using
      -address. Default 0: use -address.

  -local-storage=<disk|memory>
      Where the local servers keep the Raft log: disk (a real server's
      bolt store with fsync) or memory. Default disk.

  -clients=<n>
      Concurrent clients. Default 16.

  -duration=<duration>
      How long clients start new operations. Default 10s.

  -hosts=<n>, -gpus-per-host=<n>
      The synthetic inventory. Default 64 hosts of 8 GPUs.

  -mix=<op=weight,...>
      The operation mix. Default alloc=80,read=15,renew=5.

  -batch
      The clients' writes travel in batches (the SDK's BatchWrites: the
      allocates, releases and renewals sent at once share POST /v1/batch
      exchanges); latency is still each write's own.

  -retries=<n>
      Retries of a failed request by the client (same request ID).
      Default 2.

  -quick
      A run of a few seconds on a small inventory, for CI: 3s, 8 clients,
      8 hosts of 4 GPUs, unless those flags are given.

  -seed=<n>
      Seed of the clients' draws. Default 1.

  -event-streams=<n>
      Keep n event streams (every topic, every namespace) open and
      reading through the run, to measure what subscribers cost the
      writes. Default 0.

  -event-topic=<topic>
      The streams' topic (repeat for more; Topic:key for one key).
      Default: every topic.

  -event-raw
      The streams ask for gzip and count the bytes without inflating or
      decoding them, so that the figures are the servers' cost more than
      the readers' (with -local only: plain HTTP, no token).

  -cpuprofile=<file>
      Write a CPU profile of this process for the measured run (with
      -local it covers the servers too).`)
}

func (c *benchCommand) Run(args []string) int {
	fs := c.flags("bench")
	var (
		local        int
		spawn        int
		spawnTLS     bool
		profileDir   string
		storage      string
		clients      int
		duration     time.Duration
		hosts        int
		gpusPerHost  int
		mixFlag      string
		retries      int
		batch        bool
		quick        bool
		seed         uint64
		cpuProfile   string
		streams      int
		addressGiven bool
	)
	fs.IntVar(&local, "local", 0, "")
	fs.IntVar(&spawn, "spawn", 0, "")
	fs.BoolVar(&spawnTLS, "spawn-tls", false, "")
	fs.StringVar(&profileDir, "profile", "", "")
	fs.StringVar(&storage, "local-storage", "disk", "")
	fs.IntVar(&clients, "clients", 16, "")
	fs.DurationVar(&duration, "duration", 10*time.Second, "")
	fs.IntVar(&hosts, "hosts", 64, "")
	fs.IntVar(&gpusPerHost, "gpus-per-host", 8, "")
	fs.StringVar(&mixFlag, "mix", bench.DefaultMix.String(), "")
	fs.IntVar(&retries, "retries", 2, "")
	fs.BoolVar(&batch, "batch", false, "")
	fs.BoolVar(&quick, "quick", false, "")
	fs.Uint64Var(&seed, "seed", 1, "")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "")
	fs.IntVar(&streams, "event-streams", 0, "")
	var streamTopics multiFlag
	fs.Var(&streamTopics, "event-topic", "")
	var streamRaw bool
	fs.BoolVar(&streamRaw, "event-raw", false, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	addressGiven = set["address"]
	if quick {
		if !set["duration"] {
			duration = 3 * time.Second
		}
		if !set["clients"] {
			clients = 8
		}
		if !set["hosts"] {
			hosts = 8
		}
		if !set["gpus-per-host"] {
			gpusPerHost = 4
		}
	}
	mix, err := bench.ParseMix(mixFlag)
	switch {
	case err != nil:
		return c.usageError("bench", "%v", err)
	case local < 0 || local > 7:
		return c.usageError("bench", "-local takes 1 to 7 servers")
	case spawn < 0 || spawn > 7:
		return c.usageError("bench", "-spawn takes 1 to 7 servers")
	case boolCount(local > 0, spawn > 0, addressGiven) > 1:
		return c.usageError("bench", "give one of -local, -spawn and -address")
	case (spawnTLS || profileDir != "") && spawn == 0:
		return c.usageError("bench", "-spawn-tls and -profile need -spawn")
	case storage != "disk" && storage != "memory":
		return c.usageError("bench", "-local-storage is disk or memory, not %q", storage)
	case clients < 1 || duration <= 0 || hosts < 1 || gpusPerHost < 1:
		return c.usageError("bench", "-clients, -duration, -hosts and -gpus-per-host must be positive")
	case retries < 0 || streams < 0:
		return c.usageError("bench", "-retries and -event-streams must not be negative")
	case streamRaw && local == 0 && (spawn == 0 || spawnTLS):
		return c.usageError("bench", "-event-raw needs -local or -spawn without TLS")
	}

	progress := c.progress
	if progress == nil {
		progress = os.Stderr
	}
	ctx, cancel := commandContext()
	defer cancel()
	addrs := splitAddresses(c.address)
	nodes := len(addrs)
	var connections func() int64
	var serversCPU func() time.Duration
	var spawned *spawnedCluster
	clientTLS := tlsOrNil(c.tls)
	if spawn > 0 {
		if profileDir != "" {
			if err := os.MkdirAll(profileDir, 0o755); err != nil {
				c.ui.Error("Error: " + err.Error())
				return exitError
			}
		}
		spawned, err = spawnCluster(ctx, spawnConfig{Servers: spawn, TLS: spawnTLS, Debug: profileDir != "", Progress: progress})
		if err != nil {
			c.ui.Error("Error: " + err.Error())
			return exitError
		}
		defer c.closeAtEnd("stopping the spawned agents", spawned.Close)
		addrs, nodes, serversCPU = spawned.Addresses(), spawn, spawned.CPU
		clientTLS = tlsOrNil(spawned.tls)
		fmt.Fprintf(progress, "bench: %d agents up: %s\n", spawn, strings.Join(addrs, ", "))
	}
	if local > 0 {
		// The servers run in this process: tune it as an agent.
		tuneGC()
		startCtx, startCancel := context.WithTimeout(ctx, time.Minute)
		lc, err := cluster.StartLocal(startCtx, cluster.LocalConfig{
			Servers: local, InMemory: storage == "memory", Version: version, HTTP: api.NodeHandler(api.Options{Version: version, Role: "server"}),
		})
		startCancel()
		if err != nil {
			c.ui.Error("Error: local cluster: " + err.Error())
			return exitError
		}
		defer c.closeAtEnd("stopping the local cluster", lc.Close)
		addrs, nodes, connections = lc.Addresses(), local, lc.Connections
		fmt.Fprintf(progress, "bench: started %d local servers: %s\n", local, strings.Join(addrs, ", "))
	}
	mr := retries
	if mr == 0 {
		mr = -1 // the client's "send once"
	}
	hc, err := benchHTTPClient(clients, spawn > 0 || local > 0, clientTLS)
	if err != nil {
		c.ui.Error("Error: " + err.Error())
		return exitUsage
	}
	cl, err := client.New(client.Config{Addresses: addrs, Token: c.token, HTTPClient: hc, MaxRetries: mr, Timeout: 10 * time.Second, BatchWrites: batch})
	if err != nil {
		c.ui.Error(err.Error())
		return exitUsage
	}
	if nodes == 0 {
		nodes = len(cl.Addresses())
	}

	inv := bench.Inventory(hosts, gpusPerHost)
	fmt.Fprintf(progress, "bench: registering %d hosts with %d GPUs each\n", hosts, gpusPerHost)
	if err := bench.Register(ctx, cl, inv); err != nil {
		return c.fail(err)
	}
	if local == 0 && spawn == 0 {
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
			defer ccancel()
			if err := bench.Unregister(cctx, cl, inv); err != nil {
				c.ui.Error("Error: removing the bench hosts: " + err.Error())
			}
		}()
	}

	stopProfile := func() {}
	if cpuProfile != "" {
		if stopProfile, err = startCPUProfile(cpuProfile); err != nil {
			c.ui.Error("Error: " + err.Error())
			return exitError
		}
	}
	profiled := make(chan error, 1)
	if profileDir != "" {
		go func() {
			// The middle half of the run: past the start, clear of the end.
			select {
			case <-time.After(duration / 4):
				profiled <- spawned.Profile(ctx, profileDir, duration/2)
			case <-ctx.Done():
				profiled <- ctx.Err()
			}
		}()
	} else {
		profiled <- nil
	}
	fmt.Fprintf(progress, "bench: %d clients for %v, mix %s\n", clients, duration, mix)
	res, err := bench.Run(ctx, cl, bench.Config{
		Clients: clients, Duration: duration, Mix: mix, Hosts: inv, Nodes: nodes, Seed: seed, Progress: progress,
		Connections: connections, ServersCPU: serversCPU, EventStreams: streams, EventTopics: streamTopics, EventRaw: streamRaw,
	})
	stopProfile()
	if perr := <-profiled; perr != nil {
		c.ui.Error("Error: profiling the agents: " + perr.Error())
	} else if profileDir != "" {
		fmt.Fprintf(progress, "bench: profiles of the agents in %s\n", profileDir)
	}
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(res)
	} else {
		c.output(res.Format())
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		c.ui.Error("Interrupted: the figures cover the time until then.")
	}
	if res.Ops == 0 {
		c.ui.Error("Error: no operation succeeded.")
		return exitError
	}
	return exitOK
}

// closeAtEnd runs close with 30 s to go, reporting a failure as what.
func (c *benchCommand) closeAtEnd(what string, close func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := close(ctx); err != nil {
		c.ui.Error("Error: " + what + ": " + err.Error())
	}
}

// boolCount is how many of bs are true.
func boolCount(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// splitAddresses splits a comma-separated -address.
func splitAddresses(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
