package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

func TestDevices(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	devices := func(query string) []string {
		t.Helper()
		var list []wire.Device
		e.do("GET", "/v1/devices"+query, "").ok(200).decode(&list)
		var ids []string
		for _, d := range list {
			ids = append(ids, d.ID)
		}
		return ids
	}
	for q, want := range map[string]string{
		"":                  "c1,g1,g2,g3",
		"?type=GPU":         "g1,g2,g3",
		"?pool=big":         "g3",
		"?host=h1":          "g1,g2",
		"?host=h2&type=GPU": "g3",
		"?host=h1&pool=big": "",
		"?host=nope":        "",
		"?status=available": "c1,g1,g2,g3",
		"?status=draining":  "",
		"?type=Sensor":      "",
	} {
		if got := strings.Join(devices(q), ","); got != want {
			t.Errorf("devices%s = %s, want %s", q, got, want)
		}
	}
	var d wire.Device
	e.do("GET", "/v1/devices/g3", "").ok(200).decode(&d)
	if d.Host != "h2" || d.Pool != "big" || d.Capabilities.MemoryGB != 80 || d.Labels["rack"] != "r2" {
		t.Fatalf("device g3: %+v", d)
	}

	e.do("POST", "/v1/devices/g1/status", `{"status":"unhealthy"}`).ok(200).decode(&d)
	if d.Status != wire.Unhealthy {
		t.Fatalf("status %s", d.Status)
	}
	if got := strings.Join(devices("?status=unhealthy"), ","); got != "g1" {
		t.Fatalf("unhealthy devices %s", got)
	}
	e.do("POST", "/v1/devices/g1/drain", "").ok(200).decode(&d)
	if d.Status != wire.Draining {
		t.Fatalf("drained: %s", d.Status)
	}
	e.do("POST", "/v1/devices/g1/undrain", `{"request_id":"u1"}`).ok(200).decode(&d)
	if d.Status != wire.Available {
		t.Fatalf("undrained: %s", d.Status)
	}

	e.noSideEffect(func() {
		e.do("GET", "/v1/devices/nope", "").apiErr(404, fsm.ErrNotFound.Code)
		e.do("GET", "/v1/devices?type=QPU", "").apiErr(400, wire.CodeBadRequest)
		e.do("GET", "/v1/devices?status=broken", "").apiErr(400, wire.CodeBadRequest)
		e.do("POST", "/v1/devices/nope/status", `{"status":"draining"}`).apiErr(404, fsm.ErrNotFound.Code)
		e.do("POST", "/v1/devices/nope/drain", "").apiErr(404, fsm.ErrNotFound.Code)
		e.do("POST", "/v1/devices/g1/status", `{"status":"offline"}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("POST", "/v1/devices/g1/status", `{"status":"draining","why":"x"}`).apiErr(400, wire.CodeBadRequest)
		e.do("POST", "/v1/devices/g1/status", ``).apiErr(400, wire.CodeBadRequest)
		e.do("POST", "/v1/devices/g1/undrain", `[]`).apiErr(400, wire.CodeBadRequest)
	})
}

func TestHosts(t *testing.T) {
	e := newEnv(t, Options{MaxHostBytes: 2048})
	e.seed()
	var hosts []wire.Host
	e.do("GET", "/v1/hosts", "").ok(200).decode(&hosts)
	if len(hosts) != 2 || hosts[0].ID != "h1" || !hosts[0].Up || strings.Join(hosts[1].Devices, ",") != "c1,g3" {
		t.Fatalf("hosts %+v", hosts)
	}
	var h wire.Host
	e.do("GET", "/v1/hosts/h2", "").ok(200).decode(&h)
	if h.Labels["rack"] != "r2" || h.Since.IsZero() {
		t.Fatalf("host h2 %+v", h)
	}

	// Registering again replaces the inventory.
	e.do("PUT", "/v1/hosts/h1", `{"address":"10.0.0.1","devices":[{"id":"g1","type":"GPU","capabilities":{"memory_gb":40}}]}`).ok(200).decode(&h)
	if h.Address != "10.0.0.1" || strings.Join(h.Devices, ",") != "g1" {
		t.Fatalf("re-registered h1 %+v", h)
	}
	e.do("GET", "/v1/devices/g2", "").apiErr(404, fsm.ErrNotFound.Code)

	e.noSideEffect(func() {
		e.do("GET", "/v1/hosts/nope", "").apiErr(404, fsm.ErrNotFound.Code)
		e.do("DELETE", "/v1/hosts/nope", "").apiErr(404, fsm.ErrNotFound.Code)
		e.do("PUT", "/v1/hosts/h3", `{"devices":[{"id":"x","type":"QPU"}]}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/hosts/h3", `{"devices":[{"id":"x","type":"GPU"},{"id":"x","type":"GPU"}]}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/hosts/h3", `{"devices":[{"id":"g3","type":"GPU"}]}`).apiErr(409, fsm.ErrConflict.Code)
		e.do("PUT", "/v1/hosts/h3", `{"id":"h3","devices":[]}`).apiErr(400, wire.CodeBadRequest)
		e.do("PUT", "/v1/hosts/h3", `{"devices":[{"id":"x","type":"GPU","capabilities":{"memory_gb":-1}}]}`).apiErr(400, fsm.ErrInvalid.Code)
		big := `{"devices":[` + strings.Repeat(`{"id":"x","type":"GPU"},`, 100) + `{"id":"y","type":"GPU"}]}`
		e.do("PUT", "/v1/hosts/h3", big).apiErr(413, wire.CodeBodyTooLarge)
	})

	var res wire.WriteResult
	e.do("DELETE", "/v1/hosts/h2", "").ok(200).decode(&res)
	if res.Index == 0 || res.RequestID == "" {
		t.Fatalf("delete answer %+v", res)
	}
	e.do("GET", "/v1/hosts/h2", "").apiErr(404, fsm.ErrNotFound.Code)
	e.do("GET", "/v1/devices/g3", "").apiErr(404, fsm.ErrNotFound.Code)
}

func TestPoolsPoliciesRetention(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	var pools []wire.PoolInfo
	e.do("GET", "/v1/pools", "").ok(200).decode(&pools)
	if len(pools) != 2 || pools[0].Name != "big" || pools[1].Name != fsm.DefaultPool || pools[1].Devices.Total != 3 {
		t.Fatalf("pools %+v", pools)
	}

	var p wire.Policies
	e.do("GET", "/v1/policies", "").ok(200).decode(&p)
	if p.Types[wire.GPU].Policy != wire.BestFit || len(p.Pools) != 0 {
		t.Fatalf("policies %+v", p)
	}
	e.do("PUT", "/v1/policies/GPU", `{"policy":"PriorityBased","preemption_gap":20}`).ok(200).decode(&p)
	if c := p.Types[wire.GPU]; c.Policy != wire.PriorityBased || c.PreemptionGap != 20 {
		t.Fatalf("GPU policy %+v", c)
	}
	e.do("PUT", "/v1/pools/big/policy", `{"policy":"WorstFit"}`).ok(200).decode(&p)
	if p.Pools["big"].Policy != wire.WorstFit {
		t.Fatalf("pool policy %+v", p.Pools)
	}
	e.do("GET", "/v1/pools", "").ok(200).decode(&pools)
	if pools[0].Override == nil || pools[0].Override.Policy != wire.WorstFit {
		t.Fatalf("pool override %+v", pools[0])
	}
	p = wire.Policies{}
	e.do("DELETE", "/v1/pools/big/policy", "").ok(200).decode(&p)
	if _, ok := p.Pools["big"]; ok {
		t.Fatalf("pool override still there: %+v", p.Pools)
	}

	var rt wire.Retention
	e.do("GET", "/v1/retention", "").ok(200).decode(&rt)
	if rt.MaxCount != fsm.DefaultRetention.MaxCount || rt.MaxAge.Std() != fsm.DefaultRetention.MaxAge {
		t.Fatalf("retention %+v", rt)
	}
	r := e.do("PUT", "/v1/retention", `{"max_count":10,"max_age":"1h"}`).ok(200)
	r.decode(&rt)
	if rt.MaxCount != 10 || rt.MaxAge.Std().Hours() != 1 || !strings.Contains(string(r.body), `"1h0m0s"`) {
		t.Fatalf("retention after PUT %s", r.body)
	}

	e.noSideEffect(func() {
		e.do("PUT", "/v1/policies/QPU", `{"policy":"BestFit"}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/policies/GPU", `{"policy":"Fastest"}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/policies/GPU", `{"policy":""}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/policies/GPU", `{"policy":"BestFit","preemption_gap":-1}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/policies/GPU", `{"policy":"BestFit","gap":1}`).apiErr(400, wire.CodeBadRequest)
		e.do("PUT", "/v1/policies/GPU", ``).apiErr(400, wire.CodeBadRequest)
		e.do("PUT", "/v1/pools/big/policy", `{"policy":"Fastest"}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/pools/big/policy", `{"policy":"BestFit","type":"GPU"}`).apiErr(400, wire.CodeBadRequest)
		e.do("DELETE", "/v1/pools/big/policy", `{"x":1}`).apiErr(400, wire.CodeBadRequest)
		e.do("PUT", "/v1/retention", `{"max_count":0,"max_age":"1h"}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/retention", `{"max_count":10,"max_age":"0s"}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("PUT", "/v1/retention", `{"max_count":10,"max_age":3600}`).apiErr(400, wire.CodeBadRequest)
		e.do("PUT", "/v1/retention", `{"max_count":10,"max_age":"1h","keep":true}`).apiErr(400, wire.CodeBadRequest)
	})
}

func TestStatsAndRecommendations(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	a := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}]}`).ok(200).alloc()
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":500}}]}`).apiErr(409, fsm.ErrNoCapacity.Code)
	e.do("POST", "/v1/allocations/"+a.ID+"/release", "").ok(200)

	var stats []wire.Stats
	e.do("GET", "/v1/stats?type=GPU&pool=*", "").ok(200).decode(&stats)
	if len(stats) != 1 || stats[0].Type != wire.GPU || stats[0].Pool != fsm.AllPools ||
		stats[0].Counts.Total != 2 || stats[0].Counts.Failed != 1 || stats[0].Counts.Released != 1 || stats[0].Devices.Total != 3 {
		t.Fatalf("GPU stats %+v", stats)
	}
	e.do("GET", "/v1/stats", "").ok(200).decode(&stats)
	types := map[wire.DeviceType]bool{}
	for _, s := range stats {
		types[s.Type] = true
	}
	if !types[wire.GPU] || !types[wire.CPU] || len(types) != 2 {
		t.Fatalf("stats types %v", types)
	}
	e.do("GET", "/v1/stats?pool=big", "").ok(200).decode(&stats)
	if len(stats) != 1 || stats[0].Pool != "big" {
		t.Fatalf("pool stats %+v", stats)
	}

	var recs []wire.Recommendation
	e.do("GET", "/v1/recommendations?type=GPU", "").ok(200).decode(&recs)
	for _, r := range recs {
		if r.Type != wire.GPU || r.Kind == "" || r.Message == "" {
			t.Fatalf("recommendation %+v", r)
		}
	}
	e.do("GET", "/v1/recommendations", "").ok(200)
	e.do("GET", "/v1/stats?type=QPU", "").apiErr(400, wire.CodeBadRequest)
	e.do("GET", "/v1/recommendations?type=QPU", "").apiErr(400, wire.CodeBadRequest)
}

func TestUnroutedAnswersJSON(t *testing.T) {
	e := newEnv(t, Options{})
	e.do("GET", "/v1/nothing", "").apiErr(404, fsm.ErrNotFound.Code)
	r := e.do("PATCH", "/v1/allocations", "")
	r.apiErr(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed)
	if allow := r.hdr.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow %q", allow)
	}
	e.do("DELETE", "/v1/devices/g1", "").apiErr(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed)
}
