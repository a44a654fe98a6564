package integration

// Attacks on a cluster with ACLs (and TLS) on (issue 12), each of which
// worked on a cluster without them: no token or a wrong one, a token of
// too little or of another namespace, a snapshot restore by an operator
// who may only read, a browser's cross-origin "simple" POST, a foreign
// Host header, a reused request ID and an expired token. Each is refused
// with the documented status and a JSON error envelope, and nothing
// changes: no server's state index moves and no allocation appears,
// disappears or changes status.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// codeStatus is the status docs/api.md gives each error code an attack
// may get.
var codeStatus = map[string]int{
	wire.CodeUnauthorized:         http.StatusUnauthorized,
	wire.CodePermissionDenied:     http.StatusForbidden,
	wire.CodeHostNotAllowed:       http.StatusForbidden,
	wire.CodeCrossOrigin:          http.StatusForbidden,
	wire.CodeNotFound:             http.StatusNotFound,
	wire.CodeConflict:             http.StatusConflict,
	wire.CodeUnsupportedMediaType: http.StatusUnsupportedMediaType,
	wire.CodeRequestIDReused:      http.StatusUnprocessableEntity,
}

// rawRequest is one request sent as an attacker would: any method, path,
// body and headers; Host, when set, replaces the Host header.
type rawRequest struct {
	method, path string
	body         []byte
	header       map[string]string
	host         string
}

// sendRaw sends r to p with exactly r's headers (the cluster's Token is
// not added) and returns the status and, for a status of 400 or more,
// the error envelope, which must have a code and a message.
func sendRaw(ctx context.Context, c *Cluster, p *Process, r rawRequest) (int, wire.Error, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, p.URL(r.path), body)
	if err != nil {
		return 0, wire.Error{}, err
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	if r.host != "" {
		req.Host = r.host
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, wire.Error{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, wire.Error{}, err
	}
	if resp.StatusCode < 400 {
		return resp.StatusCode, wire.Error{}, nil
	}
	var env wire.ErrorResponse
	if err := json.Unmarshal(b, &env); err != nil || env.Error.Code == "" || env.Error.Message == "" {
		return resp.StatusCode, wire.Error{}, fmt.Errorf("HTTP %d without a JSON error envelope: %q", resp.StatusCode, b)
	}
	return resp.StatusCode, env.Error, nil
}

// clusterState is what an attack must not change: every server's state
// index and every allocation's status, in every namespace.
type clusterState struct {
	indexes []string
	allocs  map[string]wire.AllocStatus
}

func (s clusterState) String() string {
	return fmt.Sprintf("indexes %v, %d allocations %v", s.indexes, len(s.allocs), s.allocs)
}

// observe reads the state with the cluster's (management) token.
func observe(ctx context.Context, c *Cluster) (clusterState, error) {
	idx, err := stateIndexes(ctx, c)
	if err != nil {
		return clusterState{}, err
	}
	st := clusterState{indexes: idx, allocs: map[string]wire.AllocStatus{}}
	next := ""
	for {
		var page wire.AllocationList
		if err := c.Get(ctx, c.Servers[0], "/v1/allocations?namespace=*&history=true&limit=1000&next="+next, &page); err != nil {
			return clusterState{}, fmt.Errorf("listing allocations: %w", err)
		}
		for _, a := range page.Allocations {
			st.allocs[a.Namespace+"/"+a.ID] = a.Status
		}
		if next = page.Next; next == "" {
			return st, nil
		}
	}
}

// settled waits until every server has applied the same state index and
// returns the state.
func settled(t *testing.T, ctx context.Context, c *Cluster) clusterState {
	t.Helper()
	var st clusterState
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		var err error
		if st, err = observe(ctx, c); err != nil {
			return false, err
		}
		for _, s := range st.indexes {
			if s[strings.IndexByte(s, '=')+1:] != st.indexes[0][strings.IndexByte(st.indexes[0], '=')+1:] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for the servers to agree on the state index: %v (last %v)", err, st)
	}
	return st
}

// unchanged fails the test when the state is not before.
func unchanged(t *testing.T, ctx context.Context, c *Cluster, before clusterState, what string) {
	t.Helper()
	after, err := observe(ctx, c)
	if err != nil {
		t.Fatalf("after %s: %v", what, err)
	}
	if !slices.Equal(before.indexes, after.indexes) || !maps.Equal(before.allocs, after.allocs) {
		t.Fatalf("%s changed the state:\nbefore %v\nafter  %v", what, before, after)
	}
}

// attack is a raw request and the error codes that may refuse it.
type attack struct {
	name  string
	req   rawRequest
	codes []string
}

// refusedEverywhere sends a to every server and checks each answer is
// one of a's codes, with the code's documented status, and that nothing
// changed.
func refusedEverywhere(t *testing.T, ctx context.Context, c *Cluster, before clusterState, a attack) {
	t.Helper()
	for _, p := range c.Servers {
		status, e, err := sendRaw(ctx, c, p, a.req)
		if err != nil {
			t.Fatalf("%s on %s: %v", a.name, p.Name, err)
		}
		if !slices.Contains(a.codes, e.Code) || status != codeStatus[e.Code] {
			t.Fatalf("%s on %s: HTTP %d %q (%s), want one of %v", a.name, p.Name, status, e.Code, e.Message, a.codes)
		}
		unchanged(t, ctx, c, before, a.name+" on "+p.Name)
	}
}

func jsonBody(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withAuth is h with the headers of a credential added.
func withAuth(h map[string]string, cred map[string]string) map[string]string {
	out := maps.Clone(cred)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, h)
	return out
}

func TestACLAttacksAreRefused(t *testing.T) {
	c := StartCluster(t, Options{ACL: true, TLS: true})
	ctx := testContext(t, 4*time.Minute)
	waitInventory(t, ctx, c)

	token := func(name string, rules wire.ACLRules, ttl time.Duration) string {
		t.Helper()
		secret, err := c.NewToken(ctx, name, rules, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	teamA := token("team-a", wire.ACLRules{Namespaces: map[string]string{"a": "write"}, Devices: "read"}, 0)
	teamB := token("team-b", wire.ACLRules{Namespaces: map[string]string{"b": "write"}, Devices: "read"}, 0)
	reader := token("reader", wire.ACLRules{Namespaces: map[string]string{"default": "read"}}, 0)
	opRead := token("operator-read", wire.ACLRules{Operator: "read"}, 0)

	// The victims: one allocation in default (the management token's),
	// one of team A's; a snapshot saved; then team A's second allocation.
	victim := allocate(t, ctx, c, c.Servers, gpuRequest("victim-default", 1, ""))
	inA := gpuRequest("victim-a", 1, "")
	inA.Namespace = "a"
	victimA := allocate(t, ctx, c.WithToken(teamA), c.Servers, inA)
	snap, err := fetchSnapshot(ctx, c, c.Servers[0])
	if err != nil {
		t.Fatalf("saving a snapshot with the management token: %v", err)
	}
	inA2 := gpuRequest("victim-a-after-save", 1, "")
	inA2.Namespace = "a"
	victimA2 := allocate(t, ctx, c.WithToken(teamA), c.Servers, inA2)

	// Every token is valid for what its policy grants (consistent reads:
	// a follower may not have applied the allocations yet).
	for _, ok := range []struct {
		name, secret, path string
	}{
		{"team A reads its allocation", teamA, "/v1/allocations/" + victimA.ID + "?namespace=a&consistent"},
		{"team B reads its namespace", teamB, "/v1/allocations?namespace=b&consistent"},
		{"the reader reads default", reader, "/v1/allocations/" + victim.ID + "?consistent"},
		{"the operator reader reads the retention", opRead, "/v1/retention?consistent"},
	} {
		if err := c.WithToken(ok.secret).Get(ctx, c.Servers[1], ok.path, nil); err != nil {
			t.Fatalf("%s: %v", ok.name, err)
		}
	}

	before := settled(t, ctx, c)
	jsonCT := map[string]string{"Content-Type": "application/json"}
	alloc := jsonBody(t, gpuRequest("", 1, ""))
	releaseDefault := rawRequest{method: http.MethodPost, path: "/v1/allocations/" + victim.ID + "/release"}
	releaseA := rawRequest{method: http.MethodPost, path: "/v1/allocations/" + victimA.ID + "/release?namespace=a"}
	writes := []struct {
		name string
		req  rawRequest
	}{
		{"allocate", rawRequest{method: http.MethodPost, path: "/v1/allocations", body: alloc, header: jsonCT}},
		{"release default's allocation", releaseDefault},
		{"release team A's allocation", releaseA},
		{"drain a device", rawRequest{method: http.MethodPost, path: "/v1/devices/h1-gpu3/drain"}},
		{"set a device unhealthy", rawRequest{method: http.MethodPost, path: "/v1/devices/h1-gpu3/status", body: []byte(`{"status":"unhealthy"}`), header: jsonCT}},
		{"change the GPU policy", rawRequest{method: http.MethodPut, path: "/v1/policies/GPU", body: []byte(`{"policy":"PriorityBased"}`), header: jsonCT}},
		{"set retention to 1", rawRequest{method: http.MethodPut, path: "/v1/retention", body: []byte(`{"max_count":1,"max_age":"1h"}`), header: jsonCT}},
		{"delete a host", rawRequest{method: http.MethodDelete, path: "/v1/hosts/h2"}},
		{"remove a Raft peer", rawRequest{method: http.MethodDelete, path: "/v1/cluster/raft/peers/s3"}},
		{"save a snapshot", rawRequest{method: http.MethodGet, path: "/v1/snapshot"}},
		{"restore a snapshot", rawRequest{method: http.MethodPut, path: "/v1/snapshot", body: snap, header: map[string]string{"Content-Type": "application/octet-stream"}}},
		{"read the agent", rawRequest{method: http.MethodGet, path: "/v1/agent/self"}},
		{"give the anonymous token a policy", rawRequest{method: http.MethodPut, path: "/v1/acl/token/anonymous", body: []byte(`{"policies":["team-a"]}`), header: jsonCT}},
		{"create a token", rawRequest{method: http.MethodPost, path: "/v1/acl/token", body: []byte(`{"policies":["team-a"]}`), header: jsonCT}},
	}

	t.Run("no token or a wrong one", func(t *testing.T) {
		creds := []struct {
			name   string
			header map[string]string
			code   string
		}{
			{"no token", nil, wire.CodePermissionDenied},
			{"wrong X-Dmsc-Token", map[string]string{wire.HeaderToken: "00000000-0000-4000-8000-000000000000"}, wire.CodeUnauthorized},
			{"wrong bearer token", map[string]string{"Authorization": "Bearer " + strings.Repeat("x", 36)}, wire.CodeUnauthorized},
		}
		for _, cred := range creds {
			for _, w := range writes {
				r := w.req
				r.header = withAuth(r.header, cred.header)
				refusedEverywhere(t, ctx, c, before, attack{cred.name + ": " + w.name, r, []string{cred.code}})
			}
		}
		// A second bootstrap needs no token and is refused all the same.
		refusedEverywhere(t, ctx, c, before, attack{"a second bootstrap",
			rawRequest{method: http.MethodPost, path: "/v1/acl/bootstrap"}, []string{wire.CodeConflict}})
	})

	t.Run("a read-only token writing", func(t *testing.T) {
		auth := map[string]string{wire.HeaderToken: reader}
		for _, a := range []attack{
			{"allocate", rawRequest{method: http.MethodPost, path: "/v1/allocations", body: alloc, header: withAuth(jsonCT, auth)}, nil},
			{"release", rawRequest{method: http.MethodPost, path: releaseDefault.path, header: auth}, nil},
		} {
			a.codes = []string{wire.CodePermissionDenied}
			refusedEverywhere(t, ctx, c, before, a)
		}
	})

	t.Run("team B releasing team A's allocation", func(t *testing.T) {
		auth := map[string]string{"Authorization": "Bearer " + teamB}
		refusedEverywhere(t, ctx, c, before, attack{"in namespace a",
			rawRequest{method: http.MethodPost, path: releaseA.path, header: auth}, []string{wire.CodePermissionDenied}})
		refusedEverywhere(t, ctx, c, before, attack{"in its own namespace",
			rawRequest{method: http.MethodPost, path: "/v1/allocations/" + victimA.ID + "/release?namespace=b", header: auth}, []string{wire.CodeNotFound}})
	})

	t.Run("restore by an operator who may only read", func(t *testing.T) {
		auth := map[string]string{wire.HeaderToken: opRead, "Content-Type": "application/octet-stream"}
		refusedEverywhere(t, ctx, c, before, attack{"restore the older snapshot",
			rawRequest{method: http.MethodPut, path: "/v1/snapshot", body: snap, header: auth}, []string{wire.CodePermissionDenied}})
		if got := before.allocs["a/"+victimA2.ID]; got != wire.Active {
			t.Fatalf("team A's allocation made after the save is %q", got)
		}
	})

	t.Run("cross-origin simple requests", func(t *testing.T) {
		browser := func(ct string, cred map[string]string) map[string]string {
			return withAuth(map[string]string{"Origin": "http://evil.example", "Content-Type": ct}, cred)
		}
		mgmt := map[string]string{wire.HeaderToken: c.Token}
		refusedAnyway := []string{wire.CodeUnsupportedMediaType, wire.CodeCrossOrigin}
		for _, a := range []attack{
			{"text/plain allocate without a token", rawRequest{method: http.MethodPost, path: "/v1/allocations", body: alloc, header: browser("text/plain", nil)},
				append(slices.Clone(refusedAnyway), wire.CodePermissionDenied)},
			{"text/plain allocate with a valid token", rawRequest{method: http.MethodPost, path: "/v1/allocations", body: alloc, header: browser("text/plain", mgmt)}, refusedAnyway},
			{"form drain with a valid token", rawRequest{method: http.MethodPost, path: "/v1/devices/h1-gpu3/drain", body: []byte("a=b"), header: browser("application/x-www-form-urlencoded", mgmt)}, refusedAnyway},
			{"text/plain release without a body, valid token", rawRequest{method: http.MethodPost, path: releaseDefault.path, header: browser("text/plain", mgmt)}, refusedAnyway},
			{"JSON allocate from another origin, valid token", rawRequest{method: http.MethodPost, path: "/v1/allocations", body: alloc, header: browser("application/json", mgmt)}, []string{wire.CodeCrossOrigin}},
		} {
			refusedEverywhere(t, ctx, c, before, a)
		}
	})

	t.Run("a foreign Host header", func(t *testing.T) {
		mgmt := map[string]string{wire.HeaderToken: c.Token}
		for _, a := range []attack{
			{"read the agent", rawRequest{method: http.MethodGet, path: "/v1/agent/self", header: mgmt, host: "evil.example:4646"}, nil},
			{"allocate", rawRequest{method: http.MethodPost, path: "/v1/allocations", body: alloc, header: withAuth(jsonCT, mgmt), host: "evil.example:4646"}, nil},
			{"drain without a token", rawRequest{method: http.MethodPost, path: "/v1/devices/h1-gpu3/drain", host: "evil.example"}, nil},
		} {
			a.codes = []string{wire.CodeHostNotAllowed}
			refusedEverywhere(t, ctx, c, before, a)
		}
	})

	t.Run("request IDs", func(t *testing.T) {
		probe := func(ns string, memGB float64) wire.AllocateRequest {
			r := gpuRequest("probe-dup-1", 1, "")
			r.Namespace = ns
			r.Claims[0].Capabilities.Resources.MemoryGB = memGB
			return r
		}
		first := allocate(t, ctx, c, c.Servers, probe("default", 16))
		now := settled(t, ctx, c)
		mgmt := map[string]string{wire.HeaderToken: c.Token}
		refusedEverywhere(t, ctx, c, now, attack{"the same ID with 80 GB",
			rawRequest{method: http.MethodPost, path: "/v1/allocations", body: jsonBody(t, probe("default", 80)), header: withAuth(jsonCT, mgmt)},
			[]string{wire.CodeRequestIDReused}})
		refusedEverywhere(t, ctx, c, now, attack{"a release with the allocate's ID",
			rawRequest{method: http.MethodPost, path: "/v1/allocations/" + first.ID + "/release", header: withAuth(map[string]string{wire.HeaderRequestID: "probe-dup-1"}, mgmt)},
			[]string{wire.CodeRequestIDReused}})
		if got := now.allocs["default/"+first.ID]; got != wire.Active {
			t.Fatalf("the probe allocation is %q", got)
		}
		// The same ID in another namespace is another request.
		other := allocate(t, ctx, c, c.Servers, probe("b", 16))
		if other.ID == first.ID || other.Namespace != "b" {
			t.Fatalf("the same request ID in namespace b answered %s in %q, the first was %s", other.ID, other.Namespace, first.ID)
		}
		before = settled(t, ctx, c)
	})

	t.Run("an expired token", func(t *testing.T) {
		short := token("short-lived", wire.ACLRules{Namespaces: map[string]string{"a": "write"}, Agent: "read"}, 5*time.Second)
		now := settled(t, ctx, c)
		self := rawRequest{method: http.MethodGet, path: "/v1/acl/token/self", header: map[string]string{wire.HeaderToken: short}}
		expired := false
		err := poll(ctx, 200*time.Millisecond, func() (bool, error) {
			status, e, err := sendRaw(ctx, c, c.Servers[0], self)
			switch {
			case err != nil:
				return false, err
			case status == http.StatusOK:
				return false, nil
			case e.Code == wire.CodeUnauthorized:
				expired = true
				return true, nil
			}
			return false, fmt.Errorf("HTTP %d %s: %s", status, e.Code, e.Message)
		})
		if err != nil || !expired {
			t.Fatalf("waiting for the token to expire: %v", err)
		}
		auth := map[string]string{wire.HeaderToken: short}
		for _, a := range []attack{
			{"allocate in its namespace", rawRequest{method: http.MethodPost, path: "/v1/allocations?namespace=a", body: alloc, header: withAuth(jsonCT, auth)}, nil},
			{"release in its namespace", rawRequest{method: http.MethodPost, path: releaseA.path, header: auth}, nil},
			{"read the agent", rawRequest{method: http.MethodGet, path: "/v1/agent/self", header: auth}, nil},
		} {
			a.codes = []string{wire.CodeUnauthorized}
			refusedEverywhere(t, ctx, c, now, a)
		}
	})

	// The victims are still active, each on its own devices.
	final := settled(t, ctx, c)
	for _, id := range []string{"default/" + victim.ID, "a/" + victimA.ID, "a/" + victimA2.ID} {
		if final.allocs[id] != wire.Active {
			t.Errorf("victim %s is %q at the end", id, final.allocs[id])
		}
	}
}
