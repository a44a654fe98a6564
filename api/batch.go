package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// batchKey marks the context of a request served as part of a batch.
type batchKey struct{}

func inBatch(ctx context.Context) bool { return ctx.Value(batchKey{}) != nil }

// POST /v1/batch: several allocation writes in one HTTP exchange. Each
// request of the batch is served as if it came alone, with the batch's
// token, and they are served at once, so that their log entries share
// Raft batches; the answer holds each one's status and body, in order.
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
	ctx := context.WithValue(r.Context(), batchKey{}, true)
	items := make([]itemWriter, n)
	var wg sync.WaitGroup
	for i, it := range body.Requests {
		items[i].header = http.Header{}
		sub, err := s.batchItem(ctx, r, it)
		if err != nil {
			s.writeError(&items[i], r, err)
			continue
		}
		if n == 1 {
			s.batchMux.ServeHTTP(&items[i], sub)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.batchMux.ServeHTTP(&items[i], sub)
		}()
	}
	wg.Wait()
	out := wire.BatchResponse{Responses: make([]wire.BatchResult, n)}
	for i := range items {
		out.Responses[i] = items[i].result()
	}
	writeJSON(w, r, http.StatusOK, out)
	return nil
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
