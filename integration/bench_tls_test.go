package integration

// What TLS costs in throughput: `dmsc bench` against three real agent
// processes with TLS and gossip encryption on, and against three without,
// alternately, on fresh clusters. Opt-in (minutes long):
//
//	DMSC_BENCH_TLS=1 go test ./integration -run '^TestBenchTLSCost$' -v -timeout 30m
//
// DMSC_BENCH_RUNS (default 3) pairs of runs of DMSC_BENCH_DURATION
// (default 30s) with DMSC_BENCH_CLIENTS (default 64) clients each;
// DMSC_BENCH_PROFILE=DIR also saves a CPU profile of the leader (20 s in
// the middle of each run) into DIR. BENCHMARKS.md quotes the result.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dmsc/dmsc/internal/bench"
	"github.com/dmsc/dmsc/internal/certs"
)

// benchResult is the part of `dmsc bench -json` this test reads.
type benchResult struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	Ops       int64   `json:"ops"`
	Failed    int64   `json:"failed"`
	LatencyMS struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"latency_ms"`
	CPUMSPerOp float64 `json:"cpu_ms_per_op"`
}

// benchRun is one run's figures: the bench's, and the CPU the three
// agents spent per operation.
type benchRun struct {
	secure      bool
	res         benchResult
	serverCPUMS float64
	load        string
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// syncBuffer is a bytes.Buffer that a command writes while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// pid is the process ID of p while it runs, else 0.
func (p *Process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.state != nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func TestBenchTLSCost(t *testing.T) {
	if os.Getenv("DMSC_BENCH_TLS") == "" {
		t.Skip("set DMSC_BENCH_TLS=1 to measure (minutes)")
	}
	runs := envInt(t, "DMSC_BENCH_RUNS", 3)
	clients := envInt(t, "DMSC_BENCH_CLIENTS", 64)
	duration := 30 * time.Second
	if v := os.Getenv("DMSC_BENCH_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DMSC_BENCH_DURATION=%q: %v", v, err)
		}
		duration = d
	}
	profileDir := os.Getenv("DMSC_BENCH_PROFILE")

	var all []benchRun
	for i := range runs {
		// Alternate which goes first, so that neither always runs on a
		// warmer (or busier) machine.
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, secure := range order {
			name := fmt.Sprintf("pair%d-tls-%s", i+1, tlsWord(secure))
			t.Run(name, func(t *testing.T) {
				r := benchOnce(t, secure, clients, duration, profileDir, name)
				all = append(all, r)
				fmt.Printf("bench-tls: %s ops/s=%.0f p50_ms=%.1f p99_ms=%.1f failed=%d bench_cpu_ms_per_op=%.3f servers_cpu_ms_per_op=%.3f load=%s\n",
					name, r.res.OpsPerSec, r.res.LatencyMS.P50, r.res.LatencyMS.P99, r.res.Failed, r.res.CPUMSPerOp, r.serverCPUMS, r.load)
			})
		}
	}
	med := func(secure bool, f func(benchRun) float64) float64 {
		var xs []float64
		for _, r := range all {
			if r.secure == secure {
				xs = append(xs, f(r))
			}
		}
		sort.Float64s(xs)
		if len(xs) == 0 {
			return 0
		}
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	ops := func(r benchRun) float64 { return r.res.OpsPerSec }
	plain, secure := med(false, ops), med(true, ops)
	ratio := 0.0
	if plain > 0 {
		ratio = secure / plain
	}
	line := fmt.Sprintf("bench-tls: median of %d runs each, %d clients, %v: plain %.0f ops/s (p99 %.1f ms, servers %.3f CPU ms/op), tls %.0f ops/s (p99 %.1f ms, servers %.3f CPU ms/op); tls/plain = %.2f",
		runs, clients, duration, plain, med(false, func(r benchRun) float64 { return r.res.LatencyMS.P99 }),
		med(false, func(r benchRun) float64 { return r.serverCPUMS }),
		secure, med(true, func(r benchRun) float64 { return r.res.LatencyMS.P99 }),
		med(true, func(r benchRun) float64 { return r.serverCPUMS }), ratio)
	fmt.Println(line)
	t.Log(line)
}

// benchOnce starts three servers (TLS and gossip encryption on when
// secure), runs `dmsc bench` against them, and stops them.
func benchOnce(t *testing.T, secure bool, clients int, duration time.Duration, profileDir, name string) benchRun {
	ctx := testContext(t, duration+3*time.Minute)
	// The agent's own defaults for gossip and reconciliation, not the
	// harness's fast test timings: the servers run as an operator's would.
	args := []string{"-retry-interval", "2s", "-reconcile-interval", "1s",
		"-gossip-probe-interval", "1s", "-gossip-suspicion-mult", "4"}
	if profileDir != "" {
		args = append(args, "-enable-debug")
	}
	if secure {
		args = append(args, "-encrypt", keygen(t, ctx))
	}
	c := StartCluster(t, Options{Hosts: -1, TLS: secure, ServerArgs: args})
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, strings.TrimSuffix(s.URL("/"), "/"))
	}
	cmdArgs := []string{"bench", "-address", strings.Join(addrs, ","), "-clients", strconv.Itoa(clients),
		"-duration", duration.String(), "-json"}
	if secure {
		cl := c.PKI.Cert(certs.Client, "")
		cmdArgs = append(cmdArgs, "-ca-cert", cl.CA, "-client-cert", cl.Cert, "-client-key", cl.Key)
	}
	cmd := exec.CommandContext(ctx, binary, cmdArgs...)
	cmd.Env = agentEnv()
	var out bytes.Buffer
	var errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The CPU the agents spend from when the clients start (the bench
	// prints that line after registering its hosts) to the end.
	var startCPU time.Duration
	started := false
	deadline := time.Now().Add(time.Minute)
	for !started && time.Now().Before(deadline) {
		started = strings.Contains(errOut.String(), "clients for")
		if !started {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !started {
		t.Fatalf("the bench did not start its clients:\n%s", errOut.String())
	}
	for _, s := range c.Servers {
		startCPU += bench.ProcessCPUOf(s.pid())
	}
	load := loadAverage()
	var profiling sync.WaitGroup
	if profileDir != "" {
		profiling.Go(func() {
			time.Sleep(duration/2 - 10*time.Second)
			profile(t, c, leader, filepath.Join(profileDir, name+"-"+leader.Name+".pprof"))
		})
	}
	err = cmd.Wait()
	profiling.Wait()
	if err != nil {
		t.Fatalf("dmsc bench: %v\n%s", err, errOut.String())
	}
	var endCPU time.Duration
	for _, s := range c.Servers {
		endCPU += bench.ProcessCPUOf(s.pid())
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("reading the bench's output: %v\n%s", err, out.String())
	}
	r := benchRun{secure: secure, res: res, load: load}
	if res.Ops > 0 && startCPU > 0 {
		r.serverCPUMS = float64((endCPU - startCPU).Microseconds()) / 1000 / float64(res.Ops)
	}
	if err := c.Stop(c.Servers...); err != nil {
		t.Log(err)
	}
	return r
}

// profile saves a 20 s CPU profile of p (its API serves /debug/pprof/
// with -enable-debug).
func profile(t *testing.T, c *Cluster, p *Process, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL("/debug/pprof/profile?seconds=20"), nil)
	if err != nil {
		t.Log(err)
		return
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Logf("profile of %s: %v", p.Name, err)
		return
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Logf("profile of %s: %d %v", p.Name, resp.StatusCode, err)
		return
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Log(err)
	}
}
