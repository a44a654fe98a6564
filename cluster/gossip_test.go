package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/dmsc/dmsc/fsm"
)

// TestServersOnlyMembers checks which members a node lists: every one by
// default; itself and the servers only with ServersOnlyMembers, and a
// server still after it fails with no metadata in the news.
func TestServersOnlyMembers(t *testing.T) {
	node := func(name, role string) *memberlist.Node {
		n := &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 4649}
		if role != "" {
			n.Meta, _ = json.Marshal(nodeMeta{Role: role, RPC: "127.0.0.1:4647"})
		}
		return n
	}
	for _, tc := range []struct {
		serversOnly bool
		want        []string
	}{
		{false, []string{"h1", "h2", "s1", "sh1"}},
		{true, []string{"h1", "s1", "sh1"}},
	} {
		ms := newMembers()
		ms.serversOnly, ms.self = tc.serversOnly, "h1"
		ms.NotifyJoin(node("h1", "h"))
		ms.NotifyJoin(node("h2", "h"))
		ms.NotifyJoin(node("s1", "s"))
		ms.NotifyJoin(node("sh1", "sh"))
		ms.NotifyUpdate(node("h2", "h"))
		ms.NotifyLeave(node("s1", ""))
		ms.NotifyLeave(node("h2", ""))
		var got []string
		for _, m := range ms.list() {
			got = append(got, m.id)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("serversOnly=%v: members %v, want %v", tc.serversOnly, got, tc.want)
		}
		if m, ok := ms.get("s1"); !ok || m.status != MemberFailed || !m.meta.server() {
			t.Errorf("serversOnly=%v: s1 after its failure: %+v, %v", tc.serversOnly, m, ok)
		}
	}
}

// TestHostJoinsOneServer checks that a host joining contacts one server,
// not all three.
func TestHostJoinsOneServer(t *testing.T) {
	tc := newTestCluster(t, nil)
	servers := tc.servers(3)
	tc.waitLeader(servers...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	hc := tc.fastConfig("host-a", false)
	// An address that does not answer before each server: the host goes
	// past it when its name picks it first.
	for _, s := range servers {
		hc.Join = append(hc.Join, closed, s.Self().GossipAddr)
	}
	hc.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu("gpu-1", 40)}}).get
	host := tc.start(hc)
	if k, err := host.join(); k != 1 || err != nil {
		t.Fatalf("host joined %d nodes (%v), want 1", k, err)
	}
}

// TestMetaServer checks which gossip metadata reads as a server's, by the
// fast path and by decoding.
func TestMetaServer(t *testing.T) {
	meta := func(role string) []byte { b, _ := json.Marshal(nodeMeta{Role: role, RPC: "127.0.0.1:4647"}); return b }
	for _, tc := range []struct {
		meta []byte
		want bool
	}{
		{meta("s"), true},
		{meta("sh"), true},
		{meta("h"), false},
		{meta(""), false},
		{[]byte(`{ "rpc": "x", "r": "s" }`), true},
		{[]byte(`{ "r": "h" }`), false},
		{[]byte(`{"r":"shx"}`), false},
		{nil, false},
		{[]byte("{"), false},
	} {
		if got := metaServer(tc.meta); got != tc.want {
			t.Errorf("metaServer(%s) = %v, want %v", tc.meta, got, tc.want)
		}
	}
}

// TestGossipKeep starts a server and three hosts, one of which keeps only
// one of the others (Config.GossipKeep): it lists the server, that host
// and itself, though the server's whole membership reached it when it
// joined, while the server lists every host.
func TestGossipKeep(t *testing.T) {
	tc := newTestCluster(t, nil)
	server := tc.servers(1)[0]
	tc.waitLeader(server)
	names := func(n *Node) []string {
		var out []string
		for _, m := range n.ml.Members() {
			out = append(out, m.Name)
		}
		slices.Sort(out)
		return out
	}
	for _, id := range []string{"host-b", "host-c"} {
		hc := tc.fastConfig(id, false)
		hc.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu(id+"-gpu", 40)}}).get
		tc.start(hc)
	}
	poll(t, 10*time.Second, "the server to see both hosts", func() error {
		if got := names(server); len(got) != 3 {
			return fmt.Errorf("server lists %v", got)
		}
		return nil
	})
	hc := tc.fastConfig("host-a", false)
	hc.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu("host-a-gpu", 40)}}).get
	hc.GossipKeep = func(name string) bool { return name == "host-b" }
	a := tc.start(hc)
	want := []string{"host-a", "host-b", server.cfg.NodeID}
	slices.Sort(want)
	poll(t, 10*time.Second, "host-a to list what it keeps", func() error {
		if got := names(a); !slices.Equal(got, want) {
			return fmt.Errorf("host-a lists %v, want %v", got, want)
		}
		if got := names(server); len(got) != 4 {
			return fmt.Errorf("server lists %v", got)
		}
		return nil
	})
}
