package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// newACLEnv is a Server with ACLs on, bootstrapped: e.token is the
// management token, and the sample inventory is registered.
func newACLEnv(t *testing.T, opts Options) (*testEnv, string) {
	t.Helper()
	opts.ACLEnabled = true
	e := newEnv(t, opts)
	var tok wire.ACLToken
	e.do("POST", "/v1/acl/bootstrap", "").ok(200).decode(&tok)
	if tok.SecretID == "" || tok.AccessorID == "" || !tok.Management {
		t.Fatalf("bootstrap answered %+v", tok)
	}
	e.token = tok.SecretID
	e.seed()
	return e, tok.SecretID
}

// policy applies a policy with the management token.
func (e *testEnv) policy(name string, rules wire.ACLRules) {
	e.t.Helper()
	b, _ := json.Marshal(wire.ACLPolicyRequest{Rules: rules})
	e.do("PUT", "/v1/acl/policy/"+name, string(b)).ok(200)
}

// newToken creates a token with policies and returns its secret.
func (e *testEnv) newToken(policies ...string) string {
	e.t.Helper()
	b, _ := json.Marshal(wire.ACLTokenRequest{Policies: policies})
	var tok wire.ACLToken
	e.do("POST", "/v1/acl/token", string(b)).ok(200).decode(&tok)
	if tok.SecretID == "" {
		e.t.Fatalf("token without a secret: %+v", tok)
	}
	return tok.SecretID
}

// rulesFor grants access in one area (allocations: in namespace ns).
func rulesFor(area fsm.Area, access, ns string) wire.ACLRules {
	var r wire.ACLRules
	switch area {
	case fsm.AreaAllocations:
		r.Namespaces = map[string]string{ns: access}
	case fsm.AreaDevices:
		r.Devices = access
	case fsm.AreaPolicies:
		r.Policies = access
	case fsm.AreaOperator:
		r.Operator = access
	case fsm.AreaAgent:
		r.Agent = access
	}
	return r
}

// rulesLacking grants write in every area but area (allocations: in
// another namespace), and read in area when the capability is a write.
func rulesLacking(c capability) wire.ACLRules {
	r := wire.ACLRules{Namespaces: map[string]string{"elsewhere": "write"}, Devices: "write", Policies: "write", Operator: "write", Agent: "write"}
	inArea := ""
	if c.write {
		inArea = "read"
	}
	switch c.area {
	case fsm.AreaAllocations:
		if inArea != "" {
			r.Namespaces["default"] = inArea
		}
	case fsm.AreaDevices:
		r.Devices = inArea
	case fsm.AreaPolicies:
		r.Policies = inArea
	case fsm.AreaOperator:
		r.Operator = inArea
	case fsm.AreaAgent:
		r.Agent = inArea
	}
	return r
}

// capabilityLine matches a route's capability line in docs/api.md.
const capabilityPrefix = "Capability: `"

// TestRoutesCapabilityDocumented checks that every route heading of
// docs/api.md is followed by a Capability line naming exactly the
// capability the route table gives it.
func TestRoutesCapabilityDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	current := ""
	for _, line := range strings.Split(string(data), "\n") {
		if m := headingRoute.FindStringSubmatch(line); m != nil {
			current = m[1] + " " + m[2]
			continue
		}
		if strings.HasPrefix(line, "#") {
			current = ""
			continue
		}
		if current != "" && strings.HasPrefix(line, capabilityPrefix) {
			rest := line[len(capabilityPrefix):]
			documented[current] = rest[:strings.IndexByte(rest, '`')]
			current = ""
		}
	}
	for _, rt := range routes() {
		got, ok := documented[rt.pattern()]
		switch {
		case !ok:
			t.Errorf("docs/api.md names no capability for %s (want a line %s%s`)", rt.pattern(), capabilityPrefix, rt.need)
		case got != rt.need.String():
			t.Errorf("docs/api.md says %s needs %q; the server enforces %q", rt.pattern(), got, rt.need)
		}
	}
}

// routePath fills a route's path parameters.
func routePath(rt route) string {
	p := strings.NewReplacer("{id}", "g1", "{pool}", "big", "{type}", "GPU", "{name}", "nosuch", "{accessor}", "nosuch").Replace(rt.path)
	if strings.HasPrefix(rt.path, "/v1/hosts/") {
		p = strings.Replace(rt.path, "{id}", "h9", 1)
	}
	return p
}

// TestRoutesCapabilityEnforced checks, for every route, that a token with
// exactly the route's capability gets past the ACL check and that a token
// with everything else (the same area's read for a write) gets 403.
func TestRoutesCapabilityEnforced(t *testing.T) {
	e, _ := newACLEnv(t, Options{EnableDebug: true})
	tokens := map[string]string{}
	token := func(name string, rules wire.ACLRules) string {
		if s, ok := tokens[name]; ok {
			return s
		}
		e.policy(name, rules)
		tokens[name] = e.newToken(name)
		return tokens[name]
	}
	for _, rt := range routes() {
		path := routePath(rt)
		var with, lacking string
		switch rt.need.kind {
		case capNone:
			with = ""
		case capToken:
			with = token("nothing", wire.ACLRules{})
		default:
			name := string(rt.need.area) + "-" + map[bool]string{false: "read", true: "write"}[rt.need.write]
			with = token(name, rulesFor(rt.need.area, map[bool]string{false: "read", true: "write"}[rt.need.write], "default"))
			lacking = token("lacking-"+name, rulesLacking(rt.need))
		}
		// Past the check: the route's own answer, never 401 or 403. pprof's
		// profile and trace would run for seconds, and the event stream
		// until its reader leaves: their check is asked directly.
		if rt.path == "/debug/pprof/profile" || rt.path == "/debug/pprof/trace" || rt.path == "/v1/event/stream" {
			req := httptest.NewRequest(rt.method, path, nil)
			req.Header.Set(wire.HeaderToken, with)
			if _, err := e.srv.authorize(req, rt); err != nil {
				t.Errorf("%s with %s: %v", rt.pattern(), rt.need, err)
			}
		} else {
			hdr := []string{wire.HeaderToken, with}
			if with == "" {
				hdr = []string{"X-None", "1"}
				e.token, with = "", e.token
			}
			r := e.do(rt.method, path, "", hdr...)
			if with != "" && hdr[0] == "X-None" {
				e.token = with
			}
			if r.code == http.StatusUnauthorized || r.code == http.StatusForbidden {
				t.Errorf("%s with a token of %s: %d %s", rt.pattern(), rt.need, r.code, r.body)
			}
		}
		if lacking == "" {
			continue
		}
		e.noSideEffect(func() {
			r := e.do(rt.method, path, "", wire.HeaderToken, lacking)
			if r.code != http.StatusForbidden {
				t.Errorf("%s with a token lacking %s: %d %s", rt.pattern(), rt.need, r.code, r.body)
				return
			}
			r.apiErr(http.StatusForbidden, wire.CodePermissionDenied)
		})
		// The anonymous token may do nothing.
		e.noSideEffect(func() {
			saved := e.token
			e.token = ""
			defer func() { e.token = saved }()
			e.do(rt.method, path, "").apiErr(http.StatusForbidden, wire.CodePermissionDenied)
		})
	}
}

func TestACLUnauthorized(t *testing.T) {
	e, mgmt := newACLEnv(t, Options{})
	e.noSideEffect(func() {
		e.do("GET", "/v1/devices", "", wire.HeaderToken, "no-such-secret").apiErr(401, wire.CodeUnauthorized)
		e.do("DELETE", "/v1/hosts/h1", "", "Authorization", "Bearer no-such-secret").apiErr(401, wire.CodeUnauthorized)
	})
	// The bearer form works like the header.
	e.do("GET", "/v1/devices", "", "Authorization", "Bearer "+mgmt).ok(200)
	// An expired token is refused: the fake's clock is in the past, so a
	// token made with a TTL of an hour has ended by the wall clock.
	e.policy("dev-read", wire.ACLRules{Devices: "read"})
	var tok wire.ACLToken
	e.do("POST", "/v1/acl/token", `{"policies":["dev-read"],"ttl":"1h"}`).ok(200).decode(&tok)
	if tok.ExpiresAt == nil {
		t.Fatalf("token with a ttl has no expiry: %+v", tok)
	}
	e.do("GET", "/v1/devices", "", wire.HeaderToken, tok.SecretID).apiErr(401, wire.CodeUnauthorized)
	e.do("POST", "/v1/acl/token", `{"policies":["dev-read"],"ttl":"876000h"}`).ok(200).decode(&tok)
	e.do("GET", "/v1/devices", "", wire.HeaderToken, tok.SecretID).ok(200)
	// A second bootstrap is refused.
	e.noSideEffect(func() { e.do("POST", "/v1/acl/bootstrap", "").apiErr(409, fsm.ErrConflict.Code) })
	// Secrets are never shown after creation.
	for _, path := range []string{"/v1/acl/tokens", "/v1/acl/token/" + tok.AccessorID, "/v1/acl/token/self"} {
		body := string(e.do("GET", path, "").ok(200).body)
		if strings.Contains(body, "secret") || strings.Contains(body, hashSecret(tok.SecretID)) || strings.Contains(body, hashSecret(mgmt)) {
			t.Errorf("%s shows a secret: %s", path, body)
		}
	}
	var self wire.ACLToken
	e.do("GET", "/v1/acl/token/self", "", wire.HeaderToken, tok.SecretID).ok(200).decode(&self)
	if self.AccessorID != tok.AccessorID {
		t.Errorf("self is %+v, want %s", self, tok.AccessorID)
	}
	// A deleted token stops working.
	e.do("DELETE", "/v1/acl/token/"+tok.AccessorID, "").ok(200)
	e.do("GET", "/v1/devices", "", wire.HeaderToken, tok.SecretID).apiErr(401, wire.CodeUnauthorized)
	// The anonymous token gets what its policies grant.
	e.token = ""
	e.do("GET", "/v1/devices", "").apiErr(403, wire.CodePermissionDenied)
	e.do("PUT", "/v1/acl/token/anonymous", `{"policies":["dev-read"]}`, wire.HeaderToken, mgmt).ok(200)
	e.do("GET", "/v1/devices", "").ok(200)
	e.do("POST", "/v1/devices/g1/drain", "").apiErr(403, wire.CodePermissionDenied)
}

func TestACLHostRegister(t *testing.T) {
	e, _ := newACLEnv(t, Options{})
	e.policy("host-h7", wire.ACLRules{HostRegister: []string{"h7"}})
	tok := e.newToken("host-h7")
	body := `{"devices":[{"id":"g7","type":"GPU","capabilities":{"memory_gb":40}}]}`
	e.do("PUT", "/v1/hosts/h7", body, wire.HeaderToken, tok).ok(200)
	e.noSideEffect(func() {
		e.do("PUT", "/v1/hosts/h8", body, wire.HeaderToken, tok).apiErr(403, wire.CodePermissionDenied)
		e.do("DELETE", "/v1/hosts/h7", "", wire.HeaderToken, tok).apiErr(403, wire.CodePermissionDenied)
	})
}

func TestACLNamespaces(t *testing.T) {
	e, mgmt := newACLEnv(t, Options{})
	e.policy("team-a", wire.ACLRules{Namespaces: map[string]string{"team-a": "write"}})
	e.policy("reader", wire.ACLRules{Namespaces: map[string]string{"*": "read"}})
	a := e.newToken("team-a")
	reader := e.newToken("reader")
	alloc := `{"claims":[{"type":"GPU","count":1}],"request_id":"job-1"}`

	var def, own wire.Allocation
	e.do("POST", "/v1/allocations", alloc).ok(200).decode(&def)
	if def.Namespace != "default" {
		t.Fatalf("namespace %q", def.Namespace)
	}
	e.noSideEffect(func() {
		e.do("POST", "/v1/allocations", alloc, wire.HeaderToken, a).apiErr(403, wire.CodePermissionDenied)
		e.do("POST", "/v1/allocations?namespace=team-b", alloc, wire.HeaderToken, a).apiErr(403, wire.CodePermissionDenied)
		e.do("POST", "/v1/allocations?namespace=team-b", `{"claims":[{"type":"GPU","count":1}],"namespace":"team-a"}`, wire.HeaderToken, a).apiErr(400, wire.CodeBadRequest)
		e.do("POST", "/v1/allocations?namespace=*", alloc, wire.HeaderToken, a).apiErr(400, wire.CodeBadRequest)
	})
	// The same request ID in another namespace is another request.
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"request_id":"job-1","namespace":"team-a"}`, wire.HeaderToken, a).ok(200).decode(&own)
	if own.Namespace != "team-a" || own.ID == def.ID {
		t.Fatalf("allocation %+v", own)
	}
	// Another namespace's allocation is not found, whatever the token.
	e.noSideEffect(func() {
		for p, body := range map[string]string{"release": "", "renew": `{"ttl":"1m"}`, "cancel": ""} {
			e.do("POST", "/v1/allocations/"+def.ID+"/"+p+"?namespace=team-a", body, wire.HeaderToken, a).apiErr(404, wire.CodeNotFound)
			e.do("POST", "/v1/allocations/"+own.ID+"/"+p, body, wire.HeaderToken, mgmt).apiErr(404, wire.CodeNotFound)
		}
		e.do("GET", "/v1/allocations/"+def.ID+"?namespace=team-a", "", wire.HeaderToken, a).apiErr(404, wire.CodeNotFound)
		e.do("GET", "/v1/allocations/"+own.ID, "", wire.HeaderToken, mgmt).apiErr(404, wire.CodeNotFound)
		e.do("GET", "/v1/allocations?namespace=default", "", wire.HeaderToken, a).apiErr(403, wire.CodePermissionDenied)
	})
	list := func(path, token string) []string {
		t.Helper()
		var l wire.AllocationList
		e.do("GET", path, "", wire.HeaderToken, token).ok(200).decode(&l)
		var ids []string
		for _, x := range l.Allocations {
			ids = append(ids, x.Namespace)
		}
		return ids
	}
	for _, c := range []struct {
		path, token string
		want        string
	}{
		{"/v1/allocations", mgmt, "default"},
		{"/v1/allocations?namespace=team-a", mgmt, "team-a"},
		{"/v1/allocations?namespace=*", mgmt, "default,team-a"},
		{"/v1/allocations?namespace=*", a, "team-a"},
		{"/v1/allocations?namespace=team-a", a, "team-a"},
		{"/v1/allocations?namespace=*", reader, "default,team-a"},
	} {
		if got := strings.Join(list(c.path, c.token), ","); got != c.want {
			t.Errorf("%s: namespaces %q, want %q", c.path, got, c.want)
		}
	}
	e.do("GET", "/v1/allocations/"+own.ID+"?namespace=*", "", wire.HeaderToken, reader).ok(200)
	e.do("POST", "/v1/allocations/"+own.ID+"/release?namespace=team-a", "", wire.HeaderToken, reader).apiErr(403, wire.CodePermissionDenied)
	e.do("POST", "/v1/allocations/"+own.ID+"/release?namespace=team-a", "", wire.HeaderToken, a).ok(200)
	// Statistics count the request's namespace.
	var stats []wire.Stats
	e.do("GET", "/v1/stats?type=GPU&namespace=team-a", "", wire.HeaderToken, a).ok(200).decode(&stats)
	if len(stats) == 0 || stats[0].Counts.Total != 1 {
		t.Errorf("team-a stats %+v", stats)
	}
	e.do("GET", "/v1/stats?namespace=default", "", wire.HeaderToken, a).apiErr(403, wire.CodePermissionDenied)
	e.do("GET", "/v1/recommendations?namespace=*", "", wire.HeaderToken, a).ok(200)
}

// TestACLOff checks that with ACLs off nothing is checked, tokens are
// ignored and the ACL routes say ACLs are off.
func TestACLOff(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	e.do("GET", "/v1/devices", "", wire.HeaderToken, "whatever").ok(200)
	e.noSideEffect(func() { e.do("POST", "/v1/acl/bootstrap", "").apiErr(400, wire.CodeBadRequest) })
}

func TestACLTokenGivenSecret(t *testing.T) {
	e, mgmt := newACLEnv(t, Options{})
	e.policy("host-h7", wire.ACLRules{HostRegister: []string{"h7"}})
	// A host agent's pre-generated secret becomes the token's.
	secret := "h7-0123456789abcdef"
	var tok wire.ACLToken
	e.do("POST", "/v1/acl/token", `{"policies":["host-h7"],"secret_id":"`+secret+`"}`).ok(200).decode(&tok)
	if tok.SecretID != secret || tok.AccessorID == "" || tok.AccessorID == secret {
		t.Fatalf("create with a secret answered %+v", tok)
	}
	body := `{"devices":[{"id":"g7","type":"GPU","capabilities":{"memory_gb":40}}]}`
	e.do("PUT", "/v1/hosts/h7", body, wire.HeaderToken, secret).ok(200)
	// A UUID is a secret too.
	uuid := "6f1c2a3e-9b4d-4c8e-a1f2-0d3e4b5c6a7f"
	e.do("POST", "/v1/acl/token", `{"policies":["host-h7"],"secret_id":"`+uuid+`"}`).ok(200)
	e.do("GET", "/v1/acl/token/self", "", wire.HeaderToken, uuid).ok(200)
	// The state keeps the hash only; no read shows the secret.
	for _, path := range []string{"/v1/acl/tokens", "/v1/acl/token/" + tok.AccessorID} {
		if b := string(e.do("GET", path, "").ok(200).body); strings.Contains(b, secret) || strings.Contains(b, hashSecret(secret)) {
			t.Errorf("%s shows the secret or its hash: %s", path, b)
		}
	}
	e.noSideEffect(func() {
		// Bad secrets are refused before the log, without echoing them.
		for _, bad := range []string{
			"short",                        // under 16
			strings.Repeat("x", 129),       // over 128
			"has a space in it 0123456789", // space
			"tab\tin-it-0123456789",        // control character
			"non-ascii-é-0123456789",       // not ASCII
		} {
			b, _ := json.Marshal(wire.ACLTokenRequest{Policies: []string{"host-h7"}, SecretID: bad})
			e2 := e.do("POST", "/v1/acl/token", string(b)).apiErr(400, wire.CodeBadRequest)
			if strings.Contains(e2.Message, bad) {
				t.Errorf("the refusal echoes the secret: %s", e2.Message)
			}
		}
		// A secret another token has (management included) is a conflict.
		e.do("POST", "/v1/acl/token", `{"policies":["host-h7"],"secret_id":"`+secret+`"}`).apiErr(409, fsm.ErrConflict.Code)
		e.do("POST", "/v1/acl/token", `{"secret_id":"`+mgmt+`"}`).apiErr(409, fsm.ErrConflict.Code)
		// The secret is set on create only.
		e.do("PUT", "/v1/acl/token/"+tok.AccessorID, `{"policies":["host-h7"],"secret_id":"another-0123456789"}`).apiErr(400, wire.CodeBadRequest)
	})
	// Rotation: a new token, then the old one deleted; the new secret
	// works, the old does not.
	e.do("POST", "/v1/acl/token", `{"policies":["host-h7"],"secret_id":"h7-rotated-0123456789"}`).ok(200)
	e.do("DELETE", "/v1/acl/token/"+tok.AccessorID, "").ok(200)
	e.do("PUT", "/v1/hosts/h7", body, wire.HeaderToken, secret).apiErr(401, wire.CodeUnauthorized)
	e.do("PUT", "/v1/hosts/h7", body, wire.HeaderToken, "h7-rotated-0123456789").ok(200)
	// Once deleted, the old secret may be given again.
	e.do("POST", "/v1/acl/token", `{"policies":["host-h7"],"secret_id":"`+secret+`"}`).ok(200)
}
