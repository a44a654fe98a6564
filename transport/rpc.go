// Package transport is the node-to-node RPC below package cluster: its
// server and client, JSON over HTTP/1.1 on a port of its own. Through it a
// node forwards writes to the leader, asks the leader for a read index,
// and fetches a host's inventory and a server's status, a host resolves
// the ACL tokens its API receives through a server, and an operator's
// remove-peer and snapshot restore reach the leader. With TLS on it
// speaks mutual TLS and authorizes every call by the role in the caller's
// certificate (rpc_auth.go). Raft's own traffic does not pass here:
// package cluster gives it a port and a stream layer.
package transport

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/fsm"
)

// The node RPC is JSON over HTTP/1.1 on its own port (cluster.Config
// RPCPort), under RPCPrefix. Raft has a port of its own; see
// cluster/DESIGN.md.
const RPCPrefix = "/rpc/v1/"

// RPC routes.
const (
	RPCApplyPath      = RPCPrefix + "apply"
	RPCReadIndexPath  = RPCPrefix + "read-index"
	RPCInventoryPath  = RPCPrefix + "inventory"
	RPCStatusPath     = RPCPrefix + "status"
	RPCRemovePeerPath = RPCPrefix + "remove-peer"
	RPCRestorePath    = RPCPrefix + "restore"
)

// Body limits of the node RPC.
const (
	MaxRPCBody      = 8 << 20   // any request but a restore
	MaxRestoreBytes = 512 << 20 // a snapshot upload
)

// ApplyRequest forwards an encoded command (fsm.Encode) to another node.
type ApplyRequest struct {
	Command []byte `json:"command"`
	// LeaderOnly asks the receiver to apply only if it leads, and answer
	// not_leader otherwise; servers forward this way so that a request
	// never travels in a loop. Hosts send false: the receiving server
	// forwards it on.
	LeaderOnly bool `json:"leader_only"`
}

// ApplyResponse is an fsm.Result on the wire.
type ApplyResponse struct {
	Index      uint64          `json:"index"`
	Allocation *fsm.Allocation `json:"allocation,omitempty"`
	Err        *fsm.Error      `json:"error,omitempty"`
}

// NewApplyResponse converts a result for the wire.
func NewApplyResponse(r fsm.Result) ApplyResponse {
	out := ApplyResponse{Index: r.Index, Allocation: r.Allocation}
	if r.Err != nil {
		var e *fsm.Error
		if !errors.As(r.Err, &e) {
			e = &fsm.Error{Code: "internal", Message: r.Err.Error()}
		}
		out.Err = e
	}
	return out
}

// Result converts back to an fsm.Result.
func (r ApplyResponse) Result() fsm.Result {
	res := fsm.Result{Index: r.Index, Allocation: r.Allocation}
	if r.Err != nil {
		res.Err = r.Err
	}
	return res
}

// ReadIndexResponse carries the leader's commit index, confirmed with a
// quorum, for a consistent read on a follower.
type ReadIndexResponse struct {
	Index uint64 `json:"index"`
}

// InventoryResponse is a host's inventory.
type InventoryResponse struct {
	Host    fsm.HostSpec     `json:"host"`
	Devices []fsm.DeviceSpec `json:"devices"`
	// Token is the host's ACL token secret (its acl { token }): with ACLs
	// on, the leader registers the host only when the token may register
	// it. Not part of InventoryHash.
	Token string `json:"token,omitempty"`
}

// StatusResponse tells a starting server whether a peer already belongs to
// a Raft cluster (then it must not bootstrap a new one), and the leader
// how far a new server has caught up.
type StatusResponse struct {
	ID       string `json:"id"`
	Server   bool   `json:"server"`
	HasState bool   `json:"has_state"`
	Leader   string `json:"leader,omitempty"`
	// LastIndex and Term are the server's last Raft log index and term:
	// how far it has caught up, for the leader's admission of new servers.
	LastIndex uint64 `json:"last_index,omitempty"`
	Term      uint64 `json:"term,omitempty"`
}

// RemovePeerRequest names a server to remove from the Raft configuration.
type RemovePeerRequest struct {
	ID string `json:"id"`
}

// RPCHandler serves the node RPC; cluster.Node implements it. Errors that
// are *fsm.Error travel with their code; others become "internal".
type RPCHandler interface {
	RPCApply(ctx context.Context, req ApplyRequest) (ApplyResponse, error)
	RPCReadIndex(ctx context.Context) (uint64, error)
	RPCInventory(ctx context.Context) (InventoryResponse, error)
	RPCStatus(ctx context.Context) (StatusResponse, error)
	RPCRemovePeer(ctx context.Context, id string) error
	RPCRestore(ctx context.Context, snapshot io.Reader) error
	RPCKeyring(ctx context.Context, req KeyringRequest) (KeyringResponse, error)
	RPCResolveToken(ctx context.Context, req ResolveTokenRequest) (ResolveTokenResponse, error)
}

// rpcError is the body of a failed RPC.
type rpcError struct {
	Error *fsm.Error `json:"error"`
}

// NewRPCHandler returns the HTTP handler of the node RPC.
func NewRPCHandler(h RPCHandler, logger hclog.Logger) http.Handler {
	return newRPCHandler(h, logger, false)
}

// newRPCHandler is NewRPCHandler, checking every call against the
// access table (rpc_auth.go) when authorize is set.
func newRPCHandler(h RPCHandler, logger hclog.Logger, authorize bool) http.Handler {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &rpcServer{h: h, log: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+RPCApplyPath, s.apply)
	mux.HandleFunc("POST "+RPCReadIndexPath, s.readIndex)
	mux.HandleFunc("GET "+RPCInventoryPath, s.inventory)
	mux.HandleFunc("GET "+RPCStatusPath, s.status)
	mux.HandleFunc("POST "+RPCRemovePeerPath, s.removePeer)
	mux.HandleFunc("POST "+RPCRestorePath, s.restore)
	mux.HandleFunc("POST "+RPCKeyringPath, s.keyring) // server-only
	mux.HandleFunc("POST "+RPCResolveTokenPath, s.resolveToken)
	if authorize {
		return withAuthorization(mux)
	}
	return mux
}

type rpcServer struct {
	h   RPCHandler
	log hclog.Logger
}

func (s *rpcServer) apply(w http.ResponseWriter, r *http.Request) {
	var req ApplyRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if id, ok := callerOf(r.Context()); ok {
		if err := authorizeCommand(id, req.Command); err != nil {
			s.reply(w, nil, err)
			return
		}
	}
	resp, err := s.h.RPCApply(r.Context(), req)
	s.reply(w, resp, err)
}

func (s *rpcServer) readIndex(w http.ResponseWriter, r *http.Request) {
	idx, err := s.h.RPCReadIndex(r.Context())
	s.reply(w, ReadIndexResponse{Index: idx}, err)
}

func (s *rpcServer) inventory(w http.ResponseWriter, r *http.Request) {
	resp, err := s.h.RPCInventory(r.Context())
	s.reply(w, resp, err)
}

func (s *rpcServer) status(w http.ResponseWriter, r *http.Request) {
	resp, err := s.h.RPCStatus(r.Context())
	s.reply(w, resp, err)
}

func (s *rpcServer) removePeer(w http.ResponseWriter, r *http.Request) {
	var req RemovePeerRequest
	if !decodeBody(w, r, &req) {
		return
	}
	s.reply(w, struct{}{}, s.h.RPCRemovePeer(r.Context(), req.ID))
}

func (s *rpcServer) restore(w http.ResponseWriter, r *http.Request) {
	body := http.MaxBytesReader(w, r.Body, MaxRestoreBytes)
	s.reply(w, struct{}{}, s.h.RPCRestore(r.Context(), body))
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRPCBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, rpcError{Error: &fsm.Error{Code: fsm.ErrInvalid.Code, Message: "decode request: " + err.Error()}})
		return false
	}
	return true
}

func (s *rpcServer) reply(w http.ResponseWriter, v any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, v)
		return
	}
	var e *fsm.Error
	if !errors.As(err, &e) {
		s.log.Warn("rpc failed", "error", err)
		e = &fsm.Error{Code: "internal", Message: err.Error()}
	}
	writeJSON(w, rpcStatus(e.Code), rpcError{Error: e})
}

// rpcStatus picks an HTTP status for an error code; the client reads the
// code, the status is for people watching the wire.
func rpcStatus(code string) int {
	switch code {
	case fsm.ErrInvalid.Code, fsm.ErrSnapshot.Code:
		return http.StatusBadRequest
	case fsm.ErrNotFound.Code:
		return http.StatusNotFound
	case ErrForbidden.Code:
		return http.StatusForbidden
	case "internal":
		return http.StatusInternalServerError
	}
	return http.StatusServiceUnavailable
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// RPCServer serves the node RPC on a listener.
type RPCServer struct {
	srv  *http.Server
	done chan struct{}
	err  error
	once sync.Once
}

// ServeRPC starts serving h on ln in the background. Every request's
// context derives from base, so ending base ends the calls in flight.
func ServeRPC(base context.Context, ln net.Listener, h RPCHandler, logger hclog.Logger) *RPCServer {
	return ServeRPCWith(base, ln, h, logger, RPCServerOptions{})
}

// RPCServerOptions secure the node RPC. The zero value serves plain HTTP
// to anyone who reaches the port.
type RPCServerOptions struct {
	// TLS, when set, serves TLS only with it (certs.Store.ServerConfig):
	// a plain HTTP request gets a 400 and reaches no route.
	TLS *tls.Config
	// Authorize checks every call against the access table (rpc_auth.go)
	// by the role the caller's verified certificate proves, and answers
	// 403 forbidden to the others. It needs TLS that requires client
	// certificates.
	Authorize bool
}

// ServeRPCWith is ServeRPC with the options.
func ServeRPCWith(base context.Context, ln net.Listener, h RPCHandler, logger hclog.Logger, opts RPCServerOptions) *RPCServer {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if opts.TLS != nil {
		ln = tls.NewListener(ln, opts.TLS)
	}
	s := &RPCServer{
		srv: &http.Server{
			Handler:           newRPCHandler(h, logger, opts.Authorize),
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       90 * time.Second,
			ErrorLog:          logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
			BaseContext:       func(net.Listener) context.Context { return base },
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s
}

// Shutdown stops accepting, lets requests in flight finish until ctx ends,
// then closes every connection, and waits until the server has stopped.
func (s *RPCServer) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		err = s.srv.Shutdown(ctx)
		if err != nil {
			_ = s.srv.Close()
		}
		<-s.done
		if s.err != nil && err == nil {
			err = s.err
		}
	})
	return err
}

// InventoryHash is a short digest of an inventory. A host advertises the
// hash of its current inventory in gossip; the leader compares it with the
// hash of the inventory it registered to notice a change.
func InventoryHash(inv InventoryResponse) string {
	inv.Token = ""
	b, _ := json.Marshal(inv)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
