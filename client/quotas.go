package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/dmsc/dmsc/client/wire"
)

type (
	// QuotaLimit bounds what a namespace holds of a device type, in a
	// pool or in all pools: devices (MaxCount, nil for no bound) and
	// amounts (each one set in MaxAmount).
	QuotaLimit = wire.QuotaLimit
	// Quota is a namespace's quota, each limit with the namespace's use.
	Quota = wire.Quota
	// QuotaUse is one limit and what the namespace holds under it.
	QuotaUse = wire.QuotaUse
	// QuotaSpec is a quota as SetQuota sets it: limits, fair-share
	// weight, borrowing.
	QuotaSpec = wire.QuotaSpec
)

// MaxCount is a QuotaLimit.MaxCount of n.
func MaxCount(n int) *int { return &n }

// Quotas returns the quota of namespace ns with its use ("*": those of
// every namespace the token may read); an empty list when it has none.
func (c *Client) Quotas(ctx context.Context, ns string, q *QueryOptions) ([]Quota, *QueryMeta, error) {
	var out []Quota
	meta, err := c.get(ctx, "/v1/quotas", url.Values{"namespace": {ns}}, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// SetQuota sets namespace ns's quota, replacing the one before; raising
// a limit serves the queue at once. It returns the quota with its use.
func (c *Client) SetQuota(ctx context.Context, ns string, spec QuotaSpec) (*Quota, *WriteMeta, error) {
	req := wire.QuotaRequest{QuotaSpec: spec, RequestID: NewRequestID()}
	var out []Quota
	meta, err := c.write(ctx, http.MethodPut, "/v1/quotas/"+esc(ns), req, req.RequestID, &out)
	if err != nil {
		return nil, nil, err
	}
	if len(out) == 0 {
		return &Quota{Namespace: ns}, meta, nil
	}
	return &out[0], meta, nil
}

// DeleteQuota removes namespace ns's quota (ErrNotFound when it has none).
func (c *Client) DeleteQuota(ctx context.Context, ns string) (*WriteMeta, error) {
	rid := NewRequestID()
	return c.write(ctx, http.MethodDelete, "/v1/quotas/"+esc(ns), wire.WriteRequest{RequestID: rid}, rid, nil)
}
