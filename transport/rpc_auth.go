package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/certs"
)

// ErrForbidden answers a call whose caller's certificate does not allow
// it (see rpcAccess). Nothing of the call was carried out. Compare with
// errors.Is: the answers are instances that say why.
var ErrForbidden = &fsm.Error{Code: wire.CodeForbidden, Message: "forbidden"}

// forbidden makes an instance of ErrForbidden that says why.
func forbidden(format string, args ...any) *fsm.Error {
	return &fsm.Error{Code: ErrForbidden.Code, Message: ErrForbidden.Message + ": " + fmt.Sprintf(format, args...)}
}

// rpcAccess says, for each route of the node RPC, which roles may call it
// when the server authorizes calls (RPCServerOptions.Authorize): the one
// table of who may do what on this port. A route not listed is refused.
//
//   - Forwarded writes (apply) come from servers, and from hosts that
//     forward the writes their own HTTP API took, limited to hostCommands.
//   - A read index, a status, a remove-peer and a restore are asked by
//     servers of the leader or of each other.
//   - The inventory route is served by hosts and answers only a server
//     (the leader registering the host).
//   - The keyring route is served by every member and answers only a
//     server (rotating the gossip keys of the whole pool).
//   - The resolve-token route is served by servers (from their replica)
//     and answers servers and hosts: a host agent, which has no replica,
//     checks the ACL tokens its HTTP API receives with it. It tells a
//     token's accessor and policies, never its secret or secret hash, and
//     only to a caller that already knows the secret's hash.
//
// Clients (role client) never speak the node RPC.
var rpcAccess = map[string][]certs.Role{
	RPCApplyPath:      {certs.Server, certs.Host},
	RPCReadIndexPath:  {certs.Server},
	RPCInventoryPath:  {certs.Server},
	RPCStatusPath:     {certs.Server},
	RPCRemovePeerPath: {certs.Server},
	RPCRestorePath:    {certs.Server},
	// Every member keeps a gossip keyring; a server rotates them all.
	RPCKeyringPath: {certs.Server},
	// A host resolves its API's tokens through a server.
	RPCResolveTokenPath: {certs.Server, certs.Host},
}

// hostCommands are the commands a host may forward through apply: those
// its HTTP API produces from a client's write (allocate, release, renew,
// cancel, device status, policies, retention, host removal). Registering
// a host, marking a host up or down, and ticks are the leader's own
// proposals and never come from a host; a server's API takes host
// registrations with static devices.
var hostCommands = map[fsm.CommandType]bool{
	fsm.AllocateType:        true,
	fsm.ReleaseType:         true,
	fsm.RenewType:           true,
	fsm.CancelType:          true,
	fsm.SetDeviceStatusType: true,
	fsm.SetPolicyType:       true,
	fsm.SetRetentionType:    true,
	fsm.RemoveHostType:      true,
}

// authorize checks that the caller of r may call its route: by the
// identity its verified certificate proves (the TLS layer has checked the
// chain against the cluster's CA).
func authorize(r *http.Request) (certs.Identity, *fsm.Error) {
	id, ok := certs.PeerIdentity(r.TLS)
	if !ok {
		return id, forbidden("%s needs a certificate of the cluster's CA that names a role", r.URL.Path)
	}
	for _, role := range rpcAccess[r.URL.Path] {
		if role == id.Role {
			return id, nil
		}
	}
	return id, forbidden("%s may not call %s", describeCaller(id), r.URL.Path)
}

// authorizeCommand checks that the caller may have an encoded command
// applied: any command from a server, those of hostCommands from a host.
func authorizeCommand(id certs.Identity, command []byte) *fsm.Error {
	if id.Role == certs.Server {
		return nil
	}
	if id.Role == certs.Host && len(command) > 0 && hostCommands[fsm.CommandType(command[0])] {
		return nil
	}
	what := "an empty command"
	if len(command) > 0 {
		what = fmt.Sprintf("command type %d", command[0])
	}
	return forbidden("%s may not forward %s", describeCaller(id), what)
}

func describeCaller(id certs.Identity) string {
	if id.Node == "" {
		return "a " + string(id.Role)
	}
	return fmt.Sprintf("%s %q", id.Role, id.Node)
}

// withAuthorization refuses, before next sees it, every call whose
// caller may not call its route.
func withAuthorization(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := authorize(r)
		if err != nil {
			writeJSON(w, http.StatusForbidden, rpcError{Error: err})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, id)))
	})
}

// callerKey keys the authorized caller's identity in a request's context.
type callerKey struct{}

// callerOf returns the identity withAuthorization found, if it ran.
func callerOf(ctx context.Context) (certs.Identity, bool) {
	id, ok := ctx.Value(callerKey{}).(certs.Identity)
	return id, ok
}

// ClientTLS makes an RPCClient speak TLS (NewTLSRPCClient).
type ClientTLS struct {
	// Config returns the configuration for dialing a node whose
	// certificate must prove want (certs.Store.ClientConfig).
	Config func(want certs.Identity) *tls.Config
	// Default is what a node must prove when a call does not say
	// (WithPeer): certs.Identity{Role: certs.Server} when servers' names
	// are verified, as every call but Inventory goes to a server; the
	// zero Identity accepts any certificate of the cluster's CA.
	Default certs.Identity
}

// peerKey keys the identity a call's peer must prove.
type peerKey struct{}

// WithPeer says that the node a call with ctx goes to must prove want
// with its certificate (when the client speaks TLS): a host's inventory
// is fetched only from the node whose certificate says it is that host.
func WithPeer(ctx context.Context, want certs.Identity) context.Context {
	return context.WithValue(ctx, peerKey{}, want)
}

// peerOf is the identity set by WithPeer, else def.
func peerOf(ctx context.Context, def certs.Identity) certs.Identity {
	if want, ok := ctx.Value(peerKey{}).(certs.Identity); ok {
		return want
	}
	return def
}
