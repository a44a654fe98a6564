package transport

import (
	"context"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// RPCResolveToken knows one token, by the hash of "secret", and the
// anonymous token; it answers the token with its secret hash, which the
// route must not send on.
func (f *fakeNode) RPCResolveToken(ctx context.Context, req ResolveTokenRequest) (ResolveTokenResponse, error) {
	switch req.SecretHash {
	case "":
		return ResolveTokenResponse{Found: true, Token: fsm.ACLToken{AccessorID: fsm.AnonymousAccessorID}}, nil
	case fsm.HashACLSecret("secret"):
		return ResolveTokenResponse{
			Found:    true,
			Token:    fsm.ACLToken{AccessorID: "a1", SecretHash: req.SecretHash, Policies: []string{"p1"}},
			Policies: []fsm.ACLPolicy{{Name: "p1", Rules: fsm.ACLRules{Devices: fsm.AccessRead}}},
		}, nil
	}
	return ResolveTokenResponse{}, nil
}

func TestRPCResolveToken(t *testing.T) {
	addr, c := serve(t, &fakeNode{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.ResolveToken(ctx, addr, ResolveTokenRequest{SecretHash: fsm.HashACLSecret("secret")})
	if err != nil || !resp.Found || resp.Token.AccessorID != "a1" || len(resp.Policies) != 1 || resp.Policies[0].Rules.Devices != fsm.AccessRead {
		t.Fatalf("known token: %+v, %v", resp, err)
	}
	if resp.Token.SecretHash != "" {
		t.Fatal("the secret hash travelled back")
	}
	if !fsm.NewAuthorizer(resp.Token, resp.Policies).Allowed(fsm.AreaDevices, "", false) {
		t.Fatal("the answer's authorizer may not read devices")
	}
	resp, err = c.ResolveToken(ctx, addr, ResolveTokenRequest{})
	if err != nil || !resp.Found || resp.Token.AccessorID != fsm.AnonymousAccessorID {
		t.Fatalf("anonymous token: %+v, %v", resp, err)
	}
	resp, err = c.ResolveToken(ctx, addr, ResolveTokenRequest{SecretHash: fsm.HashACLSecret("other")})
	if err != nil || resp.Found {
		t.Fatalf("unknown token: %+v, %v", resp, err)
	}
}
