package api

import (
	"testing"
	"time"

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

// TestQueueConfigAndReclaim: the queue configuration is set and read
// back with the fair-share figures; a quota's weight and borrowing
// travel both ways; a borrowed allocation shows its reclaim in its status.
func TestQueueConfigAndReclaim(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	var st wire.QueueStatus
	e.do("GET", "/v1/queue/config", "").ok(200).decode(&st)
	if st.FairShare || st.PreemptWaiting || st.Usage == nil {
		t.Fatalf("default queue config %+v, want all off and an empty usage list", st)
	}
	e.do("PUT", "/v1/queue/config", `{"fair_share":true,"half_life":"1h","preempt_waiting":true}`).ok(200).decode(&st)
	if !st.FairShare || st.HalfLife.Std() != time.Hour || !st.PreemptWaiting {
		t.Fatalf("set answered %+v", st)
	}
	e.do("PUT", "/v1/queue/config", `{"half_life":"1h"}`).apiErr(400, fsm.ErrInvalid.Code)

	var qs []wire.Quota
	e.do("PUT", "/v1/quotas/team-a", `{"limits":[{"type":"GPU","max_count":1}],"weight":3}`).ok(200).decode(&qs)
	if len(qs) != 1 || qs[0].Weight != 3 || qs[0].Borrow {
		t.Fatalf("team-a's quota %+v", qs)
	}
	e.do("PUT", "/v1/quotas/team-b", `{"limits":[{"type":"GPU","max_count":1}],"borrow":true,"reclaim_grace":"1m"}`).ok(200).decode(&qs)
	if len(qs) != 1 || qs[0].Weight != 1 || !qs[0].Borrow || qs[0].ReclaimGrace.Std() != time.Minute {
		t.Fatalf("team-b's quota %+v", qs)
	}
	e.do("PUT", "/v1/quotas/team-c", `{"limits":[{"type":"GPU","max_count":1}],"reclaim_grace":"1m"}`).apiErr(400, fsm.ErrInvalid.Code)

	// team-b takes all three GPUs, two borrowed; team-a asks for one.
	var borrowed []wire.Allocation
	for range 3 {
		var a wire.Allocation
		e.do("POST", "/v1/allocations?namespace=team-b", `{"claims":[{"type":"GPU","count":1}]}`).ok(200).decode(&a)
		borrowed = append(borrowed, a)
	}
	var waiting wire.Allocation
	e.do("POST", "/v1/allocations?namespace=team-a", `{"claims":[{"type":"GPU","count":1}],"timeout":"1h"}`).ok(202).decode(&waiting)
	if waiting.Status != wire.Pending {
		t.Fatalf("team-a's request is %s, want pending", waiting.Status)
	}
	var last wire.Allocation
	e.do("GET", "/v1/allocations/"+borrowed[2].ID+"?namespace=team-b", "").ok(200).decode(&last)
	if last.Status != wire.Active || last.Preempting == nil || last.Preempting.By != waiting.ID || last.Preempting.Deadline.IsZero() {
		t.Fatalf("the most recent borrowed allocation: %s, preempting %+v; want active, reclaimed by %s", last.Status, last.Preempting, waiting.ID)
	}
	e.do("GET", "/v1/queue/config?namespace=*", "").ok(200).decode(&st)
	if len(st.Usage) == 0 {
		t.Fatalf("no fair-share figures with fair share on: %+v", st)
	}
}
