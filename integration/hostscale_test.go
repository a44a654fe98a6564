package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Host scale: three server processes and one `dmsc sim-hosts` process
// that runs the simulated hosts (internal/hostsim), each a real gossip
// member with its own RPC endpoint and inventory.

// hostScaleEnv sets the number of simulated hosts of
// TestHostScaleLeaderKill (default defaultScaleHosts, what CI's two cores
// hold in a few minutes; the acceptance figure of issue 14 is 2000).
const (
	hostScaleEnv      = "DMSC_HOST_SCALE"
	defaultScaleHosts = 250
)

// simGossipArgs are the simulated hosts' gossip settings: an agent's
// probe timing, as each host keeps only 16 neighbours and the servers
// (sim-hosts' default -gossip-peers); each message passed on 10 times
// log10 of the members rather than 4, as a host's news reaches the
// servers only through its neighbourhood; without the costs that buy
// nothing between hosts of one process (compression, TCP pings after a
// failed probe). internal/hostsim/DESIGN.md says why.
var simGossipArgs = []string{
	"-gossip-retransmit-mult", "10", "-gossip-no-compression", "-gossip-no-tcp-pings",
	"-retry-interval", "1s", "-reconnect-interval", "60s",
}

// simArgsEnv adds flags to every simulator the host scale tests start,
// after theirs (e.g. lighter gossip for more hosts than the defaults
// hold, or -cpuprofile with -duration).
const simArgsEnv = "DMSC_SIM_ARGS"

// simStartRate is how many hosts the simulator starts per second. Each
// simulated host keeps only its -gossip-peers neighbours and the servers
// (the simulator's default), so a join costs the pool a few members'
// work, not every member's: the rate need not fall with the pool.
func simStartRate(int) int { return 50 }

// scaleServerArgs give the servers an agent's default gossip timing
// (the harness's 200 ms probe would have three servers probe thousands
// of hosts five times a second each) and leave Raft at the harness's LAN
// timing.
var scaleServerArgs = []string{"-gossip-probe-interval", "1s", "-gossip-suspicion-mult", "4", "-log-level", "warn"}

// simProcess is a running `dmsc sim-hosts`.
type simProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan map[string]any
}

// startSim starts n simulated hosts joined to c's servers and waits for
// them to listen. Extra flags follow the defaults. The process is killed
// when the test ends.
func startSim(t *testing.T, ctx context.Context, c *Cluster, n int, extra ...string) *simProcess {
	t.Helper()
	var join []string
	for _, s := range c.Servers {
		join = append(join, s.GossipAddr)
	}
	args := append([]string{"sim-hosts", "-hosts", strconv.Itoa(n), "-join", strings.Join(join, ","),
		"-start-rate", strconv.Itoa(simStartRate(n)), "-log-level", "error"}, simGossipArgs...)
	args = append(append(args, extra...), strings.Fields(os.Getenv(simArgsEnv))...)
	cmd := exec.Command(binary, args...)
	cmd.Env = agentEnv()
	logFile, err := os.Create(filepath.Join(t.ArtifactDir(), "sim-hosts.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sp := &simProcess{cmd: cmd, stdin: stdin, lines: make(chan map[string]any, 16)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		defer close(sp.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				sp.lines <- m
			}
		}
	}()
	if m := sp.next(t, ctx); m["event"] != "started" {
		t.Fatalf("sim-hosts: first line %v", m)
	}
	return sp
}

// next is the next JSON line of the simulator.
func (sp *simProcess) next(t *testing.T, ctx context.Context) map[string]any {
	t.Helper()
	select {
	case m, ok := <-sp.lines:
		if !ok {
			t.Fatal("sim-hosts ended (see sim-hosts.log)")
		}
		return m
	case <-ctx.Done():
		t.Fatal("sim-hosts did not answer:", ctx.Err())
	}
	return nil
}

// control sends one control line and returns its answer.
func (sp *simProcess) control(t *testing.T, ctx context.Context, line string) map[string]any {
	t.Helper()
	if _, err := fmt.Fprintln(sp.stdin, line); err != nil {
		t.Fatal(err)
	}
	m := sp.next(t, ctx)
	if e, ok := m["error"]; ok {
		t.Fatalf("sim-hosts %q: %v", line, e)
	}
	return m
}

// hostMetrics are the host figures a server's /metrics reports.
type hostMetrics struct {
	up, down      int
	registrations uint64
}

// scrapeHosts reads p's host gauges and its count of applied RegisterHost
// commands.
func scrapeHosts(ctx context.Context, c *Cluster, p *Process) (hostMetrics, error) {
	var m hostMetrics
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL("/metrics"), nil)
	if err != nil {
		return m, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case `dmsc_hosts{state="up"}`:
			m.up = int(v)
		case `dmsc_hosts{state="down"}`:
			m.down = int(v)
		case "dmsc_host_registrations_total":
			m.registrations = uint64(v)
		}
	}
	return m, sc.Err()
}

// waitHosts waits until p reports want hosts up (and none down when
// noneDown) and returns how long that took.
func waitHosts(t *testing.T, ctx context.Context, c *Cluster, p *Process, want int, noneDown bool) time.Duration {
	t.Helper()
	start := time.Now()
	var last hostMetrics
	err := poll(ctx, 250*time.Millisecond, func() (bool, error) {
		m, err := scrapeHosts(ctx, c, p)
		if err != nil {
			return false, nil // a busy server answers later
		}
		last = m
		return m.up == want && (!noneDown || m.down == 0), nil
	})
	if err != nil {
		t.Fatalf("waiting for %d hosts up on %s: %v (last: %d up, %d down)", want, p.Name, err, last.up, last.down)
	}
	return time.Since(start)
}

// bootScaleCluster starts three servers with scaleServerArgs and the
// scaleGrace host-down grace, and no hosts; it returns them and the leader.
func bootScaleCluster(t *testing.T, ctx context.Context) (*Cluster, *Process) {
	t.Helper()
	c := NewCluster(t, Options{Hosts: -1, ServerArgs: append(scaleServerArgs, "-host-down-grace", scaleGrace.String())})
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c, leader
}

// scaleTimeout bounds a host scale test of n hosts: the simulator's start
// and the registrations take longer than linearly with n on two shared
// cores (every join is news to every member): 250 hosts registered in
// 11 s, 1,000 in 73 s, 1,250 in 173 s.
func scaleTimeout(n int) time.Duration {
	return 5*time.Minute + time.Duration(n)*400*time.Millisecond
}

// scaleHosts is the number of simulated hosts of the acceptance test.
func scaleHosts(t *testing.T) int {
	t.Helper()
	s := os.Getenv(hostScaleEnv)
	if s == "" {
		return defaultScaleHosts
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a host count", hostScaleEnv, s)
	}
	return n
}

// TestHostScaleLeaderKill is issue 14's acceptance test: with many hosts
// registered, kill -9 of the leader gets the first acknowledged write
// within 2 s, and at most 1 % of the hosts register again (their
// inventory hash is in the replicated state: the new leader skips them).
// It runs defaultScaleHosts hosts; DMSC_HOST_SCALE=2000 runs the issue's
// figure.
func TestHostScaleLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("host scale: not with -short")
	}
	n := scaleHosts(t)
	ctx := testContext(t, scaleTimeout(n))
	c, leader := bootScaleCluster(t, ctx)
	began := time.Now()
	startSim(t, ctx, c, n, "-gpus-per-host", "4")
	waitHosts(t, ctx, c, leader, n, true)
	t.Logf("%d simulated hosts started and registered in %v", n, time.Since(began).Round(time.Millisecond))

	survivors := Except(c.Servers, leader)
	// The followers apply the last registrations after the leader: count
	// from where each has them all, or they would pass for registering
	// again.
	for _, s := range survivors {
		waitHosts(t, ctx, c, s, n, true)
	}
	before := make([]uint64, len(survivors))
	for i, s := range survivors {
		m, err := scrapeHosts(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		before[i] = m.registrations
	}
	start := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	a := allocate(t, wctx, c, survivors, gpuRequest("scale-failover", 1, ""))
	cancel()
	firstWrite := time.Since(start)
	newLeader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Give the new leader time to reconcile every host, many times over
	// (the harness reconciles every 200 ms), then count.
	waitHosts(t, ctx, c, newLeader, n, false)
	time.Sleep(10 * time.Second)
	var reregistered uint64
	for i, s := range survivors {
		m, err := scrapeHosts(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		reregistered = max(reregistered, m.registrations-before[i])
	}
	t.Logf("hosts=%d first_write_after_kill_ms=%d reregistered=%d (%.2f %%), allocation %s",
		n, firstWrite.Milliseconds(), reregistered, 100*float64(reregistered)/float64(n), a.ID)
	if firstWrite > 2*time.Second {
		t.Errorf("first acknowledged write %v after the leader's kill, want at most 2s", firstWrite.Round(time.Millisecond))
	}
	if limit := uint64(n / 100); reregistered > limit {
		t.Errorf("%d hosts registered again after the leader change, want at most %d (1 %%)", reregistered, limit)
	}
}

// benchHostsEnv lists the host counts of TestHostScaleBench
// (e.g. 250,500,1000,2000); benchHostsOutEnv names a file for the JSON
// figures, and benchHostsPlotEnv an SVG or PNG file for the plot.
const (
	benchHostsEnv     = "DMSC_BENCH_HOSTS"
	benchHostsOutEnv  = "DMSC_BENCH_HOSTS_OUT"
	benchHostsPlotEnv = "DMSC_BENCH_HOSTS_PLOT"
	// benchHostsReplotEnv lists JSON files of earlier runs to plot
	// together (to DMSC_BENCH_HOSTS_PLOT) instead of measuring.
	benchHostsReplotEnv = "DMSC_BENCH_HOSTS_REPLOT"
)

// replotHostScale plots the figures of files, ordered by host count.
func replotHostScale(t *testing.T, files []string) {
	var points []scalePoint
	for _, f := range files {
		b, err := os.ReadFile(strings.TrimSpace(f))
		if err != nil {
			t.Fatal(err)
		}
		var ps []scalePoint
		if err := json.Unmarshal(b, &ps); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		points = append(points, ps...)
	}
	slices.SortFunc(points, func(a, b scalePoint) int { return a.Hosts - b.Hosts })
	path := os.Getenv(benchHostsPlotEnv)
	if path == "" || len(points) < 2 {
		t.Fatalf("set %s, and give two host counts or more", benchHostsPlotEnv)
	}
	if err := plotHostScale(points, path); err != nil {
		t.Fatal(err)
	}
}

// scaleGrace is the servers' host-down grace in the host scale tests:
// long, so that a simulated host its starved process answers late for a
// while (the simulator, not the servers, is what two shared cores cannot
// keep up with) is not marked down and registered again.
const scaleGrace = 2 * time.Minute

// scalePoint is what TestHostScaleBench measures at one host count.
type scalePoint struct {
	Hosts int `json:"hosts"`
	// RegisterS: from the simulator's start until the leader reports
	// every host up.
	RegisterS float64 `json:"register_s"`
	// DownDetectS: from killing 10 hosts until the leader's gossip
	// reports all 10 failed; the leader marks a host down HostDownGrace
	// (scaleGrace here, 30 s by default) after that, at its next
	// reconcile.
	DownDetectS float64 `json:"down_detect_s"`
	// LeaderCPU: the leader process's CPU (user+system) over a steady
	// 30 s window, in cores; per host in microseconds of CPU per second.
	LeaderCPU        float64 `json:"leader_cpu_cores"`
	LeaderCPUPerHost float64 `json:"leader_cpu_us_per_s_per_host"`
	// RSS: each server's resident memory after the hosts registered,
	// less before they started, per host (KiB), and the leader's.
	LeaderRSSMiB      float64 `json:"leader_rss_mib"`
	ServerRSSPerHostK float64 `json:"server_rss_kib_per_host"`
	// ChurnOpsPerSec: dmsc bench allocate+release throughput (16
	// clients, 20 s) while 2 hosts per second are killed, 2 restarted
	// and 2 given a new inventory.
	ChurnOpsPerSec float64 `json:"churn_alloc_ops_per_s"`
	ChurnErrors    int64   `json:"churn_bench_errors"`
}

// TestHostScaleBench measures the cost of hosts (scalePoint) at each count
// of DMSC_BENCH_HOSTS, on a fresh cluster of three server processes each
// time. Opt-in: minutes per count.
func TestHostScaleBench(t *testing.T) {
	if files := os.Getenv(benchHostsReplotEnv); files != "" {
		replotHostScale(t, strings.Split(files, ","))
		return
	}
	list := os.Getenv(benchHostsEnv)
	if list == "" {
		t.Skipf("set %s=250,500,1000,2000 to measure", benchHostsEnv)
	}
	var points []scalePoint
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 10 {
			t.Fatalf("%s: %q is not a host count of 10 or more", benchHostsEnv, f)
		}
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			p := measureHostScale(t, n)
			b, _ := json.Marshal(p)
			t.Logf("figures %s", b)
			points = append(points, p)
		})
	}
	if out := os.Getenv(benchHostsOutEnv); out != "" {
		b, _ := json.MarshalIndent(points, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if path := os.Getenv(benchHostsPlotEnv); path != "" && len(points) > 1 {
		if err := plotHostScale(points, path); err != nil {
			t.Fatal(err)
		}
	}
}

func measureHostScale(t *testing.T, n int) scalePoint {
	p := scalePoint{Hosts: n}
	ctx := testContext(t, scaleTimeout(n))
	c, leader := bootScaleCluster(t, ctx)
	rssBefore := make([]float64, len(c.Servers))
	for i, s := range c.Servers {
		rssBefore[i] = procRSS(t, s)
	}

	began := time.Now()
	sim := startSim(t, ctx, c, n)
	waitHosts(t, ctx, c, leader, n, true)
	p.RegisterS = time.Since(began).Seconds()
	t.Logf("%d hosts registered in %.1f s", n, p.RegisterS)

	const window = 30 * time.Second
	cpu0 := procCPU(t, leader)
	time.Sleep(window)
	p.LeaderCPU = (procCPU(t, leader) - cpu0) / window.Seconds()
	p.LeaderCPUPerHost = p.LeaderCPU * 1e6 / float64(n)
	var perHost float64
	for i, s := range c.Servers {
		rss := procRSS(t, s)
		if s == leader {
			p.LeaderRSSMiB = rss / 1024
		}
		perHost += (rss - rssBefore[i]) / float64(n)
	}
	p.ServerRSSPerHostK = perHost / float64(len(c.Servers))

	ans := sim.control(t, ctx, "kill 10")
	killedAt := time.Now()
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		var members []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		if err := c.Get(ctx, leader, "/v1/cluster/members", &members); err != nil {
			return false, nil
		}
		status := map[string]string{}
		for _, m := range members {
			status[m.ID] = m.Status
		}
		for _, id := range ans["hosts"].([]any) {
			if status[id.(string)] == "alive" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("killed hosts not seen failed: %v", err)
	}
	p.DownDetectS = time.Since(killedAt).Seconds()
	sim.control(t, ctx, "restart 10")
	waitHosts(t, ctx, c, leader, n, true)

	p.ChurnOpsPerSec, p.ChurnErrors = churnBench(t, ctx, c, sim)
	return p
}

// churnBench runs dmsc bench (allocate+release) against the servers for
// 20 s while, every second, 2 hosts are killed, the 2 killed a second
// before restarted, and 2 given a new inventory.
func churnBench(t *testing.T, ctx context.Context, c *Cluster, sim *simProcess) (float64, int64) {
	t.Helper()
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.URL(""))
	}
	cmd := exec.CommandContext(ctx, binary, "bench", "-address", strings.Join(addrs, ","), "-clients", "16",
		"-duration", "20s", "-mix", "alloc=100", "-hosts", "1", "-gpus-per-host", "1", "-json")
	cmd.Env = agentEnv()
	done := make(chan struct{})
	var out []byte
	var runErr error
	go func() {
		defer close(done)
		out, runErr = cmd.Output()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			sim.control(t, ctx, "restart 2")
			sim.control(t, ctx, "kill 2")
			sim.control(t, ctx, "change 2")
		}
	}
	sim.control(t, ctx, "restart 1000000")
	if runErr != nil {
		t.Fatalf("dmsc bench: %v\n%s", runErr, out)
	}
	var res struct {
		OpsPerSec float64          `json:"ops_per_sec"`
		Errors    map[string]int64 `json:"errors"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("dmsc bench output: %v\n%s", err, out)
	}
	var errs int64
	for _, n := range res.Errors {
		errs += n
	}
	return res.OpsPerSec, errs
}

// procCPU is p's CPU time so far (user and system), in seconds.
func procCPU(t *testing.T, p *Process) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", processPid(p)))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): state is
	// field 3, utime 14, stime 15, in clock ticks of 1/100 s.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// procRSS is p's resident memory in KiB.
func procRSS(t *testing.T, p *Process) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", processPid(p)))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	t.Fatalf("no VmRSS for %s", p.Name)
	return 0
}

func processPid(p *Process) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}
