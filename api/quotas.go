package api

import (
	"net/http"
	"slices"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// GET /v1/quotas: the quotas of the namespace asked for (?namespace=,
// default "default"; "*": every namespace the token may read), each limit
// with what the namespace holds under it.
func (s *Server) listQuotas(w http.ResponseWriter, r *http.Request) error {
	readable := statsNamespaces(r.Context()) // nil: every namespace
	var out []wire.Quota
	if err := s.read(w, r, func(st *fsm.State) { out = quotasOf(st, readable) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// quotasOf is the quotas of the namespaces listed (nil: all), with
// their use.
func quotasOf(st *fsm.State, namespaces []string) []wire.Quota {
	out := []wire.Quota{}
	for _, q := range st.Quotas() {
		if namespaces != nil && !slices.Contains(namespaces, q.Namespace) {
			continue
		}
		use, _ := st.QuotaStatus(q.Namespace)
		out = append(out, wire.Quota{Namespace: q.Namespace, Limits: mapSlice(use, quotaUseToWire), Weight: q.FairWeight(),
			Borrow: q.Borrow, ReclaimGrace: wire.Duration(q.ReclaimGrace), ModifyIndex: q.ModifyIndex})
	}
	return out
}

// PUT /v1/quotas/{namespace}
func (s *Server) setQuota(w http.ResponseWriter, r *http.Request) error {
	var body wire.QuotaRequest
	if err := decodeJSON(r.Body, &body, false); err != nil {
		return err
	}
	ns := r.PathValue("namespace")
	cmd := &fsm.SetQuota{Meta: fsm.Meta{RequestID: body.RequestID},
		Quota: fsm.Quota{Namespace: ns, Limits: mapSlice(body.Limits, quotaLimitFromWire), Weight: body.Weight,
			Borrow: body.Borrow, ReclaimGrace: time.Duration(body.ReclaimGrace)}}
	return s.writeQuota(w, r, cmd)
}

// DELETE /v1/quotas/{namespace}
func (s *Server) deleteQuota(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	cmd := &fsm.SetQuota{Meta: fsm.Meta{RequestID: body.RequestID}, Quota: fsm.Quota{Namespace: r.PathValue("namespace")}, Delete: true}
	return s.writeQuota(w, r, cmd)
}

// writeQuota applies a quota change and answers the namespace's quota as
// it is after it (an empty list once deleted).
func (s *Server) writeQuota(w http.ResponseWriter, r *http.Request, cmd *fsm.SetQuota) error {
	res, err := s.write(w, r, cmd, cmd.RequestID)
	if err != nil {
		return err
	}
	var out []wire.Quota
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { out = quotasOf(st, []string{cmd.Quota.Namespace}) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

func quotaLimitFromWire(l wire.QuotaLimit) fsm.QuotaLimit {
	return fsm.QuotaLimit{DeviceType: fsm.DeviceType(l.Type), Pool: l.Pool, MaxCount: l.MaxCount, MaxAmount: resourcesFromWire(l.MaxAmount)}
}

func quotaLimitToWire(l fsm.QuotaLimit) wire.QuotaLimit {
	return wire.QuotaLimit{Type: deviceTypeToWire(l.DeviceType), Pool: l.Pool, MaxCount: l.MaxCount, MaxAmount: resourcesToWire(l.MaxAmount)}
}

func quotaUseToWire(u fsm.QuotaUse) wire.QuotaUse {
	return wire.QuotaUse{Limit: quotaLimitToWire(u.Limit), Count: u.Count, Amount: resourcesToWire(u.Amount)}
}
