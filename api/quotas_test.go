package api

import (
	"testing"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// TestQuotas: a quota set through the API refuses what passes it with
// quota_exceeded and the limit in the why-not, shows its use, is listed
// by namespace, and is removed.
func TestQuotas(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	var set []wire.Quota
	e.do("PUT", "/v1/quotas/team-a", `{"limits":[{"type":"GPU","max_count":1},{"type":"GPU","pool":"big","max_amount":{"memory_gb":40}}]}`).ok(200).decode(&set)
	if len(set) != 1 || set[0].Namespace != "team-a" || len(set[0].Limits) != 2 || set[0].ModifyIndex == 0 {
		t.Fatalf("set answered %+v", set)
	}
	e.do("POST", "/v1/allocations?namespace=team-a", `{"claims":[{"type":"GPU","count":1}]}`).ok(200)
	er := e.do("POST", "/v1/allocations?namespace=team-a", `{"claims":[{"type":"GPU","count":1}]}`).apiErr(409, fsm.ErrQuotaExceeded.Code)
	if er.WhyNot == nil || er.WhyNot.Quota != "namespace team-a is at its quota: GPU, 1 of 1 devices held, 1 more asked" || er.AllocationID == "" {
		t.Fatalf("refusal %+v", er)
	}
	e.do("POST", "/v1/allocations?namespace=team-b", `{"claims":[{"type":"GPU","count":1}]}`).ok(200)

	var got []wire.Quota
	e.do("GET", "/v1/quotas?namespace=team-a", "").ok(200).decode(&got)
	if len(got) != 1 || got[0].Limits[0].Count != 1 || got[0].Limits[0].Limit.MaxCount == nil || *got[0].Limits[0].Limit.MaxCount != 1 {
		t.Fatalf("status %+v", got)
	}
	e.do("GET", "/v1/quotas?namespace=*", "").ok(200).decode(&got)
	if len(got) != 1 {
		t.Fatalf("every namespace: %+v", got)
	}
	e.do("GET", "/v1/quotas?namespace=team-b", "").ok(200).decode(&got)
	if len(got) != 0 {
		t.Fatalf("team-b: %+v", got)
	}
	e.do("DELETE", "/v1/quotas/team-a", "").ok(200)
	e.do("DELETE", "/v1/quotas/team-a", "").apiErr(404, fsm.ErrNotFound.Code)
	e.do("POST", "/v1/allocations?namespace=team-a", `{"claims":[{"type":"GPU","count":1}]}`).ok(200)
}
