package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/certs"
	"github.com/dmsc/dmsc/internal/hostsim"
)

// simHostsCommand is `dmsc sim-hosts`: many simulated hosts in one process.
type simHostsCommand struct {
	ui cli.Ui
	// in and out carry the control lines and their answers; nil is
	// standard input and output.
	in  io.Reader
	out io.Writer
}

func (c *simHostsCommand) Synopsis() string {
	return "Run many simulated device hosts in one process, for scale tests"
}

func (c *simHostsCommand) Help() string {
	return strings.TrimSpace(`
Usage: dmsc sim-hosts -join <server gossip address> [options]

  Runs -hosts simulated device hosts in this process until SIGINT or
  SIGTERM (or -duration). Each is a real host agent's node: its own
  gossip member, node RPC port and inventory (-gpus-per-host GPUs of the
  bench's models, and a label sim.generation), its own host certificate
  and the ACL token when given; the servers register them as they
  register any host. Hosts are named <prefix>00000, <prefix>00001, ...

  Each host keeps in its gossip membership the servers and -gossip-peers
  of the other hosts, its neighbours in name order: it probes them and
  they probe it, and news of the other hosts it drops unread. The
  servers keep every host. With -gossip-peers 0 every host keeps the
  whole membership, as N machines would, and one process of N hosts
  does N times the gossip work of one agent (two shared cores held
  1,250 hosts so, not 1,500). With neighbours only, a host's news
  reaches the servers through its neighbourhood, so pass each message on
  more often than an agent does; the settings of BENCHMARKS.md ("Hosts
  at scale"):

      dmsc sim-hosts -join 10.0.0.11:4649 -hosts 2000 -start-rate 50 \
          -gossip-retransmit-mult 10 -gossip-no-compression \
          -gossip-no-tcp-pings -reconnect-interval 60s

  Gossip between two hosts of this process stays in the process; the
  servers reach each host on its own UDP and TCP ports. The process runs
  the garbage collector with GOGC=400 unless GOGC is set; with
  -gossip-peers 0 its live heap grows with the square of -hosts (every
  host holds every member), so give it a GOMEMLIMIT the machine has room
  for.

  Churn: -churn-kills hosts per second are killed (as a killed agent
  ends: no gossip leave) and restarted -churn-down later on the same
  ports; -churn-changes running hosts per second get a new inventory.

  Control: each line on standard input is a command, answered by one
  JSON line on standard output:

    kill <n>      kill n running hosts (the first in name order)
    restart <n>   restart n killed hosts
    change <n>    give n running hosts a new inventory
    status        count running and killed hosts, and the gossip
                  packets between them dropped on a full queue

  The first line on standard output, once every host listens, is
  {"event":"started","hosts":N,"seconds":S}; the last, at exit,
  {"event":"stopped",...} with the churn's counts.

Options:

  -hosts=<n>
      How many hosts. Default 100.

  -join=<addr,...>
      Gossip addresses (host:port) of servers. Required.

  -bind=<ip>
      The IP the hosts listen on (each on free ports). Default 127.0.0.1.

  -prefix=<name>
      Start of the host names. Default sim-h.

  -gpus-per-host=<n>
      Default 8.

  -parallel=<n>, -start-rate=<per second>
      Hosts started at once (default 16), and at most this many per
      second (default 0: no limit). Every join is news to every member:
      a pool that grows faster than its members digest it drops gossip.

  -gossip-probe-interval=<duration>, -gossip-suspicion-mult=<n>,
  -retry-interval=<duration>, -reconnect-interval=<duration>,
  -inventory-interval=<duration>
      The hosts' timings, as the agent flags of the same names.

  -gossip-peers=<n>
      How many of the other hosts each host keeps in its gossip
      membership (half before it in name order, half after, wrapping).
      Default 16; 0: all of them.

  -gossip-probe-timeout=<duration>, -gossip-retransmit-mult=<n>,
  -gossip-no-compression, -gossip-no-tcp-pings
      The hosts' gossip load: how long a probe waits for its ack
      (default 500ms), how often each host passes a message on (times
      log10 of the members; default 4), no compression of gossip
      messages (each compressed message costs a 16 KB table), and no TCP
      ping after a failed UDP probe (on a busy process each is a stream
      that waits for a busy host).

  -encrypt=<key>
      Gossip key (or DMSC_ENCRYPT).

  -acl-token=<secret>
      The token every host sends with its inventory (or DMSC_ACL_TOKEN);
      its policy must let it register these hosts (host_register "*").

  -tls-ca-file=<file>, -tls-ca-key-file=<file>
      With both, each host gets a host certificate for its name, signed
      by this CA (made in a temporary directory), as 'dmsc tls cert
      create -host' would make it.

  -churn-kills=<per second>, -churn-down=<duration>,
  -churn-changes=<per second>, -seed=<n>
      Churn, as above. Default none; down 10s; seed 1.

  -duration=<duration>
      Stop after this long. Default 0: until a signal.

  -log-level=<level>
      The hosts' log level on standard error. Default warn.

  -cpuprofile=<file>, -memprofile=<file>
      Write a CPU profile of this process's whole run, and a heap profile
      when it stops; with -memprofile, each SIGUSR1 also writes one, to
      <file>.1, <file>.2, ... (not on Windows).`)
}

// simHostsFlags are the settings of one run.
type simHostsFlags struct {
	cfg      hostsim.Config
	join     string
	encrypt  string
	caFile   string
	caKey    string
	churn    hostsim.Churn
	duration time.Duration
	logLevel string
	memProf  string
	cpuProf  string
}

func (f *simHostsFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.cfg.Hosts, "hosts", 100, "")
	fs.StringVar(&f.join, "join", "", "")
	fs.StringVar(&f.cfg.BindAddr, "bind", "127.0.0.1", "")
	fs.StringVar(&f.cfg.Prefix, "prefix", "sim-h", "")
	fs.IntVar(&f.cfg.GPUsPerHost, "gpus-per-host", 8, "")
	fs.IntVar(&f.cfg.Parallel, "parallel", 16, "")
	fs.Float64Var(&f.cfg.StartRate, "start-rate", 0, "")
	fs.DurationVar(&f.cfg.GossipProbeInterval, "gossip-probe-interval", 0, "")
	fs.IntVar(&f.cfg.GossipSuspicionMult, "gossip-suspicion-mult", 0, "")
	fs.DurationVar(&f.cfg.GossipProbeTimeout, "gossip-probe-timeout", 0, "")
	fs.IntVar(&f.cfg.GossipRetransmitMult, "gossip-retransmit-mult", 0, "")
	fs.BoolVar(&f.cfg.GossipNoCompression, "gossip-no-compression", false, "")
	fs.BoolVar(&f.cfg.GossipNoTCPPings, "gossip-no-tcp-pings", false, "")
	fs.IntVar(&f.cfg.GossipPeers, "gossip-peers", 16, "")
	fs.DurationVar(&f.cfg.RetryJoinInterval, "retry-interval", 0, "")
	fs.DurationVar(&f.cfg.ReconnectInterval, "reconnect-interval", 0, "")
	fs.DurationVar(&f.cfg.InventoryInterval, "inventory-interval", 0, "")
	fs.StringVar(&f.encrypt, "encrypt", os.Getenv("DMSC_ENCRYPT"), "")
	fs.StringVar(&f.cfg.ACLToken, "acl-token", os.Getenv("DMSC_ACL_TOKEN"), "")
	fs.StringVar(&f.caFile, "tls-ca-file", "", "")
	fs.StringVar(&f.caKey, "tls-ca-key-file", "", "")
	fs.Float64Var(&f.churn.KillsPerSecond, "churn-kills", 0, "")
	fs.DurationVar(&f.churn.Down, "churn-down", 10*time.Second, "")
	fs.Float64Var(&f.churn.ChangesPerSecond, "churn-changes", 0, "")
	fs.Uint64Var(&f.churn.Seed, "seed", 1, "")
	fs.DurationVar(&f.duration, "duration", 0, "")
	fs.StringVar(&f.logLevel, "log-level", "warn", "")
	fs.StringVar(&f.memProf, "memprofile", "", "")
	fs.StringVar(&f.cpuProf, "cpuprofile", "", "")
}

func (c *simHostsCommand) Run(args []string) int {
	var f simHostsFlags
	fs := flag.NewFlagSet("sim-hosts", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.ui.Output(c.Help())
			return exitOK
		}
		return c.usage("%v", err)
	}
	if fs.NArg() > 0 {
		return c.usage("unexpected argument %q", fs.Arg(0))
	}
	f.cfg.Join = splitAddresses(f.join)
	switch {
	case len(f.cfg.Join) == 0:
		return c.usage("-join is required")
	case f.cfg.Hosts < 1:
		return c.usage("-hosts must be positive")
	case (f.caFile == "") != (f.caKey == ""):
		return c.usage("give -tls-ca-file and -tls-ca-key-file together")
	case f.churn.KillsPerSecond < 0 || f.churn.ChangesPerSecond < 0:
		return c.usage("churn rates must not be negative")
	}
	if f.encrypt != "" {
		key, err := cluster.DecodeGossipKey(f.encrypt)
		if err != nil {
			return c.usage("-encrypt: %v", err)
		}
		f.cfg.EncryptKey = key
	}
	f.cfg.ACLEnabled = f.cfg.ACLToken != ""
	f.cfg.Version = version
	f.cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "sim", Level: hclog.LevelFromString(f.logLevel), Output: os.Stderr})
	raiseFileLimit(f.cfg.Logger)

	if f.caFile != "" {
		dir, err := os.MkdirTemp("", "dmsc-sim-certs-")
		if err != nil {
			c.ui.Error("Error: " + err.Error())
			return exitError
		}
		defer os.RemoveAll(dir)
		f.cfg.TLS = func(id string) (*certs.Store, error) {
			files, err := certs.WriteCert(dir, f.caFile, f.caKey, certs.Request{Role: certs.Host, Node: id})
			if err != nil {
				return nil, err
			}
			return certs.LoadFor(files, certs.Identity{Role: certs.Host, Node: id})
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	// The hosts' gossip allocates as a server's write path does: a great
	// deal of short-lived garbage over a large live heap (N membership
	// tables).
	tuneGC()
	out := &jsonLines{w: c.out}
	if out.w == nil {
		out.w = os.Stdout
	}
	if f.cpuProf != "" {
		stopProfile, err := startCPUProfile(f.cpuProf)
		if err != nil {
			c.ui.Error("Error: " + err.Error())
			return exitError
		}
		defer stopProfile()
	}
	if f.memProf != "" {
		heapProfilesOnSignal(ctx, f.memProf, f.cfg.Logger)
	}
	began := time.Now()
	sim, err := hostsim.Start(ctx, f.cfg)
	if err != nil {
		c.ui.Error("Error: " + err.Error())
		return exitError
	}
	// The process ends without stopping the hosts one by one: to the
	// servers they die together, as killed agents (stopping thousands of
	// nodes would take longer than the servers take to notice).
	out.write(map[string]any{"event": "started", "hosts": f.cfg.Hosts, "seconds": time.Since(began).Seconds()})

	in := c.in
	if in == nil {
		in = os.Stdin
	}
	go controlLoop(ctx, sim, in, out)
	counts := sim.Churn(ctx, f.churn)
	if f.memProf != "" {
		if err := writeHeapProfile(f.memProf); err != nil {
			c.ui.Error("Error: " + err.Error())
		}
	}
	out.write(map[string]any{"event": "stopped", "kills": counts.Kills, "restarts": counts.Restarts,
		"changes": counts.Changes, "errors": counts.Errors, "gossip_dropped": sim.Dropped()})
	return exitOK
}

func (c *simHostsCommand) usage(format string, args ...any) int {
	c.ui.Error("Error: " + fmt.Sprintf(format, args...))
	c.ui.Error("Run 'dmsc sim-hosts -h' for the options.")
	return exitUsage
}

// jsonLines writes one JSON object per line, from any goroutine.
type jsonLines struct {
	mu sync.Mutex
	w  io.Writer
}

func (j *jsonLines) write(v any) {
	b, _ := json.Marshal(v)
	j.mu.Lock()
	defer j.mu.Unlock()
	fmt.Fprintf(j.w, "%s\n", b)
}

// controlLoop answers the control lines of in until it ends; it may
// outlive ctx while it waits for a line, which ends with the process.
func controlLoop(ctx context.Context, sim *hostsim.Sim, in io.Reader, out *jsonLines) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if ctx.Err() != nil {
			return
		}
		out.write(control(ctx, sim, sc.Text()))
	}
}

// control runs one control line and returns its answer.
func control(ctx context.Context, sim *hostsim.Sim, line string) map[string]any {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return map[string]any{"error": "empty command"}
	}
	ans := map[string]any{"command": fields[0], "at": time.Now().UnixNano()}
	n := 0
	if len(fields) > 1 {
		var err error
		if n, err = strconv.Atoi(fields[1]); err != nil || n < 0 {
			ans["error"] = "the count must be a number"
			return ans
		}
	}
	var (
		pick []string
		do   func(string) error
	)
	switch fields[0] {
	case "kill":
		pick, do = sim.Running(), sim.Kill
	case "restart":
		pick, do = sim.Killed(), func(id string) error { return sim.Restart(ctx, id) }
	case "change":
		pick, do = sim.Running(), sim.Change
	case "status":
		ans["running"], ans["killed"] = len(sim.Running()), len(sim.Killed())
		ans["gossip_dropped"] = sim.Dropped()
		return ans
	default:
		ans["error"] = "unknown command (kill, restart, change, status)"
		return ans
	}
	pick = pick[:min(n, len(pick))]
	var errs []error
	for _, id := range pick {
		errs = append(errs, do(id))
	}
	ans["hosts"] = pick
	if err := errors.Join(errs...); err != nil {
		ans["error"] = err.Error()
	}
	return ans
}
