package transport

import (
	"context"
	"net/http"
)

// RPCKeyringPath applies one gossip keyring operation to the receiving
// node. A server sends it to every live member when an operator rotates
// the gossip key (cluster/keyring.go); only servers may call it.
const RPCKeyringPath = RPCPrefix + "keyring"

// Keyring operations (KeyringRequest.Op).
const (
	KeyringList    = "list"
	KeyringInstall = "install"
	KeyringUse     = "use"
	KeyringRemove  = "remove"
)

// KeyringRequest asks a node to list its gossip keys, or to install, use
// (make primary) or remove one. Key is base64, empty for a list.
type KeyringRequest struct {
	Op  string `json:"op"`
	Key string `json:"key,omitempty"`
}

// KeyringResponse is the node's keyring after the operation: its keys in
// base64, the primary key first.
type KeyringResponse struct {
	Node string   `json:"node"`
	Keys []string `json:"keys"`
}

func (s *rpcServer) keyring(w http.ResponseWriter, r *http.Request) {
	var req KeyringRequest
	if !decodeBody(w, r, &req) {
		return
	}
	resp, err := s.h.RPCKeyring(r.Context(), req)
	s.reply(w, resp, err)
}

// Keyring asks the node at addr to apply a keyring operation.
func (c *RPCClient) Keyring(ctx context.Context, addr string, req KeyringRequest) (KeyringResponse, error) {
	var resp KeyringResponse
	err := c.call(ctx, http.MethodPost, addr, RPCKeyringPath, req, nil, &resp)
	return resp, err
}
