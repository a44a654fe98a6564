package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/internal/certs"
)

// Bounds of the container test. Raft runs at the shipped LAN timings
// (election 500 ms); the bounds leave room for a loaded CI machine.
const (
	// containerTestBudget bounds the whole test (the build excepted when
	// the Go build cache is cold).
	containerTestBudget = 6 * time.Minute
	// clusterReadyBound bounds `compose up` to every node ready.
	clusterReadyBound = 90 * time.Second
	// failoverWriteBound bounds killing the leader to the first write
	// acknowledged by the survivors.
	failoverWriteBound = 20 * time.Second
	// minorityRefusalBound bounds one write sent to the cut-off server:
	// it must be refused (retryable) within it, never acknowledged.
	minorityRefusalBound = 30 * time.Second
	// convergeBound bounds reconnecting the cut-off server to all three
	// servers showing the same state.
	convergeBound = 90 * time.Second
	// sdkDialTimeout bounds connecting to one node.
	sdkDialTimeout = 2 * time.Second
)

var (
	containerServers = []string{"server-1", "server-2", "server-3"}
	containerHosts   = []string{"host-1", "host-2"}
)

// TestContainerCluster runs deploy/docker-compose.yml (three servers, two
// device hosts) from an image built like `make image`, with the secrets
// deploy/compose/secrets.sh makes (a CA, a certificate per node and for
// the operator, a gossip key, a token secret per host). It checks that the
// cluster forms secured, with ACLs on: the operator's flow of
// deploy/README.md (bootstrap, a policy per host, each host's token made
// with the secret the host was started with, a team token) registers both
// hosts, which no host is before its token exists; three voters; a
// request without a token is refused; every API speaks only HTTPS and only
// to clients with a certificate of the cluster's CA; the operator's CLI
// works from the Docker host with the client certificate and a token; and
// a host with a valid certificate but without the gossip key never joins.
// Then, through the SDK over HTTPS with the team's token, that it allocates, survives `docker
// kill` of its leader, refuses writes on a server cut off by `docker
// network disconnect` with a retryable error while the other two serve,
// and converges once the server is reconnected. Everything it starts is
// removed at the end, whatever happened. It skips under -short and where
// no Docker engine answers.
func TestContainerCluster(t *testing.T) {
	tools := requireDocker(t)
	t.Setenv(client.TokenEnv, "") // the test's clients carry their tokens
	sweepStale(t, tools)
	ctx, cancel := context.WithTimeout(context.Background(), testBudget(t, containerTestBudget))
	defer cancel()
	p := newComposeProject(t, tools)
	timings := &phaseTimer{t: t, start: time.Now()}
	defer timings.report()

	// Build and start.
	must(t, timings.phase("build image (binary + docker build)", func() error {
		how, took, err := p.buildImage(ctx)
		timings.record("  of which "+how, took)
		return err
	}))
	must(t, timings.phase("secrets (deploy/compose/secrets.sh)", func() error { return p.makeSecrets(ctx) }))
	services := append(append([]string(nil), containerServers...), containerHosts...)
	must(t, timings.phase("compose up -d", func() error { return p.up(ctx, services...) }))
	must(t, timings.phase("all nodes ready", func() error {
		return pollUntil(ctx, clusterReadyBound, 250*time.Millisecond, func() error {
			for _, s := range services {
				if err := p.nodeReady(ctx, s); err != nil {
					return fmt.Errorf("%s: %w", s, err)
				}
			}
			return nil
		})
	}))
	var teamToken string
	must(t, timings.phase("ACLs: bootstrap, host and team tokens", func() error {
		var err error
		teamToken, err = p.setUpACLs(ctx)
		return err
	}))
	must(t, timings.phase("hosts registered with their tokens, three voters", func() error {
		return pollUntil(ctx, clusterReadyBound, 250*time.Millisecond, func() error {
			if err := p.hostsUp(ctx, containerServers[0], containerHosts); err != nil {
				return err
			}
			return p.voters(ctx, containerServers[0], containerServers)
		})
	}))
	// The health check Docker runs is the binary's own, over HTTPS with
	// the node's certificate.
	for _, s := range services {
		if out, code := p.exec(ctx, s, "/dmsc", "check-ready"); code != 0 {
			t.Fatalf("%s: dmsc check-ready exited %d: %s", s, code, out)
		}
	}
	must(t, timings.phase("APIs speak HTTPS to certified clients only", func() error {
		return p.checkHTTPSOnly(ctx, services)
	}))
	must(t, timings.phase("operator CLI on the published port", func() error { return p.checkOperatorCLI(ctx) }))
	must(t, timings.phase("a host without the gossip key stays out", func() error {
		return p.checkRogueStaysOut(ctx, services)
	}))

	sdk := p.newSDK(t, p.serverAddrs(ctx, containerServers), 10, teamToken)
	var acked []string
	first, _, err := sdk.Allocate(ctx, client.AllocateRequest{Request: client.Request{
		Claims: []wire.Claim{{Type: wire.GPU, Count: 1, Capabilities: wire.Capabilities{Resources: wire.Resources{MemoryGB: 80}}}},
	}})
	if err != nil {
		t.Fatalf("allocating a GPU: %v", err)
	}
	if first.Status != wire.Active || len(first.Devices) != 1 {
		t.Fatalf("GPU allocation: %+v", first)
	}
	acked = append(acked, first.ID)

	// Kill the leader and keep allocating: the survivors elect a leader
	// and acknowledge writes within failoverWriteBound.
	leader := mustLeader(ctx, t, p, containerServers)
	t.Logf("leader: %s; docker kill", leader)
	survivors := without(containerServers, leader)
	killedAt := time.Now()
	must(t, p.kill(ctx, leader))
	// How long the survivors take to elect a ready leader, measured on
	// the side while the client allocates.
	elected := make(chan time.Duration, 1)
	go func() {
		err := pollUntil(ctx, failoverWriteBound, 20*time.Millisecond, func() error {
			for _, s := range survivors {
				if st, err := p.readyOf(ctx, s); err == nil && st.State == "Leader" && st.Ready {
					return nil
				}
			}
			return errors.New("no ready leader")
		})
		if err != nil {
			elected <- -1
			return
		}
		elected <- time.Since(killedAt)
	}()
	for i := range 5 {
		actx, acancel := context.WithTimeout(ctx, failoverWriteBound)
		a, _, err := sdk.Allocate(actx, cpuRequest(fmt.Sprintf("%s-failover-%d", p.name, i)))
		acancel()
		if err != nil {
			t.Fatalf("allocation %d after killing leader %s (%v after the kill): %v", i, leader, time.Since(killedAt), err)
		}
		if i == 0 {
			timings.record("kill leader -> first acknowledged write (SDK)", time.Since(killedAt))
		}
		acked = append(acked, a.ID)
	}
	if d := <-elected; d < 0 {
		t.Fatalf("the survivors elected no ready leader within %v", failoverWriteBound)
	} else {
		timings.record("kill leader -> survivors have a ready leader", d)
	}
	newLeader := mustLeader(ctx, t, p, without(containerServers, leader))
	t.Logf("new leader %s; restarting %s", newLeader, leader)
	must(t, timings.phase("killed server restarted and ready", func() error {
		if err := p.start(ctx, leader); err != nil {
			return err
		}
		return pollUntil(ctx, clusterReadyBound, 250*time.Millisecond, func() error {
			return p.nodeReady(ctx, leader)
		})
	}))

	// Cut the leader off the network. The two others elect a leader and
	// serve; the cut-off one refuses writes with a retryable error.
	minority := mustLeader(ctx, t, p, containerServers)
	majority := without(containerServers, minority)
	clusterIP, probeAddr, err := p.isolate(ctx, minority)
	if err != nil {
		t.Fatalf("isolating %s: %v", minority, err)
	}
	isolatedAt := time.Now()
	t.Logf("isolated %s (cluster IP %s, probe %s)", minority, clusterIP, probeAddr)

	majoritySDK := p.newSDK(t, p.serverAddrs(ctx, majority), 20, teamToken)
	actx, acancel := context.WithTimeout(ctx, failoverWriteBound)
	a, _, err := majoritySDK.Allocate(actx, cpuRequest(p.name+"-majority"))
	acancel()
	if err != nil {
		t.Fatalf("the majority %v did not acknowledge a write within %v of the cut: %v", majority, failoverWriteBound, err)
	}
	timings.record("cut leader off -> majority acknowledges a write", time.Since(isolatedAt))
	acked = append(acked, a.ID)

	minoritySDK := p.newSDK(t, []string{probeAddr}, -1, teamToken)
	refusedStart := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, minorityRefusalBound)
	refused, _, err := minoritySDK.Allocate(rctx, cpuRequest(p.name+"-minority"))
	rcancel()
	if err == nil {
		t.Fatalf("the cut-off server %s acknowledged a write: %+v", minority, refused)
	}
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("write to the cut-off server %s: want an API error, got %v", minority, err)
	}
	if !apiErr.Retryable || !retryableRefusal(apiErr) {
		t.Fatalf("write to the cut-off server %s: want 503 no_leader/not_leader or 504 timeout, retryable; got %d %s retryable=%t: %s",
			minority, apiErr.Status, apiErr.Code, apiErr.Retryable, apiErr.Message)
	}
	timings.record(fmt.Sprintf("cut-off server refuses a write (%d %s)", apiErr.Status, apiErr.Code), time.Since(refusedStart))
	// A consistent read there is refused as well, and its health check
	// fails, so Docker would mark it unhealthy.
	_, _, err = minoritySDK.Allocations(ctx, nil, &client.QueryOptions{Consistent: true})
	if !errors.As(err, &apiErr) || !apiErr.Retryable {
		t.Fatalf("consistent read on the cut-off server: want a retryable refusal, got %v", err)
	}
	if out, code := p.exec(ctx, minority, "/dmsc", "check-ready"); code == 0 {
		t.Fatalf("dmsc check-ready passes on the cut-off server: %s", out)
	} else {
		t.Logf("check-ready on the cut-off server: exit %d: %s", code, out)
	}
	// The majority keeps serving while the cut lasts.
	a, _, err = majoritySDK.Allocate(ctx, cpuRequest(p.name+"-majority-2"))
	if err != nil {
		t.Fatalf("the majority stopped serving: %v", err)
	}
	acked = append(acked, a.ID)

	// Reconnect: all three show the same state (index and allocations),
	// with every acknowledged allocation, and the rejoined server serves.
	reconnectedAt := time.Now()
	must(t, p.reconnect(ctx, minority, clusterIP))
	must(t, timings.phase("reconnect -> all three servers agree", func() error {
		return pollUntil(ctx, convergeBound, 250*time.Millisecond, func() error {
			return converged(ctx, p, acked)
		})
	}))
	t.Logf("converged %v after reconnecting %s", time.Since(reconnectedAt).Round(time.Millisecond), minority)
	rejoined := p.newSDK(t, []string{p.addr(ctx, minority)}, 20, teamToken)
	a, _, err = rejoined.Allocate(ctx, cpuRequest(p.name+"-rejoined"))
	if err != nil {
		t.Fatalf("write through the rejoined server %s: %v", minority, err)
	}
	acked = append(acked, a.ID)
	must(t, pollUntil(ctx, convergeBound, 250*time.Millisecond, func() error { return converged(ctx, p, acked) }))
	t.Logf("%d acknowledged allocations present on all three servers", len(acked))
	// no_leader says the write was never proposed: it must not surface
	// after the heal. (A timeout's outcome is unknown, so it may.)
	if wire.NotAppliedCode(apiErr.Code) {
		all, _, err := rejoined.Allocations(ctx, &client.AllocationFilter{History: true, Limit: 1000}, &client.QueryOptions{Consistent: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range all.Allocations {
			if a.RequestID == p.name+"-minority" {
				t.Fatalf("the write refused with no_leader was applied after all: %+v", a)
			}
		}
	}
}

// testBudget is d, or less when the test binary's -timeout ends sooner: a
// minute is kept for the teardown, so that it runs before the binary is
// killed.
func testBudget(t *testing.T, d time.Duration) time.Duration {
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) - time.Minute; left < d {
			return max(left, 10*time.Second)
		}
	}
	return d
}

// phaseTimer records how long each step took and logs them at the end.
type phaseTimer struct {
	t     *testing.T
	start time.Time
	lines []string
}

func (pt *phaseTimer) phase(name string, f func() error) error {
	start := time.Now()
	err := f()
	pt.record(name, time.Since(start))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (pt *phaseTimer) record(name string, d time.Duration) {
	pt.lines = append(pt.lines, fmt.Sprintf("%-55s %8v", name, d.Round(10*time.Millisecond)))
	pt.t.Logf("%s: %v", name, d.Round(10*time.Millisecond))
}

func (pt *phaseTimer) report() {
	pt.t.Logf("timings:\n  %s\n  %-55s %8v", strings.Join(pt.lines, "\n  "), "total (before teardown)",
		time.Since(pt.start).Round(10*time.Millisecond))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pollUntil calls f every interval until it returns nil, and fails with
// its last error when bound or ctx runs out.
func pollUntil(ctx context.Context, bound, interval time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %v: %w", bound, err)
		case <-time.After(interval):
		}
	}
}

// newSDK is a client of servers' addrs, over HTTPS with the operator's
// client certificate and token, that sends a request at most retries+1
// times (-1: once), each attempt bounded above the servers' 5 s no-leader hold.
// Connections are given up after sdkDialTimeout: the address of a killed
// container swallows SYNs (the bridge's neighbour entry is still valid),
// as a crashed machine's does, and only the dial timeout stops a client
// from waiting on it for the whole attempt.
func (p *composeProject) newSDK(t *testing.T, addrs []string, retries int, token string) *client.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: sdkDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tc, err := p.tlsFor(certs.RoleName(certs.Server)).TLSClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	tr.TLSClientConfig = tc
	c, err := client.New(client.Config{
		Addresses: addrs, Timeout: 12 * time.Second, MaxRetries: retries, Token: token,
		RetryWait: 50 * time.Millisecond, RetryWaitMax: 500 * time.Millisecond,
		HTTPClient: &http.Client{Transport: tr},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serverAddrs are the HTTP APIs of services on the cluster network.
func (p *composeProject) serverAddrs(ctx context.Context, services []string) []string {
	var out []string
	for _, s := range services {
		if a := p.addr(ctx, s); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// cpuRequest asks for one compute unit of a shareable CPU, under a given
// request ID (retries of it take nothing more).
func cpuRequest(requestID string) client.AllocateRequest {
	return client.AllocateRequest{RequestID: requestID, Request: client.Request{
		Claims: []wire.Claim{{Type: wire.CPU, Count: 1, Amount: wire.Resources{ComputeUnits: 1}}},
	}}
}

// retryableRefusal says an error is what a server without a quorum owes
// a write: no leader, leadership lost, or a timeout with the outcome
// unknown.
func retryableRefusal(e *client.APIError) bool {
	switch {
	case e.Status == http.StatusServiceUnavailable && (e.Code == wire.CodeNoLeader || e.Code == wire.CodeNotLeader):
		return true
	case e.Status == http.StatusGatewayTimeout && e.Code == wire.CodeTimeout:
		return true
	}
	return false
}

// nodeReady asks one node's /v1/ready.
func (p *composeProject) nodeReady(ctx context.Context, service string) error {
	st, err := p.readyOf(ctx, service)
	if err != nil {
		return err
	}
	if !st.Ready {
		return fmt.Errorf("not ready: %+v", *st)
	}
	return nil
}

func (p *composeProject) readyOf(ctx context.Context, service string) (*wire.NodeStatus, error) {
	c, err := p.apiClient(ctx, service, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return c.Ready(ctx)
}

// hostsUp checks that server has every host registered and up.
func (p *composeProject) hostsUp(ctx context.Context, server string, hosts []string) error {
	c, err := p.apiClient(ctx, server, 2*time.Second)
	if err != nil {
		return err
	}
	list, _, err := c.Hosts(ctx, nil)
	if err != nil {
		return err
	}
	up := map[string]bool{}
	for _, h := range list {
		up[h.ID] = h.Up && len(h.Devices) > 0
	}
	for _, h := range hosts {
		if !up[h] {
			return fmt.Errorf("host %s not registered and up", h)
		}
	}
	return nil
}

// mustLeader waits until one of services says it leads and is ready.
func mustLeader(ctx context.Context, t *testing.T, p *composeProject, services []string) string {
	t.Helper()
	var leader string
	err := pollUntil(ctx, failoverWriteBound, 100*time.Millisecond, func() error {
		for _, s := range services {
			st, err := p.readyOf(ctx, s)
			if err == nil && st.State == "Leader" && st.Ready {
				leader = s
				return nil
			}
		}
		return errors.New("no ready leader")
	})
	if err != nil {
		t.Fatalf("leader among %v: %v", services, err)
	}
	return leader
}

func without(list []string, x string) []string {
	var out []string
	for _, s := range list {
		if s != x {
			out = append(out, s)
		}
	}
	return out
}

// converged checks that every server is ready under the same leader and
// shows the same allocations at the same state index, and that every
// acknowledged allocation is among them.
func converged(ctx context.Context, p *composeProject, acked []string) error {
	var refIndex uint64
	var refState, refServer, refLeader string
	for _, s := range containerServers {
		st, err := p.readyOf(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		if !st.Ready || !st.KnownLeader {
			return fmt.Errorf("%s not ready: %+v", s, *st)
		}
		c, err := p.apiClient(ctx, s, 5*time.Second)
		if err != nil {
			return err
		}
		list, meta, err := c.Allocations(ctx, &client.AllocationFilter{Limit: 1000}, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		if list.Next != "" {
			return fmt.Errorf("%s: more than one page of allocations", s)
		}
		state, have := describeAllocations(list.Allocations)
		for _, id := range acked {
			if !have[id] {
				return fmt.Errorf("%s lacks acknowledged allocation %s", s, id)
			}
		}
		if refServer == "" {
			refIndex, refState, refServer, refLeader = meta.Index, state, s, st.Leader
			continue
		}
		if st.Leader != refLeader {
			return fmt.Errorf("%s follows %s, %s follows %s", s, st.Leader, refServer, refLeader)
		}
		if meta.Index != refIndex {
			return fmt.Errorf("state index: %s at %d, %s at %d", s, meta.Index, refServer, refIndex)
		}
		if state != refState {
			return fmt.Errorf("allocations differ at index %d:\n%s: %s\n%s: %s", refIndex, s, state, refServer, refState)
		}
	}
	return nil
}

// describeAllocations renders allocations canonically (sorted by ID, with
// status and devices) and lists their IDs.
func describeAllocations(list []wire.Allocation) (string, map[string]bool) {
	ids := map[string]bool{}
	parts := make([]string, 0, len(list))
	for _, a := range list {
		ids[a.ID] = true
		devs := make([]string, 0, len(a.Devices))
		for _, d := range a.Devices {
			devs = append(devs, fmt.Sprintf("%s/%d/%g", d.DeviceID, d.Claim, d.Amount.ComputeUnits))
		}
		sort.Strings(devs)
		parts = append(parts, fmt.Sprintf("%s:%s:%s", a.ID, a.Status, strings.Join(devs, ",")))
	}
	sort.Strings(parts)
	return strings.Join(parts, " "), ids
}

// voters checks that server's Raft configuration is exactly want, every
// one a voter.
func (p *composeProject) voters(ctx context.Context, server string, want []string) error {
	c, err := p.apiClient(ctx, server, 2*time.Second)
	if err != nil {
		return err
	}
	cfg, err := c.RaftConfiguration(ctx)
	if err != nil {
		return err
	}
	voters := map[string]bool{}
	for _, s := range cfg.Servers {
		voters[s.ID] = s.Voter
	}
	for _, s := range want {
		if !voters[s] {
			return fmt.Errorf("%s is not a voter: %+v", s, cfg.Servers)
		}
	}
	if len(cfg.Servers) != len(want) {
		return fmt.Errorf("Raft configuration %+v, want the voters %v alone", cfg.Servers, want)
	}
	return nil
}

// checkHTTPSOnly checks every service's API: a GET over HTTPS with the
// operator's client certificate answers 200; plain HTTP (a GET, and on
// one server a write) is answered 400 by the TLS layer, before any
// handler; HTTPS without a client certificate, or with one of another
// CA, fails the handshake.
func (p *composeProject) checkHTTPSOnly(ctx context.Context, services []string) error {
	otherCA, otherCAKey, err := certs.NewCA(1)
	if err != nil {
		return err
	}
	otherCert, otherKey, err := certs.NewCert(otherCA, otherCAKey, certs.Request{Role: certs.Client})
	if err != nil {
		return err
	}
	foreign, err := tls.X509KeyPair(otherCert, otherKey)
	if err != nil {
		return err
	}
	for i, s := range services {
		addr := p.addr(ctx, s)
		if addr == "" {
			return fmt.Errorf("%s has no address on the cluster network", s)
		}
		good, err := p.tlsFor(s).TLSClientConfig()
		if err != nil {
			return err
		}
		noCert := good.Clone()
		noCert.Certificates = nil
		wrongCA := good.Clone()
		wrongCA.Certificates = []tls.Certificate{foreign}

		if code, body, err := httpGet(ctx, good, addr+"/v1/health"); err != nil || code != http.StatusOK {
			return fmt.Errorf("%s: HTTPS with the client certificate: %d %q, %v", s, code, body, err)
		}
		plain := "http://" + strings.TrimPrefix(addr, "https://")
		if code, body, err := httpGet(ctx, nil, plain+"/v1/health"); err != nil || code != http.StatusBadRequest || !strings.Contains(body, "HTTPS") {
			return fmt.Errorf("%s: plain HTTP: want 400 from the TLS layer, got %d %q, %v", s, code, body, err)
		}
		if i == 0 {
			code, body, err := httpDo(ctx, nil, http.MethodPost, plain+"/v1/allocations",
				`{"claims": [{"type": "GPU", "count": 1}]}`)
			if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "HTTPS") {
				return fmt.Errorf("%s: plain HTTP write: want 400 from the TLS layer, got %d %q, %v", s, code, body, err)
			}
		}
		for what, tc := range map[string]*tls.Config{"no client certificate": noCert, "a certificate of another CA": wrongCA} {
			err := clientCertRefused(ctx, tc, strings.TrimPrefix(addr, "https://"))
			if err != nil {
				return fmt.Errorf("%s: HTTPS with %s: %w", s, what, err)
			}
		}
	}
	return nil
}

// clientCertRefused checks that the TLS server at addr refuses the client
// certificate of tc (or its lack): the client verifies the server and
// finishes its side of the handshake, then reads, sending nothing, so
// the server's alert is what comes back rather than a reset or a closed
// connection that an HTTP client may report instead.
func clientCertRefused(ctx context.Context, tc *tls.Config, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: tc}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		defer conn.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetReadDeadline(dl)
		}
		_, err = conn.Read(make([]byte, 1))
		if err == nil {
			return errors.New("the server sent data; want the handshake refused")
		}
	}
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) || !strings.Contains(err.Error(), "certificate") {
		return fmt.Errorf("want the server to refuse the client's certificate, got %w", err)
	}
	return nil
}

// httpGet GETs url, over TLS with tc when set, and returns the status and
// body.
func httpGet(ctx context.Context, tc *tls.Config, url string) (int, string, error) {
	return httpDo(ctx, tc, http.MethodGet, url, "")
}

func httpDo(ctx context.Context, tc *tls.Config, method, url, body string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tr := &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// setUpACLs is the operator's flow of deploy/README.md, "ACLs", once the
// servers are ready: without a token nothing is allowed; bootstrap (the
// management token becomes p.token); no host is registered yet, since no
// token may register one; a policy per host (host_register) and each
// host's token made with the secret the host was started with, host-1's
// with the CLI (-secret-file, as the README shows), host-2's with the
// SDK; a team policy and token for the default namespace, which may not
// touch the operator's area. It returns the team token's secret.
func (p *composeProject) setUpACLs(ctx context.Context) (string, error) {
	server := containerServers[0]
	anon, err := p.apiClientToken(ctx, server, 12*time.Second, "")
	if err != nil {
		return "", err
	}
	if _, _, err := anon.Hosts(ctx, nil); !isDenied(err) {
		return "", fmt.Errorf("listing hosts without a token: want 403 permission_denied, got %v", err)
	}
	boot, err := anon.ACLBootstrap(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	p.token = boot.SecretID
	mgmt, err := p.apiClient(ctx, server, 12*time.Second)
	if err != nil {
		return "", err
	}
	hosts, _, err := mgmt.Hosts(ctx, &client.QueryOptions{Consistent: true})
	if err != nil {
		return "", err
	}
	if len(hosts) != 0 {
		return "", fmt.Errorf("hosts registered before any host token existed: %+v", hosts)
	}
	// host-1 through the CLI, as deploy/README.md does it.
	rules := filepath.Join(p.t.TempDir(), "host-1.json")
	if err := os.WriteFile(rules, []byte(`{"host_register": ["host-1"]}`), 0o600); err != nil {
		return "", err
	}
	env, err := p.cliEnv(ctx)
	if err != nil {
		return "", err
	}
	if _, err := runCommand(ctx, env, "", binary, "acl", "policy", "apply", "-name", "host-1", rules); err != nil {
		return "", err
	}
	out, err := runCommand(ctx, env, "", binary, "acl", "token", "create", "-description", "host host-1",
		"-policy", "host-1", "-secret-file", p.hostTokenFile("host-1"), "-json")
	if err != nil {
		return "", err
	}
	secret, err := os.ReadFile(p.hostTokenFile("host-1"))
	if err != nil {
		return "", err
	}
	var tok wire.ACLToken
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.SecretID != strings.TrimSpace(string(secret)) {
		return "", fmt.Errorf("dmsc acl token create -secret-file: %v: %s", err, out)
	}
	// host-2 through the SDK.
	if _, err := mgmt.ACLPolicyApply(ctx, "host-2", "registers host-2", client.ACLRules{HostRegister: []string{"host-2"}}); err != nil {
		return "", err
	}
	if secret, err = os.ReadFile(p.hostTokenFile("host-2")); err != nil {
		return "", err
	}
	if _, err := mgmt.ACLTokenCreate(ctx, client.ACLTokenSpec{Description: "host host-2", Policies: []string{"host-2"}, SecretID: strings.TrimSpace(string(secret))}); err != nil {
		return "", err
	}
	// A team: allocations in the default namespace, devices to read.
	if _, err := mgmt.ACLPolicyApply(ctx, "team-default", "jobs of the default namespace",
		client.ACLRules{Namespaces: map[string]string{"default": "write"}, Devices: "read"}); err != nil {
		return "", err
	}
	team, err := mgmt.ACLTokenCreate(ctx, client.ACLTokenSpec{Description: "team default", Policies: []string{"team-default"}})
	if err != nil {
		return "", err
	}
	teamClient, err := p.apiClientToken(ctx, server, 12*time.Second, team.SecretID)
	if err != nil {
		return "", err
	}
	if _, err := teamClient.RaftConfiguration(ctx); !isDenied(err) {
		return "", fmt.Errorf("the team token reading the Raft configuration: want 403 permission_denied, got %v", err)
	}
	return team.SecretID, nil
}

// isDenied says err is a 403 permission_denied.
func isDenied(err error) bool {
	var e *client.APIError
	return errors.As(err, &e) && e.Status == http.StatusForbidden && e.Code == wire.CodePermissionDenied
}

// cliEnv is the environment of the dmsc CLI run on this machine against
// server-1's published port, with the CA, the operator's client
// certificate and the management token.
func (p *composeProject) cliEnv(ctx context.Context) ([]string, error) {
	published, err := p.compose(ctx, "port", "server-1", "4646")
	if err != nil {
		return nil, err
	}
	return []string{
		"DMSC_ADDR=https://" + published,
		"DMSC_CACERT=" + p.tls.CACert,
		"DMSC_CLIENT_CERT=" + p.tls.ClientCert,
		"DMSC_CLIENT_KEY=" + p.tls.ClientKey,
		"DMSC_TLS_SERVER_NAME=",
		"DMSC_TOKEN=" + p.token,
	}, nil
}

// checkOperatorCLI runs the dmsc CLI on this machine, as an operator
// would, against server-1's port published on 127.0.0.1, with the CA and
// the client certificate secrets.sh made and the management token: it
// lists three voters. Without the token it is denied; without the client
// certificate it is refused.
func (p *composeProject) checkOperatorCLI(ctx context.Context) error {
	env, err := p.cliEnv(ctx)
	if err != nil {
		return err
	}
	published := strings.TrimPrefix(env[0], "DMSC_ADDR=https://")
	out, err := runCommand(ctx, env, "", binary, "operator", "raft", "list-peers")
	if err != nil {
		return err
	}
	voters := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[3] == "true" {
			voters[f[0]] = true
		}
	}
	for _, s := range containerServers {
		if !voters[s] {
			return fmt.Errorf("dmsc operator raft list-peers on %s does not list %s as a voter:\n%s", published, s, out)
		}
	}
	if out, err := runCommand(ctx, append(env, "DMSC_TOKEN="), "", binary, "operator", "raft", "list-peers"); err == nil {
		return fmt.Errorf("dmsc operator raft list-peers without a token succeeded:\n%s", out)
	} else if !strings.Contains(err.Error(), "permission_denied") {
		return fmt.Errorf("dmsc operator raft list-peers without a token: want permission_denied, got %v", err)
	}
	env = append(env, "DMSC_CLIENT_CERT=", "DMSC_CLIENT_KEY=")
	if out, err := runCommand(ctx, env, "", binary, "operator", "raft", "list-peers"); err == nil {
		return fmt.Errorf("dmsc operator raft list-peers without a client certificate succeeded:\n%s", out)
	} else if !strings.Contains(err.Error(), "certificate") {
		return fmt.Errorf("dmsc operator raft list-peers without a client certificate: want a refused handshake, got %v", err)
	}
	return nil
}

// rogueJoinAttempts is how many failed join attempts the rogue host must
// have logged before the test looks for it in the cluster.
const rogueJoinAttempts = 3

// checkRogueStaysOut starts a host that has a certificate of the
// cluster's CA (so that only the gossip key keeps it out) but no gossip
// key, and checks that it tries to join several times and fails each
// time, that no server ever lists it as a member or a host, that the
// cluster still has exactly its own members, and that the rogue never
// became ready. It removes the rogue at the end.
func (p *composeProject) checkRogueStaysOut(ctx context.Context, services []string) error {
	if err := p.startRogue(ctx); err != nil {
		return err
	}
	var joined error
	err := pollUntil(ctx, clusterReadyBound, 250*time.Millisecond, func() error {
		for _, s := range containerServers {
			c, err := p.apiClient(ctx, s, 2*time.Second)
			if err != nil {
				return err
			}
			members, err := c.Members(ctx)
			if err != nil {
				return fmt.Errorf("%s: members: %w", s, err)
			}
			for _, m := range members {
				if m.ID == rogueService {
					joined = fmt.Errorf("%s lists the rogue host without the gossip key as a member: %+v", s, m)
					return nil
				}
			}
		}
		n, err := p.logCount(ctx, rogueService, "join failed; retrying")
		if err != nil {
			return err
		}
		if n < rogueJoinAttempts {
			return fmt.Errorf("the rogue host logged %d failed joins, want %d", n, rogueJoinAttempts)
		}
		return nil
	})
	if joined != nil {
		return joined
	}
	if err != nil {
		return err
	}
	for _, s := range containerServers {
		c, err := p.apiClient(ctx, s, 2*time.Second)
		if err != nil {
			return err
		}
		members, err := c.Members(ctx)
		if err != nil {
			return fmt.Errorf("%s: members: %w", s, err)
		}
		alive := map[string]bool{}
		for _, m := range members {
			alive[m.ID] = m.Status == "alive"
		}
		for _, want := range services {
			if !alive[want] {
				return fmt.Errorf("%s does not list %s as alive: %+v", s, want, members)
			}
		}
		if len(members) != len(services) {
			return fmt.Errorf("%s lists %d members, want %d: %+v", s, len(members), len(services), members)
		}
		hosts, _, err := c.Hosts(ctx, &client.QueryOptions{Consistent: true})
		if err != nil {
			return fmt.Errorf("%s: hosts: %w", s, err)
		}
		for _, h := range hosts {
			if h.ID == rogueService {
				return fmt.Errorf("%s registered the rogue host: %+v", s, h)
			}
		}
	}
	if st, err := p.readyOf(ctx, rogueService); err != nil || st.Ready {
		return fmt.Errorf("the rogue host says it is ready (it joined someone): %+v, %v", st, err)
	}
	return p.removeRogue(ctx)
}
