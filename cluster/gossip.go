package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// nodeMeta is what a node advertises in gossip. It stays far below
// memberlist's 512-byte limit: an inventory travels over the node RPC, only
// its hash is here.
type nodeMeta struct {
	// Role is "s" (server), "h" (host) or "sh" (server with devices).
	Role    string `json:"r"`
	Raft    string `json:"ra,omitempty"`
	RPC     string `json:"rpc"`
	HTTP    string `json:"http,omitempty"`
	Version string `json:"v,omitempty"`
	// Level is the server's feature level (fsm.FeatureLevel): the
	// command types it can apply. Absent (0) from releases before levels:
	// level 1.
	Level int `json:"fl,omitempty"`
	// Expect is the server's bootstrap-expect.
	Expect int `json:"be,omitempty"`
	// Inv is the hash of the host's current inventory.
	Inv string `json:"inv,omitempty"`
	// Leaving is set before a node leaves for good (Leave).
	Leaving bool `json:"lv,omitempty"`
	// StateHash is a server's newest state checkpoint, "index:hash"
	// (statehash.go), under a key of its digest's format: a server
	// compares only checkpoints of the format it computes, so that in a
	// rolling upgrade across a change of format no server takes another
	// for divergent. Format 2 hashes the request cache as the sum of its
	// entries' hashes; builds before it advertised format 1 as "sh".
	// Integrity is "halted" or "diverged" when its replica failed its
	// integrity check.
	StateHash string `json:"sh2,omitempty"`
	Integrity string `json:"ig,omitempty"`
}

func (m nodeMeta) server() bool { return m.Role == "s" || m.Role == "sh" }
func (m nodeMeta) host() bool   { return m.Role == "h" || m.Role == "sh" }

// metaServer reports whether gossip metadata b is a server's, without
// decoding all of it when it starts as json.Marshal writes a nodeMeta
// (the role first).
func metaServer(b []byte) bool {
	if rest, ok := bytes.CutPrefix(b, []byte(`{"r":"`)); ok {
		return bytes.HasPrefix(rest, []byte(`s"`)) || bytes.HasPrefix(rest, []byte(`sh"`))
	}
	var m nodeMeta
	return json.Unmarshal(b, &m) == nil && m.server()
}

// keepFilter is the memberlist.AliveDelegate of a node with
// Config.GossipKeep: it refuses news of a member the node does not keep.
type keepFilter struct {
	self string
	keep func(name string) bool
}

// errNotKept: a member this node does not keep (Config.GossipKeep).
var errNotKept = errors.New("not kept")

func (f keepFilter) NotifyAlive(peer *memberlist.Node) error {
	if peer.Name == f.self || f.keep(peer.Name) || metaServer(peer.Meta) {
		return nil
	}
	return errNotKept
}

// memberInfo is what this node knows of another.
type memberInfo struct {
	id     string
	addr   string
	meta   nodeMeta
	status MemberStatus
	since  time.Time
}

// members tracks the gossip pool as this node has seen it, including nodes
// that failed or left (memberlist itself only lists live ones).
type members struct {
	mu     sync.Mutex
	byID   map[string]*memberInfo
	events chan struct{} // capacity 1: "something changed"
	now    func() time.Time
	swept  time.Time // the last sweep of long-gone nodes
	// serversOnly, when set, leaves out members other than self that are
	// not servers (Config.ServersOnlyMembers).
	serversOnly bool
	self        string
}

func newMembers() *members {
	return &members{byID: map[string]*memberInfo{}, events: make(chan struct{}, 1), now: time.Now}
}

func (ms *members) signal() {
	select {
	case ms.events <- struct{}{}:
	default:
	}
}

func (ms *members) set(n *memberlist.Node, alive bool) {
	var meta nodeMeta
	_ = json.Unmarshal(n.Meta, &meta)
	ms.mu.Lock()
	m := ms.byID[n.Name]
	if m == nil && ms.serversOnly && n.Name != ms.self && !meta.server() {
		ms.mu.Unlock() // a server's first news always carries its metadata
		return
	}
	if m == nil {
		m = &memberInfo{id: n.Name}
		ms.byID[n.Name] = m
	}
	m.addr = net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	if len(n.Meta) > 0 {
		m.meta = meta
	}
	status := MemberAlive
	if !alive {
		status = MemberFailed
		if m.meta.Leaving {
			status = MemberLeft
		}
	}
	if m.status != status || m.since.IsZero() {
		m.status = status
		m.since = ms.now()
	}
	// Forget nodes gone for long; the leader tracks absences of its own.
	// The sweep runs at most once per forgetSweep: every node sees an
	// event per member, so a sweep per event would cost each node N² on
	// the pool's start (and a process of many simulated hosts N³).
	if now := ms.now(); now.Sub(ms.swept) >= forgetSweep {
		ms.swept = now
		for id, o := range ms.byID {
			if o.status != MemberAlive && now.Sub(o.since) > forgetAfter {
				delete(ms.byID, id)
			}
		}
	}
	ms.mu.Unlock()
	ms.signal()
}

// forgetAfter is how long a failed or departed node stays listed (up to
// forgetSweep longer).
const (
	forgetAfter = 72 * time.Hour
	forgetSweep = time.Minute
)

// NotifyJoin, NotifyUpdate and NotifyLeave make members a
// memberlist.EventDelegate. They run inside memberlist and must not block.
func (ms *members) NotifyJoin(n *memberlist.Node)   { ms.set(n, true) }
func (ms *members) NotifyUpdate(n *memberlist.Node) { ms.set(n, true) }
func (ms *members) NotifyLeave(n *memberlist.Node)  { ms.set(n, false) }

func (ms *members) get(id string) (memberInfo, bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m := ms.byID[id]
	if m == nil {
		return memberInfo{}, false
	}
	return *m, true
}

// list returns every known member sorted by ID.
func (ms *members) list() []memberInfo {
	ms.mu.Lock()
	out := make([]memberInfo, 0, len(ms.byID))
	for _, m := range ms.byID {
		out = append(out, *m)
	}
	ms.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// metaDelegate is the memberlist.Delegate that advertises a node's
// metadata; the node carries no gossip payload of its own.
type metaDelegate struct {
	meta func() []byte
}

func (d metaDelegate) NodeMeta(limit int) []byte {
	b := d.meta()
	if len(b) > limit {
		return nil
	}
	return b
}
func (metaDelegate) NotifyMsg([]byte)                {}
func (metaDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (metaDelegate) LocalState(bool) []byte          { return nil }
func (metaDelegate) MergeRemoteState([]byte, bool)   {}

func (m memberInfo) export() Member {
	return Member{
		ID: m.id, Server: m.meta.server(), Host: m.meta.host(),
		GossipAddr: m.addr, RaftAddr: m.meta.Raft, RPCAddr: m.meta.RPC, HTTPAddr: m.meta.HTTP,
		Version: m.meta.Version, FeatureLevel: m.meta.Level, Status: m.status, Since: m.since, Integrity: m.meta.Integrity,
	}
}
