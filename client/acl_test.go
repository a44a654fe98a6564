package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
)

// TestACLOnNode drives the ACL calls against a one-server cluster with
// ACLs on: bootstrap, a policy, a namespaced token, the typed errors, and
// namespaces from the client's configuration.
func TestACLOnNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers: 1, Dir: t.TempDir(), Fast: true,
		HTTP:    api.NodeHandler(api.Options{Version: "test", ACLEnabled: true}),
		Version: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = lc.Close(cctx)
	})
	addr := lc.Addresses()[0]
	t.Setenv(client.TokenEnv, "")
	t.Setenv(client.NamespaceEnv, "")
	anon, err := client.New(client.Config{Addresses: []string{addr}, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := anon.Devices(ctx, nil, nil); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("anonymous devices: %v, want permission denied", err)
	}
	boot, err := anon.ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.ACLBootstrap(ctx); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("second bootstrap: %v", err)
	}
	mgmt, _ := client.New(client.Config{Addresses: []string{addr}, Token: boot.SecretID})
	if _, _, err := mgmt.RegisterHost(ctx, "h1", client.RegisterHostRequest{Devices: []client.DeviceSpec{gpuSpec("g1", 80), gpuSpec("g2", 40)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.ACLPolicyApply(ctx, "team-a", "team A", client.ACLRules{Namespaces: map[string]string{"team-a": "write"}, Devices: "read"}); err != nil {
		t.Fatal(err)
	}
	policies, _, err := mgmt.ACLPolicyList(ctx, nil)
	if err != nil || len(policies) != 1 || policies[0].Rules.Devices != "read" {
		t.Fatalf("policies %+v, %v", policies, err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx, client.ACLTokenSpec{Description: "team A", Policies: []string{"team-a"}, TTL: time.Hour})
	if err != nil || tok.SecretID == "" || tok.ExpiresAt == nil {
		t.Fatalf("token %+v, %v", tok, err)
	}
	teamA, _ := client.New(client.Config{Addresses: []string{addr}, Token: tok.SecretID, Namespace: "team-a"})
	self, _, err := teamA.ACLTokenSelf(ctx, nil)
	if err != nil || self.AccessorID != tok.AccessorID || self.SecretID != "" {
		t.Fatalf("self %+v, %v", self, err)
	}
	a, _, err := teamA.Allocate(ctx, client.AllocateRequest{Request: client.Request{Claims: []client.Claim{{Type: client.GPU, Count: 1}}}})
	if err != nil || a.Namespace != "team-a" {
		t.Fatalf("allocate %+v, %v", a, err)
	}
	if _, _, err := mgmt.Allocation(ctx, a.ID, nil); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another namespace's allocation: %v, want not found", err)
	}
	if _, _, err := teamA.Policies(ctx, nil); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("policies without policies:read: %v", err)
	}
	if _, err := mgmt.ACLTokenUpdate(ctx, "anonymous", client.ACLTokenSpec{Policies: []string{"team-a"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := anon.Devices(ctx, nil, nil); err != nil {
		t.Fatalf("anonymous devices after the update: %v", err)
	}
	if _, err := mgmt.ACLTokenDelete(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := teamA.Allocations(ctx, nil, nil); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("deleted token: %v, want unauthorized", err)
	}
}
