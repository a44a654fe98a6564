package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// RPCKeyring answers a list with two keys and refuses anything else as a
// node would refuse removing its primary key.
func (f *fakeNode) RPCKeyring(ctx context.Context, req KeyringRequest) (KeyringResponse, error) {
	if req.Op == KeyringList {
		return KeyringResponse{Node: "h1", Keys: []string{"k1", "k2"}}, nil
	}
	return KeyringResponse{}, &fsm.Error{Code: fsm.ErrConflict.Code, Message: "removing the primary key " + req.Key}
}

func TestRPCKeyring(t *testing.T) {
	addr, c := serve(t, &fakeNode{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Keyring(ctx, addr, KeyringRequest{Op: KeyringList})
	if err != nil || resp.Node != "h1" || len(resp.Keys) != 2 || resp.Keys[0] != "k1" {
		t.Fatalf("list: %+v, %v", resp, err)
	}
	_, err = c.Keyring(ctx, addr, KeyringRequest{Op: KeyringRemove, Key: "k1"})
	var fe *fsm.Error
	if !errors.As(err, &fe) || fe.Code != fsm.ErrConflict.Code || fe.Message != "removing the primary key k1" {
		t.Fatalf("remove: %v, want the node's conflict", err)
	}
}
