package integration

// TestLinearizable is the fault-injection test: clients allocate, release,
// renew and read while a nemesis kills, freezes and partitions servers;
// then the recorded history is checked for linearizability against the
// allocation model, and every replica's state against the invariants, the
// other replicas and the acknowledged writes. See README.md.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/inventory"
)

var (
	seedFlag = flag.Uint64("seed", 0, "seed of TestLinearizable (0: $DMSC_SEED, else the clock); printed by every run")
	soakFlag = flag.Duration("soak", 0, "run TestLinearizable for this long (release checks) instead of its short CI runs")
)

// seedEnv replays a seed like -seed.
const seedEnv = "DMSC_SEED"

// jepsenDevices is a host with three exclusive GPUs and one shareable
// 16-unit CPU: few devices, so that clients contend for them.
func jepsenDevices(host string) inventory.File {
	f := inventory.File{Host: fsm.HostSpec{ID: host, Labels: map[string]string{"node": host}}}
	for i := range 3 {
		f.Devices = append(f.Devices, fsm.DeviceSpec{
			ID: fmt.Sprintf("%s-gpu%d", host, i), Type: fsm.GPU, Name: "A100-SXM4-80GB",
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 80, ComputeUnits: 108}},
		})
	}
	f.Devices = append(f.Devices, fsm.DeviceSpec{
		ID: host + "-cpu", Type: fsm.CPU, Name: "EPYC", Shareable: true,
		Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: 16}},
	})
	return f
}

// jepsenServerArgs: hosts are never marked down during a run (the model
// has no host loss); snapshots are frequent so that restarted servers
// also catch up by snapshot install; gossip heals quickly after a
// partition; the servers compare state hashes every two entries, so
// that a replica that diverges is reported even if a snapshot install
// hides it later.
var jepsenServerArgs = []string{
	"-host-down-grace", "10m",
	"-reconnect-interval", "1s",
	"-snapshot-threshold", "64", "-snapshot-interval", "1s", "-trailing-logs", "32",
	"-state-hash-interval", "2",
}

var jepsenHostArgs = []string{"-reconnect-interval", "1s"}

// runSpec is one run: a fresh cluster, a workload and a nemesis.
type runSpec struct {
	n        int // run number, from 1
	servers  int
	hosts    int
	clients  int
	duration time.Duration
	seed     uint64
	// secure runs the cluster with TLS (Options.TLS) and gossip
	// encryption on.
	secure bool
	// acl runs the cluster with ACLs on (Options.ACL); the clients send
	// a token that may write allocations in default and read devices.
	acl bool
}

// tlsWord is how a line shows whether a run had TLS on.
func tlsWord(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// runReport is what a run measured.
type runReport struct {
	ops, checked, unknown, resolved int
	faults                          map[faultKind]int
	failovers                       []time.Duration
	violations                      []string
	took                            time.Duration
}

// TestLinearizable runs the fault-injection test: in CI a few short
// randomized runs on 3 and 5 servers; with -soak D, runs one after
// another for D (every other pair of runs with TLS and gossip encryption
// on). -seed N (or DMSC_SEED=N) replays the runs of a seed.
func TestLinearizable(t *testing.T) {
	jepsenSuite(t, false, false)
}

// TestLinearizableTLS is TestLinearizable on a cluster with TLS and
// gossip encryption on: every write, forwarded write, read index and
// Raft message goes over mutual TLS while servers are killed, frozen and
// partitioned. One run on 3 servers; with -soak, TestLinearizable's runs
// cover TLS and this one is skipped.
func TestLinearizableTLS(t *testing.T) {
	if *soakFlag > 0 {
		t.Skip("with -soak, TestLinearizable alternates runs with TLS on and off")
	}
	jepsenSuite(t, true, false)
}

// TestLinearizableACL is TestLinearizable on a cluster with ACLs on:
// every host registers with a token of its own, and the clients'
// writes and reads carry a token that may write allocations in the
// default namespace and read devices, while servers are killed, frozen
// and partitioned. One run on 3 servers.
func TestLinearizableACL(t *testing.T) {
	if *soakFlag > 0 {
		t.Skip("a soak runs TestLinearizable")
	}
	jepsenSuite(t, false, true)
}

// jepsenSuite makes the runs of TestLinearizable, TestLinearizableTLS
// (secure) or TestLinearizableACL (acl) and prints their total.
func jepsenSuite(t *testing.T, secure, acl bool) {
	seed := *seedFlag
	if seed == 0 {
		if v := os.Getenv(seedEnv); v != "" {
			s, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s=%q: %v", seedEnv, v, err)
			}
			seed = s
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	fmt.Printf("jepsen: seed=%d (replay: go test ./integration -run '^%s$' -seed %d)\n", seed, t.Name(), seed)
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	var specs []runSpec
	switch {
	case *soakFlag > 0:
	case acl && testing.Short():
		specs = []runSpec{{servers: 3, duration: 12 * time.Second, acl: true}}
	case acl:
		specs = []runSpec{{servers: 3, duration: 18 * time.Second, acl: true}}
	case secure && testing.Short():
		specs = []runSpec{{servers: 3, duration: 12 * time.Second, secure: true}}
	case secure:
		specs = []runSpec{{servers: 3, duration: 18 * time.Second, secure: true}}
	case testing.Short():
		specs = []runSpec{{servers: 3, duration: 12 * time.Second}}
	default:
		specs = []runSpec{
			{servers: 3, duration: 18 * time.Second},
			{servers: 5, duration: 18 * time.Second},
			{servers: 3, duration: 15 * time.Second},
		}
	}
	began := time.Now()
	var total runReport
	total.faults = map[faultKind]int{}
	runs, tlsRuns := 0, 0
	for i := 0; ; i++ {
		var spec runSpec
		if *soakFlag > 0 {
			left := *soakFlag - time.Since(began)
			if left < 20*time.Second {
				break
			}
			spec = runSpec{servers: 3 + 2*(i%2), duration: min(2*time.Minute, left-15*time.Second), secure: (i/2)%2 == 1}
		} else if i < len(specs) {
			spec = specs[i]
		} else {
			break
		}
		spec.n = i + 1
		spec.hosts = 2
		spec.clients = spec.servers + 2
		spec.seed = rng.Uint64()
		name := fmt.Sprintf("run%d-%dservers", spec.n, spec.servers)
		if spec.secure {
			name += "-tls"
		}
		if spec.acl {
			name += "-acl"
		}
		var rep runReport
		ok := t.Run(name, func(t *testing.T) {
			rep = jepsenRun(t, spec)
		})
		runs++
		if spec.secure {
			tlsRuns++
		}
		total.ops += rep.ops
		total.checked += rep.checked
		total.unknown += rep.unknown
		total.resolved += rep.resolved
		for k, v := range rep.faults {
			total.faults[k] += v
		}
		total.failovers = append(total.failovers, rep.failovers...)
		total.violations = append(total.violations, rep.violations...)
		if !ok && *soakFlag > 0 {
			break
		}
	}
	line := fmt.Sprintf("jepsen: total seed=%d runs=%d tls_runs=%d ops=%d checked=%d unknown=%d resolved=%d faults{%s} violations=%d failover_median_ms=%d failovers=%d took=%v",
		seed, runs, tlsRuns, total.ops, total.checked, total.unknown, total.resolved, formatFaults(total.faults),
		len(total.violations), median(total.failovers).Milliseconds(), len(total.failovers), time.Since(began).Round(time.Second))
	fmt.Println(line)
	t.Log(line)
}

// jepsenRun runs one cluster through a workload and a nemesis, then
// checks everything.
func jepsenRun(t *testing.T, spec runSpec) runReport {
	began := time.Now()
	rep := runReport{}
	fmt.Printf("jepsen: run %d: seed=%d servers=%d tls=%s acl=%s hosts=%d clients=%d duration=%v\n",
		spec.n, spec.seed, spec.servers, tlsWord(spec.secure), tlsWord(spec.acl), spec.hosts, spec.clients, spec.duration)
	rng := rand.New(rand.NewPCG(spec.seed, 2))

	parts, err := newPartitioner(t)
	if err != nil {
		t.Logf("partitions disabled: %v", err)
		fmt.Printf("jepsen: run %d: partitions disabled: %v\n", spec.n, err)
		parts = nil
	}
	opts := Options{
		Servers: spec.servers, Hosts: spec.hosts, Devices: jepsenDevices,
		ServerArgs: jepsenServerArgs, HostArgs: jepsenHostArgs, ACL: spec.acl,
	}
	if spec.secure {
		// Every agent gets its certificate from the harness's CA and the
		// same gossip key.
		key := keygen(t, t.Context())
		opts.TLS = true
		opts.ServerArgs = append(slices.Clone(jepsenServerArgs), "-encrypt", key)
		opts.HostArgs = append(slices.Clone(jepsenHostArgs), "-encrypt", key)
	}
	c := NewCluster(t, opts)
	if parts != nil {
		parts.attach(c.All())
	}
	ctx := testContext(t, spec.duration+4*time.Minute)
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	var catalog []catalogDevice
	for _, h := range c.Hosts {
		for _, d := range jepsenDevices(h.Name).Devices {
			catalog = append(catalog, catalogDevice{ID: d.ID, Host: h.Name, Type: wire.DeviceType(d.Type), Shareable: d.Shareable, Units: d.Capabilities.ComputeUnits})
		}
	}
	waitDevices(t, ctx, c, len(catalog))
	if spec.secure {
		// The API answered over HTTPS with the harness's client
		// certificate; every member encrypts gossip with the one key.
		var kr wire.KeyringResponse
		if err := c.Get(ctx, c.Servers[0], "/v1/operator/keyring", &kr); err != nil {
			t.Fatal(err)
		}
		if n := len(c.All()); kr.Members != n || len(kr.Keys) != 1 || kr.Keys[0].Primary != n {
			t.Fatalf("gossip keyring %+v, want one key, primary on all %d members", kr, n)
		}
	}

	c.AttemptTimeout = 3 * time.Second
	clientView := c
	if spec.acl {
		clientView = jepsenClientToken(t, ctx, c)
	}
	w := &workload{c: clientView, model: newAllocModel(catalog), start: time.Now(), opTimeout: 20 * time.Second, leaseTTL: 2 * time.Hour}
	logf := func(format string, args ...any) {
		t.Logf("%8.3fs "+format, append([]any{float64(w.now()) / 1e9}, args...)...)
	}
	nem := newNemesis(c, rand.New(rand.NewPCG(rng.Uint64(), 3)), parts, w.now, logf)

	stopClients, stopNemesis := make(chan struct{}), make(chan struct{})
	var clients, nemDone sync.WaitGroup
	for i := range spec.clients {
		cl := &worker{id: i, w: w, rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(10+i)))}
		clients.Add(1)
		go func() {
			defer clients.Done()
			cl.run(stopClients)
		}()
	}
	nemDone.Add(1)
	go func() {
		defer nemDone.Done()
		nem.run(stopNemesis)
	}()
	select {
	case <-time.After(spec.duration):
	case <-nem.failed:
	case <-ctx.Done():
	}
	close(stopNemesis)
	nemDone.Wait()
	nem.healAll()
	recovered := false
	select {
	case <-nem.failed:
	default:
		recovered = nem.waitRecovered("the end of the run")
	}
	close(stopClients)
	clients.Wait()
	logf("workload stopped: %d operations", len(w.history()))

	rep.faults, rep.failovers, _, rep.violations = nem.summary()
	hist := w.history()
	rep.ops = len(hist)
	check := checkRun(t, ctx, c, w, hist, recovered)
	rep.checked, rep.unknown, rep.resolved = len(check.ops), check.unknown, check.resolved
	rep.violations = append(rep.violations, check.violations...)
	for _, v := range rep.violations {
		t.Errorf("violation: %s", v)
	}
	if len(rep.violations) > 0 {
		_, _, events, _ := nem.summary()
		dir := saveArtifacts(t, spec, c, w.model, check, events)
		fmt.Printf("jepsen: run %d FAILED: history and visualization in %s\n", spec.n, dir)
		t.Errorf("history, visualization and logs saved in %s", dir)
	}
	rep.took = time.Since(began)
	fmt.Printf("jepsen: run %d: seed=%d servers=%d tls=%s acl=%s ops=%d checked=%d unknown=%d resolved=%d linearizable=%s faults{%s} violations=%d failover_median_ms=%d took=%v\n",
		spec.n, spec.seed, spec.servers, tlsWord(spec.secure), tlsWord(spec.acl), rep.ops, rep.checked, rep.unknown, rep.resolved, check.result,
		formatFaults(rep.faults), len(rep.violations), median(rep.failovers).Milliseconds(), rep.took.Round(100*time.Millisecond))
	return rep
}

// jepsenClientToken is c as the workload's clients see it with ACLs on:
// with a token that may write allocations in default and read devices,
// and nothing else (checked: it may not save a snapshot).
func jepsenClientToken(t *testing.T, ctx context.Context, c *Cluster) *Cluster {
	t.Helper()
	secret, err := c.NewToken(ctx, "jepsen-client", wire.ACLRules{Namespaces: map[string]string{"default": "write"}, Devices: "read"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.WithToken(secret)
	var apiErr *APIError
	if _, err := fetchSnapshot(ctx, cc, c.Servers[0]); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("the clients' token saved a snapshot: %v", err)
	}
	if err := cc.Get(ctx, c.Servers[0], "/v1/retention", nil); !errors.As(err, &apiErr) || apiErr.Body.Code != wire.CodePermissionDenied {
		t.Fatalf("the clients' token read the retention: %v, want permission_denied", err)
	}
	return cc
}

// waitDevices waits until the leader sees want devices, all available.
func waitDevices(t *testing.T, ctx context.Context, c *Cluster, want int) {
	t.Helper()
	var last []wire.Device
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		leader, err := c.Leader(ctx)
		if err != nil {
			return false, err
		}
		ds, err := devices(ctx, c, leader, "&status=available")
		last = ds
		return err == nil && len(ds) == want, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d available devices: %v (last saw %v)", want, err, deviceIDs(last))
	}
}

// checkResult is what the checks after a run found.
type checkResult struct {
	ops               []historyOp // the history checked (unknowns resolved or dropped)
	unknown, resolved int
	result            porcupine.CheckResult
	info              porcupine.LinearizationInfo
	snapshots         map[string][]byte
	violations        []string
}

// checkRun resolves unknown outcomes from the final state, checks the
// history for linearizability, and every replica's state.
//
// When the cluster did not recover (recovered false; the run has failed
// already), only the history is checked, for the diagnosis, with unknown
// outcomes resolved from the stale state of the replica that knows the
// most allocations.
func checkRun(t *testing.T, ctx context.Context, c *Cluster, w *workload, hist []historyOp, recovered bool) *checkResult {
	res := &checkResult{}
	violation := func(format string, args ...any) {
		res.violations = append(res.violations, fmt.Sprintf(format, args...))
	}

	// The final state, as the leader sees it.
	var final []wire.Allocation
	if recovered {
		var err error
		if final, err = allAllocations(ctx, c, nil); err != nil {
			violation("reading the final allocations: %v", err)
			return res
		}
	} else {
		for _, p := range Running(c.Servers) {
			if list, err := allAllocations(ctx, c, p); err == nil && len(list) > len(final) {
				final = list
			}
		}
		t.Logf("the cluster did not recover: unknown outcomes resolved from a replica's stale state (%d allocations)", len(final))
	}
	byRequest := map[string]wire.Allocation{}
	byID := map[string]wire.Allocation{}
	for _, a := range final {
		byRequest[a.RequestID] = a
		byID[a.ID] = a
	}

	// Unknown outcomes, as etcd's robustness tests treat them: a write
	// whose effect is in the final state took effect at some point after
	// it was called (it stays open to the end of the history); one whose
	// effect is not there never took effect (dropped); an unknown read or
	// renew constrains nothing (dropped).
	for _, op := range hist {
		if op.Output.Outcome != outUnknown {
			res.ops = append(res.ops, op)
			continue
		}
		res.unknown++
		switch op.Input.Kind {
		case opAllocate:
			a, ok := byRequest[op.Input.RequestID]
			if !ok {
				continue
			}
			switch {
			case a.Status == wire.Failed:
				op.Output = opOutput{Outcome: outRefused, AllocID: a.ID, Error: op.Output.Error, Resolved: true}
			case len(a.Devices) > 0:
				op.Output = opOutput{Outcome: outOK, AllocID: a.ID, Host: a.Host, Held: w.heldOf(a.Devices), Error: op.Output.Error, Resolved: true}
			default:
				violation("allocate %s: unknown outcome, the final state has it %s without devices", op.Input.RequestID, a.Status)
				continue
			}
		case opRelease:
			a, ok := byID[op.Input.AllocID]
			if !ok || a.Status != wire.Released {
				continue
			}
			op.Output = opOutput{Outcome: outOK, Error: op.Output.Error, Resolved: true}
		default:
			continue
		}
		res.resolved++
		res.ops = append(res.ops, op)
	}

	// Linearizability.
	var end int64
	for _, op := range res.ops {
		end = max(end, op.Call, op.Return)
	}
	nclients := 0
	for _, op := range res.ops {
		nclients = max(nclients, op.Client+1)
	}
	var pops []porcupine.Operation
	pending := 0
	for _, op := range res.ops {
		ret, client := op.Return, op.Client
		if ret < 0 {
			// Open to the end: on a row of its own in the visualization.
			ret, client = end+1, nclients+pending
			pending++
		}
		pops = append(pops, porcupine.Operation{ClientId: client, Input: op.Input, Call: op.Call, Output: op.Output, Return: ret})
	}
	timeout := time.Minute
	if *soakFlag > 0 {
		timeout = 10 * time.Minute
	}
	checkStart := time.Now()
	res.result, res.info = porcupine.CheckOperationsVerbose(w.model.porcupine(), pops, timeout)
	t.Logf("porcupine: %s over %d operations in %v", res.result, len(pops), time.Since(checkStart).Round(time.Millisecond))
	switch res.result {
	case porcupine.Illegal:
		violation("the history of %d operations is not linearizable%s", len(pops), firstIllegal(w.model, res, pops))
	case porcupine.Unknown:
		violation("the linearizability check did not finish within %v (%d operations)", timeout, len(pops))
	}

	if !recovered {
		return res
	}

	// Every replica: the same bytes once quiet, the invariants, and the
	// acknowledged writes.
	snaps, err := quietSnapshots(ctx, c)
	res.snapshots = snaps
	if err != nil {
		violation("%v", err)
	}
	// The servers compared state hashes all along (every two entries,
	// jepsenServerArgs): a replica that diverged and then caught up by a
	// snapshot leaves no trace in the snapshots above, but one here.
	for _, p := range Running(c.Servers) {
		st, err := c.Status(ctx, p)
		switch {
		case err != nil:
			violation("%s: reading its status: %v", p.Name, err)
		case st.Integrity != "" || st.Divergence != "":
			violation("%s: replica integrity %q, divergence seen: %s", p.Name, st.Integrity, st.Divergence)
		}
	}
	acked := map[string][]held{}
	releasedOK := map[string]bool{}
	for _, op := range res.ops {
		switch {
		case op.Input.Kind == opAllocate && op.Output.Outcome == outOK:
			acked[op.Output.AllocID] = op.Output.Held
		case op.Input.Kind == opRelease && op.Output.Outcome == outOK:
			releasedOK[op.Input.AllocID] = true
		}
	}
	for _, name := range sortedKeys(snaps) {
		body, _, _ := cluster.SplitRaftSnapshot(snaps[name])
		st, err := fsm.Restore(bytes.NewReader(body))
		if err != nil {
			violation("%s: the snapshot does not restore: %v", name, err)
			continue
		}
		if err := st.CheckInvariants(); err != nil {
			violation("%s: invariants: %v", name, err)
		}
		for id, hs := range acked {
			a, ok := st.Allocation(id)
			var inState []held
			if ok {
				for _, d := range a.Devices {
					inState = append(inState, w.held(d.DeviceID, d.Amount.ComputeUnits))
				}
			}
			switch {
			case !ok:
				violation("%s: acknowledged allocation %s is missing", name, id)
			case releasedOK[id] && a.Status != fsm.Released:
				violation("%s: allocation %s was released, it is %s", name, id, a.Status)
			case !releasedOK[id] && a.Status != fsm.Active:
				violation("%s: acknowledged allocation %s was not released, it is %s", name, id, a.Status)
			case !sameHeld(inState, hs):
				violation("%s: allocation %s holds %s, was acknowledged with %s", name, id, describeHeld(inState), describeHeld(hs))
			}
		}
		for _, a := range st.Live() {
			if _, ok := acked[a.ID]; !ok {
				violation("%s: allocation %s (request %s) is %s but no client was told of it", name, a.ID, a.RequestID, a.Status)
			}
		}
	}
	return res
}

// firstIllegal says where the longest linearizable prefix stops: the
// state it reaches and why none of the operations that could come next
// fits it.
func firstIllegal(m *allocModel, res *checkResult, pops []porcupine.Operation) string {
	parts := res.info.PartialLinearizations()
	if len(parts) == 0 {
		return ""
	}
	var longest []int
	for _, p := range parts[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	state := m.porcupine().Init().(*allocState)
	done := map[int]bool{}
	for _, i := range longest {
		_, state = m.step(state, pops[i].Input.(opInput), pops[i].Output.(opOutput))
		done[i] = true
	}
	var next int64 = math.MaxInt64
	for i, op := range pops {
		if !done[i] {
			next = min(next, op.Return)
		}
	}
	var why []string
	for i, op := range pops {
		if done[i] || op.Call > next || len(why) == 5 {
			continue
		}
		in, out := op.Input.(opInput), op.Output.(opOutput)
		reason := ""
		switch {
		case in.Kind == opAllocate && out.Outcome == outOK:
			reason = m.placementError(state, in, out)
		case in.Kind == opReadDevices && out.Outcome == outOK:
			reason = m.viewError(state, out.Devices)
		}
		if reason != "" {
			reason = ": " + reason
		}
		why = append(why, fmt.Sprintf("client %d at %.3fs: %s%s", op.ClientId, float64(op.Call)/1e9, describeOp(in, out), reason))
	}
	return fmt.Sprintf("; the longest linearizable prefix has %d operations and reaches {%s}; none of the next fits: %s",
		len(longest), describeState(state), strings.Join(why, "; "))
}

// allAllocations lists every allocation, live and ended, with consistent
// reads of the leader; or, from a server given, as its replica has them.
func allAllocations(ctx context.Context, c *Cluster, from *Process) ([]wire.Allocation, error) {
	var out []wire.Allocation
	next := ""
	for {
		leader, path := from, "/v1/allocations?stale&history=true&limit=1000"
		if from == nil {
			var err error
			if leader, err = c.Leader(ctx); err != nil {
				return nil, err
			}
			path = "/v1/allocations?consistent&history=true&limit=1000"
		}
		var page wire.AllocationList
		if next != "" {
			path += "&next=" + next
		}
		if err := c.Get(ctx, leader, path, &page); err != nil {
			return nil, err
		}
		out = append(out, page.Allocations...)
		if page.Next == "" {
			return out, nil
		}
		next = page.Next
	}
}

// quietSnapshots fetches GET /v1/snapshot from every server until all are
// byte-identical (a tick between two fetches makes them differ for a
// while); it returns the last ones fetched, with an error if they never
// agreed.
func quietSnapshots(ctx context.Context, c *Cluster) (map[string][]byte, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		snaps := map[string][]byte{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []string
		for _, s := range c.Servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := fetchSnapshot(ctx, c, s)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", s.Name, err))
					return
				}
				snaps[s.Name] = b
			}()
		}
		wg.Wait()
		same := len(errs) == 0
		var first []byte
		for _, b := range snaps {
			if first == nil {
				first = b
			} else if !bytes.Equal(first, b) {
				same = false
			}
		}
		if same {
			return snaps, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if len(errs) > 0 {
				return snaps, fmt.Errorf("fetching snapshots: %s", strings.Join(errs, "; "))
			}
			return snaps, fmt.Errorf("the replicas' snapshots never agreed within 30s: %s", snapshotDiff(snaps))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func fetchSnapshot(ctx context.Context, c *Cluster, p *Process) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL("/v1/snapshot"), nil)
	if err != nil {
		return nil, err
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
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// snapshotDiff names the top-level sections in which snapshots differ.
func snapshotDiff(snaps map[string][]byte) string {
	decoded := map[string]map[string]json.RawMessage{}
	for name, b := range snaps {
		var m map[string]json.RawMessage
		body, _, _ := cluster.SplitRaftSnapshot(b)
		_ = json.Unmarshal(body, &m)
		decoded[name] = m
	}
	names := sortedKeys(decoded)
	if len(names) < 2 {
		return "fewer than two snapshots"
	}
	var diffs []string
	ref := decoded[names[0]]
	for _, name := range names[1:] {
		var keys []string
		for k := range ref {
			if !reflect.DeepEqual([]byte(ref[k]), []byte(decoded[name][k])) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		diffs = append(diffs, fmt.Sprintf("%s vs %s differ in %v", names[0], name, keys))
	}
	return strings.Join(diffs, "; ")
}

// artifactDir is where a failed run's files go: the test's artifact
// directory when -artifacts keeps it, else a directory left in the
// temporary directory.
func artifactDir(t *testing.T, spec runSpec) string {
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("dmsc-jepsen-%d-run%d-", spec.seed, spec.n))
	if err != nil {
		return t.ArtifactDir()
	}
	return dir
}

// saveArtifacts writes the history (JSON), porcupine's visualization, the
// replicas' snapshots and the processes' logs.
func saveArtifacts(t *testing.T, spec runSpec, c *Cluster, m *allocModel, check *checkResult, events []nemesisEvent) string {
	dir := artifactDir(t, spec)
	record := struct {
		Seed    uint64         `json:"seed"`
		Servers int            `json:"servers"`
		Result  string         `json:"result"`
		Faults  []nemesisEvent `json:"faults"`
		Ops     []historyOp    `json:"operations"`
		Errors  []string       `json:"violations"`
	}{spec.seed, spec.servers, string(check.result), events, check.ops, check.violations}
	b, err := json.MarshalIndent(record, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
	}
	if err != nil {
		t.Logf("saving the history: %v", err)
	}
	if check.result != "" {
		var notes []porcupine.Annotation
		for _, ev := range events {
			notes = append(notes, porcupine.Annotation{
				Tag: "nemesis", Start: ev.Start, End: ev.End,
				Description: string(ev.Kind), Details: ev.Targets, BackgroundColor: "#f7d0d0",
			})
		}
		check.info.AddAnnotations(notes)
		if err := porcupine.VisualizePath(m.porcupine(), check.info, filepath.Join(dir, "visualization.html")); err != nil {
			t.Logf("saving the visualization: %v", err)
		}
	}
	for name, snap := range check.snapshots {
		_ = os.WriteFile(filepath.Join(dir, name+".snap"), snap, 0o644)
	}
	for _, p := range c.All() {
		if src, err := os.ReadFile(p.LogPath); err == nil && filepath.Dir(p.LogPath) != dir {
			_ = os.WriteFile(filepath.Join(dir, p.Name+".log"), src, 0o644)
		}
	}
	for _, p := range c.Servers {
		if err := copyDataDir(p, filepath.Join(dir, p.Name+"-data")); err != nil {
			t.Logf("saving %s's data directory: %v", p.Name, err)
		}
	}
	return dir
}

// copyDataDir copies a server's data directory (its Raft log, stable
// store and snapshots, for replaying what each replica applied), the
// server frozen meanwhile so that the copy is whole.
func copyDataDir(p *Process, to string) error {
	if p.Running() {
		if err := p.Signal(syscall.SIGSTOP); err == nil {
			defer func() { _ = p.Signal(syscall.SIGCONT) }()
		}
	}
	return os.CopyFS(to, os.DirFS(p.DataDir))
}
