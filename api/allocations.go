package api

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// slotKey keys the request's concurrency slot in its context, so that a
// handler that starts to wait can trade it for a blocking slot.
type slotKey struct{}

type slot struct{ release func() }

// toBlocking trades the request's regular slot for a blocking one; false
// when every blocking slot is taken (the request should not wait).
func (s *Server) toBlocking(ctx context.Context) bool {
	sl, _ := ctx.Value(slotKey{}).(*slot)
	if sl == nil {
		return true
	}
	release, ok := s.acquire(true)
	if !ok {
		return false
	}
	sl.release()
	sl.release = release
	return true
}

// POST /v1/allocations
func (s *Server) createAllocation(w http.ResponseWriter, r *http.Request) error {
	cmd, body, err := decodeAllocate(r.Body)
	if err != nil {
		return err
	}
	wait, err := boolParam(r.URL.Query(), "wait")
	if err != nil {
		return err
	}
	wait = wait || body.Wait
	if wait && inBatch(r.Context()) {
		return badRequest("an allocation that waits for placement is sent alone, not in a batch")
	}
	fsm.SetNamespace(cmd, callerOf(r.Context()).namespace)
	res, err := s.write(w, r, cmd, body.RequestID)
	if err != nil {
		return err
	}
	a := res.Allocation
	if a == nil {
		// A repeated request ID whose allocation the history no longer holds.
		return notFound("allocation of request", fsm.RequestIDOf(cmd))
	}
	if wait && a.Status == fsm.Pending && s.toBlocking(r.Context()) {
		if a, err = s.waitPlaced(w, r, a, res.Index); err != nil {
			return err
		}
		if a.Status == fsm.TimedOut {
			return &refusal{
				err:          &fsm.Error{Code: fsm.ErrNoCapacity.Code, Message: "no capacity before the deadline: " + whySummary(a), WhyNot: a.WhyNot},
				allocationID: a.ID, requestID: a.RequestID,
			}
		}
	}
	return answerAllocation(w, r, a)
}

func whySummary(a *fsm.Allocation) string {
	if a.WhyNot != nil {
		return a.WhyNot.Summary
	}
	return a.Reason
}

// waitPlaced blocks until a pending allocation is placed or ends, or its
// timeout (plus WaitGrace, at most MaxAllocateWait) passes, with blocking
// reads from the index of the allocate.
func (s *Server) waitPlaced(w http.ResponseWriter, r *http.Request, a *fsm.Allocation, idx uint64) (*fsm.Allocation, error) {
	deadline := time.Now().Add(min(a.Request.Timeout+s.opts.WaitGrace, s.opts.MaxAllocateWait))
	for a.Status == fsm.Pending {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			break
		}
		var cur *fsm.Allocation
		meta, err := s.b.Read(r.Context(), cluster.ReadOptions{MinIndex: idx, Wait: remaining}, func(st *fsm.State) {
			cur, _ = st.Allocation(a.ID)
		})
		if err != nil {
			return a, err
		}
		setReadMeta(w, meta)
		if cur == nil {
			break
		}
		a = cur
		idx = max(idx, meta.Index)
	}
	return a, nil
}

// answerAllocation answers an allocation: 202 while it is pending, 200
// otherwise.
func answerAllocation(w http.ResponseWriter, r *http.Request, a *fsm.Allocation) error {
	status := http.StatusOK
	if a.Status == fsm.Pending {
		status = http.StatusAccepted
	}
	wa := allocationToWire(a)
	if !pretty(r) {
		buf := answerBuffers.Get().(*[]byte)
		defer answerBuffers.Put(buf)
		if b, ok := appendAllocation((*buf)[:0], &wa); ok {
			*buf = b
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(append(b, '\n'))
			return nil
		}
	}
	writeJSON(w, r, status, wa)
	return nil
}

// answerBuffers hold the answers appendAllocation writes; Write copies
// them out before they return to the pool.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// GET /v1/allocations
func (s *Server) listAllocations(w http.ResponseWriter, r *http.Request) error {
	history, err := boolParam(r.URL.Query(), "history")
	if err != nil {
		return err
	}
	return s.allocationPage(w, r, true, history)
}

// GET /v1/history
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	return s.allocationPage(w, r, false, true)
}

// allocationPage answers one page of the live and/or ended allocations
// that match the query's filter. Under the read lock it filters copies:
// of the live allocations, and of the history's records, each decoded
// for the read. What it keeps is cut to the page's window as it grows,
// so a long history costs no more memory than a few pages.
func (s *Server) allocationPage(w http.ResponseWriter, r *http.Request, live, history bool) error {
	q := r.URL.Query()
	f, err := parseAllocFilter(q)
	if err != nil {
		return err
	}
	p, err := parsePage(q)
	if err != nil {
		return err
	}
	var (
		page []*fsm.Allocation
		next string
	)
	inNS := namespaceFilter(r.Context())
	err = s.read(w, r, func(st *fsm.State) {
		var list []*fsm.Allocation
		keep := func(a *fsm.Allocation) bool {
			if inNS(a.Namespace) && f.match(st, a) {
				list = append(list, a)
				if len(list) > 2*p.limit+64 {
					list = pageWindow(list, p)
				}
			}
			return true
		}
		if live {
			for _, a := range st.Live() {
				keep(a)
			}
		}
		if history {
			st.EachHistory(keep)
		}
		page, next = paginate(list, p)
	})
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, allocationList(page, next))
	return nil
}

// GET /v1/queue
func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) error {
	var queue []*fsm.Allocation
	if err := s.read(w, r, func(st *fsm.State) { queue = st.Queue() }); err != nil {
		return err
	}
	inNS := namespaceFilter(r.Context())
	queue = slices.DeleteFunc(queue, func(a *fsm.Allocation) bool { return !inNS(a.Namespace) })
	writeJSON(w, r, http.StatusOK, mapSlice(queue, allocationToWire))
	return nil
}

// GET /v1/allocations/{id}
func (s *Server) getAllocation(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var a *fsm.Allocation
	if err := s.read(w, r, func(st *fsm.State) { a, _ = st.Allocation(id) }); err != nil {
		return err
	}
	if a == nil || !namespaceFilter(r.Context())(a.Namespace) {
		return notFound("allocation", id) // another namespace's is not found either
	}
	writeJSON(w, r, http.StatusOK, allocationToWire(a))
	return nil
}

// allocationWrite serves release, renew and cancel.
func (s *Server) allocationWrite(w http.ResponseWriter, r *http.Request, cmd fsm.Command, bodyID string) error {
	fsm.SetNamespace(cmd, callerOf(r.Context()).namespace) // another namespace's allocation is not found
	res, err := s.write(w, r, cmd, bodyID)
	if err != nil {
		return err
	}
	if res.Allocation == nil {
		return notFound("allocation of request", fsm.RequestIDOf(cmd))
	}
	return answerAllocation(w, r, res.Allocation)
}

// POST /v1/allocations/{id}/release
func (s *Server) releaseAllocation(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	return s.allocationWrite(w, r, &fsm.Release{AllocationID: r.PathValue("id")}, body.RequestID)
}

// POST /v1/allocations/{id}/renew
func (s *Server) renewAllocation(w http.ResponseWriter, r *http.Request) error {
	cmd, err := decodeRenew(r.Body, r.PathValue("id"))
	if err != nil {
		return err
	}
	return s.allocationWrite(w, r, cmd, cmd.RequestID)
}

// POST /v1/allocations/{id}/cancel
func (s *Server) cancelAllocation(w http.ResponseWriter, r *http.Request) error {
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	return s.allocationWrite(w, r, &fsm.Cancel{AllocationID: r.PathValue("id")}, body.RequestID)
}
