package api

import (
	"bytes"
	"context"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// TestStatsPerNamespace: a flood of impossible requests in namespace a
// moves neither namespace b's statistics nor its advice.
func TestStatsPerNamespace(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	ctx := context.Background()
	allocate := func(ns string, memGB float64) {
		t.Helper()
		cmd := &fsm.Allocate{Meta: fsm.Meta{Namespace: ns}, Request: fsm.Request{
			Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: memGB}}}},
		}}
		if _, err := e.b.Apply(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		allocate("b", 40)
	}
	statsB := e.do("GET", "/v1/stats?namespace=b", "").ok(200).body
	recsB := e.do("GET", "/v1/recommendations?namespace=b", "").ok(200).body
	for range 200 {
		allocate("a", 10000)
	}
	if got := e.do("GET", "/v1/stats?namespace=b", "").ok(200).body; !bytes.Equal(got, statsB) {
		t.Errorf("namespace b's statistics moved:\nbefore %s\nafter  %s", statsB, got)
	}
	if got := e.do("GET", "/v1/recommendations?namespace=b", "").ok(200).body; !bytes.Equal(got, recsB) {
		t.Errorf("namespace b's advice moved:\nbefore %s\nafter  %s", recsB, got)
	}
	var a, all []wire.Stats
	e.do("GET", "/v1/stats?namespace=a&type=GPU", "").ok(200).decode(&a)
	e.do("GET", "/v1/stats?namespace=*&type=GPU", "").ok(200).decode(&all)
	if len(a) == 0 || len(all) == 0 || a[0].Counts.Failed != 200 || all[0].Counts.Total != 203 {
		t.Fatalf("stats a %+v, all %+v", a, all)
	}
	// The default namespace has none of them.
	var def []wire.Stats
	e.do("GET", "/v1/stats?type=GPU", "").ok(200).decode(&def)
	if len(def) == 0 || def[0].Counts.Total != 0 {
		t.Fatalf("default namespace: %+v", def)
	}
	e.do("GET", "/v1/stats?namespace=a%20b", "").apiErr(400, wire.CodeBadRequest)
	e.do("GET", "/v1/recommendations?namespace=../x", "").apiErr(400, wire.CodeBadRequest)
}
