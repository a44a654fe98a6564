package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/certs"
	"github.com/dmsc/dmsc/transport"
)

// testPKI is a CA in a temporary directory and one store per node.
type testPKI struct {
	t             testing.TB
	dir           string
	caCert, caKey string
	mu            sync.Mutex
	stores        map[certs.Identity]*certs.Store
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, key, err := certs.WriteCA(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, dir: dir, caCert: ca, caKey: key, stores: map[certs.Identity]*certs.Store{}}
}

// store returns the store of a certificate of role for node, made once.
func (p *testPKI) store(role certs.Role, node string) *certs.Store {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := certs.Identity{Role: role, Node: node}
	if s, ok := p.stores[id]; ok {
		return s
	}
	f, err := certs.WriteCert(p.dir, p.caCert, p.caKey, certs.Request{Role: role, Node: node})
	if err != nil {
		p.t.Fatal(err)
	}
	s, err := certs.Load(f)
	if err != nil {
		p.t.Fatal(err)
	}
	p.stores[id] = s
	return s
}

// configure gives every node the certificate of its role and name.
func (p *testPKI) configure(c *Config) {
	role := certs.Host
	if c.Server {
		role = certs.Server
	}
	c.TLS = p.store(role, c.NodeID)
}

// logLines keeps the lines of a logger, for waiting on one.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(l.b.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// modifiedIndexes are the servers' modified indexes: they move only when
// a command changes the state.
func modifiedIndexes(nodes []*Node) []uint64 {
	var out []uint64
	for _, n := range nodes {
		_, m := n.fsm.Indexes()
		out = append(out, m)
	}
	return out
}

func TestTLSCluster(t *testing.T) {
	pki := newTestPKI(t)
	lines := &logLines{}
	tc := newTestCluster(t, pki.configure)
	tc.log = hclog.New(&hclog.LoggerOptions{Output: lines, Level: hclog.Warn})
	servers := tc.servers(3)
	leader := tc.waitLeader(servers...)
	follower := followers(leader, servers...)[0]

	t.Run("elects and applies over mutual TLS", func(t *testing.T) {
		mustApply(t, follower, staticHost("hs", gpu("g1", 40)))
		res := mustApply(t, follower, gpuRequest(40))
		var found bool
		if _, err := follower.Read(ctxT(t, 5*time.Second), ReadOptions{Consistent: true}, func(s *fsm.State) {
			_, found = s.Allocation(res.Allocation.ID)
		}); err != nil || !found {
			t.Fatalf("consistent read on a follower: found=%v err=%v", found, err)
		}
		waitSame(t, servers...)
	})

	t.Run("a host is registered only by its own certificate", func(t *testing.T) {
		inv := &inventory{devices: []fsm.DeviceSpec{gpu("h2-gpu0", 80)}}
		honest := tc.fastConfig("h2", false)
		honest.Inventory = inv.get
		tc.start(honest)
		fake := &inventory{devices: []fsm.DeviceSpec{gpu("h1-fake-gpu", 80)}}
		impostor := tc.fastConfig("h1", false)
		impostor.Inventory = fake.get
		impostor.TLS = pki.store(certs.Host, "h9")
		tc.start(impostor)

		waitHost(t, leader, "h2", true, 1, fsm.Available)
		poll(t, 15*time.Second, "the leader to refuse h1's inventory", func() error {
			if _, _, ok := hostView(t, leader, "h1"); ok {
				t.Fatal("the impostor registered h1")
			}
			if !lines.has("registering host failed", "host=h1") {
				return errors.New("not yet")
			}
			return nil
		})
		if h, _, ok := hostView(t, leader, "h1"); ok {
			t.Fatalf("the impostor registered h1: %+v", h)
		}
	})

	t.Run("a host forwards a client's writes, never a registration", func(t *testing.T) {
		host := tc.lc.Node("h2")
		mustApply(t, host, gpuRequest(80))
		_, err := host.Apply(ctxT(t, 10*time.Second), staticHost("h7", gpu("h7-gpu0", 80)))
		if !errors.Is(err, transport.ErrForbidden) {
			t.Fatalf("a registration through a host: %v, want forbidden", err)
		}
		if _, _, ok := hostView(t, leader, "h7"); ok {
			t.Fatal("h7 was registered through a host")
		}
	})

	t.Run("the RPC applies nothing for plain HTTP, hosts or clients", func(t *testing.T) {
		waitSame(t, servers...)
		before := modifiedIndexes(servers)
		forged, _ := fsm.Encode(&fsm.SetHostStatus{HostID: "hs", Up: false})
		body, _ := json.Marshal(transport.ApplyRequest{Command: forged, LeaderOnly: true})
		url := "://" + leader.Self().RPCAddr + transport.RPCApplyPath

		plain := &http.Client{Timeout: 5 * time.Second}
		if resp, err := plain.Post("http"+url, "application/json", bytes.NewReader(body)); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("plain HTTP: status %d", resp.StatusCode)
			}
		}
		for _, caller := range []*certs.Store{pki.store(certs.Host, "h2"), pki.store(certs.Client, "")} {
			id, _ := caller.Identity()
			status, err := postTLS(caller, "https"+url, body)
			if err != nil || status != http.StatusForbidden {
				t.Errorf("%s: status %d, %v; want 403", id.Role, status, err)
			}
		}
		if after := modifiedIndexes(servers); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("the state moved from %v to %v", before, after)
		}
		if h, _, _ := hostView(t, leader, "hs"); !h.Up {
			t.Fatal("host hs was marked down")
		}
		// The same request from a server is applied: the refusals above
		// are the certificates', not the request's.
		if status, err := postTLS(pki.store(certs.Server, "s9"), "https"+url, body); err != nil || status != http.StatusOK {
			t.Fatalf("server: status %d, %v", status, err)
		}
		if h, _, _ := hostView(t, leader, "hs"); h.Up {
			t.Fatal("a server's request was not applied")
		}
	})

	t.Run("raft takes entries only from servers", func(t *testing.T) {
		target := followers(tc.waitLeader(servers...), servers...)[0]
		waitSame(t, servers...)
		before := modifiedIndexes(servers)
		for name, dial := range map[string]func(string, time.Duration) (net.Conn, error){
			"plain TCP": func(addr string, d time.Duration) (net.Conn, error) { return net.DialTimeout("tcp", addr, d) },
			"host certificate": func(addr string, d time.Duration) (net.Conn, error) {
				return dialTLS(addr, d, pki.store(certs.Host, "h2").ClientConfig(certs.Identity{}))
			},
			"client certificate": func(addr string, d time.Duration) (net.Conn, error) {
				return dialTLS(addr, d, pki.store(certs.Client, "").ClientConfig(certs.Identity{}))
			},
		} {
			if err := forgeEntry(target, dial, "evil"); err == nil {
				t.Errorf("%s: a forged entry was taken", name)
			}
		}
		if after := modifiedIndexes(servers); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("the state moved from %v to %v", before, after)
		}
		for _, n := range servers {
			if _, _, ok := hostView(t, n, "evil"); ok {
				t.Fatalf("%s registered the forged host", n.cfg.NodeID)
			}
		}
		// With a server's certificate the same entry is taken: the
		// refusals above are the certificates'. (This leaves the target's
		// replica forged; it is the last check of the test.)
		server := func(addr string, d time.Duration) (net.Conn, error) {
			return dialTLS(addr, d, pki.store(certs.Server, "s9").ClientConfig(certs.Identity{}))
		}
		poll(t, 10*time.Second, "a forged entry from a server", func() error {
			if err := forgeEntry(target, server, "evil"); err != nil {
				return err
			}
			if _, _, ok := hostView(t, target, "evil"); !ok {
				return errors.New("not applied")
			}
			return nil
		})
	})
}

// postTLS posts body to url with the certificate of store and returns
// the status.
func postTLS(store *certs.Store, url string, body []byte) (int, error) {
	tr := &http.Transport{TLSClientConfig: store.ClientConfig(certs.Identity{})}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// forgeEntry sends target an AppendEntries in its current term that
// appends and commits a RegisterHost of host, as an attacker who reaches
// the Raft port with hashicorp/raft's transport would. It returns nil when
// target took the entry.
func forgeEntry(target *Node, dial func(string, time.Duration) (net.Conn, error), host string) error {
	stream := &dialStream{dial: dial, done: make(chan struct{})}
	trans := raft.NewNetworkTransport(stream, 1, 2*time.Second, nil)
	defer trans.Close()
	cmd := &fsm.RegisterHost{Host: fsm.HostSpec{ID: host}, Devices: []fsm.DeviceSpec{gpu(host+"-gpu", 80)}}
	fsm.Stamp(cmd, time.Now())
	data, err := EncodeLogEntry(cmd)
	if err != nil {
		return err
	}
	stats := target.raft.Stats()
	lastTerm, _ := strconv.ParseUint(stats["last_log_term"], 10, 64)
	last := target.raft.LastIndex()
	term := target.raft.CurrentTerm()
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("forger"), Addr: []byte("127.0.0.1:1")},
		Term:              term,
		PrevLogEntry:      last,
		PrevLogTerm:       lastTerm,
		Entries:           []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}},
		LeaderCommitIndex: last + 1,
	}
	var resp raft.AppendEntriesResponse
	addr := raft.ServerAddress(target.Self().RaftAddr)
	if err := trans.AppendEntries(raft.ServerID(target.cfg.NodeID), addr, req, &resp); err != nil {
		return err
	}
	if !resp.Success {
		return fmt.Errorf("refused by raft (term %d, last %d)", resp.Term, resp.LastLog)
	}
	return nil
}

// dialStream is a raft.StreamLayer that only dials.
type dialStream struct {
	dial func(string, time.Duration) (net.Conn, error)
	done chan struct{}
	once sync.Once
}

func (s *dialStream) Accept() (net.Conn, error) { <-s.done; return nil, net.ErrClosed }
func (s *dialStream) Close() error              { s.once.Do(func() { close(s.done) }); return nil }
func (s *dialStream) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (s *dialStream) Dial(a raft.ServerAddress, d time.Duration) (net.Conn, error) {
	return s.dial(string(a), d)
}

// With incoming connections and server names not verified (a rollout),
// the ports still speak TLS only, and the cluster works.
func TestTLSWithoutVerification(t *testing.T) {
	pki := newTestPKI(t)
	tc := newTestCluster(t, func(c *Config) {
		pki.configure(c)
		c.TLSSkipVerifyIncoming = true
		c.TLSSkipVerifyServerHostname = true
	})
	servers := tc.servers(3)
	leader := tc.waitLeader(servers...)
	follower := followers(leader, servers...)[0]
	mustApply(t, follower, staticHost("hs", gpu("g1", 40)))
	waitSame(t, servers...)
	if err := forgeEntry(follower, func(addr string, d time.Duration) (net.Conn, error) {
		return net.DialTimeout("tcp", addr, d)
	}, "evil"); err == nil {
		t.Fatal("a plain TCP connection on the Raft port took an entry")
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + leader.Self().RPCAddr + transport.RPCStatusPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain HTTP on the RPC port: %d", resp.StatusCode)
	}
}

// A node dials only servers that prove it (verify_server_hostname), by
// name where it knows it; over the node RPC and Raft alike.
func TestTLSDialsOnlyServers(t *testing.T) {
	pki := newTestPKI(t)
	listen := func(role certs.Role, node string) string {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"id":"` + node + `","server":true}`))
		}))
		srv.TLS = pki.store(role, node).ServerConfig(false)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "https://")
	}
	s2, h1 := listen(certs.Server, "s2"), listen(certs.Host, "h1")
	node := func(skip bool) *Node {
		n, err := New(Config{NodeID: "s1", Server: true, TLS: pki.store(certs.Server, "s1"), TLSSkipVerifyServerHostname: skip})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.rpc.Close)
		return n
	}
	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct {
		name     string
		skip     bool
		addr, to string // to: the server's name when known
		ok       bool
	}{
		{"a server", false, s2, "", true},
		{"the server named", false, s2, "s2", true},
		{"another server than the one named", false, s2, "s3", false},
		{"a host taken for a server", false, h1, "", false},
		{"a host, names not verified", true, h1, "", true},
		{"another server, names not verified", true, s2, "s3", true},
	} {
		n := node(tc.skip)
		_, err := n.rpc.Status(n.toServer(ctx, tc.to), tc.addr)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, certs.ErrCert)) {
			t.Errorf("RPC to %s: %v", tc.name, err)
		}
		if tc.to != "" {
			continue // Raft dials by address: it checks the role only
		}
		conn, err := dialTLS(tc.addr, 2*time.Second, n.raftTLS().dial)
		if err == nil {
			conn.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("Raft to %s: %v", tc.name, err)
		}
	}
}
