package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestStartLocal starts three servers in memory and a host, each serving
// a small HTTP handler, and checks what the helper promises: addresses,
// the host registered, connections counted, a restart on the same HTTP
// address, and a fast, complete Close.
func TestStartLocal(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	inv := &inventory{devices: []fsm.DeviceSpec{gpu("g1", 16)}}
	lc, err := StartLocal(ctx, LocalConfig{
		Servers:  3,
		Hosts:    []LocalHost{{ID: "h1", Inventory: inv.get}},
		InMemory: true,
		Fast:     true,
		HTTP: func(n *Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, n.Self().ID) })
		},
		Version: "test",
		Logger:  testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close(context.Background()) })

	if n := len(lc.Nodes()); n != 4 {
		t.Fatalf("%d nodes, want 4", n)
	}
	addrs := lc.Addresses()
	if len(addrs) != 3 {
		t.Fatalf("addresses %v, want the 3 servers'", addrs)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(url string) (string, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for i, a := range addrs {
		id, err := get(a)
		if want := lc.Servers()[i].Self().ID; err != nil || id != want {
			t.Fatalf("GET %s: %q %v, want %q", a, id, err, want)
		}
		if self := lc.Servers()[i].Self(); "http://"+self.HTTPAddr != a {
			t.Errorf("%s advertises HTTP address %s, serves %s", self.ID, self.HTTPAddr, a)
		}
	}
	if lc.Connections() < 3 {
		t.Errorf("%d connections counted after 3 requests", lc.Connections())
	}
	host := lc.Node("h1")
	if host == nil || host.Self().Server || lc.Config("h1").Inventory == nil || lc.Config("s1").BootstrapExpect != 3 {
		t.Fatalf("host %v, configs %+v %+v", host, lc.Config("h1"), lc.Config("s1"))
	}
	leader, err := lc.WaitLeader(ctx)
	if err != nil || leader != lc.Leader() {
		t.Fatalf("WaitLeader %v %v, Leader %v", leader, err, lc.Leader())
	}
	waitHost(t, leader, "h1", true, 1, fsm.Available)

	// A follower stopped and restarted keeps its ports and HTTP address.
	f := followers(leader, lc.Servers()...)[0]
	id, before := f.Self().ID, f.Self()
	if err := lc.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Restart(ctx, id); err != nil {
		t.Fatal(err)
	}
	after := lc.Node(id).Self()
	if after.RaftAddr != before.RaftAddr || after.GossipAddr != before.GossipAddr || after.HTTPAddr != before.HTTPAddr {
		t.Errorf("restarted on %+v, was %+v", after, before)
	}
	if err := lc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := get("http://" + after.HTTPAddr); err != nil || got != id {
		t.Errorf("after the restart GET: %q %v", got, err)
	}

	start := time.Now()
	if err := lc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the short gossip leave each node would wait 2 s.
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Close took %v", d)
	}
	for _, n := range lc.Nodes() {
		if n.running() == nil {
			t.Errorf("%s runs after Close", n.Self().ID)
		}
	}
	if _, err := get(addrs[0]); err == nil {
		t.Error("the HTTP API answers after Close")
	}
	if err := lc.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := lc.StartNode(ctx, lc.NodeConfig("s9", true)); !errors.Is(err, ErrLocalConfig) {
		t.Errorf("StartNode after Close: %v, want ErrLocalConfig", err)
	}
}

// TestStartLocalOnDisk checks the temporary data directory: made under
// the servers' IDs and removed by Close.
func TestStartLocalOnDisk(t *testing.T) {
	lc, err := StartLocal(ctxT(t, 30*time.Second), LocalConfig{Servers: 1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	dir := lc.Config("s1").DataDir
	if _, err := os.Stat(dir); err != nil || !strings.Contains(dir, "dmsc-local-") {
		t.Fatalf("data directory %q: %v", dir, err)
	}
	if err := lc.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data directory %s after Close: %v", dir, err)
	}
}

func TestStartLocalRefuses(t *testing.T) {
	for _, n := range []int{0, 8} {
		if _, err := StartLocal(context.Background(), LocalConfig{Servers: n}); !errors.Is(err, ErrLocalConfig) {
			t.Errorf("%d servers: %v, want ErrLocalConfig", n, err)
		}
	}
	// A context that ends first: not ready, nothing left running.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := StartLocal(ctx, LocalConfig{Servers: 3, InMemory: true}); err == nil {
		t.Error("a 3-server cluster was ready within a millisecond")
	}

	lc, err := StartLocal(ctxT(t, 30*time.Second), LocalConfig{Servers: 1, InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(context.Background())
	if _, err := lc.StartNode(ctxT(t, time.Second), lc.NodeConfig("s1", true)); !errors.Is(err, ErrLocalConfig) {
		t.Errorf("a second s1: %v, want ErrLocalConfig", err)
	}
	if _, err := lc.Restart(ctxT(t, time.Second), "s1"); !errors.Is(err, ErrLocalConfig) {
		t.Errorf("restart of a running node: %v, want ErrLocalConfig", err)
	}
	if err := lc.Stop(ctxT(t, time.Second), "nobody"); !errors.Is(err, ErrLocalConfig) {
		t.Errorf("stop of an unknown node: %v, want ErrLocalConfig", err)
	}
}
