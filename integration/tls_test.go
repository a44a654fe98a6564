package integration

// Attacks on a cluster with TLS on (issue 11), each of which worked on a
// cluster without it: a raw Raft client, plain HTTP and wrong roles on
// the node RPC, an impostor host; and certificates reloaded on SIGHUP
// while a client keeps allocating.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/certs"
	"github.com/dmsc/dmsc/transport"
)

// stateIndexes is every server's state index (the API's X-Dmsc-Index of
// a local read): it moves only when a command changes the state.
func stateIndexes(ctx context.Context, c *Cluster) ([]string, error) {
	var out []string
	for _, p := range c.Servers {
		var hosts []wire.Host
		h, err := c.Do(ctx, p, http.MethodGet, "/v1/hosts", nil, &hosts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		out = append(out, p.Name+"="+h.Get(wire.HeaderIndex))
	}
	return out, nil
}

// hostOn reads host id from p's replica.
func hostOn(ctx context.Context, c *Cluster, p *Process, id string) (wire.Host, bool, error) {
	var hosts []wire.Host
	if err := c.Get(ctx, p, "/v1/hosts", &hosts); err != nil {
		return wire.Host{}, false, err
	}
	for _, h := range hosts {
		if h.ID == id {
			return h, true, nil
		}
	}
	return wire.Host{}, false, nil
}

// waitHostEverywhere waits until every server's replica has host id up.
func waitHostEverywhere(t *testing.T, ctx context.Context, c *Cluster, id string) {
	t.Helper()
	for _, p := range c.Servers {
		if err := c.WaitRegistered(ctx, p, c.Process(id)); err != nil {
			t.Fatal(err)
		}
	}
}

// dialStream is a raft.StreamLayer that only dials, in plain TCP.
type dialStream struct {
	done chan struct{}
	once sync.Once
}

func (s *dialStream) Accept() (net.Conn, error) { <-s.done; return nil, net.ErrClosed }
func (s *dialStream) Close() error              { s.once.Do(func() { close(s.done) }); return nil }
func (s *dialStream) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (s *dialStream) Dial(a raft.ServerAddress, d time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(a), d)
}

// forgeAppend sends p, over the Raft port with hashicorp/raft's own
// transport, an AppendEntries in p's current term that appends and
// commits cmd after p's commit index, as the attack of issue 11 did. It
// returns nil when p took the entry.
func forgeAppend(ctx context.Context, c *Cluster, p *Process, cmd fsm.Command) error {
	st, err := c.Status(ctx, p)
	if err != nil {
		return err
	}
	fsm.Stamp(cmd, time.Now())
	data, err := cluster.EncodeLogEntry(cmd)
	if err != nil {
		return err
	}
	trans := raft.NewNetworkTransport(&dialStream{done: make(chan struct{})}, 1, 2*time.Second, nil)
	defer trans.Close()
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("forger"), Addr: []byte("127.0.0.1:1")},
		Term:              st.Term,
		PrevLogEntry:      st.CommitIndex,
		PrevLogTerm:       st.Term,
		Entries:           []*raft.Log{{Index: st.CommitIndex + 1, Term: st.Term, Type: raft.LogCommand, Data: data, AppendedAt: time.Now()}},
		LeaderCommitIndex: st.CommitIndex + 1,
	}
	var resp raft.AppendEntriesResponse
	if err := trans.AppendEntries(raft.ServerID(p.Name), raft.ServerAddress(p.RaftAddr), req, &resp); err != nil {
		return err
	}
	if !resp.Success {
		return fmt.Errorf("refused by raft (term %d, last log %d)", resp.Term, resp.LastLog)
	}
	return nil
}

// postApply posts a forged command to p's node RPC with client (plain
// HTTP when tlsConfig is nil) and returns the status.
func postApply(p *Process, tlsConfig *tls.Config, cmd fsm.Command) (int, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return 0, err
	}
	body, _ := json.Marshal(transport.ApplyRequest{Command: data, LeaderOnly: true})
	scheme, tr := "http://", &http.Transport{}
	if tlsConfig != nil {
		scheme, tr.TLSClientConfig = "https://", tlsConfig
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post(scheme+p.RPCAddr+transport.RPCApplyPath, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestTLSRefusesForgedWrites(t *testing.T) {
	c := StartCluster(t, Options{TLS: true, Hosts: 1})
	ctx := testContext(t, 60*time.Second)
	waitHostEverywhere(t, ctx, c, "h1")
	before, err := stateIndexes(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	forged := func() fsm.Command { return &fsm.SetHostStatus{HostID: "h1", Up: false} }

	// A raw hashicorp/raft client on every server's Raft port, for a
	// while: no entry is taken.
	deadline := time.Now().Add(2 * time.Second)
	for attempts := 0; attempts < 3 || time.Now().Before(deadline); attempts++ {
		for _, p := range c.Servers {
			if err := forgeAppend(ctx, c, p, forged()); err == nil {
				t.Fatalf("%s took a forged entry on its Raft port", p.Name)
			}
		}
	}
	// The node RPC: plain HTTP, a host's certificate (h1's own), a
	// client's.
	for _, p := range c.Servers {
		if status, err := postApply(p, nil, forged()); err == nil && status != http.StatusBadRequest {
			t.Errorf("%s: plain HTTP on the RPC port got %d", p.Name, status)
		}
		for _, caller := range []*certs.Store{c.PKI.Store(certs.Host, "h1"), c.PKI.Store(certs.Client, "")} {
			id, _ := caller.Identity()
			status, err := postApply(p, caller.ClientConfig(certs.Identity{}), forged())
			if err != nil || status != http.StatusForbidden {
				t.Errorf("%s: a %s's certificate on the RPC port: %d %v, want 403", p.Name, id.Role, status, err)
			}
		}
	}

	after, err := stateIndexes(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Fatalf("the state index moved: %v, then %v", before, after)
	}
	for _, p := range c.Servers {
		if h, _, err := hostOn(ctx, c, p, "h1"); err != nil || !h.Up {
			t.Fatalf("h1 on %s: %+v %v", p.Name, h, err)
		}
	}
}

// impostorNode is a host that claims the name node with the certificate
// of another host, in this process: an agent refuses to start that way,
// so this is what a modified binary would do.
func impostorNode(t *testing.T, c *Cluster, node, certOf string) *cluster.Node {
	t.Helper()
	var join []string
	for _, s := range c.Servers {
		join = append(join, s.GossipAddr)
	}
	var devs []fsm.DeviceSpec
	for i := range 1000 {
		devs = append(devs, fsm.DeviceSpec{ID: fmt.Sprintf("fake-h100-%d", i), Type: fsm.GPU, Name: "H100",
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 80}}})
	}
	n, err := cluster.New(cluster.Config{
		NodeID: node, BindAddr: "127.0.0.1", Join: join, RetryJoinInterval: 200 * time.Millisecond,
		GossipProbeInterval: 200 * time.Millisecond, GossipSuspicionMult: 2,
		Inventory: func() (fsm.HostSpec, []fsm.DeviceSpec, error) { return fsm.HostSpec{}, devs, nil },
		TLS:       c.PKI.Store(certs.Host, certOf),
		Logger:    hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

func TestTLSImpostorHostCannotTakeAName(t *testing.T) {
	c := NewCluster(t, Options{TLS: true, Hosts: 1})
	ctx := testContext(t, 90*time.Second)
	if err := c.Start(c.Servers...); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, c.Servers...); err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// An agent does not start as h1 with h9's certificate.
	h9 := c.PKI.Cert(certs.Host, "h9")
	args := append([]string{"agent", "-host", "-node", "h1", "-join", c.Servers[0].GossipAddr, "-devices", "none.json"}, TLSArgs(h9)...)
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), `is the certificate of host "h9", but this node is host "h1"`) {
		t.Fatalf("agent -node h1 with h9's certificate: %v\n%s", err, out)
	}

	before, err := stateIndexes(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	impostor := impostorNode(t, c, "h1", "h9")
	// The leader asks h1 for its inventory and refuses the answer of a
	// node whose certificate names another host.
	err = poll(ctx, 50*time.Millisecond, func() (bool, error) {
		if _, ok, _ := hostOn(ctx, c, leader, "h1"); ok {
			return false, errors.New("the impostor registered h1")
		}
		b, _ := os.ReadFile(leader.LogPath)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "registering host failed") && strings.Contains(line, "host=h1") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the leader to refuse the impostor: %v", err)
	}
	after, err := stateIndexes(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Fatalf("the state index moved: %v, then %v", before, after)
	}

	// Once the impostor is gone, the real h1 (its own certificate) is
	// registered: the refusal was the certificate's.
	if err := impostor.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(c.Hosts...); err != nil {
		t.Fatal(err)
	}
	waitHostEverywhere(t, ctx, c, "h1")
	h, _, err := hostOn(ctx, c, leader, "h1")
	if err != nil || len(h.Devices) != len(DefaultDevices("h1").Devices) {
		t.Fatalf("the real h1: %+v %v", h, err)
	}
}

// servedSerial is the serial of the certificate served at addr.
func servedSerial(addr string, cfg *tls.Config) (*big.Int, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// Every agent's certificate is replaced and reloaded with SIGHUP while a
// client keeps allocating and releasing: no request fails, and every
// port serves the new certificate.
func TestTLSReloadOnSIGHUPWhileAllocating(t *testing.T) {
	c := StartCluster(t, Options{TLS: true, Hosts: 1})
	ctx := testContext(t, 90*time.Second)
	waitInventory(t, ctx, c)

	var (
		ops, failed atomic.Int64
		firstErr    atomic.Value
		stop        = make(chan struct{})
		wg          sync.WaitGroup
	)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := c.Servers[i%len(c.Servers)]
			var a wire.Allocation
			id := fmt.Sprintf("reload-%d", i)
			_, err := c.do(ctx, p, http.MethodPost, "/v1/allocations", id, gpuRequest(id, 1, ""), &a)
			if err == nil {
				_, err = c.do(ctx, p, http.MethodPost, "/v1/allocations/"+a.ID+"/release", "release-"+id, nil, nil)
			}
			ops.Add(1)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %v", p.Name, err))
			}
		}
	})

	serverCheck := c.PKI.Store(certs.Server, "s-check").ClientConfig(certs.Identity{})
	for _, p := range c.All() {
		role := certs.Host
		if p.Server {
			role = certs.Server
		}
		ports := []string{p.HTTPAddr, p.RPCAddr}
		if p.Server {
			ports = append(ports, p.RaftAddr)
		}
		old := map[string]*big.Int{}
		for _, addr := range ports {
			s, err := servedSerial(addr, serverCheck)
			if err != nil {
				t.Fatalf("%s %s: %v", p.Name, addr, err)
			}
			old[addr] = s
		}
		files := c.PKI.Cert(role, p.Name)
		next, err := certs.WriteCert(t.TempDir(), c.PKI.CA, c.PKI.CAKey, certs.Request{Role: role, Node: p.Name})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(next.Key, files.Key); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(next.Cert, files.Cert); err != nil {
			t.Fatal(err)
		}
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for _, addr := range ports {
			err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
				s, err := servedSerial(addr, serverCheck)
				return err == nil && s.Cmp(old[addr]) != 0, nil
			})
			if err != nil {
				t.Fatalf("%s %s still serves its old certificate: %v", p.Name, addr, err)
			}
		}
	}
	// Some more operations over the new certificates.
	target := ops.Load() + 20
	if err := poll(ctx, 20*time.Millisecond, func() (bool, error) { return ops.Load() >= target, nil }); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d operations failed; the first: %v", n, ops.Load(), firstErr.Load())
	}
	t.Logf("%d operations, none failed", ops.Load())
}
