package api

import (
	"context"
	"net/http"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
)

// GET /v1/operator/keyring
func (s *Server) listKeyring(w http.ResponseWriter, r *http.Request) error {
	return s.keyring(w, r, cluster.KeyringList)
}

// POST /v1/operator/keyring
func (s *Server) installKey(w http.ResponseWriter, r *http.Request) error {
	return s.keyring(w, r, cluster.KeyringInstall)
}

// PUT /v1/operator/keyring
func (s *Server) useKey(w http.ResponseWriter, r *http.Request) error {
	return s.keyring(w, r, cluster.KeyringUse)
}

// DELETE /v1/operator/keyring
func (s *Server) removeKey(w http.ResponseWriter, r *http.Request) error {
	return s.keyring(w, r, cluster.KeyringRemove)
}

// keyring runs a gossip keyring operation across the cluster (the node
// fans it out to every live member) within the write timeout, and answers
// the keys the members hold afterwards.
func (s *Server) keyring(w http.ResponseWriter, r *http.Request, op cluster.KeyringOp) error {
	var key string
	if op != cluster.KeyringList {
		var body wire.KeyringRequest
		if err := decodeJSON(r.Body, &body, false); err != nil {
			return err
		}
		if body.Key == "" {
			return badRequest("key is empty; give the gossip key in base64 as {\"key\": \"...\"}")
		}
		key = body.Key
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.WriteTimeout)
	defer cancel()
	res, err := s.b.Keyring(ctx, op, key)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, keyringOf(res))
	return nil
}

func keyringOf(res cluster.KeyringResult) wire.KeyringResponse {
	out := wire.KeyringResponse{Members: res.Members, Keys: make([]wire.KeyringKey, len(res.Keys))}
	for i, k := range res.Keys {
		out.Keys[i] = wire.KeyringKey{Key: k.Key, Installed: k.Installed, Primary: k.Primary}
	}
	for _, f := range res.Failed {
		out.Failed = append(out.Failed, wire.KeyringFailure{Node: f.Node, Error: f.Error})
	}
	return out
}
