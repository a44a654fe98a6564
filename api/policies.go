package api

import (
	"net/http"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// GET /v1/pools
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) error {
	var pools []fsm.PoolInfo
	if err := s.read(w, r, func(st *fsm.State) { pools = st.Pools() }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, mapSlice(pools, poolInfoToWire))
	return nil
}

func policiesOf(st *fsm.State) wire.Policies {
	return policiesToWire(st.TypePolicies(), st.PoolPolicies())
}

// GET /v1/policies
func (s *Server) getPolicies(w http.ResponseWriter, r *http.Request) error {
	var out wire.Policies
	if err := s.read(w, r, func(st *fsm.State) { out = policiesOf(st) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// setPolicy applies a policy change and answers the policies in force.
func (s *Server) setPolicy(w http.ResponseWriter, r *http.Request, cmd *fsm.SetPolicy) error {
	res, err := s.write(w, r, cmd, cmd.RequestID)
	if err != nil {
		return err
	}
	var out wire.Policies
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { out = policiesOf(st) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// PUT /v1/policies/{type}
func (s *Server) setTypePolicy(w http.ResponseWriter, r *http.Request) error {
	cmd, err := decodePolicy(r.Body, fsm.DeviceType(r.PathValue("type")), "")
	if err != nil {
		return err
	}
	return s.setPolicy(w, r, cmd)
}

// PUT /v1/pools/{pool}/policy
func (s *Server) setPoolPolicy(w http.ResponseWriter, r *http.Request) error {
	cmd, err := decodePolicy(r.Body, "", r.PathValue("pool"))
	if err != nil {
		return err
	}
	return s.setPolicy(w, r, cmd)
}

// DELETE /v1/pools/{pool}/policy
func (s *Server) deletePoolPolicy(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	return s.setPolicy(w, r, &fsm.SetPolicy{Meta: fsm.Meta{RequestID: body.RequestID}, Pool: r.PathValue("pool")})
}

func retentionOf(st *fsm.State) wire.Retention {
	return retentionToWire(st.Retention())
}

// GET /v1/retention
func (s *Server) getRetention(w http.ResponseWriter, r *http.Request) error {
	var out wire.Retention
	if err := s.read(w, r, func(st *fsm.State) { out = retentionOf(st) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// PUT /v1/retention
func (s *Server) setRetention(w http.ResponseWriter, r *http.Request) error {
	cmd, err := decodeRetention(r.Body)
	if err != nil {
		return err
	}
	res, err := s.write(w, r, cmd, cmd.RequestID)
	if err != nil {
		return err
	}
	var out wire.Retention
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { out = retentionOf(st) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// GET /v1/stats
func (s *Server) getStats(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	typ, err := typeParam(q)
	if err != nil {
		return err
	}
	f := fsm.StatsFilter{Type: typ, Pool: q.Get("pool"), Namespaces: statsNamespaces(r.Context())}
	var out []fsm.Stats
	if err := s.read(w, r, func(st *fsm.State) { out = st.Stats(f) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, mapSlice(out, statsToWire))
	return nil
}

// GET /v1/stats/namespaces
func (s *Server) getNamespaceStats(w http.ResponseWriter, r *http.Request) error {
	typ, err := typeParam(r.URL.Query())
	if err != nil {
		return err
	}
	ns := statsNamespaces(r.Context())
	var out []fsm.NamespaceStats
	if err := s.read(w, r, func(st *fsm.State) { out = st.NamespaceStats(typ, ns) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, mapSlice(out, namespaceStatsToWire))
	return nil
}

func namespaceStatsToWire(n fsm.NamespaceStats) wire.NamespaceStats {
	return wire.NamespaceStats{Namespace: n.Namespace, Type: deviceTypeToWire(n.Type), Weight: n.Weight, EntitlementPct: n.EntitlementPct,
		Held: n.Held, SharePct: n.SharePct, RecentSharePct: n.RecentSharePct, MaxCount: n.MaxCount, Borrowing: n.Borrowing,
		Counts: outcomeCountsToWire(n.Counts), QueueWait: durationStatsToWire(n.QueueWait), Refusals: n.Refusals}
}

// GET /v1/recommendations
func (s *Server) getRecommendations(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	typ, err := typeParam(q)
	if err != nil {
		return err
	}
	var out []fsm.Recommendation
	ns := statsNamespaces(r.Context())
	if err := s.read(w, r, func(st *fsm.State) { out = st.Recommend(typ, ns...) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, mapSlice(out, recommendationToWire))
	return nil
}
