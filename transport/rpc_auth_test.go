package transport

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/certs"
)

// testPKI is a CA in a temporary directory and the stores of its nodes.
type testPKI struct {
	t             *testing.T
	dir           string
	caCert, caKey string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, key, err := certs.WriteCA(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, dir: dir, caCert: ca, caKey: key}
}

func (p *testPKI) store(role certs.Role, node string) *certs.Store {
	p.t.Helper()
	f, err := certs.WriteCert(p.dir, p.caCert, p.caKey, certs.Request{Role: role, Node: node})
	if err != nil {
		p.t.Fatal(err)
	}
	s, err := certs.Load(f)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// serveTLS serves h with mutual TLS and authorization, as a node with
// store does.
func serveTLS(t *testing.T, h RPCHandler, store *certs.Store) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeRPCWith(context.Background(), ln, h, nil, RPCServerOptions{TLS: store.ServerConfig(true), Authorize: true})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

func tlsClient(t *testing.T, store *certs.Store) *RPCClient {
	c := NewTLSRPCClient(nil, ClientTLS{Config: store.ClientConfig, Default: certs.Identity{Role: certs.Server}})
	t.Cleanup(c.Close)
	return c
}

// TestRPCAccessTable calls every route as each role and checks that only
// the roles of the table get through, and that what is refused never
// reaches the node.
func TestRPCAccessTable(t *testing.T) {
	p := newTestPKI(t)
	node := &fakeNode{}
	addr := serveTLS(t, node, p.store(certs.Server, "s1"))
	ctx := context.Background()
	alloc, _ := fsm.Encode(&fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}}})

	routes := map[string]func(c *RPCClient) error{
		RPCApplyPath: func(c *RPCClient) error {
			_, err := c.Apply(ctx, addr, ApplyRequest{Command: alloc})
			return err
		},
		RPCReadIndexPath: func(c *RPCClient) error { _, err := c.ReadIndex(ctx, addr); return err },
		RPCInventoryPath: func(c *RPCClient) error { _, err := c.Inventory(ctx, addr); return err },
		RPCStatusPath:    func(c *RPCClient) error { _, err := c.Status(ctx, addr); return err },
		RPCRemovePeerPath: func(c *RPCClient) error {
			err := c.RemovePeer(ctx, addr, "")
			if errors.Is(err, fsm.ErrInvalid) { // the fake's answer: it was reached
				return nil
			}
			return err
		},
		RPCRestorePath: func(c *RPCClient) error { return c.Restore(ctx, addr, strings.NewReader("x")) },
		RPCKeyringPath: func(c *RPCClient) error { _, err := c.Keyring(ctx, addr, KeyringRequest{Op: "list"}); return err },
		RPCResolveTokenPath: func(c *RPCClient) error {
			_, err := c.ResolveToken(ctx, addr, ResolveTokenRequest{SecretHash: fsm.HashACLSecret("secret")})
			return err
		},
	}
	if len(routes) != len(rpcAccess) {
		t.Fatalf("the test covers %d routes, the table has %d", len(routes), len(rpcAccess))
	}
	callers := map[certs.Role]*RPCClient{
		certs.Server: tlsClient(t, p.store(certs.Server, "s2")),
		certs.Host:   tlsClient(t, p.store(certs.Host, "h1")),
		certs.Client: tlsClient(t, p.store(certs.Client, "")),
	}
	want := map[string][]certs.Role{
		RPCApplyPath:      {certs.Server, certs.Host},
		RPCReadIndexPath:  {certs.Server},
		RPCInventoryPath:  {certs.Server},
		RPCStatusPath:     {certs.Server},
		RPCRemovePeerPath: {certs.Server},
		RPCRestorePath:    {certs.Server},
		RPCKeyringPath:    {certs.Server},
		// A host checks its API's tokens through a server.
		RPCResolveTokenPath: {certs.Server, certs.Host},
	}
	for path, call := range routes {
		for role, c := range callers {
			allowed := false
			for _, r := range want[path] {
				allowed = allowed || r == role
			}
			node.applied, node.restored = nil, nil
			err := call(c)
			switch {
			case allowed && err != nil:
				t.Errorf("%s as %s: %v, want it allowed", path, role, err)
			case !allowed && !errors.Is(err, ErrForbidden):
				t.Errorf("%s as %s: %v, want forbidden", path, role, err)
			case !allowed && (len(node.applied) > 0 || node.restored != nil):
				t.Errorf("%s as %s reached the node", path, role)
			}
		}
	}
}

// TestHostForwardsOnlyAPIWrites checks the commands a host may forward:
// the writes of the HTTP API, never the leader's own proposals.
func TestHostForwardsOnlyAPIWrites(t *testing.T) {
	p := newTestPKI(t)
	node := &fakeNode{}
	addr := serveTLS(t, node, p.store(certs.Server, "s1"))
	host := tlsClient(t, p.store(certs.Host, "h1"))
	server := tlsClient(t, p.store(certs.Server, "s2"))
	ctx := context.Background()
	cmds := []struct {
		cmd     fsm.Command
		forHost bool
	}{
		{&fsm.Allocate{}, true},
		{&fsm.Release{AllocationID: "x"}, true},
		{&fsm.Renew{AllocationID: "x"}, true},
		{&fsm.Cancel{AllocationID: "x"}, true},
		{&fsm.SetDeviceStatus{DeviceID: "d"}, true},
		{&fsm.SetPolicy{}, true},
		{&fsm.SetRetention{}, true},
		{&fsm.RemoveHost{HostID: "h2"}, true},
		{&fsm.RegisterHost{Host: fsm.HostSpec{ID: "h2"}}, false},
		{&fsm.SetHostStatus{HostID: "h2"}, false},
		{&fsm.Tick{}, false},
	}
	for _, tc := range cmds {
		data, err := fsm.Encode(tc.cmd)
		if err != nil {
			t.Fatal(err)
		}
		node.applied = nil
		_, err = host.Apply(ctx, addr, ApplyRequest{Command: data})
		if tc.forHost != (err == nil) || (!tc.forHost && (!errors.Is(err, ErrForbidden) || len(node.applied) > 0)) {
			t.Errorf("%T from a host: %v (applied %d)", tc.cmd, err, len(node.applied))
		}
		if _, err := server.Apply(ctx, addr, ApplyRequest{Command: data}); err != nil {
			t.Errorf("%T from a server: %v", tc.cmd, err)
		}
	}
	if _, err := host.Apply(ctx, addr, ApplyRequest{}); !errors.Is(err, ErrForbidden) {
		t.Errorf("an empty command from a host: %v", err)
	}
	tick, _ := fsm.Encode(&fsm.Tick{})
	if _, err := host.Apply(ctx, addr, ApplyRequest{Command: tick}); err == nil || !strings.Contains(err.Error(), `host "h1" may not forward command type 11`) {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if _, err := host.ReadIndex(ctx, addr); err == nil || !strings.Contains(err.Error(), `host "h1" may not call /rpc/v1/read-index`) {
		t.Errorf("the refusal does not say why: %v", err)
	}
}

// TestTLSRPCRefusesPlainAndStrangers checks that a plain HTTP request
// reaches no route and that a client checks who answers.
func TestTLSRPCRefusesPlainAndStrangers(t *testing.T) {
	p := newTestPKI(t)
	node := &fakeNode{}
	addr := serveTLS(t, node, p.store(certs.Host, "h2"))
	data, _ := fsm.Encode(&fsm.Allocate{})
	resp, err := http.Post("http://"+addr+RPCApplyPath, "application/json", strings.NewReader(`{"command":"`+string(data)+`"}`))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP got %d", resp.StatusCode)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	if len(node.applied) > 0 {
		t.Fatal("a plain HTTP request was applied")
	}

	// The leader wants h1's inventory: h2 at that address cannot give it,
	// even on a connection that proved h2 before.
	leader := tlsClient(t, p.store(certs.Server, "s1"))
	ctx := context.Background()
	if _, err := leader.Inventory(WithPeer(ctx, certs.Identity{Role: certs.Host, Node: "h2"}), addr); err != nil {
		t.Fatalf("h2's inventory from h2: %v", err)
	}
	if _, err := leader.Inventory(WithPeer(ctx, certs.Identity{Role: certs.Host, Node: "h1"}), addr); !errors.Is(err, ErrUnreachable) || !errors.Is(err, certs.ErrCert) {
		t.Fatalf("h1's inventory from h2: %v, want a certificate error", err)
	}
	// A server is what calls go to by default.
	if _, err := leader.Status(ctx, addr); !errors.Is(err, certs.ErrCert) {
		t.Fatalf("status of a host taken for a server: %v, want a certificate error", err)
	}
	// A plain client cannot talk to it at all.
	plain := NewRPCClient(nil)
	defer plain.Close()
	if _, err := plain.Apply(ctx, addr, ApplyRequest{Command: data}); err == nil {
		t.Fatal("a plain client was answered")
	}
	if len(node.applied) > 0 {
		t.Fatal("a plain client's command was applied")
	}
}
