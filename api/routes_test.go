package api

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// headingRoute matches a route heading of docs/api.md: ### `GET /v1/x`.
var headingRoute = regexp.MustCompile("^### `(GET|POST|PUT|DELETE|PATCH|HEAD) (/[^`]*)`\\s*$")

// TestRoutesDocumented checks that every route the server registers has a
// heading in docs/api.md and every heading there is a registered route.
func TestRoutesDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := headingRoute.FindStringSubmatch(line); m != nil {
			p := m[1] + " " + m[2]
			if documented[p] {
				t.Errorf("docs/api.md documents %s twice", p)
			}
			documented[p] = true
		} else if strings.HasPrefix(line, "### `") {
			t.Errorf("docs/api.md heading %q is not of the form ### `METHOD /path`", line)
		}
	}
	registered := map[string]bool{}
	for _, rt := range routes() {
		p := rt.pattern()
		if registered[p] {
			t.Errorf("route %s is in the table twice", p)
		}
		registered[p] = true
		if !documented[p] {
			t.Errorf("route %s is not documented in docs/api.md", p)
		}
	}
	var extra []string
	for p := range documented {
		if !registered[p] {
			extra = append(extra, p)
		}
	}
	sort.Strings(extra)
	for _, p := range extra {
		t.Errorf("docs/api.md documents %s, which is not a route", p)
	}
	if len(registered) < 40 {
		t.Errorf("only %d routes registered", len(registered))
	}
}

// TestRoutesServed checks that the route table is what the server
// serves: every route answers something other than the mux's 404 or 405
// (pprof only when enabled).
func TestRoutesServed(t *testing.T) {
	e := newEnv(t, Options{EnableDebug: true})
	e.seed()
	for _, rt := range routes() {
		path := strings.NewReplacer("{id}", "g1", "{pool}", "big", "{type}", "GPU", "{$}", "").Replace(rt.path)
		if rt.path == "/debug/pprof/profile" || rt.path == "/debug/pprof/trace" {
			path += "?seconds=0"
		}
		_, pattern := e.srv.mux.Handler(httptestRequest(rt.method, path))
		if pattern != rt.pattern() {
			t.Errorf("%s %s is served by %q, want %q", rt.method, path, pattern, rt.pattern())
		}
	}
	off := newEnv(t, Options{})
	for _, rt := range routes() {
		if !rt.debug {
			continue
		}
		if _, pattern := off.srv.mux.Handler(httptestRequest(rt.method, rt.path)); pattern != "" {
			t.Errorf("%s is served without EnableDebug", rt.pattern())
		}
	}
}
