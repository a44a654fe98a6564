package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/jsonappend"
)

// batchKey marks the context of a request served as part of a batch.
type batchKey struct{}

func inBatch(ctx context.Context) bool { return ctx.Value(batchKey{}) != nil }

// POST /v1/batch: several allocation writes in one HTTP exchange. Each
// request of the batch is served as if it came alone, with the batch's
// token, and they are served at once; on the leader their writes go to
// Raft together, as one log entry where every server supports it
// (cluster.WriteGroup). The answer holds each one's
// status and body, in order.
// The batch takes one request slot; a request of it may not wait for
// placement.
func (s *Server) batch(w http.ResponseWriter, r *http.Request) error {
	var body wire.BatchRequest
	if err := decodeJSON(r.Body, &body, false); err != nil {
		return err
	}
	n := len(body.Requests)
	if n == 0 || n > wire.MaxBatch {
		return badRequest("a batch holds 1 to %d requests, not %d", wire.MaxBatch, n)
	}
	// One deadline for the writes of the batch, which start together:
	// write sets none of its own for a request of a batch.
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), batchKey{}, true), s.opts.WriteTimeout)
	defer cancel()
	items := make([]itemWriter, n)
	// On the leader the writes of the batch go to Raft together.
	group := cluster.NewWriteGroup(n, cluster.WriteGroupMaxWait)
	var wg sync.WaitGroup
	for i, it := range body.Requests {
		items[i].header = http.Header{}
		sub, err := s.batchItem(group.Member(ctx, i), r, it)
		if err != nil {
			group.Done(i)
			s.writeError(&items[i], r, err)
			continue
		}
		if n == 1 {
			s.batchMux.ServeHTTP(&items[i], sub)
			group.Done(i)
			continue
		}
		wg.Add(1)
		s.workers.run(func() {
			defer wg.Done()
			defer group.Done(i)
			s.batchMux.ServeHTTP(&items[i], sub)
		})
	}
	wg.Wait()
	s.markForwarded(w.Header())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(appendBatchResponse(nil, items))
	return nil
}

// appendBatchResponse writes a wire.BatchResponse of the items' answers,
// their bodies as they are: JSON the server wrote itself, which
// encoding/json would scan again for nothing.
func appendBatchResponse(b []byte, items []itemWriter) []byte {
	size := 0
	for i := range items {
		size += items[i].body.Len() + 128
	}
	j := jsonappend.New(slices.Grow(b, size))
	j.Raw(`{"responses":[`)
	for i := range items {
		res := items[i].result()
		if i > 0 {
			j.Raw(",")
		}
		j.Raw(`{"status":`)
		j.Int(int64(res.Status))
		if res.Index > 0 {
			j.Raw(`,"index":`)
			j.Uint(res.Index)
		}
		j.OptStr(`,"request_id":`, res.RequestID)
		j.Raw(`,"body":`)
		j.B = append(j.B, res.Body...)
		j.Raw("}")
	}
	j.Raw("]}\n")
	return j.B
}

// itemWorkers runs the requests of batches on goroutines that stay a
// while for the next, so that the stacks they grew serving one request
// serve the next too.
type itemWorkers struct {
	work chan func()
	// idle is how long an idle worker waits for work before it ends.
	idle time.Duration
	// live counts the workers.
	live atomic.Int64
}

// itemWorkerIdle is how long an idle worker waits for work.
const itemWorkerIdle = 5 * time.Second

func newItemWorkers(idle time.Duration) *itemWorkers {
	return &itemWorkers{work: make(chan func()), idle: idle}
}

// run hands f to an idle worker, or starts one.
func (p *itemWorkers) run(f func()) {
	select {
	case p.work <- f:
	default:
		p.live.Add(1)
		go p.serve(f)
	}
}

func (p *itemWorkers) serve(f func()) {
	defer p.live.Add(-1)
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-idle.C:
			return
		}
	}
}

// batchItem makes the request a batch item stands for, with the batch's
// token, client address and Host.
func (s *Server) batchItem(ctx context.Context, r *http.Request, it wire.BatchItem) (*http.Request, error) {
	if !strings.HasPrefix(it.Path, "/") || strings.HasPrefix(it.Path, "//") {
		return nil, badRequest("batch request path %q: want an absolute path such as /v1/allocations", it.Path)
	}
	sub, err := http.NewRequestWithContext(ctx, it.Method, it.Path, bytes.NewReader(it.Body))
	if err != nil {
		return nil, badRequest("batch request %s %q: %v", it.Method, it.Path, err)
	}
	if _, pattern := s.batchMux.Handler(sub); pattern == "" {
		return nil, badRequest("%s %s may not be batched (allocate, release, renew and cancel may)", it.Method, sub.URL.Path)
	}
	sub.Host, sub.RemoteAddr, sub.RequestURI = r.Host, r.RemoteAddr, it.Path
	for _, h := range []string{"Authorization", wire.HeaderToken} {
		if v := r.Header.Get(h); v != "" {
			sub.Header.Set(h, v)
		}
	}
	sub.Header.Set("Content-Type", "application/json")
	if it.RequestID != "" {
		sub.Header.Set(wire.HeaderRequestID, it.RequestID)
	}
	return sub, nil
}

// wrapItem serves a request of a batch: what wrap does, less what the
// batch itself went through (the screen, the slot, the body cap).
func (s *Server) wrapItem(rt route) http.Handler {
	label := rt.pattern()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(rt, label, &statusWriter{ResponseWriter: w}, r, time.Now(), nil, &slot{release: func() {}})
	})
}

// itemWriter records the answer to one request of a batch.
type itemWriter struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (w *itemWriter) Header() http.Header { return w.header }

func (w *itemWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *itemWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.body.Write(b)
}

func (w *itemWriter) result() wire.BatchResult {
	res := wire.BatchResult{Status: w.code, RequestID: w.header.Get(wire.HeaderRequestID), Body: json.RawMessage("null")}
	if res.Status == 0 {
		res.Status = http.StatusOK
	}
	res.Index, _ = strconv.ParseUint(w.header.Get(wire.HeaderIndex), 10, 64)
	if b := bytes.TrimSpace(w.body.Bytes()); len(b) > 0 {
		res.Body = b
	}
	return res
}
