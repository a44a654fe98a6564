package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/bench"
	"github.com/dmsc/dmsc/internal/certs"
)

// spawnConfig says how `dmsc bench -spawn` starts its servers.
type spawnConfig struct {
	// Servers is how many agents to start.
	Servers int
	// TLS turns TLS on for every port (certificates made for the run) and
	// gossip encryption.
	TLS bool
	// Debug serves /debug/pprof/ on the agents, with block and mutex
	// profiling on, so that the run can be profiled.
	Debug bool
	// Progress receives what the spawner does.
	Progress io.Writer
}

// spawnedCluster is agents of this binary started as separate processes
// on 127.0.0.1, each with its own temporary data directory (the Raft log
// on disk with fsync, as in production), stopped and removed by Close.
type spawnedCluster struct {
	dir    string
	agents []*spawnedAgent
	// tls is what a client needs to talk to the agents (zero without TLS).
	tls client.TLSConfig
}

// spawnedAgent is one agent process.
type spawnedAgent struct {
	name    string
	http    string // base URL of the HTTP API
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// spawnCluster starts cfg.Servers agents and waits until they agree on a
// leader.
func spawnCluster(ctx context.Context, cfg spawnConfig) (_ *spawnedCluster, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("spawn: this binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "dmsc-bench-")
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	c := &spawnedCluster{dir: dir}
	defer func() {
		if err != nil {
			c.Close(context.Background())
		}
	}()
	ports, err := freePorts(2 * cfg.Servers)
	if err != nil {
		return nil, err
	}
	var common []string
	scheme := "http"
	if cfg.TLS {
		if common, err = c.makeTLS(cfg.Servers); err != nil {
			return nil, err
		}
		scheme = "https"
	}
	if cfg.Debug {
		common = append(common, "-enable-debug")
	}
	var joins []string
	for i := range cfg.Servers {
		joins = append(joins, "127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
	}
	for i := range cfg.Servers {
		name := fmt.Sprintf("bench-s%d", i+1)
		httpAddr := "127.0.0.1:" + strconv.Itoa(ports[2*i])
		args := append([]string{"agent", "-server", "-bootstrap-expect", strconv.Itoa(cfg.Servers),
			"-node", name, "-bind", "127.0.0.1", "-http-addr", httpAddr,
			"-gossip-port", strconv.Itoa(ports[2*i+1]), "-raft-port", "0", "-rpc-port", "0",
			"-data-dir", filepath.Join(dir, name), "-log-level", "warn",
			"-join", strings.Join(joins, ",")}, common...)
		if cfg.TLS {
			args = append(args, "-tls-cert-file", filepath.Join(dir, name+".pem"), "-tls-key-file", filepath.Join(dir, name+"-key.pem"))
		}
		a := &spawnedAgent{name: name, http: scheme + "://" + httpAddr, logPath: filepath.Join(dir, name+".log")}
		if err := a.start(self, args, cfg.Debug); err != nil {
			return nil, err
		}
		c.agents = append(c.agents, a)
	}
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "bench: spawned %d agents (data and logs in %s), waiting for a leader\n", cfg.Servers, dir)
	}
	if err := c.waitLeader(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// makeTLS writes a CA, a certificate per server and one for the bench's
// client into the cluster's directory, and returns the agent flags that
// turn TLS and gossip encryption on.
func (c *spawnedCluster) makeTLS(servers int) ([]string, error) {
	caCert, caKey, err := certs.NewCA(1)
	if err != nil {
		return nil, err
	}
	write := func(name string, b []byte) error { return os.WriteFile(filepath.Join(c.dir, name), b, 0o600) }
	if err := write("ca.pem", caCert); err != nil {
		return nil, err
	}
	for i := range servers {
		name := fmt.Sprintf("bench-s%d", i+1)
		crt, key, err := certs.NewCert(caCert, caKey, certs.Request{Role: certs.Server, Node: name, Days: 1})
		if err != nil {
			return nil, err
		}
		if err := errors.Join(write(name+".pem", crt), write(name+"-key.pem", key)); err != nil {
			return nil, err
		}
	}
	crt, key, err := certs.NewCert(caCert, caKey, certs.Request{Role: certs.Client, Days: 1})
	if err != nil {
		return nil, err
	}
	if err := errors.Join(write("client.pem", crt), write("client-key.pem", key)); err != nil {
		return nil, err
	}
	c.tls = client.TLSConfig{CACert: filepath.Join(c.dir, "ca.pem"),
		ClientCert: filepath.Join(c.dir, "client.pem"), ClientKey: filepath.Join(c.dir, "client-key.pem")}
	gossipKey, err := cluster.GenerateGossipKey()
	if err != nil {
		return nil, fmt.Errorf("spawn: gossip key: %w", err)
	}
	return []string{"-tls-ca-file", c.tls.CACert, "-encrypt", gossipKey}, nil
}

// start runs the agent, its output into its log file.
func (a *spawnedAgent) start(bin string, args []string, debug bool) error {
	logFile, err := os.Create(a.logPath)
	if err != nil {
		return fmt.Errorf("spawn: %w", err)
	}
	defer logFile.Close()
	a.cmd = exec.Command(bin, args...)
	a.cmd.Env = spawnEnv(debug)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	a.cmd.SysProcAttr = childProcAttr()
	if err := a.cmd.Start(); err != nil {
		return fmt.Errorf("spawn: %s: %w", a.name, err)
	}
	a.exited = make(chan struct{})
	go func() {
		_ = a.cmd.Wait()
		close(a.exited)
	}()
	return nil
}

// spawnEnv is this process's environment without DMSC_* settings (a
// developer's own configuration must not leak into the agents), with
// debugProfileEnv set when the agents are profiled.
func spawnEnv(debug bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DMSC_") {
			env = append(env, kv)
		}
	}
	if debug {
		env = append(env, debugProfileEnv+"=1")
	}
	return env
}

// waitLeader polls the agents until each names the same leader.
func (c *spawnedCluster) waitLeader(ctx context.Context) error {
	clients := make([]*client.Client, len(c.agents))
	for i, a := range c.agents {
		cl, err := client.New(client.Config{Addresses: []string{a.http}, TLS: tlsOrNil(c.tls), MaxRetries: -1, Timeout: 2 * time.Second})
		if err != nil {
			return err
		}
		clients[i] = cl
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var last error
		leaders := map[string]bool{}
		for i, a := range c.agents {
			select {
			case <-a.exited:
				return fmt.Errorf("spawn: %s exited; its log:\n%s", a.name, tailFile(a.logPath, 20))
			default:
			}
			l, err := clients[i].Leader(ctx)
			if err == nil && l.ID != "" {
				leaders[l.ID] = true
				continue
			}
			last = err
			leaders[""] = true
		}
		if len(leaders) == 1 && !leaders[""] {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("spawn: no leader the agents agree on in time (last error: %v)", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Addresses are the agents' HTTP API base URLs.
func (c *spawnedCluster) Addresses() []string {
	out := make([]string, len(c.agents))
	for i, a := range c.agents {
		out[i] = a.http
	}
	return out
}

// CPU is the CPU time the agents have used so far (0 where the system
// does not say).
func (c *spawnedCluster) CPU() time.Duration {
	var sum time.Duration
	for _, a := range c.agents {
		sum += bench.ProcessCPUOf(a.cmd.Process.Pid)
	}
	return sum
}

// Profile saves, from every agent at once, a CPU profile over d and then
// the block, mutex and allocation profiles accumulated so far, into dir
// as <agent>-cpu.pprof, -block.pprof, -mutex.pprof and -allocs.pprof.
func (c *spawnedCluster) Profile(ctx context.Context, dir string, d time.Duration) error {
	hc := &http.Client{}
	if c.tls != (client.TLSConfig{}) {
		tc, err := c.tls.TLSClientConfig()
		if err != nil {
			return err
		}
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.agents))
	for i, a := range c.agents {
		wg.Go(func() {
			secs := strconv.Itoa(max(1, int(d.Seconds())))
			errs[i] = errors.Join(
				fetchTo(ctx, hc, a.http+"/debug/pprof/profile?seconds="+secs, filepath.Join(dir, a.name+"-cpu.pprof")),
				fetchTo(ctx, hc, a.http+"/debug/pprof/block", filepath.Join(dir, a.name+"-block.pprof")),
				fetchTo(ctx, hc, a.http+"/debug/pprof/mutex", filepath.Join(dir, a.name+"-mutex.pprof")),
				fetchTo(ctx, hc, a.http+"/debug/pprof/allocs", filepath.Join(dir, a.name+"-allocs.pprof")))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetchTo saves the body of a GET of url into path.
func fetchTo(ctx context.Context, hc *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Close stops the agents (an interrupt, then a kill after 10 s) and
// removes their directory.
func (c *spawnedCluster) Close(ctx context.Context) error {
	var errs []error
	for _, a := range c.agents {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, a := range c.agents {
		select {
		case <-a.exited:
		case <-time.After(10 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.exited
			errs = append(errs, fmt.Errorf("spawn: %s did not stop in 10s; killed", a.name))
		case <-ctx.Done():
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
	}
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

// freePorts finds n distinct free TCP ports on 127.0.0.1 (free when
// asked: another process may take one before the agents bind it).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("spawn: a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// tailFile is the last n lines of the file at path.
func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// benchClientsPerAddress is how many of the load generator's clients share
// one source address against agents on this machine: well within an
// agent's per-address limits (a quarter of its 512 request slots, 200
// connections), as clients on many machines would be.
const benchClientsPerAddress = 32

// benchHTTPClient is the load generator's HTTP client for clients
// concurrent clients: its idle pool holds a connection for each, so that
// none is closed and opened again between two requests. With spread (the
// agents listen on loopback), its connections come from the source
// addresses 127.0.0.1, 127.0.0.2, ... in turn, benchClientsPerAddress
// clients to each.
func benchHTTPClient(clients int, spread bool, t *client.TLSConfig) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = clients
	if t != nil {
		tc, err := t.TLSClientConfig()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	}
	if spread && clients > benchClientsPerAddress {
		sources := (clients + benchClientsPerAddress - 1) / benchClientsPerAddress
		var next atomic.Uint64
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			ip := net.IPv4(127, 0, 0, byte(1+next.Add(1)%uint64(sources)))
			d := net.Dialer{Timeout: client.DefaultDialTimeout, KeepAlive: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
			return d.DialContext(ctx, network, addr)
		}
	}
	return &http.Client{Transport: tr}, nil
}
