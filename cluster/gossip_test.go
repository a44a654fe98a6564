package cluster

import (
	"encoding/json"
	"net"
	"slices"
	"testing"

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
