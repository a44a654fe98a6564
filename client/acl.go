package client

import (
	"context"
	"net/http"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

type (
	// ACLRules are what an ACL policy grants: per namespace for
	// allocations, per area for the rest ("read", "write", "deny").
	ACLRules = wire.ACLRules
	// ACLPolicy is a named set of rules.
	ACLPolicy = wire.ACLPolicy
	// ACLToken is a token; SecretID is set only by ACLBootstrap and
	// ACLTokenCreate.
	ACLToken = wire.ACLToken
)

// The bounds of a token secret given on create (ACLTokenSpec.SecretID).
const (
	ACLSecretMinLength = wire.ACLSecretMinLength
	ACLSecretMaxLength = wire.ACLSecretMaxLength
)

// ValidACLSecret reports whether s may be given as a token's secret: 16 to
// 128 printable ASCII characters, no spaces.
func ValidACLSecret(s string) bool { return wire.ValidACLSecret(s) }

// ACLTokenSpec is what ACLTokenCreate and ACLTokenUpdate take.
type ACLTokenSpec struct {
	Description string
	Policies    []string
	// TTL, on create, ends the token that long after it is made.
	TTL time.Duration
	// SecretID, on create, is the token's secret instead of a random one:
	// 16 to 128 printable ASCII characters without spaces, e.g. a UUID
	// (wire.ValidACLSecret). A secret another token has is ErrConflict.
	// A host agent can thus be started with a secret before its token
	// exists.
	SecretID string
}

// ACLBootstrap creates the one management token of a cluster with ACLs
// on; its SecretID is shown only here. A second bootstrap is ErrConflict.
func (c *Client) ACLBootstrap(ctx context.Context) (*ACLToken, error) {
	rid := NewRequestID()
	var out ACLToken
	if _, err := c.write(ctx, http.MethodPost, "/v1/acl/bootstrap", wire.WriteRequest{RequestID: rid}, rid, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ACLPolicyApply creates or replaces a policy.
func (c *Client) ACLPolicyApply(ctx context.Context, name, description string, rules ACLRules) (*ACLPolicy, error) {
	rid := NewRequestID()
	var out ACLPolicy
	body := wire.ACLPolicyRequest{Description: description, Rules: rules, RequestID: rid}
	if _, err := c.write(ctx, http.MethodPut, "/v1/acl/policy/"+esc(name), body, rid, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ACLPolicyList lists the policies.
func (c *Client) ACLPolicyList(ctx context.Context, q *QueryOptions) ([]ACLPolicy, *QueryMeta, error) {
	var out []ACLPolicy
	meta, err := c.get(ctx, "/v1/acl/policies", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// ACLPolicyRead returns one policy; ErrNotFound when unknown.
func (c *Client) ACLPolicyRead(ctx context.Context, name string, q *QueryOptions) (*ACLPolicy, *QueryMeta, error) {
	var out ACLPolicy
	meta, err := c.get(ctx, "/v1/acl/policy/"+esc(name), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// ACLPolicyDelete deletes a policy.
func (c *Client) ACLPolicyDelete(ctx context.Context, name string) (*WriteMeta, error) {
	rid := NewRequestID()
	return c.write(ctx, http.MethodDelete, "/v1/acl/policy/"+esc(name), wire.WriteRequest{RequestID: rid}, rid, nil)
}

// ACLTokenCreate creates a token; the answer's SecretID is the only time
// the secret is shown.
func (c *Client) ACLTokenCreate(ctx context.Context, spec ACLTokenSpec) (*ACLToken, error) {
	rid := NewRequestID()
	var out ACLToken
	body := wire.ACLTokenRequest{Description: spec.Description, Policies: spec.Policies, TTL: wire.Duration(spec.TTL), SecretID: spec.SecretID, RequestID: rid}
	if _, err := c.write(ctx, http.MethodPost, "/v1/acl/token", body, rid, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ACLTokenUpdate replaces a token's description and policies (not its
// secret or expiry: spec.TTL and spec.SecretID are ignored). The anonymous token (accessor "anonymous") takes
// policies this way: what requests without a token may do.
func (c *Client) ACLTokenUpdate(ctx context.Context, accessor string, spec ACLTokenSpec) (*ACLToken, error) {
	rid := NewRequestID()
	var out ACLToken
	body := wire.ACLTokenRequest{Description: spec.Description, Policies: spec.Policies, RequestID: rid}
	if body.Policies == nil {
		body.Policies = []string{}
	}
	if _, err := c.write(ctx, http.MethodPut, "/v1/acl/token/"+esc(accessor), body, rid, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ACLTokenList lists the tokens, without secrets.
func (c *Client) ACLTokenList(ctx context.Context, q *QueryOptions) ([]ACLToken, *QueryMeta, error) {
	var out []ACLToken
	meta, err := c.get(ctx, "/v1/acl/tokens", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// ACLTokenRead returns one token by accessor, without its secret.
func (c *Client) ACLTokenRead(ctx context.Context, accessor string, q *QueryOptions) (*ACLToken, *QueryMeta, error) {
	var out ACLToken
	meta, err := c.get(ctx, "/v1/acl/token/"+esc(accessor), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// ACLTokenSelf returns the client's own token (the anonymous token when it
// has none).
func (c *Client) ACLTokenSelf(ctx context.Context, q *QueryOptions) (*ACLToken, *QueryMeta, error) {
	return c.ACLTokenRead(ctx, "self", q)
}

// ACLTokenDelete deletes a token; its secret stops working at once.
func (c *Client) ACLTokenDelete(ctx context.Context, accessor string) (*WriteMeta, error) {
	rid := NewRequestID()
	return c.write(ctx, http.MethodDelete, "/v1/acl/token/"+esc(accessor), wire.WriteRequest{RequestID: rid}, rid, nil)
}
