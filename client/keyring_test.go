package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// TestKeyringRotationSDK rotates the gossip key of a server and a host
// through the SDK, with the host's address first: the host answers
// not_server and the client moves on to the server.
func TestKeyringRotationSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Raft nodes")
	}
	old, err := cluster.GenerateGossipKey()
	if err != nil {
		t.Fatal(err)
	}
	oldRaw, _ := cluster.DecodeGossipKey(old)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers:   1,
		Dir:       t.TempDir(),
		Fast:      true,
		Configure: func(c *cluster.Config) { c.EncryptKey = oldRaw },
		Hosts: []cluster.LocalHost{{ID: "h1", Inventory: func() (fsm.HostSpec, []fsm.DeviceSpec, error) {
			return fsm.HostSpec{}, []fsm.DeviceSpec{{ID: "g1", Type: fsm.GPU}}, nil
		}}},
		HTTP: api.NodeHandler(api.Options{Version: "test"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := lc.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	hostURL := "http://" + lc.Node("h1").Self().HTTPAddr
	c, err := client.New(client.Config{Addresses: []string{hostURL, lc.Addresses()[0]}})
	if err != nil {
		t.Fatal(err)
	}
	want := func(what string, res *client.KeyringResponse, err error, keys ...client.KeyringKey) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.Members != 2 || len(res.Failed) != 0 || !slices.Equal(res.Keys, keys) {
			t.Fatalf("%s: %+v, want keys %+v on 2 members", what, res, keys)
		}
	}
	res, err := c.KeyringList(ctx)
	want("list", res, err, client.KeyringKey{Key: old, Installed: 2, Primary: 2})

	next, _ := cluster.GenerateGossipKey()
	if _, err := c.KeyringUse(ctx, next); !errors.Is(err, client.ErrConflict) {
		t.Errorf("use of a key not installed: %v, want conflict", err)
	}
	if _, err := c.KeyringInstall(ctx, "bm90IGEga2V5"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("install of a 9-byte key: %v, want invalid", err)
	}
	res, err = c.KeyringInstall(ctx, next)
	want("install", res, err, client.KeyringKey{Key: old, Installed: 2, Primary: 2}, client.KeyringKey{Key: next, Installed: 2})
	res, err = c.KeyringUse(ctx, next)
	want("use", res, err, client.KeyringKey{Key: next, Installed: 2, Primary: 2}, client.KeyringKey{Key: old, Installed: 2})
	if _, err := c.KeyringRemove(ctx, next); !errors.Is(err, client.ErrConflict) {
		t.Errorf("removal of the primary key: %v, want conflict", err)
	}
	res, err = c.KeyringRemove(ctx, old)
	want("remove", res, err, client.KeyringKey{Key: next, Installed: 2, Primary: 2})
}

// TestKeyringIncomplete: an answer that names failed members comes back
// with ErrKeyringIncomplete, and the request carries the key.
func TestKeyringIncomplete(t *testing.T) {
	f := newFakeNode(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, wire.KeyringResponse{
			Members: 3, Keys: []wire.KeyringKey{{Key: "k", Installed: 2, Primary: 2}},
			Failed: []wire.KeyringFailure{{Node: "h2", Error: "node unreachable"}},
		})
	})
	c, err := client.New(client.Config{Addresses: []string{f.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.KeyringInstall(context.Background(), "k")
	if !errors.Is(err, client.ErrKeyringIncomplete) || res == nil || res.Failed[0].Node != "h2" {
		t.Fatalf("install: %+v, %v", res, err)
	}
	if r, body := f.request(0); r.Method != http.MethodPost || r.URL.Path != "/v1/operator/keyring" || body != `{"key":"k"}` {
		t.Fatalf("request %s %s %s", r.Method, r.URL.Path, body)
	}
}
