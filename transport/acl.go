package transport

import (
	"context"
	"net/http"

	"github.com/dmsc/dmsc/fsm"
)

// RPCResolveTokenPath resolves an ACL token by the SHA-256 of its secret.
// A node without a replica (a host agent) asks a server with it to check
// the tokens its HTTP API receives; servers serve it from their replica,
// servers and hosts may call it.
const RPCResolveTokenPath = RPCPrefix + "resolve-token"

// ResolveTokenRequest names a token by the SHA-256 of its secret in
// lower-case hex (fsm.HashACLSecret); "" names the anonymous token. The
// secret itself never travels.
type ResolveTokenRequest struct {
	SecretHash string `json:"secret_hash"`
}

// ResolveTokenResponse is the token, when found, without its secret
// hash, and the policies it names that exist (fsm.NewAuthorizer builds
// what it may do from them).
type ResolveTokenResponse struct {
	Found    bool            `json:"found"`
	Token    fsm.ACLToken    `json:"token"`
	Policies []fsm.ACLPolicy `json:"policies,omitempty"`
}

func (s *rpcServer) resolveToken(w http.ResponseWriter, r *http.Request) {
	var req ResolveTokenRequest
	if !decodeBody(w, r, &req) {
		return
	}
	resp, err := s.h.RPCResolveToken(r.Context(), req)
	resp.Token.SecretHash = ""
	s.reply(w, resp, err)
}

// ResolveToken asks the server at addr for a token by its secret hash.
func (c *RPCClient) ResolveToken(ctx context.Context, addr string, req ResolveTokenRequest) (ResolveTokenResponse, error) {
	var resp ResolveTokenResponse
	err := c.call(ctx, http.MethodPost, addr, RPCResolveTokenPath, req, nil, &resp)
	resp.Token.SecretHash = ""
	return resp, err
}
