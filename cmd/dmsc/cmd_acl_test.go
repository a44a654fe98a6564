package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

func TestCLIACL(t *testing.T) {
	apiNodeWith(t, api.Options{Version: "test", Role: "server", WaitGrace: time.Second, ACLEnabled: true})
	t.Setenv(client.TokenEnv, "")
	t.Setenv(client.NamespaceEnv, "")
	// Without a token nothing is allowed.
	cliCase{args: []string{"device", "list"}, code: exitDenied, errOut: []string{"permission_denied", "devices:read"}}.check(t)
	var boot wire.ACLToken
	jsonOut(t, &boot, "acl", "bootstrap")
	if boot.AccessorID == "" || boot.SecretID == "" {
		t.Fatalf("bootstrap %+v", boot)
	}
	cliCase{args: []string{"acl", "bootstrap"}, code: exitConflict}.check(t)
	cliCase{args: []string{"device", "list", "-token", "wrong"}, code: exitDenied, errOut: []string{"unauthorized"}}.check(t)
	t.Setenv(client.TokenEnv, boot.SecretID)

	rules := filepath.Join(t.TempDir(), "team-a.json")
	if err := os.WriteFile(rules, []byte(`{"namespaces": {"team-a": "write"}, "devices": "read"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []cliCase{
		{args: []string{"device", "list"}, out: []string{"g1"}},
		{args: []string{"acl", "token", "self"}, out: []string{boot.AccessorID, "Management:  true"}},
		{args: []string{"acl", "policy", "apply", "-name", "team-a", "-description", "team A", rules}, out: []string{"Applied policy team-a"}},
		{args: []string{"acl", "policy", "apply", rules}, code: exitUsage, errOut: []string{"-name is required"}},
		{args: []string{"acl", "policy", "list"}, out: []string{"team-a", "team A"}},
		{args: []string{"acl", "policy", "read", "team-a"}, out: []string{`"team-a": "write"`, `"devices": "read"`}},
		{args: []string{"acl", "token", "create", "-policy", "nosuch"}, code: exitNotFound},
	} {
		tc.check(t)
	}
	var tok wire.ACLToken
	jsonOut(t, &tok, "acl", "token", "create", "-policy", "team-a", "-description", "team A", "-ttl", "24h")
	if tok.SecretID == "" || tok.ExpiresAt == nil || len(tok.Policies) != 1 {
		t.Fatalf("token %+v", tok)
	}
	var a wire.Allocation
	jsonOut(t, &a, "alloc", "-type", "GPU", "-token", tok.SecretID, "-namespace", "team-a")
	if a.Namespace != "team-a" {
		t.Fatalf("allocation %+v", a)
	}
	for _, tc := range []cliCase{
		{args: []string{"acl", "token", "list"}, out: []string{tok.AccessorID, "team-a", "anonymous", "(management)"}},
		{args: []string{"acl", "token", "read", tok.AccessorID}, out: []string{"Policies:    team-a", "Expires:"}},
		// The token acts in its namespace only; another namespace's
		// allocation is not found.
		{args: []string{"alloc", "-type", "GPU", "-token", tok.SecretID}, code: exitDenied, errOut: []string{"allocations:write in namespace default"}},
		{args: []string{"alloc", "status", a.ID}, code: exitNotFound},
		{args: []string{"alloc", "status", a.ID, "-namespace", "team-a"}, out: []string{a.ID}},
		{args: []string{"release", a.ID, "-token", tok.SecretID, "-namespace", "team-a"}, out: []string{a.ID}},
		{args: []string{"policy", "get", "-token", tok.SecretID}, code: exitDenied},
		// The anonymous token gets what its policies grant.
		{args: []string{"acl", "token", "update", "-policy", "team-a", "anonymous"}, out: []string{"anonymous", "team-a"}},
		{args: []string{"device", "list", "-token", ""}, out: []string{"g1"}},
		{args: []string{"acl", "token", "delete", tok.AccessorID}, out: []string{"Deleted token"}},
		{args: []string{"device", "list", "-token", tok.SecretID}, code: exitDenied, errOut: []string{"unauthorized"}},
		{args: []string{"acl", "policy", "delete", "team-a"}, out: []string{"Deleted policy team-a"}},
	} {
		tc.check(t)
	}
}

// TestCLIACLTokenSecret creates tokens with a secret given by -secret and
// -secret-file, as an operator does for host agents started before their
// tokens existed.
func TestCLIACLTokenSecret(t *testing.T) {
	apiNodeWith(t, api.Options{Version: "test", Role: "server", WaitGrace: time.Second, ACLEnabled: true})
	t.Setenv(client.TokenEnv, "")
	t.Setenv(client.NamespaceEnv, "")
	var boot wire.ACLToken
	jsonOut(t, &boot, "acl", "bootstrap")
	t.Setenv(client.TokenEnv, boot.SecretID)

	dir := t.TempDir()
	rules := filepath.Join(dir, "dev-read.json")
	if err := os.WriteFile(rules, []byte(`{"devices": "read"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cliCase{args: []string{"acl", "policy", "apply", "-name", "dev-read", rules}, out: []string{"Applied policy dev-read"}}.check(t)

	// -secret-file: the file's final newline is not part of the secret.
	const fromFile = "host-1-0123456789abcdef"
	secretFile := filepath.Join(dir, "host-1.token")
	if err := os.WriteFile(secretFile, []byte(fromFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var tok wire.ACLToken
	jsonOut(t, &tok, "acl", "token", "create", "-policy", "dev-read", "-secret-file", secretFile)
	if tok.SecretID != fromFile {
		t.Fatalf("token from -secret-file: %+v", tok)
	}
	const given = "6f1c2a3e-9b4d-4c8e-a1f2-0d3e4b5c6a7f"
	empty := filepath.Join(dir, "empty.token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []cliCase{
		{args: []string{"acl", "token", "create", "-policy", "dev-read", "-secret", given}, out: []string{"SecretID:    " + given}},
		{args: []string{"device", "list", "-token", given}, out: []string{"g1"}},
		{args: []string{"device", "list", "-token", fromFile}, out: []string{"g1"}},
		// A secret in use is a conflict; bad secrets are refused here.
		{args: []string{"acl", "token", "create", "-policy", "dev-read", "-secret", given}, code: exitConflict, errOut: []string{"another token has this secret"}},
		{args: []string{"acl", "token", "create", "-secret-file", secretFile}, code: exitConflict},
		{args: []string{"acl", "token", "create", "-secret", "short"}, code: exitUsage, errOut: []string{"16 to 128"}},
		{args: []string{"acl", "token", "create", "-secret", "x-0123456789abcdef", "-secret-file", secretFile}, code: exitUsage, errOut: []string{"exclude each other"}},
		{args: []string{"acl", "token", "create", "-secret-file", filepath.Join(dir, "nosuch")}, code: exitUsage, errOut: []string{"-secret-file"}},
		{args: []string{"acl", "token", "create", "-secret-file", empty}, code: exitUsage, errOut: []string{"is empty"}},
		// The secret is set on create only.
		{args: []string{"acl", "token", "update", "-secret", given, tok.AccessorID}, code: exitUsage},
	} {
		tc.check(t)
	}
}
