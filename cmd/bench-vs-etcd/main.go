// Command bench-vs-etcd measures dmsc's write path beside etcd's on the
// same machine in the same run: a 3-member etcd (the peers directory's
// scripts, 256-byte puts from etcdload) and a 3-server dmsc (`dmsc bench
// -spawn 3`, allocate+release), every server a separate process, the
// systems taking turns for several rounds at each client count, so that
// the machine's noise falls on both. It prints every round as it ends, then
// one table of medians and the ratios. `make bench-vs-etcd` runs it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dmsc/dmsc/internal/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags.
type options struct {
	peers    string
	dmsc     string
	rounds   int
	clients  []int
	duration time.Duration
	extras   bool
	profile  string
	raw      string
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench-vs-etcd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var clients string
	fs.StringVar(&o.peers, "peers", "../shared/peers", "directory of the peers' scripts (etcd3.sh); etcd and etcdload are taken from ${TMPDIR:-/tmp}/peers/bin, built by its build.sh")
	fs.StringVar(&o.dmsc, "dmsc", "bin/dmsc", "the dmsc binary")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds (each system once per round and client count)")
	fs.StringVar(&clients, "clients", "64,256", "client counts, comma-separated")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "length of one run")
	fs.BoolVar(&o.extras, "extras", true, "also run dmsc with TLS on, and with 4- and 8-GPU requests on 10k GPUs, at the first client count")
	fs.StringVar(&o.profile, "profile", "", "save the dmsc servers' CPU, block and mutex profiles of the last round into this directory")
	fs.StringVar(&o.raw, "raw", "", "append every run's figures as a JSON line to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, f := range strings.Split(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "bench-vs-etcd: -clients: want positive numbers, got %q\n", clients)
			return 2
		}
		o.clients = append(o.clients, n)
	}
	if o.rounds < 1 || o.duration <= 0 {
		fmt.Fprintln(stderr, "bench-vs-etcd: -rounds and -duration must be positive")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b, err := newRunner(o, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench-vs-etcd:", err)
		return 1
	}
	if err := b.all(ctx); err != nil {
		fmt.Fprintln(stderr, "bench-vs-etcd:", err)
		return 1
	}
	return 0
}

// runResult is one run's figures.
type runResult struct {
	System  string  `json:"system"` // etcd, dmsc, dmsc-batch, dmsc-tls, dmsc-multigpu
	Clients int     `json:"clients"`
	Round   int     `json:"round"`
	Writes  float64 `json:"writes_per_sec"`
	// P50 and P99 are one write request's latency in ms (etcd: a put;
	// dmsc: an allocate).
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	// CPU is the CPU time per write of the servers and the load
	// generator together, in ms; ServersCPU the servers' share.
	CPU        float64 `json:"cpu_ms_per_write"`
	ServersCPU float64 `json:"servers_cpu_ms_per_write"`
	Errors     int64   `json:"errors"`
	Load       string  `json:"load"`
}

// runner runs the rounds and keeps their results.
type runner struct {
	o              options
	out, log       io.Writer
	etcd, etcdload string
	results        []runResult
}

func newRunner(o options, out, log io.Writer) (*runner, error) {
	bin := filepath.Join(tmpDir(), "peers", "bin")
	b := &runner{o: o, out: out, log: log, etcd: filepath.Join(bin, "etcd"), etcdload: filepath.Join(bin, "etcdload")}
	for _, p := range []string{b.etcd, b.etcdload, filepath.Join(o.peers, "etcd3.sh"), o.dmsc} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w (build etcd with the peers' build.sh, dmsc with `make build`)", err)
		}
	}
	return b, nil
}

func tmpDir() string {
	if d := os.Getenv("TMPDIR"); d != "" {
		return d
	}
	return "/tmp"
}

// all runs every round and prints the table.
func (b *runner) all(ctx context.Context) error {
	fmt.Fprintf(b.out, "bench-vs-etcd: %d rounds of %v per system and client count; 3 servers each, separate processes, on this machine (%s)\n",
		b.o.rounds, b.o.duration, machine())
	for round := 1; round <= b.o.rounds; round++ {
		for _, c := range b.o.clients {
			// Alternate which goes first, so that neither always runs on
			// a warmer (or busier) machine.
			systems := []string{"etcd", "dmsc", "dmsc-batch"}
			if (round+c)%2 == 0 {
				systems = []string{"dmsc-batch", "dmsc", "etcd"}
			}
			if b.o.extras && c == b.o.clients[0] {
				systems = append(systems, "dmsc-tls", "dmsc-multigpu")
			}
			for _, sys := range systems {
				r, err := b.once(ctx, sys, c, round)
				if err != nil {
					return fmt.Errorf("round %d, %s, %d clients: %w", round, sys, c, err)
				}
				b.results = append(b.results, r)
				fmt.Fprintf(b.out, "round %d  %-14s %4d clients  %7.0f writes/s  p50 %6.1f ms  p99 %6.1f ms  CPU %.3f ms/write (servers %.3f)  errors %d  load %s\n",
					round, sys, c, r.Writes, r.P50, r.P99, r.CPU, r.ServersCPU, r.Errors, r.Load)
				if b.o.raw != "" {
					if err := appendJSON(b.o.raw, r); err != nil {
						return err
					}
				}
			}
		}
	}
	b.table()
	return nil
}

// once runs one system once.
func (b *runner) once(ctx context.Context, sys string, clients, round int) (runResult, error) {
	r := runResult{System: sys, Clients: clients, Round: round, Load: loadAverage()}
	var err error
	if sys == "etcd" {
		err = b.etcdOnce(ctx, &r)
	} else {
		err = b.dmscOnce(ctx, &r, round == b.o.rounds)
	}
	return r, err
}

// etcdLoad is what etcdload prints.
type etcdLoad struct {
	OpsPerSec float64            `json:"ops_per_sec"`
	LatencyMS map[string]float64 `json:"latency_ms"`
	Errors    int64              `json:"errors"`
}

// etcdOnce starts a fresh 3-member etcd with the peers' script, waits for
// it to take writes, drives it with etcdload and stops it.
func (b *runner) etcdOnce(ctx context.Context, r *runResult) error {
	dir, err := os.MkdirTemp("", "etcd3-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start := exec.CommandContext(ctx, "bash", filepath.Join(b.o.peers, "etcd3.sh"), dir)
	start.Env = append(os.Environ(), "ETCD_BIN="+b.etcd)
	start.Stderr = b.log
	pidsOut, err := start.Output()
	if err != nil {
		return fmt.Errorf("etcd3.sh: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(pidsOut)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	defer stopPIDs(pids)
	eps := "127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792"
	ready := false
	for i := 0; i < 100 && !ready && ctx.Err() == nil; i++ {
		out, _ := exec.CommandContext(ctx, b.etcdload, "-endpoints", "127.0.0.1:23790", "-clients", "1", "-conns", "1", "-duration", "200ms").Output()
		ready = bytes.Contains(out, []byte(`"errors":0`))
		if !ready {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !ready {
		return errors.New("etcd did not take writes in time")
	}
	cpu0 := pidsCPU(pids)
	load := exec.CommandContext(ctx, b.etcdload, "-endpoints", eps, "-clients", strconv.Itoa(r.Clients), "-duration", b.o.duration.String())
	load.Stderr = io.Discard
	out, err := load.Output()
	if err != nil {
		return fmt.Errorf("etcdload: %w", err)
	}
	servers := pidsCPU(pids) - cpu0
	var res etcdLoad
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("etcdload's output: %w: %s", err, out)
	}
	client := load.ProcessState.UserTime() + load.ProcessState.SystemTime()
	r.Writes, r.P50, r.P99, r.Errors = res.OpsPerSec, res.LatencyMS["p50"], res.LatencyMS["p99"], res.Errors
	if writes := res.OpsPerSec * b.o.duration.Seconds(); writes > 0 {
		r.CPU = msPer(servers+client, writes)
		r.ServersCPU = msPer(servers, writes)
	}
	return nil
}

// dmscResult is the part of `dmsc bench -json` read here.
type dmscResult struct {
	WritesPerSec         float64 `json:"writes_per_sec"`
	Failed               int64   `json:"failed"`
	CPUMSPerWrite        float64 `json:"cpu_ms_per_write"`
	ServersCPUMSPerWrite float64 `json:"servers_cpu_ms_per_write"`
	ByRequest            map[string]struct {
		LatencyMS struct {
			P50 float64 `json:"p50"`
			P99 float64 `json:"p99"`
		} `json:"latency_ms"`
	} `json:"by_request"`
}

// dmscOnce runs `dmsc bench -spawn 3` once.
func (b *runner) dmscOnce(ctx context.Context, r *runResult, last bool) error {
	// Eight GPUs a client at least, so that no request finds the GPUs it
	// asks for all taken.
	args := []string{"bench", "-spawn", "3", "-clients", strconv.Itoa(r.Clients), "-duration", b.o.duration.String(),
		"-hosts", strconv.Itoa(max(64, r.Clients)), "-mix", "alloc=100", "-json"}
	switch r.System {
	case "dmsc-batch":
		// The SDK gathers the writes its goroutines send at once into
		// POST /v1/batch exchanges, as etcd's clients share gRPC
		// connections.
		args = append(args, "-batch")
	case "dmsc-tls":
		args = append(args, "-spawn-tls")
	case "dmsc-multigpu":
		// 10,000 GPUs; a third of the requests take one GPU, a third four
		// and a third eight, each of one host.
		args = append(args, "-hosts", "1250", "-gpus-per-host", "8", "-mix", "alloc=1,alloc4=1,alloc8=1")
	}
	if last && b.o.profile != "" {
		args = append(args, "-profile", filepath.Join(b.o.profile, fmt.Sprintf("%s-%d", r.System, r.Clients)))
	}
	cmd := exec.CommandContext(ctx, b.o.dmsc, args...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("dmsc bench: %w\n%s", err, tail(errOut.String(), 20))
	}
	var res dmscResult
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("dmsc bench's output: %w: %s", err, out)
	}
	alloc := res.ByRequest["allocate"].LatencyMS
	r.Writes, r.P50, r.P99, r.Errors = res.WritesPerSec, alloc.P50, alloc.P99, res.Failed
	r.CPU, r.ServersCPU = res.CPUMSPerWrite, res.ServersCPUMSPerWrite
	return nil
}

// table prints the medians of every system and client count, and dmsc's
// ratios to etcd.
func (b *runner) table() {
	type key struct {
		sys     string
		clients int
	}
	med := map[key]runResult{}
	var keys []key
	for _, r := range b.results {
		k := key{r.System, r.Clients}
		if _, ok := med[k]; ok {
			continue
		}
		keys = append(keys, k)
		var rs []runResult
		for _, x := range b.results {
			if x.System == r.System && x.Clients == r.Clients {
				rs = append(rs, x)
			}
		}
		med[k] = runResult{System: r.System, Clients: r.Clients,
			Writes:     median(rs, func(x runResult) float64 { return x.Writes }),
			P50:        median(rs, func(x runResult) float64 { return x.P50 }),
			P99:        median(rs, func(x runResult) float64 { return x.P99 }),
			CPU:        median(rs, func(x runResult) float64 { return x.CPU }),
			ServersCPU: median(rs, func(x runResult) float64 { return x.ServersCPU })}
	}
	slices.SortStableFunc(keys, func(a, b key) int { return a.clients - b.clients })
	fmt.Fprintf(b.out, "\nmedians of %d rounds (writes: etcd puts; dmsc allocate and release requests, each committed and fsynced on a quorum; one Raft entry each, but one for all the writes of a batch in dmsc-batch; latency of one put or allocate request)\n\n", b.o.rounds)
	fmt.Fprintf(b.out, "| system | clients | writes/s | p50 ms | p99 ms | CPU ms/write (servers) | writes vs etcd | p99 vs etcd |\n")
	fmt.Fprintf(b.out, "|---|---|---|---|---|---|---|---|\n")
	for _, k := range keys {
		m := med[k]
		vs, p99 := "", ""
		if e, ok := med[key{"etcd", k.clients}]; ok && k.sys != "etcd" && e.Writes > 0 && e.P99 > 0 {
			vs, p99 = fmt.Sprintf("%.2f×", m.Writes/e.Writes), fmt.Sprintf("%.2f×", m.P99/e.P99)
		}
		fmt.Fprintf(b.out, "| %s | %d | %.0f | %.1f | %.1f | %.3f (%.3f) | %s | %s |\n",
			k.sys, k.clients, m.Writes, m.P50, m.P99, m.CPU, m.ServersCPU, vs, p99)
	}
}

func median(rs []runResult, f func(runResult) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	if len(xs) == 0 {
		return 0
	}
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func msPer(d time.Duration, n float64) float64 {
	return float64(d.Microseconds()) / 1000 / n
}

// pidsCPU is the user and system CPU time of the processes so far (0
// where /proc does not say).
func pidsCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		sum += bench.ProcessCPUOf(pid)
	}
	return sum
}

// stopPIDs ends the processes and waits until they are gone.
func stopPIDs(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func appendJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadAverage is the machine's 1-minute load average before a run.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// machine is the CPU count and model.
func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), model)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
