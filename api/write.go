package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// readAfterWait bounds how long an answer to a write waits for the local
// replica to apply the write before it reads the result.
const readAfterWait = 5 * time.Second

// write settles the request ID, applies cmd through the node and returns
// the state machine's answer. A refusal comes back as an error (a
// *refusal); the result is returned with it.
func (s *Server) write(w http.ResponseWriter, r *http.Request, cmd fsm.Command, bodyID string) (fsm.Result, error) {
	id, err := requestID(w, r, bodyID)
	if err != nil {
		return fsm.Result{}, err
	}
	fsm.SetRequestID(cmd, id)
	// What the API can judge by itself is refused here, without a log
	// entry.
	if err := fsm.Precheck(cmd); err != nil {
		return fsm.Result{}, err
	}
	ctx := r.Context()
	if !inBatch(ctx) {
		// A batch set one deadline for all its writes (batch).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.WriteTimeout)
		defer cancel()
	}
	start := time.Now()
	res, err := s.b.Apply(ctx, cmd)
	s.metrics.observeApply(cmd, err, time.Since(start))
	if err != nil {
		return res, err
	}
	if res.Err == nil || errors.Is(res.Err, fsm.ErrNoCapacity) || errors.Is(res.Err, fsm.ErrQuotaExceeded) {
		w.Header().Set(wire.HeaderIndex, strconv.FormatUint(res.Index, 10))
	}
	if !inBatch(ctx) {
		// A batch marks its own answer once (batch).
		s.markForwarded(w.Header())
	}
	if res.Err != nil {
		ref := &refusal{err: res.Err, requestID: id}
		if res.Allocation != nil {
			ref.allocationID = res.Allocation.ID
		}
		return res, ref
	}
	return res, nil
}

// markForwarded sets X-Dmsc-Forwarded on a write's answer when this
// server is not the leader: the SDK then looks for the leader among its
// addresses and writes to it from then on (a follower forwards each write
// of a batch on its own).
func (s *Server) markForwarded(h http.Header) {
	if l, ok := s.b.Leader(); ok && l.ID != s.b.Self().ID {
		h.Set(wire.HeaderForwarded, "true")
	}
}

// read runs fn on the state with the consistency and blocking parameters
// of the request, and sets the freshness headers.
func (s *Server) read(w http.ResponseWriter, r *http.Request, fn func(*fsm.State)) error {
	opts, err := readOptions(r)
	if err != nil {
		return err
	}
	meta, err := s.b.Read(r.Context(), opts, fn)
	if err != nil {
		return err
	}
	setReadMeta(w, meta)
	return nil
}

// readAfter reads once the local replica has applied the write at index
// idx (bounded by readAfterWait), so that a write answers with what it
// made.
func (s *Server) readAfter(w http.ResponseWriter, r *http.Request, idx uint64, fn func(*fsm.State)) error {
	opts := cluster.ReadOptions{}
	if idx > 0 {
		opts.MinIndex, opts.Wait = idx-1, readAfterWait
	}
	meta, err := s.b.Read(r.Context(), opts, fn)
	if err != nil {
		return err
	}
	setReadMeta(w, meta)
	return nil
}

// notFound is a 404 for a named thing.
func notFound(kind, id string) error {
	return &fsm.Error{Code: fsm.ErrNotFound.Code, Message: kind + " " + strconv.Quote(id) + " not found"}
}

// POST /v1/operator/test-noop: writes an fsm.TestNoop, the command type
// of a pretended newer release, for mixed-version tests. Served only with
// the test knob (fsm.EnableTestNoop). It answers the entry's index.
func (s *Server) testNoop(w http.ResponseWriter, r *http.Request) error {
	res, err := s.write(w, r, &fsm.TestNoop{Note: "test"}, "")
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, map[string]uint64{"index": res.Index})
	return nil
}
