package api

import (
	"bytes"
	"context"
	"net/http"
	"strconv"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

func memberOf(m cluster.Member) wire.Member {
	return wire.Member{
		ID: m.ID, Server: m.Server, Host: m.Host, GossipAddr: m.GossipAddr, RaftAddr: m.RaftAddr,
		RPCAddr: m.RPCAddr, HTTPAddr: m.HTTPAddr, Version: m.Version, FeatureLevel: m.FeatureLevel,
		Status: string(m.Status), Since: m.Since, Leader: m.Leader, Integrity: m.Integrity,
	}
}

func nodeStatusOf(st cluster.Status) wire.NodeStatus {
	return wire.NodeStatus{
		ID: st.ID, Server: st.Server, Host: st.Host, State: st.State, Leader: st.Leader,
		KnownLeader: st.KnownLeader, LastContact: wire.Duration(st.LastContact), CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, Term: st.Term, Ready: st.Ready, Reason: st.Reason,
		Integrity: st.Integrity, Divergence: st.Divergence,
	}
}

// GET /v1/cluster/members
func (s *Server) getMembers(w http.ResponseWriter, r *http.Request) error {
	members := s.b.Members()
	out := make([]wire.Member, len(members))
	for i, m := range members {
		out[i] = memberOf(m)
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// GET /v1/cluster/leader
func (s *Server) getLeader(w http.ResponseWriter, r *http.Request) error {
	l, ok := s.b.Leader()
	if !ok {
		return cluster.ErrNoLeader
	}
	writeJSON(w, r, http.StatusOK, wire.Leader{ID: l.ID, RaftAddr: l.RaftAddr, RPCAddr: l.RPCAddr, HTTPAddr: l.HTTPAddr})
	return nil
}

// GET /v1/cluster/raft
func (s *Server) getRaft(w http.ResponseWriter, r *http.Request) error {
	cfg, err := s.b.RaftConfiguration()
	if err != nil {
		return err
	}
	out := wire.RaftConfiguration{Index: cfg.Index, Servers: make([]wire.RaftServer, len(cfg.Servers))}
	for i, sv := range cfg.Servers {
		out.Servers[i] = wire.RaftServer{ID: sv.ID, Address: sv.Address, Voter: sv.Voter, Leader: sv.Leader}
	}
	for _, rs := range cfg.Removed {
		out.Removed = append(out.Removed, wire.RemovedServer{ID: rs.ID, Since: rs.Since})
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// DELETE /v1/cluster/raft/removed/{id}
func (s *Server) readmitPeer(w http.ResponseWriter, r *http.Request) error {
	if err := validServerID(r.PathValue("id")); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.WriteTimeout)
	defer cancel()
	if err := s.b.ReadmitPeer(ctx, r.PathValue("id")); err != nil {
		return err
	}
	return s.getRaft(w, r)
}

// DELETE /v1/cluster/raft/peers/{id}
func (s *Server) removePeer(w http.ResponseWriter, r *http.Request) error {
	if err := validServerID(r.PathValue("id")); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.WriteTimeout)
	defer cancel()
	if err := s.b.RemovePeer(ctx, r.PathValue("id")); err != nil {
		return err
	}
	return s.getRaft(w, r)
}

// GET /v1/agent/self
func (s *Server) getAgentSelf(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, r, http.StatusOK, wire.AgentSelf{
		Version: s.opts.Version, Role: s.opts.Role, Member: memberOf(s.b.Self()),
		Status: nodeStatusOf(s.b.Status()), Config: s.opts.Config,
	})
	return nil
}

// GET /v1/snapshot
func (s *Server) saveSnapshot(w http.ResponseWriter, r *http.Request) error {
	var buf bytes.Buffer
	meta, err := s.b.SnapshotSave(r.Context(), &buf)
	if err != nil {
		return err
	}
	setReadMeta(w, meta)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="dmsc-`+strconv.FormatUint(meta.Index, 10)+`.snap"`)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// GET /v1/health
//
// 503 with code replica_failed when this server's replica failed its
// integrity check (halted, or divergent); a state divergence seen between
// other servers is listed in Alarms with a 200.
func (s *Server) getHealth(w http.ResponseWriter, r *http.Request) error {
	st := s.b.Status()
	h := wire.Health{Status: "ok", Node: s.b.Self().ID}
	if st.Integrity != "" {
		h.Status, h.Code, h.Reason = "failed", cluster.ErrReplicaFailed.Code, st.Integrity
		writeJSON(w, r, http.StatusServiceUnavailable, h)
		return nil
	}
	if st.Divergence != "" {
		h.Alarms = append(h.Alarms, st.Divergence)
	}
	writeJSON(w, r, http.StatusOK, h)
	return nil
}

// GET /v1/ready
func (s *Server) getReady(w http.ResponseWriter, r *http.Request) error {
	st := nodeStatusOf(s.b.Status())
	code := http.StatusOK
	switch {
	case st.Integrity != "":
		code, st.Reason = http.StatusServiceUnavailable, st.Integrity
	case !st.Ready && st.Reason != "":
		code = http.StatusServiceUnavailable
	case !st.Ready:
		code, st.Reason = http.StatusServiceUnavailable, "the node is not ready: no leader known, or not caught up"
	case s.opts.Ready != nil && !s.opts.Ready():
		code, st.Reason = http.StatusServiceUnavailable, "the agent is not ready"
	default:
		if why := s.overloaded(); why != "" {
			code, st.Reason = http.StatusServiceUnavailable, why
		}
	}
	st.Ready = code == http.StatusOK
	writeJSON(w, r, code, st)
	return nil
}

// pprofRoute adapts a net/http/pprof handler to the route table.
func pprofRoute(h http.HandlerFunc) func(*Server, http.ResponseWriter, *http.Request) error {
	return func(_ *Server, w http.ResponseWriter, r *http.Request) error {
		h(w, r)
		return nil
	}
}

// validServerID refuses a Raft server ID that no server can have: empty,
// longer than fsm.MaxServerIDLength, or with a byte other than printable
// ASCII.
func validServerID(id string) error {
	if id == "" || len(id) > fsm.MaxServerIDLength {
		return badRequest("server id is empty or longer than %d bytes", fsm.MaxServerIDLength)
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c > '~' {
			return badRequest("server id %q has a character other than printable ASCII", id)
		}
	}
	return nil
}
