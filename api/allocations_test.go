package api

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

const gpuReq = `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":40}}]}`

func (r *resp) alloc() wire.Allocation {
	r.t.Helper()
	var a wire.Allocation
	r.decode(&a)
	return a
}

func TestCreateAllocation(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	r := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":40}}],
		"priority":5,"lease_ttl":"1m","request_id":"req-1"}`).ok(http.StatusOK)
	a := r.alloc()
	if a.Status != wire.Active || len(a.Devices) != 1 || a.Host == "" || a.RequestID != "req-1" {
		t.Fatalf("allocation %+v", a)
	}
	if a.Request.LeaseTTL.Std() != time.Minute || a.LeaseExpiresAt.IsZero() || a.AllocatedAt.IsZero() {
		t.Fatalf("lease not kept: %+v", a)
	}
	if got := r.hdr.Get(wire.HeaderRequestID); got != "req-1" {
		t.Fatalf("X-Request-Id %q", got)
	}
	if r.index() != e.b.stateIndex() {
		t.Fatalf("X-Dmsc-Index %d, state at %d", r.index(), e.b.stateIndex())
	}
	if !strings.Contains(string(r.body), `"lease_ttl":"1m0s"`) {
		t.Fatalf("durations are not strings: %s", r.body)
	}

	// The same request again returns the first answer and takes nothing
	// more; another request under the same ID is refused.
	again := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":40}}],
		"priority":5,"lease_ttl":"1m","request_id":"req-1"}`).ok(http.StatusOK).alloc()
	if again.ID != a.ID {
		t.Fatalf("retry made %s, first was %s", again.ID, a.ID)
	}
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"request_id":"req-1"}`).apiErr(http.StatusUnprocessableEntity, "request_id_reused")
	var live wire.AllocationList
	e.do("GET", "/v1/allocations", "").ok(200).decode(&live)
	if len(live.Allocations) != 1 {
		t.Fatalf("%d live allocations after a retry, want 1", len(live.Allocations))
	}

	// The header carries the request ID as well; a server-made one is echoed.
	h := e.do("POST", "/v1/allocations", gpuReq, wire.HeaderRequestID, "req-2").ok(http.StatusOK).alloc()
	if h.RequestID != "req-2" {
		t.Fatalf("request id from header: %q", h.RequestID)
	}
	gen := e.do("POST", "/v1/allocations", `{"claims":[{"type":"CPU","count":1,"amount":{"compute_units":4}}]}`).ok(http.StatusOK)
	if id := gen.hdr.Get(wire.HeaderRequestID); id == "" || gen.alloc().RequestID != id {
		t.Fatalf("generated request id %q vs %q", id, gen.alloc().RequestID)
	}
}

func TestCreateAllocationRefused(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	// Nothing has 100 GB: refused at once, with the why-not, and recorded.
	r := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":100}}],"request_id":"big"}`)
	body := r.apiErr(http.StatusConflict, fsm.ErrNoCapacity.Code)
	if body.WhyNot == nil || len(body.WhyNot.Claims) != 1 || body.AllocationID == "" || body.Retryable || body.RequestID != "big" {
		t.Fatalf("refusal body %+v", body)
	}
	var got wire.Allocation
	e.do("GET", "/v1/allocations/"+body.AllocationID, "").ok(200).decode(&got)
	if got.Status != wire.Failed {
		t.Fatalf("refused allocation is %s", got.Status)
	}
	// The retry gives the same refusal.
	again := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":100}}],"request_id":"big"}`)
	if b := again.apiErr(http.StatusConflict, fsm.ErrNoCapacity.Code); b.AllocationID != body.AllocationID {
		t.Fatalf("retry names %s, first %s", b.AllocationID, body.AllocationID)
	}
}

func TestCreateAllocationBadInput(t *testing.T) {
	e := newEnv(t, Options{MaxBodyBytes: 512})
	e.seed()
	cases := []struct {
		name, body, query string
		headers           []string
		status            int
		code              string
	}{
		{"empty body", "", "", nil, 400, wire.CodeBadRequest},
		{"not JSON", "{claims", "", nil, 400, wire.CodeBadRequest},
		{"unknown field", `{"claims":[{"type":"GPU","count":1}],"gpu":1}`, "", nil, 400, wire.CodeBadRequest},
		{"unknown nested field", `{"claims":[{"type":"GPU","count":1,"colour":"red"}]}`, "", nil, 400, wire.CodeBadRequest},
		{"trailing data", gpuReq + `{}`, "", nil, 400, wire.CodeBadRequest},
		{"number duration", `{"claims":[{"type":"GPU","count":1}],"timeout":30}`, "", nil, 400, wire.CodeBadRequest},
		{"bad duration", `{"claims":[{"type":"GPU","count":1}],"timeout":"soon"}`, "", nil, 400, wire.CodeBadRequest},
		{"wrong type", `{"claims":"GPU"}`, "", nil, 400, wire.CodeBadRequest},
		{"no claims", `{"claims":[]}`, "", nil, 400, fsm.ErrInvalid.Code},
		{"unknown device type", `{"claims":[{"type":"QPU","count":1}]}`, "", nil, 400, fsm.ErrInvalid.Code},
		{"zero count", `{"claims":[{"type":"GPU","count":0}]}`, "", nil, 400, fsm.ErrInvalid.Code},
		{"negative priority", `{"claims":[{"type":"GPU","count":1}],"priority":-1}`, "", nil, 400, fsm.ErrInvalid.Code},
		{"negative timeout", `{"claims":[{"type":"GPU","count":1}],"timeout":"-1s"}`, "", nil, 400, fsm.ErrInvalid.Code},
		{"oversize", `{"claims":[{"type":"GPU","count":1}],"pool":"` + strings.Repeat("x", 600) + `"}`, "", nil, 413, wire.CodeBodyTooLarge},
		{"bad wait", gpuReq, "?wait=perhaps", nil, 400, wire.CodeBadRequest},
		{"request ids differ", `{"claims":[{"type":"GPU","count":1}],"request_id":"a"}`, "", []string{wire.HeaderRequestID, "b"}, 400, wire.CodeBadRequest},
		{"request id with space", gpuReq, "", []string{wire.HeaderRequestID, "a b"}, 400, wire.CodeBadRequest},
		{"request id too long", gpuReq, "", []string{wire.HeaderRequestID, strings.Repeat("r", 129)}, 400, wire.CodeBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			applies := e.b.applyCount()
			e.noSideEffect(func() {
				e.do("POST", "/v1/allocations"+c.query, c.body, c.headers...).apiErr(c.status, c.code)
			})
			// What the API cannot read never reaches the log.
			if c.code != fsm.ErrInvalid.Code && e.b.applyCount() != applies {
				t.Fatalf("a %s request was applied", c.code)
			}
		})
	}
}

func TestAllocationWaitPlaced(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	// Take all three GPUs, then ask for one more with a timeout and wait.
	var held []wire.Allocation
	for range 3 {
		held = append(held, e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}]}`).ok(200).alloc())
	}
	pending := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"timeout":"1m"}`).ok(http.StatusAccepted).alloc()
	if pending.Status != wire.Pending || pending.WhyNot == nil || pending.Deadline.IsZero() {
		t.Fatalf("pending allocation %+v", pending)
	}
	var queue []wire.Allocation
	e.do("GET", "/v1/queue", "").ok(200).decode(&queue)
	if len(queue) != 1 || queue[0].ID != pending.ID {
		t.Fatalf("queue %+v", queue)
	}

	done := make(chan *resp, 1)
	go func() {
		done <- e.do("POST", "/v1/allocations?wait=true", `{"claims":[{"type":"GPU","count":1}],"timeout":"1m","request_id":"w"}`)
	}()
	// The waiting request is queued behind the first pending one: release
	// two GPUs and it is placed.
	waitFor(t, func() bool {
		var q []wire.Allocation
		e.do("GET", "/v1/queue", "").ok(200).decode(&q)
		return len(q) == 2
	})
	select {
	case r := <-done:
		t.Fatalf("returned while pending: %d %s", r.code, r.body)
	default:
	}
	e.do("POST", "/v1/allocations/"+held[0].ID+"/release", "").ok(200)
	e.do("POST", "/v1/allocations/"+held[1].ID+"/release", "").ok(200)
	select {
	case r := <-done:
		if a := r.ok(http.StatusOK).alloc(); a.Status != wire.Active {
			t.Fatalf("waited allocation is %s", a.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not end when the allocation was placed")
	}
}

func TestAllocationWaitTimesOut(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	for range 3 {
		e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}]}`).ok(200)
	}
	done := make(chan *resp, 1)
	go func() {
		done <- e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"timeout":"30s","wait":true}`)
	}()
	waitFor(t, func() bool {
		var q []wire.Allocation
		e.do("GET", "/v1/queue", "").ok(200).decode(&q)
		return len(q) == 1
	})
	// The leader's clock passes the deadline: the request times out.
	e.b.advance(t, time.Minute)
	select {
	case r := <-done:
		body := r.apiErr(http.StatusConflict, fsm.ErrNoCapacity.Code)
		var a wire.Allocation
		e.do("GET", "/v1/allocations/"+body.AllocationID, "").ok(200).decode(&a)
		if a.Status != wire.TimedOut || body.WhyNot == nil {
			t.Fatalf("timed-out allocation %+v, why-not %v", a, body.WhyNot)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not end when the request timed out")
	}
}

func TestAllocationLifecycle(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	a := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"lease_ttl":"10m"}`).ok(200).alloc()
	path := "/v1/allocations/" + a.ID

	// Renew with an explicit TTL and with the request's.
	r := e.do("POST", path+"/renew", `{"ttl":"1h"}`).ok(200).alloc()
	if want := r.AllocatedAt.Add(time.Hour); !r.LeaseExpiresAt.Equal(want) {
		t.Fatalf("lease expires %v, want %v", r.LeaseExpiresAt, want)
	}
	e.do("POST", path+"/renew", "").ok(200)
	e.noSideEffect(func() {
		e.do("POST", path+"/renew", `{"ttl":"-1s"}`).apiErr(400, fsm.ErrInvalid.Code)
		e.do("POST", path+"/renew", `{"ttl":60}`).apiErr(400, wire.CodeBadRequest)
		e.do("POST", path+"/renew", `{"lease":"1h"}`).apiErr(400, wire.CodeBadRequest)
		e.do("POST", path+"/cancel", "").apiErr(409, fsm.ErrConflict.Code)
		e.do("POST", path+"/release", `{"force":true}`).apiErr(400, wire.CodeBadRequest)
		e.do("POST", "/v1/allocations/nope/release", "").apiErr(404, fsm.ErrNotFound.Code)
		e.do("POST", "/v1/allocations/nope/renew", "").apiErr(404, fsm.ErrNotFound.Code)
		e.do("POST", "/v1/allocations/nope/cancel", "").apiErr(404, fsm.ErrNotFound.Code)
		e.do("GET", "/v1/allocations/nope", "").apiErr(404, fsm.ErrNotFound.Code)
	})

	rel := e.do("POST", path+"/release", `{"request_id":"rel-1"}`).ok(200).alloc()
	if rel.Status != wire.Released || rel.EndedAt.IsZero() {
		t.Fatalf("released allocation %+v", rel)
	}
	// A retried release answers the same; a new one is refused.
	e.do("POST", path+"/release", `{"request_id":"rel-1"}`).ok(200)
	e.noSideEffect(func() {
		e.do("POST", path+"/release", "").apiErr(409, fsm.ErrNotActive.Code)
		e.do("POST", path+"/renew", "").apiErr(409, fsm.ErrNotActive.Code)
	})

	// A renew of an allocation without lease TTL needs one.
	b := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}]}`).ok(200).alloc()
	e.noSideEffect(func() {
		e.do("POST", "/v1/allocations/"+b.ID+"/renew", "").apiErr(400, fsm.ErrInvalid.Code)
	})

	// Cancel a pending request.
	for range 2 {
		e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}]}`).ok(200)
	}
	p := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}],"timeout":"1h"}`).ok(202).alloc()
	e.noSideEffect(func() {
		e.do("POST", "/v1/allocations/"+p.ID+"/release", "").apiErr(409, fsm.ErrNotActive.Code)
	})
	if c := e.do("POST", "/v1/allocations/"+p.ID+"/cancel", "").ok(200).alloc(); c.Status != wire.Cancelled {
		t.Fatalf("cancelled allocation is %s", c.Status)
	}
}

func TestListAllocations(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	var ids []string
	for i := range 3 {
		a := e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1}]}`).ok(200).alloc()
		ids = append(ids, a.ID)
		if i == 0 {
			e.do("POST", "/v1/allocations/"+a.ID+"/release", "").ok(200)
		}
	}
	cpu := e.do("POST", "/v1/allocations", `{"claims":[{"type":"CPU","count":1,"amount":{"compute_units":8}}]}`).ok(200).alloc()
	ids = append(ids, cpu.ID)
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"capabilities":{"memory_gb":500}}]}`).apiErr(409, fsm.ErrNoCapacity.Code)

	list := func(query string) wire.AllocationList {
		t.Helper()
		var l wire.AllocationList
		r := e.do("GET", "/v1/allocations"+query, "").ok(200)
		r.decode(&l)
		if r.index() == 0 || r.hdr.Get(wire.HeaderKnownLeader) != "true" || r.hdr.Get(wire.HeaderLastContact) != "0" {
			t.Fatalf("read headers %v", r.hdr)
		}
		return l
	}
	idsOf := func(l wire.AllocationList) []string {
		var out []string
		for _, a := range l.Allocations {
			out = append(out, a.ID)
		}
		return out
	}
	eq := func(got, want []string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	eq(idsOf(list("")), ids[1:])
	eq(idsOf(list("?type=CPU")), ids[3:])
	eq(idsOf(list("?pool=big")), nil)
	eq(idsOf(list("?host=h1")), ids[1:3])
	if l := list("?history=true"); len(l.Allocations) != 5 {
		t.Fatalf("with history: %d allocations, want 5", len(l.Allocations))
	}
	eq(idsOf(list("?history=true&status=released")), ids[:1])
	if l := list("?history=true&status=failed,released"); len(l.Allocations) != 2 {
		t.Fatalf("two statuses: %v", idsOf(l))
	}

	// Pages of two, forwards and backwards.
	p1 := list("?history=true&limit=2")
	if len(p1.Allocations) != 2 || p1.Next == "" {
		t.Fatalf("page 1: %+v", p1)
	}
	p2 := list("?history=true&limit=2&next=" + p1.Next)
	p3 := list("?history=true&limit=2&next=" + p2.Next)
	if len(p2.Allocations) != 2 || len(p3.Allocations) != 1 || p3.Next != "" {
		t.Fatalf("pages: %v %v %v", idsOf(p1), idsOf(p2), idsOf(p3))
	}
	all := append(append(idsOf(p1), idsOf(p2)...), idsOf(p3)...)
	eq(all[:4], ids)
	rev := list("?history=true&reverse=true&limit=3")
	if got := idsOf(rev); got[0] != all[4] || got[1] != ids[3] {
		t.Fatalf("reverse: %v", got)
	}
	rev2 := list("?history=true&reverse=true&limit=3&next=" + rev.Next)
	if got := idsOf(rev2); len(got) != 2 || got[1] != ids[0] {
		t.Fatalf("reverse page 2: %v", got)
	}

	// History holds only ended allocations.
	var h wire.AllocationList
	e.do("GET", "/v1/history?status=failed", "").ok(200).decode(&h)
	if len(h.Allocations) != 1 || h.Allocations[0].Status != wire.Failed {
		t.Fatalf("history: %+v", h)
	}
	e.do("GET", "/v1/history?limit=1", "").ok(200).decode(&h)
	if len(h.Allocations) != 1 || h.Next == "" {
		t.Fatalf("history page: %+v", h)
	}

	for _, q := range []string{"?status=gone", "?type=QPU", "?limit=0", "?limit=5000", "?next=abc", "?history=maybe", "?reverse=2"} {
		e.do("GET", "/v1/allocations"+q, "").apiErr(400, wire.CodeBadRequest)
	}
	e.do("GET", "/v1/history?status=done", "").apiErr(400, wire.CodeBadRequest)
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met before the deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPageWindowPaginatesAsWhole checks that a list cut to its page's
// window, as allocationPage cuts it while it filters, paginates as the
// whole list would.
func TestPageWindowPaginatesAsWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := rng.IntN(500)
		var all []*fsm.Allocation
		for _, seq := range rng.Perm(2 * n)[:n] {
			all = append(all, &fsm.Allocation{Seq: uint64(seq)})
		}
		p := pageParams{limit: 1 + rng.IntN(20), reverse: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			p.from, p.hasFrom = uint64(rng.IntN(2*n+1)), true
		}
		var cut []*fsm.Allocation
		for _, a := range all {
			cut = append(cut, a)
			if len(cut) > 2*p.limit+3 {
				cut = pageWindow(cut, p)
			}
		}
		wantPage, wantNext := paginate(slices.Clone(all), p)
		page, next := paginate(cut, p)
		if !slices.Equal(page, wantPage) || next != wantNext {
			t.Fatalf("%+v over %d: cut list gives %d and %q, whole list %d and %q", p, n, len(page), next, len(wantPage), wantNext)
		}
	}
}
