package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/certs"
)

// ErrUnreachable wraps a failure to get an answer from a node: refused,
// reset, timed out, or a reply that is not the RPC's. For a forwarded write
// the outcome is then unknown.
var ErrUnreachable = errors.New("node unreachable")

// DialFunc opens a connection; a test can inject faults with it.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// RPCClient calls the node RPC of other nodes. Calls are bounded by their
// context only.
type RPCClient struct {
	dial DialFunc
	tls  *ClientTLS // nil: plain HTTP

	// A connection is checked once, at its handshake, against what its
	// peer must prove; so connections are pooled apart by that identity
	// (one pool in plain HTTP), and a call never rides on a connection
	// whose peer proved something else.
	mu    sync.Mutex
	pools map[certs.Identity]*http.Client
}

// NewRPCClient returns a client; dial may be nil for plain TCP with a
// 2 second connect timeout.
func NewRPCClient(dial DialFunc) *RPCClient {
	if dial == nil {
		d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	return &RPCClient{dial: dial, pools: map[certs.Identity]*http.Client{}}
}

// NewTLSRPCClient returns a client that speaks TLS with t: each call's
// peer must prove the identity the call's context names (WithPeer), else
// t.Default. dial may be nil as for NewRPCClient.
func NewTLSRPCClient(dial DialFunc, t ClientTLS) *RPCClient {
	c := NewRPCClient(dial)
	c.tls = &t
	return c
}

// maxIdleConnsPerPeer is how many connections to one peer are kept for
// the next calls. Each call holds a connection, so a follower that
// forwards n writes at once opens n; those beyond the idle bound are
// closed after their call and dialled again for the next. It is as large
// as the writes an agent's HTTP API lets in at once by default (512),
// so that a busy follower reuses its connections to the leader.
const maxIdleConnsPerPeer = 512

// pool returns the HTTP client for calls whose peer must prove want.
func (c *RPCClient) pool(want certs.Identity) *http.Client {
	if c.tls == nil {
		want = certs.Identity{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc, ok := c.pools[want]; ok {
		return hc
	}
	tr := &http.Transport{
		DialContext:         c.dial,
		MaxIdleConnsPerHost: maxIdleConnsPerPeer,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
	if c.tls != nil {
		tr.TLSClientConfig = c.tls.Config(want)
		tr.TLSHandshakeTimeout = 5 * time.Second
	}
	hc := &http.Client{Transport: tr}
	c.pools[want] = hc
	return hc
}

// Close drops idle connections; calls in flight are not interrupted.
func (c *RPCClient) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, hc := range c.pools {
		hc.Transport.(*http.Transport).CloseIdleConnections()
	}
}

// Apply forwards an encoded command to the node at addr (its RPC address).
func (c *RPCClient) Apply(ctx context.Context, addr string, req ApplyRequest) (ApplyResponse, error) {
	var resp ApplyResponse
	err := c.call(ctx, http.MethodPost, addr, RPCApplyPath, req, nil, &resp)
	return resp, err
}

// ReadIndex asks the leader at addr for a read index.
func (c *RPCClient) ReadIndex(ctx context.Context, addr string) (uint64, error) {
	var resp ReadIndexResponse
	err := c.call(ctx, http.MethodPost, addr, RPCReadIndexPath, struct{}{}, nil, &resp)
	return resp.Index, err
}

// Inventory asks a host for its inventory. With TLS, name the host the
// answer must come from with WithPeer.
func (c *RPCClient) Inventory(ctx context.Context, addr string) (InventoryResponse, error) {
	var resp InventoryResponse
	err := c.call(ctx, http.MethodGet, addr, RPCInventoryPath, nil, nil, &resp)
	return resp, err
}

// Status asks a node whether it already belongs to a Raft cluster.
func (c *RPCClient) Status(ctx context.Context, addr string) (StatusResponse, error) {
	var resp StatusResponse
	err := c.call(ctx, http.MethodGet, addr, RPCStatusPath, nil, nil, &resp)
	return resp, err
}

// RemovePeer asks the leader at addr to remove a server.
func (c *RPCClient) RemovePeer(ctx context.Context, addr, id string) error {
	return c.call(ctx, http.MethodPost, addr, RPCRemovePeerPath, RemovePeerRequest{ID: id}, nil, &struct{}{})
}

// Restore uploads a snapshot to the leader at addr.
func (c *RPCClient) Restore(ctx context.Context, addr string, snapshot io.Reader) error {
	return c.call(ctx, http.MethodPost, addr, RPCRestorePath, nil, snapshot, &struct{}{})
}

// call sends body (JSON of in, or raw) and decodes the answer into out. A
// node's refusal comes back as its *fsm.Error; anything else wraps
// ErrUnreachable.
func (c *RPCClient) call(ctx context.Context, method, addr, path string, in any, raw io.Reader, out any) error {
	var body io.Reader
	switch {
	case raw != nil:
		body = raw
	case in != nil:
		b, err := json.Marshal(in)
		if err != nil {
			return &fsm.Error{Code: fsm.ErrInvalid.Code, Message: "encode rpc: " + err.Error()}
		}
		body = bytes.NewReader(b)
	}
	scheme, want := "http://", certs.Identity{}
	if c.tls != nil {
		scheme, want = "https://", peerOf(ctx, c.tls.Default)
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+addr+path, body)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.pool(want).Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxRPCBody))
	if err != nil {
		return fmt.Errorf("%w: %s: read reply: %w", ErrUnreachable, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e rpcError
		if json.Unmarshal(data, &e) == nil && e.Error != nil && e.Error.Code != "" {
			return e.Error
		}
		return fmt.Errorf("%w: %s: status %d", ErrUnreachable, addr, resp.StatusCode)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s: bad reply: %v", ErrUnreachable, addr, err)
	}
	return nil
}
