package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func secretHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func TestACLBootstrapOnce(t *testing.T) {
	h := newHarness(t)
	if ok, _ := h.s.ACLBootstrapped(); ok {
		t.Fatal("a fresh state is bootstrapped")
	}
	h.must(&ACLBootstrap{Token: ACLToken{AccessorID: "root", SecretHash: secretHash("s3cret")}})
	tok, ok := h.s.ACLTokenBySecretHash(secretHash("s3cret"))
	if !ok || !tok.Management || tok.AccessorID != "root" {
		t.Fatalf("bootstrap token %+v %t", tok, ok)
	}
	if r := h.apply(&ACLBootstrap{Token: ACLToken{AccessorID: "again", SecretHash: secretHash("x")}}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("second bootstrap: %v, want conflict", r.Err)
	}
	if strings.Contains(string(h.s.SnapshotBytes()), "s3cret") {
		t.Fatal("the snapshot holds the secret")
	}
}

func TestACLPoliciesTokensAndAuthorizer(t *testing.T) {
	h := newHarness(t)
	h.must(&ACLPolicyUpsert{Policy: ACLPolicy{Name: "team-a", Rules: ACLRules{
		Namespaces: map[string]Access{"team-a": AccessWrite, "*": AccessRead},
		Devices:    AccessRead,
	}}})
	h.must(&ACLPolicyUpsert{Policy: ACLPolicy{Name: "no-b", Rules: ACLRules{
		Namespaces: map[string]Access{"team-b": AccessDeny},
		Devices:    AccessWrite,
	}}})
	h.must(&ACLPolicyUpsert{Policy: ACLPolicy{Name: "host-h1", Rules: ACLRules{HostRegister: []string{"h1"}}}})
	if r := h.apply(&ACLTokenUpsert{Token: ACLToken{AccessorID: "a", SecretHash: secretHash("a"), Policies: []string{"ghost"}}}); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("a token naming an unknown policy: %v", r.Err)
	}
	h.must(&ACLTokenUpsert{Token: ACLToken{AccessorID: "a", SecretHash: secretHash("a"), Policies: []string{"team-a", "no-b", "host-h1"}}})
	if r := h.apply(&ACLTokenUpsert{Token: ACLToken{AccessorID: "b", SecretHash: secretHash("a")}}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("a second token with the same secret: %v", r.Err)
	}
	tok, _ := h.s.ACLTokenBySecretHash(secretHash("a"))
	az := h.s.Authorizer(tok)
	for _, tc := range []struct {
		area  Area
		ns    string
		write bool
		want  bool
	}{
		{AreaAllocations, "team-a", true, true},
		{AreaAllocations, "team-c", false, true},  // "*" read
		{AreaAllocations, "team-c", true, false},  // "*" read only
		{AreaAllocations, "team-b", false, false}, // named deny wins over "*"
		{AreaDevices, "", true, true},             // write wins over read
		{AreaOperator, "", false, false},          // default deny
		{AreaAgent, "", false, false},
	} {
		if got := az.Allowed(tc.area, tc.ns, tc.write); got != tc.want {
			t.Errorf("%s %q write=%t: %t, want %t", tc.area, tc.ns, tc.write, got, tc.want)
		}
	}
	if !az.MayRegisterHost("h1") || az.MayRegisterHost("h2") {
		t.Error("host registration rules")
	}
	// Deleting a policy takes it from its tokens.
	h.must(&ACLPolicyDelete{Name: "no-b"})
	tok, _ = h.s.ACLToken("a")
	if strings.Join(tok.Policies, ",") != "host-h1,team-a" {
		t.Fatalf("policies after the delete: %v", tok.Policies)
	}
	// The anonymous token exists, takes policies, and cannot be deleted.
	h.must(&ACLTokenUpsert{Token: ACLToken{AccessorID: AnonymousAccessorID, Policies: []string{"team-a"}}})
	if r := h.apply(&ACLTokenDelete{AccessorID: AnonymousAccessorID}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("deleting the anonymous token: %v", r.Err)
	}
	if r := h.apply(&ACLTokenUpsert{Token: ACLToken{AccessorID: AnonymousAccessorID, SecretHash: secretHash("z")}}); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("a secret for the anonymous token: %v", r.Err)
	}
	h.must(&ACLTokenDelete{AccessorID: "a"})
	if _, ok := h.s.ACLTokenBySecretHash(secretHash("a")); ok {
		t.Fatal("a deleted token's secret still resolves")
	}
	// Everything survives a snapshot, byte for byte.
	snap := h.s.SnapshotBytes()
	s2, err := Restore(strings.NewReader(string(snap)))
	if err != nil {
		t.Fatal(err)
	}
	if string(s2.SnapshotBytes()) != string(snap) {
		t.Fatal("restore changed the ACL state")
	}
	for _, bad := range []Command{
		&ACLPolicyUpsert{Policy: ACLPolicy{Name: "bad name"}},
		&ACLPolicyUpsert{Policy: ACLPolicy{Name: "p", Rules: ACLRules{Devices: "admin"}}},
		&ACLPolicyUpsert{Policy: ACLPolicy{Name: "p", Rules: ACLRules{Namespaces: map[string]Access{"a b": AccessRead}}}},
		&ACLTokenUpsert{Token: ACLToken{AccessorID: "t", SecretHash: "not-hex"}},
		&ACLPolicyDelete{Name: "ghost"},
		&ACLTokenDelete{AccessorID: "ghost"},
	} {
		if r := h.apply(bad); r.Err == nil {
			t.Errorf("%T %+v accepted", bad, bad)
		}
	}
}

func TestIDsAreSafe(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"../etc", "a/b", "x\x1b[2J", "\xff\xfe", strings.Repeat("a", 257), "", "..", "with space"} {
		if r := h.apply(host(id, gpu("g1", 8))); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("host id %q: %v, want invalid", id, r.Err)
		}
		if r := h.apply(host("h1", gpu(id, 8))); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("device id %q: %v, want invalid", id, r.Err)
		}
	}
	h.must(host("GPU-1f2e.node-1:0", gpu("GPU-8a3c0e1d-2f4b-4b1e-9c3d-4e5f6a7b8c9d", 8)))
}

// TestNewAuthorizerMatchesState checks that an authorizer built from a
// token and its policies (as a host builds it from a server's answer)
// decides as the state's own: the same merge whatever the order of the
// policies, policies the token does not name ignored.
func TestNewAuthorizerMatchesState(t *testing.T) {
	h := newHarness(t)
	h.must(&ACLPolicyUpsert{Policy: ACLPolicy{Name: "team-a", Rules: ACLRules{
		Namespaces: map[string]Access{"team-a": AccessWrite, "*": AccessRead}, Devices: AccessRead, Agent: AccessRead,
	}}})
	h.must(&ACLPolicyUpsert{Policy: ACLPolicy{Name: "no-b", Rules: ACLRules{
		Namespaces: map[string]Access{"team-b": AccessDeny, "team-a": AccessRead}, Devices: AccessWrite, Agent: AccessDeny,
	}}})
	h.must(&ACLPolicyUpsert{Policy: ACLPolicy{Name: "host-h1", Rules: ACLRules{HostRegister: []string{"h1"}}}})
	h.must(&ACLPolicyUpsert{Policy: ACLPolicy{Name: "ops", Rules: ACLRules{Operator: AccessWrite}}})
	h.must(&ACLTokenUpsert{Token: ACLToken{AccessorID: "a", SecretHash: secretHash("a"), Policies: []string{"team-a", "no-b", "host-h1"}}})
	h.must(&ACLBootstrap{Token: ACLToken{AccessorID: "root", SecretHash: secretHash("root")}})
	for _, accessor := range []string{"a", "root", AnonymousAccessorID} {
		tok, _ := h.s.ACLToken(accessor)
		want := h.s.Authorizer(tok)
		pols := h.s.ACLTokenPolicies(tok)
		if len(pols) != len(tok.Policies) {
			t.Fatalf("%s: %d policies for %v", accessor, len(pols), tok.Policies)
		}
		if got := NewAuthorizer(tok, pols); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: NewAuthorizer %+v, the state's %+v", accessor, got, want)
		}
		// Reversed, with a policy the token does not name.
		other := append([]ACLPolicy{}, pols...)
		slices.Reverse(other)
		ops, _ := h.s.ACLPolicy("ops")
		other = append(other, ops)
		got := NewAuthorizer(tok, other)
		for _, area := range []Area{AreaDevices, AreaPolicies, AreaOperator, AreaAgent} {
			for _, write := range []bool{false, true} {
				if got.Allowed(area, "", write) != want.Allowed(area, "", write) {
					t.Errorf("%s: %s write=%t differs", accessor, area, write)
				}
			}
		}
		for _, ns := range []string{"team-a", "team-b", "team-c"} {
			for _, write := range []bool{false, true} {
				if got.Allowed(AreaAllocations, ns, write) != want.Allowed(AreaAllocations, ns, write) {
					t.Errorf("%s: namespace %s write=%t differs", accessor, ns, write)
				}
			}
		}
		ga, gn := got.ReadableNamespaces()
		wa, wn := want.ReadableNamespaces()
		if ga != wa || !slices.Equal(gn, wn) || got.MayRegisterHost("h1") != want.MayRegisterHost("h1") {
			t.Errorf("%s: readable namespaces or host registration differ", accessor)
		}
	}
	if a := NewAuthorizer(ACLToken{Policies: []string{"ghost"}}, nil); a.Allowed(AreaAgent, "", false) || a.Management() {
		t.Error("a token without policies may read")
	}
}
