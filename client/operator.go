package client

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/dmsc/dmsc/client/wire"
)

type (
	// Member is a node of the gossip pool.
	Member = wire.Member
	// Leader names the Raft leader.
	Leader = wire.Leader
	// RaftConfiguration is the Raft configuration.
	RaftConfiguration = wire.RaftConfiguration
	// NodeStatus is a node's health summary.
	NodeStatus = wire.NodeStatus
	// AgentSelf describes an agent.
	AgentSelf = wire.AgentSelf
	// Health is the answer of the liveness probe.
	Health = wire.Health
)

// MaxSnapshotBytes is the largest snapshot the API restores.
const MaxSnapshotBytes = 512 << 20

// Members lists every node gossip knows, servers and hosts, as the
// answering node sees them.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	var out []Member
	if _, err := c.get(ctx, "/v1/cluster/members", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Leader returns the leader as the answering node knows it; ErrNoLeader
// when none is known.
func (c *Client) Leader(ctx context.Context) (*Leader, error) {
	var out Leader
	if _, err := c.get(ctx, "/v1/cluster/leader", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RaftConfiguration returns the servers of the Raft configuration.
func (c *Client) RaftConfiguration(ctx context.Context) (*RaftConfiguration, error) {
	var out RaftConfiguration
	if _, err := c.get(ctx, "/v1/cluster/raft", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemovePeer removes a dead server from the Raft configuration and
// returns the new configuration. It is sent again only when the answer
// proves it was not done.
func (c *Client) RemovePeer(ctx context.Context, id string) (*RaftConfiguration, error) {
	var out RaftConfiguration
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/cluster/raft/peers/" + esc(id), write: true, out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ReadmitPeer lifts an operator's removal of a server: the leader may add
// it again (first as a non-voter, a voter once it is stable). It returns
// the new configuration.
func (c *Client) ReadmitPeer(ctx context.Context, id string) (*RaftConfiguration, error) {
	var out RaftConfiguration
	_, err := c.do(ctx, &request{method: http.MethodDelete, path: "/v1/cluster/raft/removed/" + esc(id), write: true, out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// SnapshotSave writes the replicated state, as of a consistent read, to w.
// The bytes restore with SnapshotRestore.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer) (*QueryMeta, error) {
	ans, err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/snapshot", idempotent: true,
		stream: func(r io.Reader) error {
			_, err := io.Copy(w, r)
			return err
		}})
	if err != nil {
		return nil, err
	}
	return ans.queryMeta(), nil
}

// SnapshotRestore replaces the whole replicated state with a snapshot read
// from r (at most MaxSnapshotBytes). It is sent again only when the answer
// proves it was not done.
func (c *Client) SnapshotRestore(ctx context.Context, r io.Reader) (*WriteMeta, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSnapshotBytes+1))
	if err != nil {
		return nil, fmt.Errorf("dmsc client: read snapshot: %w", err)
	}
	if len(data) > MaxSnapshotBytes {
		return nil, fmt.Errorf("dmsc client: snapshot larger than %d bytes", MaxSnapshotBytes)
	}
	var res wire.WriteResult
	ans, err := c.do(ctx, &request{method: http.MethodPut, path: "/v1/snapshot", body: data,
		ctype: "application/octet-stream", write: true, out: &res})
	if err != nil {
		return nil, err
	}
	meta := ans.writeMeta()
	meta.Index = res.Index
	return meta, nil
}

// Health asks a node whether its process serves HTTP.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var out Health
	if _, err := c.get(ctx, "/v1/health", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Ready returns a node's readiness: Ready is true when it knows a leader
// and has caught up (a host: has joined the pool). A node that is not
// ready answers its status too, with a nil error.
func (c *Client) Ready(ctx context.Context) (*NodeStatus, error) {
	var out NodeStatus
	_, err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/ready", idempotent: true,
		out: &out, okStatus: http.StatusServiceUnavailable})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// AgentSelf describes the answering agent: version, role, membership,
// status and a summary of its configuration.
func (c *Client) AgentSelf(ctx context.Context) (*AgentSelf, error) {
	var out AgentSelf
	if _, err := c.get(ctx, "/v1/agent/self", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
