package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// The API's bodies, under the client's name.
type (
	// Request is an allocation request: claims, priority, timeout, lease
	// TTL, pool and labels.
	Request = wire.Request
	// AllocateRequest is a Request with its request ID.
	AllocateRequest = wire.AllocateRequest
	// Allocation is an allocation as the API shows it.
	Allocation = wire.Allocation
	// AllocationList is a page of allocations.
	AllocationList = wire.AllocationList
	// Duration is a time.Duration that travels as "30s".
	Duration = wire.Duration
)

// AllocateOption changes how Allocate behaves.
type AllocateOption func(*allocateOptions)

type allocateOptions struct {
	wait bool
}

// WaitForPlacement makes Allocate return only once the request is placed
// (an active allocation) or refused (ErrNoCapacity when its timeout
// passes), instead of answering a pending allocation at once. The server
// holds the request while it waits; if it answers pending anyway (its own
// bound ran out first), the client keeps watching the allocation with
// blocking queries. The context bounds the wait.
func WaitForPlacement() AllocateOption {
	return func(o *allocateOptions) { o.wait = true }
}

// Allocate asks for devices. A request without a request ID gets a fresh
// one, which every retry repeats: however many times the request is sent,
// it takes devices once. The answer is the allocation: active, or pending
// when it waits in the queue (timeout > 0). A request that cannot be
// placed fails with an *APIError matching ErrNoCapacity whose WhyNot says
// why.
func (c *Client) Allocate(ctx context.Context, req AllocateRequest, opts ...AllocateOption) (*Allocation, *WriteMeta, error) {
	var o allocateOptions
	for _, opt := range opts {
		opt(&o)
	}
	req.RequestID = orNewID(req.RequestID)
	req.Wait = req.Wait || o.wait
	body, err := jsonBody(req)
	if err != nil {
		return nil, nil, err
	}
	rq := &request{method: http.MethodPost, path: "/v1/allocations", body: body, ctype: "application/json",
		write: true, idempotent: true, batchable: !req.Wait, requestID: req.RequestID}
	if req.Namespace != "" {
		rq.query = url.Values{"namespace": {req.Namespace}}
	}
	if req.Wait {
		rq.extra = min(req.Timeout.Std(), 10*time.Minute) + allocateWaitGrace
	}
	var a Allocation
	rq.out = &a
	ans, err := c.do(ctx, rq)
	if err != nil {
		return nil, nil, err
	}
	meta := ans.writeMeta()
	if meta.RequestID == "" {
		meta.RequestID = req.RequestID
	}
	if !req.Wait || a.Status != Pending {
		return &a, meta, nil
	}
	placed, err := c.waitPlaced(ctx, &a, meta.Index, nil)
	if err != nil {
		return nil, meta, err
	}
	return placed, meta, nil
}

// waitPlaced watches a pending allocation until it leaves pending,
// telling seen (when set) of each state it sees. A request that timed out
// is an ErrNoCapacity error, as the server's own wait answers it.
func (c *Client) waitPlaced(ctx context.Context, a *Allocation, index uint64, seen func(*Allocation)) (*Allocation, error) {
	cur := a
	if seen != nil {
		seen(a)
	}
	err := c.WatchAllocation(ctx, a.ID, &WatchOptions{WaitIndex: index}, func(got *Allocation) bool {
		cur = got
		if seen != nil {
			seen(got)
		}
		return got.Status == Pending
	})
	if err != nil {
		return nil, err
	}
	if cur.Status == TimedOut {
		msg := "no capacity before the deadline"
		if cur.WhyNot != nil {
			msg += ": " + cur.WhyNot.Summary
		}
		return nil, &APIError{Status: http.StatusConflict, Code: ErrNoCapacity.Code, Message: msg,
			WhyNot: cur.WhyNot, AllocationID: cur.ID, RequestID: cur.RequestID}
	}
	return cur, nil
}

// Allocation returns one allocation, live or from the history.
func (c *Client) Allocation(ctx context.Context, id string, q *QueryOptions) (*Allocation, *QueryMeta, error) {
	var a Allocation
	meta, err := c.get(ctx, "/v1/allocations/"+esc(id), nil, q, &a)
	if err != nil {
		return nil, nil, err
	}
	return &a, meta, nil
}

// AllocationFilter selects allocations of a list and the page.
type AllocationFilter struct {
	// Statuses keeps allocations in any of these statuses.
	Statuses []AllocStatus
	// Type keeps allocations with a claim of this device type.
	Type DeviceType
	// Pool keeps allocations that ask for or hold devices of this pool.
	Pool string
	// Host keeps allocations placed on this host.
	Host string
	// History adds the ended allocations the history retains
	// (Allocations only; History lists only those).
	History bool
	// Limit is the page size (server default 100, at most 1000).
	Limit int
	// Next is the token of the page to read (AllocationList.Next).
	Next string
	// Reverse lists newest first.
	Reverse bool
}

func (f *AllocationFilter) values(history bool) url.Values {
	v := url.Values{}
	if f == nil {
		return v
	}
	if len(f.Statuses) > 0 {
		s := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			s[i] = string(st)
		}
		v.Set("status", strings.Join(s, ","))
	}
	setIf(v, "type", string(f.Type))
	setIf(v, "pool", f.Pool)
	setIf(v, "host", f.Host)
	if history && f.History {
		v.Set("history", "true")
	}
	if f.Limit > 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	setIf(v, "next", f.Next)
	if f.Reverse {
		v.Set("reverse", "true")
	}
	return v
}

func setIf(v url.Values, k, s string) {
	if s != "" {
		v.Set(k, s)
	}
}

// Allocations lists live allocations (and, with History, the retained
// ended ones), one page at a time: pass the answer's Next as the filter's
// Next for the following page.
func (c *Client) Allocations(ctx context.Context, f *AllocationFilter, q *QueryOptions) (*AllocationList, *QueryMeta, error) {
	var out AllocationList
	meta, err := c.get(ctx, "/v1/allocations", f.values(true), q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// History lists the ended allocations the history retains, one page at a
// time.
func (c *Client) History(ctx context.Context, f *AllocationFilter, q *QueryOptions) (*AllocationList, *QueryMeta, error) {
	var out AllocationList
	meta, err := c.get(ctx, "/v1/history", f.values(false), q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// Queue lists the pending allocations in the order they are served.
func (c *Client) Queue(ctx context.Context, q *QueryOptions) ([]Allocation, *QueryMeta, error) {
	var out []Allocation
	meta, err := c.get(ctx, "/v1/queue", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// allocationWrite serves release, renew and cancel.
func (c *Client) allocationWrite(ctx context.Context, id, verb string, body any, requestID string) (*Allocation, *WriteMeta, error) {
	var a Allocation
	rq, err := writeRequest(http.MethodPost, "/v1/allocations/"+esc(id)+"/"+verb, body, requestID, &a)
	if err != nil {
		return nil, nil, err
	}
	rq.batchable = true
	ans, err := c.do(ctx, rq)
	if err != nil {
		return nil, nil, err
	}
	return &a, ans.writeMeta(), nil
}

// Release gives back an active allocation. ErrNotActive when it is
// pending (Cancel it) or already ended.
func (c *Client) Release(ctx context.Context, id string) (*Allocation, *WriteMeta, error) {
	rid := NewRequestID()
	return c.allocationWrite(ctx, id, "release", wire.WriteRequest{RequestID: rid}, rid)
}

// Renew extends an active allocation's lease by ttl from now; 0 uses the
// request's lease TTL. ErrNotActive when it is not active.
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (*Allocation, *WriteMeta, error) {
	rid := NewRequestID()
	return c.allocationWrite(ctx, id, "renew", wire.RenewRequest{TTL: Duration(ttl), RequestID: rid}, rid)
}

// Cancel withdraws a pending request. ErrConflict when it is active
// (Release it), ErrNotActive when it has ended.
func (c *Client) Cancel(ctx context.Context, id string) (*Allocation, *WriteMeta, error) {
	rid := NewRequestID()
	return c.allocationWrite(ctx, id, "cancel", wire.WriteRequest{RequestID: rid}, rid)
}
