package integration

// The harness: TestMain builds the dmsc binary once; a Cluster runs server
// and host processes of it on 127.0.0.1 with fixed ports (the same command
// line on every start, as an operator would run it), logs each process to
// a file, and talks to them over the HTTP API with the wire types.
//
// It is meant to be built on: a fault-injection test can freeze a process
// with Signal(syscall.SIGSTOP), read every address a process uses from its
// fields, pass extra flags per role through Options, and run 5 servers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/inventory"
)

// binaryEnv names a prebuilt dmsc binary to test instead of building one.
const binaryEnv = "DMSC_TEST_BINARY"

// binary is the dmsc binary under test, set by TestMain.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return m.Run()
	}
	if bin := os.Getenv(binaryEnv); bin != "" {
		binary = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "dmsc-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "dmsc")
	if err := buildBinary(binary); err != nil {
		fmt.Fprintln(os.Stderr, "integration: building dmsc:", err)
		return 1
	}
	return m.Run()
}

// buildBinary compiles cmd/dmsc without the race detector, whatever
// GOFLAGS says: the processes under test should run at full speed.
func buildBinary(out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	cmd := exec.Command(goTool, "build", "-o", out, "github.com/dmsc/dmsc/cmd/dmsc")
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f != "-race" && f != "-race=true" {
			flags = append(flags, f)
		}
	}
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.Join(flags, " "))
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, buf.String())
	}
	return nil
}

// Options shape a Cluster. Zero values take the defaults.
type Options struct {
	// Servers and Hosts are how many of each to run (default 3 and 2;
	// Hosts < 0 runs none).
	Servers int
	Hosts   int
	// ServerArgs and HostArgs are added after the harness's own flags
	// (serverFlags, hostFlags), so a flag given here wins.
	ServerArgs []string
	HostArgs   []string
	// Devices is the inventory of a host (default DefaultDevices).
	Devices func(host string) inventory.File
	// TLS gives the cluster a CA and every process a certificate of its
	// role and name (Cluster.PKI, pki_test.go): Raft and the node RPC
	// take only mutual TLS, the API serves HTTPS, and the harness talks
	// to it with a client certificate.
	TLS bool
	// ACL turns ACLs on (-acl-enabled on every agent). Boot starts the
	// servers, bootstraps ACLs and keeps the management secret in
	// Cluster.Token, gives each host a token that may register only that
	// host (-acl-token), then starts the hosts.
	ACL bool
}

// serverFlags tune every server for a LAN on one machine: Raft at the
// product's LAN timings (stated so that the measured failover says what it
// was measured with), and fast joins, gossip failure detection and
// reconciliation so that tests do not wait on defaults meant for real
// networks.
var serverFlags = []string{
	"-heartbeat-timeout", "500ms",
	"-election-timeout", "500ms",
	"-leader-lease-timeout", "250ms",
	"-commit-timeout", "20ms",
	"-retry-interval", "200ms",
	"-reconcile-interval", "200ms",
	"-gossip-probe-interval", "200ms",
	"-gossip-suspicion-mult", "2",
}

// hostFlags are the hosts' share of the same tuning.
var hostFlags = []string{
	"-retry-interval", "200ms",
	"-gossip-probe-interval", "200ms",
	"-gossip-suspicion-mult", "2",
}

// DefaultDevices is a host with four exclusive 80 GB GPUs and one
// shareable 32-core CPU. Every device carries the host label node=<host>,
// so a request can be steered to a host with Labels.Required.
func DefaultDevices(host string) inventory.File {
	f := inventory.File{Host: fsm.HostSpec{ID: host, Labels: map[string]string{"node": host}}}
	for i := range 4 {
		f.Devices = append(f.Devices, fsm.DeviceSpec{
			ID: fmt.Sprintf("%s-gpu%d", host, i), Type: fsm.GPU, Name: "A100-SXM4-80GB",
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 80, ComputeUnits: 108}},
		})
	}
	f.Devices = append(f.Devices, fsm.DeviceSpec{
		ID: host + "-cpu", Type: fsm.CPU, Name: "EPYC", Shareable: true,
		Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: 32}},
	})
	return f
}

// Cluster is a set of dmsc processes started by one test.
type Cluster struct {
	t       testing.TB
	Servers []*Process
	Hosts   []*Process
	// AttemptTimeout bounds each attempt of a Write, so that a frozen or
	// cut-off node does not hold it (default 10 s, above the servers'
	// own 5 s hold for a leader).
	AttemptTimeout time.Duration
	// PKI is the cluster's CA and certificates with Options.TLS, else nil.
	PKI *PKI
	// Token is sent as X-Dmsc-Token with every request (Options.ACL: the
	// management token's secret).
	Token string
	acl   bool
	http  *http.Client
}

// NewCluster prepares the processes (ports, data directories, devices
// files, log files) without starting them. Every process is killed when
// the test ends; when it failed, the end of every log is printed.
func NewCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Servers == 0 {
		opts.Servers = 3
	}
	if opts.Hosts == 0 {
		opts.Hosts = 2
	}
	if opts.Devices == nil {
		opts.Devices = DefaultDevices
	}
	dataRoot, logRoot := t.TempDir(), t.ArtifactDir()
	c := &Cluster{t: t, acl: opts.ACL, AttemptTimeout: 10 * time.Second, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}}
	for i := range opts.Servers {
		c.Servers = append(c.Servers, newProcess(t, fmt.Sprintf("s%d", i+1), true, logRoot))
	}
	for i := range max(opts.Hosts, 0) {
		c.Hosts = append(c.Hosts, newProcess(t, fmt.Sprintf("h%d", i+1), false, logRoot))
	}
	if opts.TLS {
		c.PKI = NewPKI(t)
		c.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, TLSClientConfig: c.PKI.ClientTLS()}}
		for _, p := range c.All() {
			p.tlsArgs = c.PKI.AgentArgs(p.Name, p.Server)
		}
	}
	if opts.ACL {
		opts.ServerArgs = append([]string{"-acl-enabled"}, opts.ServerArgs...)
		opts.HostArgs = append([]string{"-acl-enabled"}, opts.HostArgs...)
	}
	var join []string
	for _, s := range c.Servers {
		join = append(join, s.GossipAddr)
	}
	for _, s := range c.Servers {
		s.DataDir = filepath.Join(dataRoot, s.Name)
		var others []string
		for _, j := range join {
			if j != s.GossipAddr {
				others = append(others, j)
			}
		}
		s.args = append(s.commonArgs(), "-server", "-bootstrap-expect", strconv.Itoa(opts.Servers),
			"-data-dir", s.DataDir, "-join", strings.Join(others, ","))
		s.args = append(append(append(s.args, serverFlags...), s.tlsArgs...), opts.ServerArgs...)
	}
	for _, h := range c.Hosts {
		devices := filepath.Join(dataRoot, h.Name+"-devices.json")
		b, err := json.MarshalIndent(opts.Devices(h.Name), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(devices, b, 0o644); err != nil {
			t.Fatal(err)
		}
		h.args = append(h.commonArgs(), "-host", "-devices", devices, "-join", strings.Join(join, ","))
		h.args = append(append(append(h.args, hostFlags...), h.tlsArgs...), opts.HostArgs...)
	}
	t.Cleanup(c.close)
	return c
}

// StartCluster starts a cluster and waits until every process is ready, a
// leader leads and it has every host registered and up.
func StartCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := NewCluster(t, opts)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRegistered(ctx, leader, c.Hosts...); err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitRegistered waits until server p's replica has every host of hosts
// registered and up. A host is ready once it has joined the gossip pool,
// which comes before the leader has registered it.
func (c *Cluster) WaitRegistered(ctx context.Context, p *Process, hosts ...*Process) error {
	var missing []string
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		var list []wire.Host
		if err := c.Get(ctx, p, "/v1/hosts", &list); err != nil {
			return false, nil // a busy server answers later
		}
		up := map[string]bool{}
		for _, h := range list {
			up[h.ID] = h.Up
		}
		missing = missing[:0]
		for _, h := range hosts {
			if !up[h.Name] {
				missing = append(missing, h.Name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("hosts %v not registered and up on %s: %w", missing, p.Name, err)
	}
	return nil
}

// Boot starts every process and waits until each is ready. With
// Options.ACL it starts the servers first, bootstraps ACLs (Token is then
// the management secret), and starts each host with a token of its own
// whose policy may register only that host.
func (c *Cluster) Boot(ctx context.Context) error {
	if !c.acl {
		if err := c.Start(c.All()...); err != nil {
			return err
		}
		return c.WaitReady(ctx, c.All()...)
	}
	if err := c.Start(c.Servers...); err != nil {
		return err
	}
	if err := c.WaitReady(ctx, c.Servers...); err != nil {
		return err
	}
	var boot wire.ACLToken
	if err := c.Write(ctx, c.Servers, http.MethodPost, "/v1/acl/bootstrap", "harness-acl-bootstrap", nil, &boot); err != nil {
		return fmt.Errorf("ACL bootstrap: %w", err)
	}
	c.Token = boot.SecretID
	for _, h := range c.Hosts {
		secret, err := c.NewToken(ctx, "host-"+h.Name, wire.ACLRules{HostRegister: []string{h.Name}}, 0)
		if err != nil {
			return fmt.Errorf("token of host %s: %w", h.Name, err)
		}
		h.args = append(h.args, "-acl-token", secret)
	}
	if err := c.Start(c.Hosts...); err != nil {
		return err
	}
	return c.WaitReady(ctx, c.Hosts...)
}

// NewToken creates (or replaces) policy name with rules and a token of
// that policy alone, ending ttl after it is made (0: never), with the
// cluster's Token; it returns the new token's secret.
func (c *Cluster) NewToken(ctx context.Context, name string, rules wire.ACLRules, ttl time.Duration) (string, error) {
	pol := wire.ACLPolicyRequest{Description: "harness: " + name, Rules: rules, RequestID: "harness-policy-" + name}
	if err := c.Write(ctx, c.Servers, http.MethodPut, "/v1/acl/policy/"+name, pol.RequestID, pol, nil); err != nil {
		return "", fmt.Errorf("policy %s: %w", name, err)
	}
	req := wire.ACLTokenRequest{Description: "harness: " + name, Policies: []string{name}, TTL: wire.Duration(ttl), RequestID: "harness-token-" + name}
	var tok wire.ACLToken
	if err := c.Write(ctx, c.Servers, http.MethodPost, "/v1/acl/token", req.RequestID, req, &tok); err != nil {
		return "", fmt.Errorf("token of policy %s: %w", name, err)
	}
	if tok.SecretID == "" {
		return "", fmt.Errorf("token of policy %s: no secret in the answer", name)
	}
	return tok.SecretID, nil
}

// WithToken is the cluster seen by a client that sends secret instead of
// Token: same processes, same connections.
func (c *Cluster) WithToken(secret string) *Cluster {
	cc := *c
	cc.Token = secret
	return &cc
}

// All lists the servers, then the hosts.
func (c *Cluster) All() []*Process {
	return append(append([]*Process(nil), c.Servers...), c.Hosts...)
}

// Running keeps the processes of ps that run.
func Running(ps []*Process) []*Process {
	var out []*Process
	for _, p := range ps {
		if p.Running() {
			out = append(out, p)
		}
	}
	return out
}

// Except returns ps without x.
func Except(ps []*Process, x *Process) []*Process {
	var out []*Process
	for _, p := range ps {
		if p != x {
			out = append(out, p)
		}
	}
	return out
}

// Process returns the process named name (s1, h2, ...), or nil.
func (c *Cluster) Process(name string) *Process {
	for _, p := range c.All() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Start starts processes that are not running.
func (c *Cluster) Start(ps ...*Process) error {
	for _, p := range ps {
		if err := p.Start(); err != nil {
			return err
		}
	}
	return nil
}

// Stop sends SIGTERM to every process of ps at once and waits for all of
// them to exit; each must exit cleanly.
func (c *Cluster) Stop(ps ...*Process) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Stop()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitReady polls /v1/ready of each process until it answers 200. It
// fails early when a process exits.
func (c *Cluster) WaitReady(ctx context.Context, ps ...*Process) error {
	for _, p := range ps {
		err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
			if !p.Running() {
				return false, fmt.Errorf("%s exited while waiting for it to be ready: %v", p.Name, p.ExitState())
			}
			st, err := c.Status(ctx, p)
			return err == nil && st.Ready, nil
		})
		if err != nil {
			return fmt.Errorf("%s not ready: %w", p.Name, err)
		}
	}
	return nil
}

// Leader polls the running servers until one says it is the leader and
// ready, and returns it.
func (c *Cluster) Leader(ctx context.Context) (*Process, error) {
	var leader *Process
	err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
		var best uint64
		leader = nil
		for _, p := range Running(c.Servers) {
			st, err := c.Status(ctx, p)
			if err == nil && st.State == "Leader" && st.Ready && st.Term >= best {
				leader, best = p, st.Term
			}
		}
		return leader != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no leader: %w", err)
	}
	return leader, nil
}

// Status is a process's /v1/ready body, whatever the status code.
func (c *Cluster) Status(ctx context.Context, p *Process) (wire.NodeStatus, error) {
	var st wire.NodeStatus
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := c.Do(ctx, p, http.MethodGet, "/v1/ready", nil, &st)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable {
		// 503 carries the status too; Do decoded it into st.
		err = nil
	}
	return st, err
}

// APIError is an answer with a status of 400 or more.
type APIError struct {
	Status int
	Body   wire.Error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

// errBadAnswer marks an answer the harness could not read.
var errBadAnswer = errors.New("unreadable answer")

// Retryable says a request may succeed if sent again with the same request
// ID: the API says so, or no full answer came (refused, reset, timed out).
func Retryable(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr.Body.Retryable
	}
	return err != nil && !errors.Is(err, errBadAnswer)
}

// Do sends one request to p. in, when not nil, is sent as JSON; a 2xx
// answer is decoded into out (when not nil). An answer of 400 or more is
// an *APIError; a 503 body that is not an error envelope (/v1/ready) is
// decoded into out as well.
func (c *Cluster) Do(ctx context.Context, p *Process, method, path string, in, out any) (http.Header, error) {
	return c.do(ctx, p, method, path, "", in, out)
}

func (c *Cluster) do(ctx context.Context, p *Process, method, path, requestID string, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.URL(path), body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if requestID != "" {
		req.Header.Set(wire.HeaderRequestID, requestID)
	}
	if c.Token != "" {
		req.Header.Set(wire.HeaderToken, c.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Header, err
	}
	if resp.StatusCode >= 400 {
		var env wire.ErrorResponse
		if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
			return resp.Header, &APIError{Status: resp.StatusCode, Body: env.Error}
		}
		if out != nil {
			_ = json.Unmarshal(b, out)
		}
		return resp.Header, &APIError{Status: resp.StatusCode, Body: wire.Error{Code: "http", Message: strings.TrimSpace(string(b))}}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.Header, fmt.Errorf("%w: %s %s: decoding %q: %v", errBadAnswer, method, path, b, err)
		}
	}
	return resp.Header, nil
}

// Get reads path from p into out.
func (c *Cluster) Get(ctx context.Context, p *Process, path string, out any) error {
	_, err := c.Do(ctx, p, http.MethodGet, path, nil, out)
	return err
}

// Write sends a write with requestID as its X-Request-Id (a body's
// request_id, if any, must be the same), rotating through targets and
// retrying retryable failures until one is answered or ctx ends. The
// request ID makes the retries safe: the cluster applies a write once.
func (c *Cluster) Write(ctx context.Context, targets []*Process, method, path, requestID string, in, out any) error {
	if len(targets) == 0 {
		return errors.New("write: no targets")
	}
	if requestID == "" {
		return errors.New("write: a request ID is needed to retry safely")
	}
	backoff := 10 * time.Millisecond
	for i := 0; ; i++ {
		p := targets[i%len(targets)]
		actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
		_, err := c.do(actx, p, method, path, requestID, in, out)
		cancel()
		if err == nil || !Retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s (request %s): %w (last error from %s: %v)", method, path, requestID, ctx.Err(), p.Name, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// close kills every process, reports processes that died on their own,
// and on failure prints the end of every log.
func (c *Cluster) close() {
	for _, p := range c.All() {
		if p.unexpectedExit() {
			c.t.Errorf("%s exited on its own: %v (log %s)", p.Name, p.ExitState(), p.LogPath)
		}
		if err := p.Kill(); err != nil {
			c.t.Errorf("killing %s: %v", p.Name, err)
		}
	}
	c.http.CloseIdleConnections()
	if c.t.Failed() {
		for _, p := range c.All() {
			c.t.Logf("---- %s: last lines of %s ----\n%s", p.Name, p.LogPath, tail(p.LogPath, 150))
		}
	}
}

// Process is one dmsc agent. Its ports are fixed when it is created, so a
// restart runs the very same command line.
type Process struct {
	Name   string
	Server bool
	// Addresses on 127.0.0.1.
	HTTPAddr, GossipAddr, RaftAddr, RPCAddr string
	// DataDir is a server's data directory.
	DataDir string
	// LogPath is the file stdout and stderr go to, appended on restart.
	LogPath string
	// BeforeStart, when set, adjusts the command before every start (the
	// nemesis runs each process under a group of its own).
	BeforeStart func(*exec.Cmd)
	// Env is added to the agent's environment on every start (test
	// knobs such as DMSC_TEST_EXTRA_COMMAND=1).
	Env []string

	t    testing.TB
	args []string
	// tlsArgs are the agent's TLS flags (Options.TLS); its API is HTTPS.
	tlsArgs []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the running process has exited
	state    *os.ProcessState
	expected bool // the harness stopped or killed it
	starts   int
}

func newProcess(t testing.TB, name string, server bool, logRoot string) *Process {
	addr := func() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))) }
	p := &Process{
		Name: name, Server: server, t: t,
		HTTPAddr: addr(), GossipAddr: addr(), RPCAddr: addr(),
		LogPath: filepath.Join(logRoot, name+".log"),
	}
	if server {
		p.RaftAddr = addr()
	}
	return p
}

func (p *Process) commonArgs() []string {
	port := func(addr string) string {
		_, port, _ := net.SplitHostPort(addr)
		return port
	}
	args := []string{"agent", "-node", p.Name, "-bind", "127.0.0.1", "-http-addr", p.HTTPAddr,
		"-gossip-port", port(p.GossipAddr), "-rpc-port", port(p.RPCAddr)}
	if p.RaftAddr != "" {
		args = append(args, "-raft-port", port(p.RaftAddr))
	}
	return args
}

// URL is the HTTP API URL of path on this process (https with TLS).
func (p *Process) URL(path string) string {
	if len(p.tlsArgs) > 0 {
		return "https://" + p.HTTPAddr + path
	}
	return "http://" + p.HTTPAddr + path
}

// Start runs the process (again). Output is appended to LogPath after a
// line that marks the start.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.state == nil {
		return fmt.Errorf("%s is already running", p.Name)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	p.starts++
	fmt.Fprintf(logFile, "==== harness: start %d of %s at %s: %s %s\n", p.starts, p.Name,
		time.Now().Format(time.RFC3339Nano), binary, strings.Join(p.args, " "))
	cmd := exec.Command(binary, p.args...)
	cmd.Env = append(agentEnv(), p.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childProcAttr()
	if p.BeforeStart != nil {
		p.BeforeStart(cmd)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.state, p.expected = cmd, done, nil, false
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// agentEnv is the test's environment without DMSC_* settings, so that a
// developer's own configuration does not leak into the processes.
func agentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DMSC_") {
			env = append(env, kv)
		}
	}
	return env
}

// Running reports whether the process runs (a frozen one runs).
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.state == nil
}

// ExitState is how the process last exited (nil while it runs).
func (p *Process) ExitState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

func (p *Process) unexpectedExit() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state != nil && !p.expected
}

// Signal sends sig (SIGSTOP and SIGCONT freeze and thaw).
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.state != nil {
		return fmt.Errorf("%s is not running", p.Name)
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM || sig == syscall.SIGINT {
		p.expected = true
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone. Killing a
// process that does not run does nothing.
func (p *Process) Kill() error {
	if !p.Running() {
		return nil
	}
	if err := p.Signal(syscall.SIGKILL); err != nil && p.Running() {
		return err
	}
	return p.wait(10 * time.Second)
}

// stopTimeout bounds a graceful stop; the agent's own bound is 15 s.
const stopTimeout = 25 * time.Second

// Stop sends SIGTERM and waits for a clean exit (status 0). A process that
// does not exit in time is killed and an error returned.
func (p *Process) Stop() error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := p.wait(stopTimeout); err != nil {
		_ = p.Kill()
		return err
	}
	if st := p.ExitState(); !st.Success() {
		return fmt.Errorf("%s stopped with %v (log %s)", p.Name, st, p.LogPath)
	}
	return nil
}

func (p *Process) wait(d time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s did not exit within %v", p.Name, d)
	}
}

// ports remembers the ports handed out in this test binary.
var ports struct {
	sync.Mutex
	used map[int]bool
}

// freePort picks a port free for TCP and UDP on 127.0.0.1 below the
// kernel's ephemeral range, so that a restarted process does not find its
// port taken by the source port of some outgoing connection.
func freePort(t testing.TB) int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 1000 {
		lo, hi = 0, 0
	}
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	for range 1000 {
		port := 0
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		port = l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		if !ports.used[port] {
			ports.used[port] = true
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux;
// 32768 elsewhere).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// poll calls cond every interval until it reports true, returns an error,
// or ctx ends.
func poll(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 2*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// median of durations (the mean of the middle two for an even count).
func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
