package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/dmsc/dmsc/client/wire"
)

type (
	// Pool is a pool: its types, device counts and policies.
	Pool = wire.PoolInfo
	// Policies are the policies in force per device type and pool.
	Policies = wire.Policies
	// PolicyConfig is a policy with its preemption gap.
	PolicyConfig = wire.PolicyConfig
	// Retention is the history retention.
	Retention = wire.Retention
	// Stats are the statistics of one device type in one pool (or "*").
	Stats = wire.Stats
	// Recommendation is one piece of advice with its evidence.
	Recommendation = wire.Recommendation
)

// Pools lists the pools that hold devices or have a policy override.
func (c *Client) Pools(ctx context.Context, q *QueryOptions) ([]Pool, *QueryMeta, error) {
	var out []Pool
	meta, err := c.get(ctx, "/v1/pools", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Policies returns the policy of every device type and the pool overrides.
func (c *Client) Policies(ctx context.Context, q *QueryOptions) (*Policies, *QueryMeta, error) {
	var out Policies
	meta, err := c.get(ctx, "/v1/policies", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

func (c *Client) putPolicy(ctx context.Context, method, path string, p PolicyConfig) (*Policies, *WriteMeta, error) {
	rid := NewRequestID()
	var out Policies
	var body any = wire.PolicyRequest{Policy: p.Policy, PreemptionGap: p.PreemptionGap, RequestID: rid}
	if method == http.MethodDelete {
		body = wire.WriteRequest{RequestID: rid}
	}
	meta, err := c.write(ctx, method, path, body, rid, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// SetPolicy sets a device type's policy; the queue is re-examined at once.
func (c *Client) SetPolicy(ctx context.Context, typ DeviceType, p PolicyConfig) (*Policies, *WriteMeta, error) {
	return c.putPolicy(ctx, http.MethodPut, "/v1/policies/"+esc(string(typ)), p)
}

// SetPoolPolicy sets a pool's override, which beats the type's policy for
// requests in the pool. An empty Policy removes the override.
func (c *Client) SetPoolPolicy(ctx context.Context, pool string, p PolicyConfig) (*Policies, *WriteMeta, error) {
	return c.putPolicy(ctx, http.MethodPut, "/v1/pools/"+esc(pool)+"/policy", p)
}

// DeletePoolPolicy removes a pool's override.
func (c *Client) DeletePoolPolicy(ctx context.Context, pool string) (*Policies, *WriteMeta, error) {
	return c.putPolicy(ctx, http.MethodDelete, "/v1/pools/"+esc(pool)+"/policy", PolicyConfig{})
}

// Retention returns the history retention.
func (c *Client) Retention(ctx context.Context, q *QueryOptions) (*Retention, *QueryMeta, error) {
	var out Retention
	meta, err := c.get(ctx, "/v1/retention", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// SetRetention sets the history retention.
func (c *Client) SetRetention(ctx context.Context, r Retention) (*Retention, *WriteMeta, error) {
	rid := NewRequestID()
	var out Retention
	meta, err := c.write(ctx, http.MethodPut, "/v1/retention",
		wire.RetentionRequest{MaxCount: r.MaxCount, MaxAge: r.MaxAge, RequestID: rid}, rid, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// StatsFilter keeps one device type and/or one pool ("*": the per-type
// totals only).
type StatsFilter struct {
	Type DeviceType
	Pool string
}

// Stats returns the statistics by device type and pool.
func (c *Client) Stats(ctx context.Context, f *StatsFilter, q *QueryOptions) ([]Stats, *QueryMeta, error) {
	v := url.Values{}
	if f != nil {
		setIf(v, "type", string(f.Type))
		setIf(v, "pool", f.Pool)
	}
	var out []Stats
	meta, err := c.get(ctx, "/v1/stats", v, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Recommendations returns the advice for one device type ("" for all),
// most urgent first.
func (c *Client) Recommendations(ctx context.Context, typ DeviceType, q *QueryOptions) ([]Recommendation, *QueryMeta, error) {
	v := url.Values{}
	setIf(v, "type", string(typ))
	var out []Recommendation
	meta, err := c.get(ctx, "/v1/recommendations", v, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

type (
	// QueueConfig is how the queue is served: fair share (with a usage
	// half-life) and preemption by waiting requests.
	QueueConfig = wire.QueueConfig
	// QueueStatus is the queue configuration with the namespaces'
	// fair-share figures.
	QueueStatus = wire.QueueStatus
	// FairShareUse is a namespace's fair-share figures for a device type.
	FairShareUse = wire.FairShareUse
	// NamespaceStats is a namespace's figures for a device type.
	NamespaceStats = wire.NamespaceStats
)

// NamespaceStats returns the figures of namespace ns ("*": every
// namespace the token may read) per device type (typ, or every type when
// empty): share against entitlement, queue wait, refusals by reason.
func (c *Client) NamespaceStats(ctx context.Context, typ DeviceType, ns string, q *QueryOptions) ([]NamespaceStats, *QueryMeta, error) {
	v := url.Values{"namespace": {ns}}
	setIf(v, "type", string(typ))
	var out []NamespaceStats
	meta, err := c.get(ctx, "/v1/stats/namespaces", v, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// QueueConfig returns how the queue is served, with the fair-share
// figures of namespace ns ("*": of every namespace the token may read).
func (c *Client) QueueConfig(ctx context.Context, ns string, q *QueryOptions) (*QueueStatus, *QueryMeta, error) {
	var out QueueStatus
	meta, err := c.get(ctx, "/v1/queue/config", url.Values{"namespace": {ns}}, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// SetQueueConfig sets how the queue is served, all of it at once (what
// cfg leaves out is off).
func (c *Client) SetQueueConfig(ctx context.Context, cfg QueueConfig) (*QueueStatus, *WriteMeta, error) {
	req := wire.QueueConfigRequest{QueueConfig: cfg, RequestID: NewRequestID()}
	var out QueueStatus
	meta, err := c.write(ctx, http.MethodPut, "/v1/queue/config", req, req.RequestID, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}
