package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestBadInputNeverReachesRaft sends input the API can judge by itself to
// every write route: each is answered 4xx and not one command is applied.
func TestBadInputNeverReachesRaft(t *testing.T) {
	e, _ := newACLEnv(t, Options{}) // ACLs on, so that their routes count; the management token
	esc := url.PathEscape
	long := strings.Repeat("x", 300)
	const alloc = "00000000-0000-5000-8000-000000000000"
	cases := []struct {
		name, method, path, body string
	}{
		{"allocate count 0", "POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":0}]}`},
		{"allocate no claims", "POST", "/v1/allocations", `{"claims":[]}`},
		{"allocate unknown type", "POST", "/v1/allocations", `{"claims":[{"type":"Banana","count":1}]}`},
		{"allocate negative priority", "POST", "/v1/allocations", `{"priority":-1,"claims":[{"type":"GPU","count":1}]}`},
		{"allocate bad pool", "POST", "/v1/allocations", `{"pool":"../x","claims":[{"type":"GPU","count":1}]}`},
		{"allocate bad request id", "POST", "/v1/allocations", `{"request_id":"a b","claims":[{"type":"GPU","count":1}]}`},
		{"allocate not json", "POST", "/v1/allocations", `count=0`},
		{"release bad id", "POST", "/v1/allocations/" + esc("../etc") + "/release", ``},
		{"release not uuid", "POST", "/v1/allocations/job-42/release", ``},
		{"renew bad id", "POST", "/v1/allocations/job-42/renew", `{}`},
		{"renew negative ttl", "POST", "/v1/allocations/" + alloc + "/renew", `{"ttl":"-1s"}`},
		{"batch empty", "POST", "/v1/batch", `{"requests":[]}`},
		{"batch not json", "POST", "/v1/batch", `requests=1`},
		{"cancel bad id", "POST", "/v1/allocations/" + esc("\x1b[2J") + "/cancel", ``},
		{"device status unknown", "POST", "/v1/devices/g1/status", `{"status":"offline"}`},
		{"device status bad id", "POST", "/v1/devices/" + esc("g\x1b[2J") + "/status", `{"status":"draining"}`},
		{"drain bad id", "POST", "/v1/devices/" + esc("../g1") + "/drain", ``},
		{"undrain long id", "POST", "/v1/devices/" + long + "/undrain", ``},
		{"host drain negative deadline", "POST", "/v1/hosts/h1/drain", `{"deadline":"-1s"}`},
		{"host drain bad id", "POST", "/v1/hosts/" + esc("../h1") + "/drain", ``},
		{"host undrain long id", "POST", "/v1/hosts/" + long + "/undrain", ``},
		{"register control char", "PUT", "/v1/hosts/" + esc("h\x1b[2J"), `{"devices":[]}`},
		{"register long id", "PUT", "/v1/hosts/" + long, `{"devices":[]}`},
		{"register bad utf8", "PUT", "/v1/hosts/" + esc("h\xff"), `{"devices":[]}`},
		{"register bad device id", "PUT", "/v1/hosts/h9", `{"devices":[{"id":"g 1","type":"GPU"}]}`},
		{"register duplicate device", "PUT", "/v1/hosts/h9", `{"devices":[{"id":"x","type":"GPU"},{"id":"x","type":"GPU"}]}`},
		{"register unknown type", "PUT", "/v1/hosts/h9", `{"devices":[{"id":"x","type":"Banana"}]}`},
		{"register negative capability", "PUT", "/v1/hosts/h9", `{"devices":[{"id":"x","type":"GPU","capabilities":{"memory_gb":-1}}]}`},
		{"remove host bad id", "DELETE", "/v1/hosts/" + esc("h/.."), ``},
		{"pool policy bad pool", "PUT", "/v1/pools/" + esc("p q") + "/policy", `{"policy":"binpack"}`},
		{"pool policy unknown", "PUT", "/v1/pools/big/policy", `{"policy":"random-ish"}`},
		{"delete pool policy bad pool", "DELETE", "/v1/pools/" + esc("\x00") + "/policy", ``},
		{"type policy unknown type", "PUT", "/v1/policies/Banana", `{"policy":"binpack"}`},
		{"type policy unknown policy", "PUT", "/v1/policies/GPU", `{"policy":"random-ish"}`},
		{"type policy gap", "PUT", "/v1/policies/GPU", `{"policy":"binpack","preemption_gap":-3}`},
		{"retention count 0", "PUT", "/v1/retention", `{"max_count":0,"max_age":"1h"}`},
		{"quota no limits", "PUT", "/v1/quotas/team-a", `{"limits":[]}`},
		{"quota unknown type", "PUT", "/v1/quotas/team-a", `{"limits":[{"type":"TPU","max_count":1}]}`},
		{"quota negative count", "PUT", "/v1/quotas/team-a", `{"limits":[{"type":"GPU","max_count":-1}]}`},
		{"quota bounds nothing", "PUT", "/v1/quotas/team-a", `{"limits":[{"type":"GPU"}]}`},
		{"quota bad namespace", "PUT", "/v1/quotas/bad%20ns", `{"limits":[{"type":"GPU","max_count":1}]}`},
		{"delete quota bad namespace", "DELETE", "/v1/quotas/bad%20ns", ``},
		{"quota bad weight", "PUT", "/v1/quotas/team-a", `{"limits":[],"weight":-1}`},
		{"quota grace without borrow", "PUT", "/v1/quotas/team-a", `{"weight":1,"reclaim_grace":"1m"}`},
		{"queue half-life without fair share", "PUT", "/v1/queue/config", `{"half_life":"1h"}`},
		{"queue negative half-life", "PUT", "/v1/queue/config", `{"fair_share":true,"half_life":"-1h"}`},
		{"retention negative age", "PUT", "/v1/retention", `{"max_count":10,"max_age":"-1h"}`},
		{"remove peer long id", "DELETE", "/v1/cluster/raft/peers/" + long, ``},
		{"readmit peer control", "DELETE", "/v1/cluster/raft/removed/" + esc("n\x1b"), ``},
		{"keyring install no key", "POST", "/v1/operator/keyring", `{}`},
		{"keyring use unknown field", "PUT", "/v1/operator/keyring", `{"key":"k","primary":true}`},
		{"keyring remove empty", "DELETE", "/v1/operator/keyring", `{"key":""}`},
		{"snapshot garbage", "PUT", "/v1/snapshot", `garbage`},
		{"bootstrap again", "POST", "/v1/acl/bootstrap", ``},
		{"policy bad name", "PUT", "/v1/acl/policy/" + esc("p q"), `{"rules":{}}`},
		{"policy bad access", "PUT", "/v1/acl/policy/p", `{"rules":{"devices":"root"}}`},
		{"policy bad namespace", "PUT", "/v1/acl/policy/p", `{"rules":{"namespaces":{"../x":"read"}}}`},
		{"policy long description", "PUT", "/v1/acl/policy/p", `{"description":"` + strings.Repeat("d", 2000) + `","rules":{}}`},
		{"delete policy bad name", "DELETE", "/v1/acl/policy/" + esc("\x1b[2J"), ``},
		{"token negative ttl", "POST", "/v1/acl/token", `{"ttl":"-1h"}`},
		{"token bad policy name", "POST", "/v1/acl/token", `{"policies":["a b"]}`},
		{"token unknown field", "POST", "/v1/acl/token", `{"management":true}`},
		{"update token bad accessor", "PUT", "/v1/acl/token/" + long, `{"policies":[]}`},
		{"delete token bad accessor", "DELETE", "/v1/acl/token/" + esc("t\x00"), ``},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			before := e.b.applyCount()
			ct := "application/json"
			if c.path == "/v1/snapshot" {
				ct = "application/octet-stream"
			}
			r := e.do(c.method, c.path, c.body, "Content-Type", ct)
			if r.code < 400 || r.code >= 500 {
				t.Fatalf("%s %s: status %d, want 4xx: %s", c.method, c.path, r.code, r.body)
			}
			if n := e.b.applyCount() - before; n != 0 {
				t.Fatalf("%s %s: %d commands applied, want none", c.method, c.path, n)
			}
		})
	}
	// Every write route is in the table.
	covered := map[string]bool{}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, "http://x"+c.path, nil)
		_, pattern := e.srv.mux.Handler(req)
		covered[pattern] = true
	}
	for _, rt := range routes() {
		if rt.method != "GET" && !rt.debug && !covered[rt.pattern()] {
			t.Errorf("write route %s has no bad input in the table", rt.pattern())
		}
	}
}
