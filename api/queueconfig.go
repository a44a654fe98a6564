package api

import (
	"net/http"
	"slices"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// GET /v1/queue/config: how the queue is served, with the fair-share
// figures of the namespace asked for (?namespace=, default "default";
// "*": every namespace the token may read).
func (s *Server) getQueueConfig(w http.ResponseWriter, r *http.Request) error {
	readable := statsNamespaces(r.Context()) // nil: every namespace
	var out wire.QueueStatus
	if err := s.read(w, r, func(st *fsm.State) { out = queueStatusOf(st, readable) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

func queueStatusOf(st *fsm.State, namespaces []string) wire.QueueStatus {
	c := st.QueueConfig()
	out := wire.QueueStatus{QueueConfig: wire.QueueConfig{FairShare: c.FairShare, HalfLife: wire.Duration(c.HalfLife), PreemptWaiting: c.PreemptWaiting},
		Usage: []wire.FairShareUse{}}
	_, _, use := st.FairShare()
	for _, u := range use {
		if namespaces == nil || slices.Contains(namespaces, u.Namespace) {
			out.Usage = append(out.Usage, wire.FairShareUse{Namespace: u.Namespace, Type: deviceTypeToWire(u.Type), Weight: u.Weight,
				Held: u.Held, Recent: u.Recent, Score: u.Score})
		}
	}
	return out
}

// PUT /v1/queue/config
func (s *Server) setQueueConfig(w http.ResponseWriter, r *http.Request) error {
	var body wire.QueueConfigRequest
	if err := decodeJSON(r.Body, &body, false); err != nil {
		return err
	}
	cmd := &fsm.SetQueueConfig{Meta: fsm.Meta{RequestID: body.RequestID}, FairShare: body.FairShare,
		HalfLife: time.Duration(body.HalfLife), PreemptWaiting: body.PreemptWaiting}
	res, err := s.write(w, r, cmd, cmd.RequestID)
	if err != nil {
		return err
	}
	var out wire.QueueStatus
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { out = queueStatusOf(st, statsNamespaces(r.Context())) }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
}
