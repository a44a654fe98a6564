package api

import (
	"net/http"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
)

// TestACLOnHostAgent checks the ACL check of a host agent, which has no
// replica: tokens are resolved through the backend (a server, cached),
// writes go through with a token that may make them, and reads still
// answer not_server.
func TestACLOnHostAgent(t *testing.T) {
	e, mgmt := newACLEnv(t, Options{})
	e.policy("team-a", wire.ACLRules{Namespaces: map[string]string{"team-a": "write"}})
	tok := e.newToken("team-a")
	e.b.mu.Lock()
	e.b.host, e.b.resolves = true, 0
	e.b.mu.Unlock()
	e.token = ""

	var a wire.Allocation
	e.do("POST", "/v1/allocations?namespace=team-a", gpuReq, wire.HeaderToken, tok).ok(200).decode(&a)
	if a.ID == "" || a.Namespace != "team-a" {
		t.Fatalf("allocation %+v", a)
	}
	e.noSideEffect(func() {
		e.do("POST", "/v1/allocations?namespace=team-b", gpuReq, wire.HeaderToken, tok).apiErr(http.StatusForbidden, wire.CodePermissionDenied)
		e.do("POST", "/v1/allocations?namespace=team-a", gpuReq).apiErr(http.StatusForbidden, wire.CodePermissionDenied)
		e.do("POST", "/v1/allocations?namespace=team-a", gpuReq, wire.HeaderToken, "no-such-secret").apiErr(http.StatusUnauthorized, wire.CodeUnauthorized)
	})
	// A read passes the ACL check and then needs the replica.
	e.do("GET", "/v1/devices", "", wire.HeaderToken, mgmt).apiErr(http.StatusServiceUnavailable, wire.CodeNotServer)
	e.do("GET", "/v1/devices", "", wire.HeaderToken, tok).apiErr(http.StatusForbidden, wire.CodePermissionDenied)
	e.b.mu.Lock()
	resolves := e.b.resolves
	e.b.mu.Unlock()
	if resolves == 0 {
		t.Fatal("no token was resolved through the backend")
	}
}
