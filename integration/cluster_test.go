package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// testContext bounds a test's waiting.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// gpuRequest asks for count GPUs, on host when it is not empty.
func gpuRequest(requestID string, count int, host string) wire.AllocateRequest {
	r := wire.AllocateRequest{RequestID: requestID}
	r.Claims = []wire.Claim{{Type: wire.GPU, Count: count}}
	if host != "" {
		r.Labels.Required = map[string]string{"node": host}
	}
	return r
}

// allocate writes an allocation through targets and checks it is active.
func allocate(t *testing.T, ctx context.Context, c *Cluster, targets []*Process, req wire.AllocateRequest) wire.Allocation {
	t.Helper()
	var a wire.Allocation
	if err := c.Write(ctx, targets, http.MethodPost, "/v1/allocations", req.RequestID, req, &a); err != nil {
		t.Fatalf("allocate %s: %v", req.RequestID, err)
	}
	if a.Status != wire.Active || len(a.Devices) == 0 {
		t.Fatalf("allocate %s: got %s with devices %v, want active", req.RequestID, a.Status, a.Devices)
	}
	return a
}

func release(t *testing.T, ctx context.Context, c *Cluster, targets []*Process, id string) {
	t.Helper()
	var a wire.Allocation
	if err := c.Write(ctx, targets, http.MethodPost, "/v1/allocations/"+id+"/release", "release-"+id, nil, &a); err != nil {
		t.Fatalf("release %s: %v", id, err)
	}
	if a.Status != wire.Released {
		t.Fatalf("release %s: status %s", id, a.Status)
	}
}

// getAllocation reads an allocation from p with a consistent read.
func getAllocation(ctx context.Context, c *Cluster, p *Process, id string) (wire.Allocation, error) {
	var a wire.Allocation
	err := c.Get(ctx, p, "/v1/allocations/"+url.PathEscape(id)+"?consistent", &a)
	return a, err
}

func devices(ctx context.Context, c *Cluster, p *Process, query string) ([]wire.Device, error) {
	var ds []wire.Device
	err := c.Get(ctx, p, "/v1/devices?consistent"+query, &ds)
	return ds, err
}

// waitInventory waits until every host of c is up with all of its devices
// available, as the leader sees it.
func waitInventory(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	want := 0
	for _, h := range c.Hosts {
		want += len(DefaultDevices(h.Name).Devices)
	}
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
		t.Fatalf("waiting for %d available devices: %v (last saw %d: %v)", want, err, len(last), deviceIDs(last))
	}
}

func deviceIDs(ds []wire.Device) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID + "/" + string(d.Status)
	}
	return ids
}

func assignedIDs(a wire.Allocation) []string {
	var ids []string
	for _, d := range a.Devices {
		ids = append(ids, d.DeviceID)
	}
	sort.Strings(ids)
	return ids
}

// activeCount is how many allocations are active, as the leader sees it.
func activeCount(t *testing.T, ctx context.Context, c *Cluster) int {
	t.Helper()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var list wire.AllocationList
	if err := c.Get(ctx, leader, "/v1/allocations?consistent&status=active&limit=1000", &list); err != nil {
		t.Fatal(err)
	}
	return len(list.Allocations)
}

// TestClusterFormsThroughJoin: three servers started with the same
// command line find each other through -join, bootstrap one Raft
// configuration of three voters, and register both hosts' devices; a write
// through a follower and one through a host are seen by every server.
func TestClusterFormsThroughJoin(t *testing.T) {
	c := StartCluster(t, Options{})
	ctx := testContext(t, 60*time.Second)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, s := range c.Servers {
		var cfg wire.RaftConfiguration
		if err := c.Get(ctx, s, "/v1/cluster/raft", &cfg); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		got := map[string]string{}
		leaders := 0
		for _, rs := range cfg.Servers {
			if !rs.Voter {
				t.Errorf("%s reports %s as a non-voter", s.Name, rs.ID)
			}
			if rs.Leader {
				leaders++
				if rs.ID != leader.Name {
					t.Errorf("%s reports leader %s, the leader says it is %s", s.Name, rs.ID, leader.Name)
				}
			}
			got[rs.ID] = rs.Address
		}
		want := map[string]string{}
		for _, p := range c.Servers {
			want[p.Name] = p.RaftAddr
		}
		if !reflect.DeepEqual(got, want) || leaders != 1 {
			t.Errorf("%s: raft configuration %+v, want voters %v and one leader", s.Name, cfg.Servers, want)
		}
	}

	waitInventory(t, ctx, c)
	var hosts []wire.Host
	if err := c.Get(ctx, leader, "/v1/hosts?consistent", &hosts); err != nil {
		t.Fatal(err)
	}
	if len(hosts) != len(c.Hosts) {
		t.Fatalf("hosts %+v, want %d", hosts, len(c.Hosts))
	}
	for i, h := range hosts {
		want := DefaultDevices(c.Hosts[i].Name)
		var ids []string
		for _, d := range want.Devices {
			ids = append(ids, d.ID)
		}
		sort.Strings(ids)
		if h.ID != c.Hosts[i].Name || !h.Up || !reflect.DeepEqual(h.Devices, ids) {
			t.Errorf("host %+v, want %s up with devices %v", h, c.Hosts[i].Name, ids)
		}
		if h.Address != c.Hosts[i].RPCAddr {
			t.Errorf("host %s registered at %q, want its RPC address %s", h.ID, h.Address, c.Hosts[i].RPCAddr)
		}
	}

	var members []wire.Member
	if err := c.Get(ctx, leader, "/v1/cluster/members", &members); err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, m := range members {
		if m.Status == "alive" {
			alive++
		}
	}
	if alive != len(c.All()) {
		t.Errorf("members %+v: %d alive, want %d", members, alive, len(c.All()))
	}

	// Writes are accepted anywhere: a follower forwards to the leader, a
	// host to a server.
	follower := Except(c.Servers, leader)[0]
	viaFollower := allocate(t, ctx, c, []*Process{follower}, gpuRequest("form-follower", 1, ""))
	viaHost := allocate(t, ctx, c, []*Process{c.Hosts[0]}, gpuRequest("form-host", 2, "h2"))
	if viaHost.Host != "h2" {
		t.Errorf("allocation through h1 asked for h2, landed on %q", viaHost.Host)
	}
	for _, s := range c.Servers {
		for _, want := range []wire.Allocation{viaFollower, viaHost} {
			got, err := getAllocation(ctx, c, s, want.ID)
			if err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
			if got.Status != wire.Active || !reflect.DeepEqual(assignedIDs(got), assignedIDs(want)) {
				t.Errorf("%s sees %s as %s on %v, want active on %v", s.Name, want.ID, got.Status, assignedIDs(got), assignedIDs(want))
			}
		}
	}
}

// TestLeaderKillFailover kills the leader with SIGKILL, measures the time
// until a write sent to the survivors is acknowledged, restarts the killed
// server and waits for it to rejoin; five times (once with -short). It
// prints the median as failover_median_ms=N.
func TestLeaderKillFailover(t *testing.T) {
	kills := 5
	if testing.Short() {
		kills = 1
	}
	c := StartCluster(t, Options{})
	ctx := testContext(t, 150*time.Second)
	waitInventory(t, ctx, c)

	var took []time.Duration
	for i := range kills {
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		survivors := Except(c.Servers, leader)
		reqID := fmt.Sprintf("failover-%d", i)

		start := time.Now()
		if err := leader.Kill(); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		a := allocate(t, wctx, c, survivors, gpuRequest(reqID, 1, ""))
		cancel()
		d := time.Since(start)
		took = append(took, d)

		newLeader, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kill %d: %s killed, %s leads, first write acknowledged after %v", i+1, leader.Name, newLeader.Name, d.Round(time.Millisecond))
		if newLeader == leader {
			t.Fatalf("kill %d: the killed server %s still leads", i+1, leader.Name)
		}
		// Retries of the write carried one request ID: one allocation.
		if n := activeCount(t, ctx, c); n != 1 {
			t.Fatalf("kill %d: %d active allocations after one acknowledged write (%s), want 1", i+1, n, a.ID)
		}
		release(t, ctx, c, survivors, a.ID)

		if err := leader.Start(); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx, leader); err != nil {
			t.Fatal(err)
		}
		// It rejoined: it has caught up with the write made without it.
		if got, err := getAllocation(ctx, c, leader, a.ID); err != nil || got.Status != wire.Released {
			t.Fatalf("kill %d: restarted %s sees %s as %q (err %v), want released", i+1, leader.Name, a.ID, got.Status, err)
		}
	}
	med := median(took)
	t.Logf("failover over %d kills: median %v, each %v", kills, med.Round(time.Millisecond), took)
	fmt.Printf("failover_median_ms=%d\n", med.Milliseconds())
}

// TestHostKilledAndRestarted: a host killed with SIGKILL is marked down
// after the host-down grace (its devices offline, its allocations lost);
// the other host is untouched; restarted, its devices are available again.
func TestHostKilledAndRestarted(t *testing.T) {
	const grace = time.Second
	c := StartCluster(t, Options{ServerArgs: []string{"-host-down-grace", grace.String()}})
	ctx := testContext(t, 90*time.Second)
	waitInventory(t, ctx, c)

	onH1 := allocate(t, ctx, c, c.Servers, gpuRequest("host-h1", 2, "h1"))
	onH2 := allocate(t, ctx, c, c.Servers, gpuRequest("host-h2", 1, "h2"))
	h1 := c.Process("h1")

	killedAt := time.Now()
	if err := h1.Kill(); err != nil {
		t.Fatal(err)
	}
	var lost wire.Allocation
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		leader, err := c.Leader(ctx)
		if err != nil {
			return false, err
		}
		lost, err = getAllocation(ctx, c, leader, onH1.ID)
		return err == nil && lost.Status == wire.Lost, nil
	})
	if err != nil {
		t.Fatalf("allocation on the killed host: %v (last status %q)", err, lost.Status)
	}
	t.Logf("host h1 killed; its allocation lost after %v (grace %v)", time.Since(killedAt).Round(time.Millisecond), grace)
	if gap := lost.EndedAt.Sub(killedAt); gap < grace {
		t.Errorf("allocation lost %v after the kill, before the %v grace", gap, grace)
	}
	if !reflect.DeepEqual(assignedIDs(lost), assignedIDs(onH1)) {
		t.Errorf("lost allocation holds %v, was %v", assignedIDs(lost), assignedIDs(onH1))
	}

	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := devices(ctx, c, leader, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		wantOffline := d.Host == "h1"
		if (d.Status == wire.Offline) != wantOffline {
			t.Errorf("device %s of %s is %s, want offline=%v", d.ID, d.Host, d.Status, wantOffline)
		}
		if wantOffline && len(d.Allocations) != 0 {
			t.Errorf("offline device %s still holds %v", d.ID, d.Allocations)
		}
	}
	var host wire.Host
	if err := c.Get(ctx, leader, "/v1/hosts/h1?consistent", &host); err != nil || host.Up {
		t.Errorf("host h1: %+v (err %v), want down", host, err)
	}
	if got, err := getAllocation(ctx, c, leader, onH2.ID); err != nil || got.Status != wire.Active {
		t.Errorf("allocation on h2: %q (err %v), want active", got.Status, err)
	}
	var refused wire.Allocation
	err = c.Write(ctx, c.Servers, http.MethodPost, "/v1/allocations", "host-h1-down", gpuRequest("host-h1-down", 1, "h1"), &refused)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Body.Code != wire.CodeNoCapacity {
		t.Errorf("allocate on the down host: %+v, %v; want no_capacity", refused, err)
	}

	if err := h1.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, h1); err != nil {
		t.Fatal(err)
	}
	waitInventory(t, ctx, c)
	again := allocate(t, ctx, c, c.Servers, gpuRequest("host-h1-back", 4, "h1"))
	if again.Host != "h1" {
		t.Errorf("allocation after the restart landed on %q, want h1", again.Host)
	}
	if got, err := getAllocation(ctx, c, leader, onH1.ID); err != nil || got.Status != wire.Lost {
		t.Errorf("allocation lost with h1 is %q after its return (err %v), want lost", got.Status, err)
	}
}

// TestWholeClusterRestart stops every process with SIGTERM and starts them
// again: every acknowledged allocation is there with the same devices, on
// every server, restored from a snapshot and the log after it.
func TestWholeClusterRestart(t *testing.T) {
	c := StartCluster(t, Options{ServerArgs: []string{
		"-snapshot-threshold", "8", "-snapshot-interval", "200ms", "-trailing-logs", "4",
	}})
	ctx := testContext(t, 120*time.Second)
	waitInventory(t, ctx, c)

	acked := map[string]wire.Allocation{}
	var released []string
	for i, req := range []wire.AllocateRequest{
		gpuRequest("restart-0", 1, "h1"),
		gpuRequest("restart-1", 2, "h2"),
		gpuRequest("restart-2", 1, ""),
		gpuRequest("restart-3", 1, ""),
		{Request: wire.Request{Claims: []wire.Claim{{Type: wire.CPU, Count: 1, Amount: wire.Resources{ComputeUnits: 8}}}}, RequestID: "restart-4"},
		{Request: wire.Request{Claims: []wire.Claim{{Type: wire.CPU, Count: 1, Amount: wire.Resources{ComputeUnits: 12}}}}, RequestID: "restart-5"},
	} {
		through := c.All()[i%len(c.All())]
		a := allocate(t, ctx, c, []*Process{through}, req)
		acked[a.ID] = a
	}
	for id := range acked {
		if len(released) < 2 {
			release(t, ctx, c, c.Servers, id)
			released = append(released, id)
		}
	}
	for _, id := range released {
		delete(acked, id)
	}
	// Every server has taken a snapshot; then more writes land in the log
	// after it.
	for _, s := range c.Servers {
		err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
			m, _ := filepath.Glob(filepath.Join(s.DataDir, "raft", "snapshots", "*", "meta.json"))
			return len(m) > 0, nil
		})
		if err != nil {
			t.Fatalf("%s took no snapshot: %v", s.Name, err)
		}
	}
	for i := range 2 {
		a := allocate(t, ctx, c, c.Servers, gpuRequest(fmt.Sprintf("restart-after-snapshot-%d", i), 1, ""))
		acked[a.ID] = a
	}

	stopStart := time.Now()
	if err := c.Stop(c.All()...); err != nil {
		t.Fatalf("stopping the cluster: %v", err)
	}
	t.Logf("stopped %d processes in %v", len(c.All()), time.Since(stopStart).Round(time.Millisecond))
	if err := c.Start(c.All()...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, c.All()...); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted and ready in %v", time.Since(stopStart).Round(time.Millisecond))

	for _, s := range c.Servers {
		for id, want := range acked {
			got, err := getAllocation(ctx, c, s, id)
			if err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
			if got.Status != wire.Active || got.Host != want.Host || !reflect.DeepEqual(got.Devices, want.Devices) {
				t.Errorf("%s: %s after the restart is %s on %s %+v, was active on %s %+v", s.Name, id,
					got.Status, got.Host, got.Devices, want.Host, want.Devices)
			}
		}
		for _, id := range released {
			if got, err := getAllocation(ctx, c, s, id); err != nil || got.Status != wire.Released {
				t.Errorf("%s: released %s is %q after the restart (err %v)", s.Name, id, got.Status, err)
			}
		}
	}
	// The hosts came back with the allocations on their devices.
	waitInventory(t, ctx, c)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := devices(ctx, c, leader, "")
	if err != nil {
		t.Fatal(err)
	}
	holds := map[string][]string{}
	for _, d := range ds {
		holds[d.ID] = d.Allocations
	}
	for id, a := range acked {
		for _, dev := range assignedIDs(a) {
			if !strings.Contains(strings.Join(holds[dev], ","), id) {
				t.Errorf("device %s holds %v, not %s", dev, holds[dev], id)
			}
		}
	}
	if n := activeCount(t, ctx, c); n != len(acked) {
		t.Errorf("%d active allocations after the restart, want %d", n, len(acked))
	}
}

// TestServersRestartWhileHostsRun stops and restarts every server while
// the hosts keep running: the hosts find the servers again on their own
// and their allocations stay active. It runs with the default host-down
// grace, which must outlast the hosts' reconnect interval (10 s, not
// configurable): with a grace shorter than that, every running host is
// marked down after such a restart and its allocations are lost.
func TestServersRestartWhileHostsRun(t *testing.T) {
	c := StartCluster(t, Options{})
	ctx := testContext(t, 90*time.Second)
	waitInventory(t, ctx, c)
	var acked []wire.Allocation
	for _, h := range c.Hosts {
		acked = append(acked, allocate(t, ctx, c, c.Servers, gpuRequest("servers-restart-"+h.Name, 1, h.Name)))
	}

	start := time.Now()
	if err := c.Stop(c.Servers...); err != nil {
		t.Fatalf("stopping the servers: %v", err)
	}
	if err := c.Start(c.Servers...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, c.Servers...); err != nil {
		t.Fatal(err)
	}
	// Every host is back in the pool, as the leader sees it.
	err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		leader, err := c.Leader(ctx)
		if err != nil {
			return false, err
		}
		var members []wire.Member
		if err := c.Get(ctx, leader, "/v1/cluster/members", &members); err != nil {
			return false, nil
		}
		alive := 0
		for _, m := range members {
			if m.Host && m.Status == "alive" {
				alive++
			}
		}
		return alive == len(c.Hosts), nil
	})
	if err != nil {
		t.Fatalf("hosts did not rejoin the restarted servers: %v", err)
	}
	t.Logf("hosts rejoined %v after the servers were stopped", time.Since(start).Round(time.Millisecond))
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acked {
		got, err := getAllocation(ctx, c, leader, a.ID)
		if err != nil || got.Status != wire.Active || !reflect.DeepEqual(got.Devices, a.Devices) {
			t.Errorf("allocation %s on %s: %s %+v (err %v), want active on %+v", a.ID, a.Host, got.Status, got.Devices, err, a.Devices)
		}
	}
	var hosts []wire.Host
	if err := c.Get(ctx, leader, "/v1/hosts?consistent", &hosts); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if !h.Up {
			t.Errorf("host %s is down after the servers restarted", h.ID)
		}
	}
}
