package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
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

// TestACLHostAgentEndToEnd serves the API with ACLs on over a real
// cluster of a server and a host agent: an allocate sent to the host's
// API is checked with a token the host resolves through the server, and
// forwarded to the leader.
func TestACLHostAgentEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft node and a host")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers: 1,
		Hosts:   []cluster.LocalHost{{ID: "h1", Inventory: func() (fsm.HostSpec, []fsm.DeviceSpec, error) { return fsm.HostSpec{}, nil, nil }}},
		Dir:     t.TempDir(),
		Fast:    true,
		Configure: func(c *cluster.Config) {
			c.ACLEnabled = true
			c.NoLeaderHold = 2 * time.Second
		},
		HTTP: NodeHandler(Options{Version: "test", ACLEnabled: true}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := lc.Close(sctx); err != nil {
			t.Error(err)
		}
	}()
	server := lc.Addresses()[0]
	host := "http://" + lc.Node("h1").Self().HTTPAddr
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 15 * time.Second}
	defer hc.CloseIdleConnections()
	call := func(method, url, body, token string) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set(wire.HeaderToken, token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	must := func(method, url, body, token string, out any) {
		t.Helper()
		code, data := call(method, url, body, token)
		if code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, url, code, data)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatal(err)
			}
		}
	}

	var mgmt, tok wire.ACLToken
	must("POST", server+"/v1/acl/bootstrap", "", "", &mgmt)
	must("PUT", server+"/v1/acl/policy/team-a", `{"rules":{"namespaces":{"team-a":"write"}}}`, mgmt.SecretID, nil)
	must("POST", server+"/v1/acl/token", `{"policies":["team-a"]}`, mgmt.SecretID, &tok)
	must("PUT", server+"/v1/hosts/static1", `{"devices":[{"id":"g1","type":"GPU","capabilities":{"memory_gb":40}}]}`, mgmt.SecretID, nil)

	// The host may need a moment to see the server in gossip.
	var (
		code int
		data []byte
	)
	for deadline := time.Now().Add(15 * time.Second); ; {
		code, data = call("POST", host+"/v1/allocations?namespace=team-a", gpuReq, tok.SecretID)
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var a wire.Allocation
	if code != http.StatusOK || json.Unmarshal(data, &a) != nil || a.Namespace != "team-a" || a.ID == "" {
		t.Fatalf("allocate on the host with a token: %d %s", code, data)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{
		{"", http.StatusForbidden},                  // anonymous: no policies
		{"no-such-secret", http.StatusUnauthorized}, // unknown
	} {
		if code, data := call("POST", host+"/v1/allocations?namespace=team-a", gpuReq, tc.token); code != tc.want {
			t.Errorf("allocate on the host with token %q: %d %s, want %d", tc.token, code, data, tc.want)
		}
	}
	if code, data := call("POST", host+"/v1/allocations?namespace=team-b", gpuReq, tok.SecretID); code != http.StatusForbidden {
		t.Errorf("allocate in another namespace on the host: %d %s", code, data)
	}
	// Reads still need a replica.
	if code, data := call("GET", host+"/v1/devices", "", mgmt.SecretID); code != http.StatusServiceUnavailable || !strings.Contains(string(data), wire.CodeNotServer) {
		t.Errorf("a read on the host: %d %s", code, data)
	}
	// The allocation is in the cluster's state.
	must("GET", server+"/v1/allocations/"+a.ID+"?namespace=team-a", "", tok.SecretID, nil)
}
