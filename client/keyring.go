package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/dmsc/dmsc/client/wire"
)

type (
	// KeyringResponse is the gossip keyrings of the live members after a
	// keyring operation, and the members that failed it.
	KeyringResponse = wire.KeyringResponse
	// KeyringKey is one gossip key and how many members hold it.
	KeyringKey = wire.KeyringKey
	// KeyringFailure is a member that failed a keyring operation.
	KeyringFailure = wire.KeyringFailure
)

// ErrKeyringIncomplete is returned, wrapped and with the response, when a
// keyring operation was answered but some members failed it; the
// response's Failed names them. Every keyring operation may be sent again.
var ErrKeyringIncomplete = errors.New("dmsc client: the keyring operation failed on some members")

// KeyringList lists the gossip keys every live member holds: for each
// key, how many members hold it and how many encrypt with it.
func (c *Client) KeyringList(ctx context.Context) (*KeyringResponse, error) {
	return c.keyring(ctx, http.MethodGet, "")
}

// KeyringInstall installs a gossip key (base64) on every live member, so
// that each can decrypt with it.
func (c *Client) KeyringInstall(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyring(ctx, http.MethodPost, key)
}

// KeyringUse makes an installed key every member's primary key, the one
// gossip is encrypted with. ErrConflict, nothing changed, when some live
// member does not hold it.
func (c *Client) KeyringUse(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyring(ctx, http.MethodPut, key)
}

// KeyringRemove removes a gossip key from every live member. ErrConflict,
// nothing changed, while it is some member's primary key.
func (c *Client) KeyringRemove(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyring(ctx, http.MethodDelete, key)
}

// keyring sends a keyring operation to a server (a host answers
// not_server and the next address is tried). The operations are
// idempotent, so they are sent again as reads are.
func (c *Client) keyring(ctx context.Context, method, key string) (*KeyringResponse, error) {
	var out KeyringResponse
	rq := &request{method: method, path: "/v1/operator/keyring", idempotent: true, out: &out}
	if method != http.MethodGet {
		b, err := jsonBody(wire.KeyringRequest{Key: key})
		if err != nil {
			return nil, err
		}
		rq.body, rq.ctype = b, "application/json"
	}
	if _, err := c.do(ctx, rq); err != nil {
		return nil, err
	}
	if len(out.Failed) > 0 {
		failed := make([]string, len(out.Failed))
		for i, f := range out.Failed {
			failed[i] = f.Node + ": " + f.Error
		}
		return &out, fmt.Errorf("%w: %d of %d members: %s", ErrKeyringIncomplete, len(out.Failed), out.Members, strings.Join(failed, "; "))
	}
	return &out, nil
}
