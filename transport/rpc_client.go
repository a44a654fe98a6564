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
	"time"

	"github.com/dmsc/dmsc/fsm"
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
	tr *http.Transport
	c  *http.Client
}

// NewRPCClient returns a client; dial may be nil for plain TCP with a
// 2 second connect timeout.
func NewRPCClient(dial DialFunc) *RPCClient {
	if dial == nil {
		d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	tr := &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
	return &RPCClient{tr: tr, c: &http.Client{Transport: tr}}
}

// Close drops idle connections; calls in flight are not interrupted.
func (c *RPCClient) Close() { c.tr.CloseIdleConnections() }

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

// Inventory asks a host for its inventory.
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
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, body)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.c.Do(req)
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
