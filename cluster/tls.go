package cluster

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/dmsc/dmsc/internal/certs"
	"github.com/dmsc/dmsc/transport"
)

// The node's side of TLS (Config.TLS): what the Raft stream layer and
// the node RPC listen and dial with, and what each peer must prove. See
// DESIGN.md, "TLS".

// serverIdentity is what a server this node dials must prove: a server's
// certificate, with node's name when it is known; with server names not
// verified, any certificate of the CA.
func (n *Node) serverIdentity(node string) certs.Identity {
	if n.cfg.TLSSkipVerifyServerHostname {
		return certs.Identity{}
	}
	return certs.Identity{Role: certs.Server, Node: node}
}

// toServer names the server a call with ctx goes to, so that only that
// server's certificate is taken.
func (n *Node) toServer(ctx context.Context, node string) context.Context {
	return transport.WithPeer(ctx, n.serverIdentity(node))
}

// toHost names the host a call for its inventory goes to: only the node
// whose certificate says it is that host may answer, so no other node
// can register devices under its name. A server that carries devices
// proves its name with its server certificate.
func toHost(ctx context.Context, m memberInfo) context.Context {
	role := certs.Host
	if m.meta.server() {
		role = certs.Server
	}
	return transport.WithPeer(ctx, certs.Identity{Role: role, Node: m.id})
}

// newRPCClient is the node RPC client: TLS with Config.TLS, else plain.
func (n *Node) newRPCClient() *transport.RPCClient {
	if n.cfg.TLS == nil {
		return transport.NewRPCClient(nil)
	}
	return transport.NewTLSRPCClient(nil, transport.ClientTLS{
		Config:  n.cfg.TLS.ClientConfig,
		Default: n.serverIdentity(""),
	})
}

// rpcServerOptions secure the node RPC's listener: TLS with Config.TLS,
// mutual and authorized unless incoming connections are not verified.
func (n *Node) rpcServerOptions() transport.RPCServerOptions {
	if n.cfg.TLS == nil {
		return transport.RPCServerOptions{}
	}
	verify := !n.cfg.TLSSkipVerifyIncoming
	return transport.RPCServerOptions{TLS: n.cfg.TLS.ServerConfig(verify), Authorize: verify}
}

// raftTLS is what the Raft stream layer speaks TLS with.
type raftTLS struct {
	// accept configures accepted connections; dial, dialed ones.
	accept, dial *tls.Config
}

// raftTLS returns the Raft stream layer's TLS, nil without Config.TLS.
// Only servers speak Raft: an accepted connection must come from a
// server's certificate (unless incoming connections are not verified),
// and a dialed one must reach a server's.
func (n *Node) raftTLS() *raftTLS {
	if n.cfg.TLS == nil {
		return nil
	}
	t := &raftTLS{dial: n.cfg.TLS.ClientConfig(n.serverIdentity(""))}
	if n.cfg.TLSSkipVerifyIncoming {
		t.accept = n.cfg.TLS.ServerConfig(false)
	} else {
		t.accept = n.cfg.TLS.ServerConfigFor(certs.Identity{Role: certs.Server})
	}
	return t
}

// tlsServerConn is an accepted Raft connection over TLS. Its handshake
// runs on the first read or write (in the goroutine Raft serves the
// connection with, not in Accept), bounded by raftIOTimeout; a peer
// that fails it gets nothing read from it.
type tlsServerConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *tlsServerConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), raftIOTimeout)
		defer cancel()
		c.err = c.Conn.HandshakeContext(ctx)
	})
	return c.err
}

func (c *tlsServerConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *tlsServerConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// dialTLS opens a Raft connection over TLS, handshake included, within
// timeout.
func dialTLS(address string, timeout time.Duration, cfg *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	return d.DialContext(ctx, "tcp", address)
}
