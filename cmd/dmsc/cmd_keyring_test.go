package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
)

// TestCLIKeyring rotates the gossip key of a one-server cluster with the
// CLI: keygen, list, install, use, remove, and the refusals with their
// exit codes.
func TestCLIKeyring(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node")
	}
	_, out, _ := runCLI(t, "operator", "keygen")
	old := strings.TrimSpace(out)
	raw, err := cluster.DecodeGossipKey(old)
	if err != nil || len(raw) != 32 {
		t.Fatalf("keygen printed %q: %v", out, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers:   1,
		Dir:       t.TempDir(),
		Configure: func(c *cluster.Config) { c.EncryptKey = raw },
		HTTP:      api.NodeHandler(api.Options{Version: "test", Role: "server"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := lc.Close(sctx); err != nil {
			t.Error(err)
		}
	})
	t.Setenv(client.AddressEnv, lc.Addresses()[0])
	_, out, _ = runCLI(t, "operator", "keygen")
	next := strings.TrimSpace(out)
	if next == old {
		t.Fatal("keygen printed the same key twice")
	}
	for _, tc := range []cliCase{
		{args: []string{"operator", "keygen", "extra"}, code: exitUsage, errOut: []string{"takes no arguments"}},
		{args: []string{"operator", "keyring", "-list"}, out: []string{"KEY", "INSTALLED", "PRIMARY", old + "  1/1        1/1"}},
		{args: []string{"operator", "keyring"}, code: exitUsage, errOut: []string{"choose exactly one of -list"}},
		{args: []string{"operator", "keyring", "-list", "-use", next}, code: exitUsage, errOut: []string{"choose exactly one"}},
		{args: []string{"operator", "keyring", "-use", next}, code: exitConflict, errOut: []string{"installed on 0 of 1 members"}},
		{args: []string{"operator", "keyring", "-install", "abc"}, code: exitUsage, errOut: []string{"gossip key is not base64"}},
		{args: []string{"operator", "keyring", "-install", next}, out: []string{"Installed key " + next + " on 1 of 1 members", next + "  1/1        0/1"}},
		{args: []string{"operator", "keyring", "-use", next}, out: []string{"Now using key " + next, next + "  1/1        1/1", old + "  1/1        0/1"}},
		{args: []string{"operator", "keyring", "-remove", next}, code: exitConflict, errOut: []string{"primary key of 1 of 1 members"}},
		{args: []string{"operator", "keyring", "-remove", old}, out: []string{"Removed key " + old}},
	} {
		tc.check(t)
	}
	var res wire.KeyringResponse
	jsonOut(t, &res, "operator", "keyring", "-list")
	if res.Members != 1 || len(res.Keys) != 1 || res.Keys[0] != (wire.KeyringKey{Key: next, Installed: 1, Primary: 1}) {
		t.Fatalf("list -json: %+v", res)
	}
}
