package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// batchesInFlight is how many batches a client has in flight to one node
// at once: while one is served, the next gathers the writes that come.
// One gives the fewest and fullest batches: with two or four, a 64-client
// benchmark spent 14 % and 40 % more CPU per write and did 7 % and 20 %
// fewer (BENCHMARKS.md).
const batchesInFlight = 1

// maxRegather bounds how long the next batch to a node waits, after one
// returns, for the writers it answered to send again (batcher).
const maxRegather = time.Millisecond

// batcher gathers the allocation writes that goroutines send at once into
// POST /v1/batch exchanges (Config.BatchWrites): a write goes at once when
// fewer than batchesInFlight batches are in flight to its node, and
// otherwise waits for one to return and goes with every write that came
// meanwhile, up to wire.MaxBatch; a full batch goes without waiting. Each
// write keeps its own context, its own answer and the retry rules of a
// write sent alone.
//
// When a batch returns, the goroutines it answered often send their next
// write at once. Sent right away, the next batch would leave them for the
// one after, and the writers would split into two halves taking turns,
// each waiting for the other's round trip as well as its own. So the next
// batch waits until as many writes wait as the last one answered, or
// until a quarter of its round trip has passed (maxRegather at most),
// whichever comes first.
type batcher struct {
	c *Client
	// The wait for the writers a batch answered lasts at most a
	// regatherShare-th of the batch's round trip (none if 0), and at most
	// regatherMax.
	regatherShare int
	regatherMax   time.Duration
	// off is set when a node answered POST /v1/batch with 404 or 405 (a
	// release without it): writes go alone from then on.
	off atomic.Bool
	mu  sync.Mutex
	// nodes holds the writes waiting for each node address.
	nodes map[string]*batchQueue
}

type batchQueue struct {
	waiting  []*batchCall
	inFlight int
	// regather, while a batch waits for the writers the last one
	// answered (batcher), is how many writes it waits for; the timer
	// ends the wait.
	regather int
	timer    *time.Timer
}

// batchCall is one write in a batch and, once done is closed, its answer.
type batchCall struct {
	ctx  context.Context
	rq   *request
	done chan struct{}
	ans  *answer
	err  error
	sent bool
	// alone: the node serves no batches; the write is to go alone.
	alone bool
}

func newBatcher(c *Client) *batcher {
	return &batcher{c: c, nodes: map[string]*batchQueue{}, regatherShare: 4, regatherMax: maxRegather}
}

// send is Client.once for a batchable write.
func (b *batcher) send(ctx context.Context, addr string, rq *request) (*answer, error, bool) {
	call := &batchCall{ctx: ctx, rq: rq, done: make(chan struct{})}
	b.mu.Lock()
	q := b.nodes[addr]
	if q == nil {
		q = &batchQueue{}
		b.nodes[addr] = q
	}
	q.waiting = append(q.waiting, call)
	if q.regather == 0 || len(q.waiting) >= q.regather {
		b.startLocked(addr, q)
	}
	b.mu.Unlock()
	select {
	case <-call.done:
		if call.alone {
			return b.c.once(ctx, addr, rq)
		}
		return call.ans, call.err, call.sent
	case <-ctx.Done():
		// Still waiting, it will be dropped; already sent, its outcome is
		// unknown (a retry with the same request ID is safe).
		return nil, ctx.Err(), true
	}
}

// startLocked sends the waiting writes of a node when a batch may go.
func (b *batcher) startLocked(addr string, q *batchQueue) {
	if b.off.Load() {
		for _, call := range q.waiting {
			call.alone = true
			close(call.done)
		}
		q.waiting = nil
		return
	}
	for len(q.waiting) > 0 && (q.inFlight < batchesInFlight || len(q.waiting) >= wire.MaxBatch) {
		var calls []*batchCall
		rest := q.waiting[:0]
		for _, call := range q.waiting {
			switch {
			case call.ctx.Err() != nil:
				call.err = call.ctx.Err()
				close(call.done)
			case len(calls) < wire.MaxBatch:
				calls = append(calls, call)
			default:
				rest = append(rest, call)
			}
		}
		clear(q.waiting[len(rest):])
		q.waiting = rest
		if len(calls) == 0 {
			return
		}
		q.regather = 0
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
		q.inFlight++
		go b.exchange(addr, q, calls)
	}
}

// exchange sends one batch and hands each write its answer.
func (b *batcher) exchange(addr string, q *batchQueue, calls []*batchCall) {
	start := time.Now()
	defer func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		q.inFlight--
		if len(q.waiting) >= len(calls) || q.inFlight >= batchesInFlight {
			b.startLocked(addr, q)
			return
		}
		// Wait a little for the writers just answered (batcher).
		q.regather = len(calls)
		if q.timer == nil {
			var t *time.Timer
			wait := b.regatherMax
			if b.regatherShare > 0 {
				wait = min(wait, time.Since(start)/time.Duration(b.regatherShare))
			}
			t = time.AfterFunc(wait, func() {
				b.mu.Lock()
				defer b.mu.Unlock()
				if q.timer != t {
					return // a batch went meanwhile
				}
				q.regather, q.timer = 0, nil
				b.startLocked(addr, q)
			})
			q.timer = t
		}
	}()
	items := make([]wire.BatchItem, len(calls))
	for i, call := range calls {
		items[i] = wire.BatchItem{Method: call.rq.method, Path: b.c.target(call.rq),
			RequestID: call.rq.requestID, Body: call.rq.body}
	}
	body, err := appendBatchRequest(nil, items)
	var raw []byte
	var batchAns *answer
	sent := false
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), b.c.cfg.Timeout)
		batchAns, err, sent = b.c.once(ctx, addr, &request{method: http.MethodPost, path: "/v1/batch", body: body,
			ctype: "application/json", write: true, raw: &raw})
		cancel()
	}
	forwarded := batchAns != nil && batchAns.header.Get(wire.HeaderForwarded) == "true"
	var ae *APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed) {
		b.off.Store(true)
	}
	var results []batchResult
	if err == nil {
		// Each success's body goes straight into its write's out.
		if results, err = readBatchAnswer(raw, calls); err != nil {
			err = &ConnError{Address: addr, Err: err}
		}
	}
	if err == nil && len(results) != len(calls) {
		err = fmt.Errorf("dmsc client: batch of %d writes answered with %d results", len(calls), len(results))
	}
	for i, call := range calls {
		call.sent = sent
		switch {
		case b.off.Load():
			call.alone = true
		case err != nil:
			call.err = err
		default:
			call.ans, call.err = b.answer(addr, call.rq, results[i], forwarded)
		}
		close(call.done)
	}
}

// answer turns one result of a batch into what the write alone would
// have had; forwarded: the batch's answer said X-Dmsc-Forwarded.
func (b *batcher) answer(addr string, rq *request, res batchResult, forwarded bool) (*answer, error) {
	if res.status >= 400 && res.status != rq.okStatus {
		return nil, apiErrorOf(res.status, res.body, addr)
	}
	h := http.Header{}
	if forwarded {
		h.Set(wire.HeaderForwarded, "true")
	}
	if res.requestID != "" {
		h.Set(wire.HeaderRequestID, res.requestID)
	}
	if res.index > 0 {
		h.Set(wire.HeaderIndex, strconv.FormatUint(res.index, 10))
	}
	if res.err != nil {
		return nil, fmt.Errorf("dmsc client: %s %s from %s: %w", rq.method, rq.path, addr, res.err)
	}
	return &answer{status: res.status, header: h, address: addr}, nil
}
