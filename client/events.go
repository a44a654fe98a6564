package client

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

type (
	// Event is one change the cluster applied (GET /v1/event/stream).
	Event = wire.Event
	// PolicyEvent is the payload of a Policy event.
	PolicyEvent = wire.PolicyEvent
	// LeaderEvent is the payload of a Leader event.
	LeaderEvent = wire.LeaderEvent
)

// Event topics.
const (
	TopicAllocation = wire.TopicAllocation
	TopicDevice     = wire.TopicDevice
	TopicHost       = wire.TopicHost
	TopicPolicy     = wire.TopicPolicy
	TopicQueue      = wire.TopicQueue
	TopicLeader     = wire.TopicLeader
)

// EventBatch is the events of one log index, or, as the channel's last
// value, why the stream ended (Err).
type EventBatch struct {
	Index  uint64
	Events []Event
	Err    error
}

// EventsIdleTimeout is how long a stream may send nothing, not even a
// heartbeat (sent every 5 s), before the client takes the connection for
// dead and opens another.
var EventsIdleTimeout = 20 * time.Second

// Events streams the events of topics (Allocation, Device, Host, Policy,
// Queue, Leader; "Allocation:<id>" for one key; none for all) after log
// index index (0: from now on), in log order. It returns once a node has
// accepted the stream, or with the error that refused it. When a node
// fails or cuts the stream off (too slow, a snapshot restored) the
// client resumes after the last index it delivered, on the next node.
// The channel is closed when ctx ends; a stream that cannot go on sends
// one last batch with Err set (an error matching ErrIndexTooOld when the
// index has left the buffers). Allocation and Queue events are those of
// the client's namespace ("*": every namespace the token may read).
func (c *Client) Events(ctx context.Context, topics []string, index uint64) (<-chan EventBatch, error) {
	ch := make(chan EventBatch, 64)
	started := make(chan error, 1)
	go func() {
		defer close(ch)
		after, first, failures := index, true, 0
		// refused is why a stream never began: the caller gets it.
		var refused error
		defer func() {
			if first {
				started <- cmp.Or(refused, ctx.Err())
			}
		}()
		for {
			err := c.streamEvents(ctx, topics, after, func() {
				if first {
					first = false
					started <- nil
				}
				failures = 0
			}, func(b wire.EventBatch) bool {
				after = b.Index
				select {
				case ch <- EventBatch{Index: b.Index, Events: b.Events}:
					return true
				case <-ctx.Done():
					return false
				}
			})
			switch {
			case ctx.Err() != nil:
				return
			case !IsRetryable(err) && first:
				refused = err
				return
			case !IsRetryable(err):
				select {
				case ch <- EventBatch{Err: err}:
				case <-ctx.Done():
				}
				return
			}
			failures++
			c.log.Debug("event stream interrupted; resuming", "after", after, "error", err)
			if !retryPause(ctx, c.cfg.RetryWait, failures) {
				return
			}
		}
	}()
	if err := <-started; err != nil {
		for range ch { // the goroutine has ended or ends now
		}
		return nil, err
	}
	return ch, nil
}

var (
	// errStreamIdle ends a stream that sent nothing for EventsIdleTimeout.
	errStreamIdle = errors.New("dmsc client: event stream idle")
	// errStreamEnded: a stream that had begun ended (why is kept aside).
	errStreamEnded = errors.New("dmsc client: event stream ended")
)

// streamEvents reads one stream until it ends: opened is called once the
// node accepted it, deliver for each batch (false stops). It returns why
// the stream ended: a retryable error to resume after.
func (c *Client) streamEvents(ctx context.Context, topics []string, after uint64, opened func(), deliver func(wire.EventBatch) bool) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(EventsIdleTimeout, func() { cancel(errStreamIdle) })
	defer idle.Stop()
	q := url.Values{"topic": topics}
	if after > 0 {
		q.Set("index", strconv.FormatUint(after, 10))
	}
	// ended is why a stream that had begun ended; the callback returns
	// errStreamEnded instead, which the request machinery does not retry
	// (a retry would start again from the first index).
	var ended error
	_, err := c.do(sctx, &request{method: http.MethodGet, path: "/v1/event/stream", query: q, idempotent: true,
		extra: 100 * 365 * 24 * time.Hour, // the stream lasts; idle ends a dead one
		stream: func(r io.Reader) error {
			opened()
			ended = readEvents(r, idle, deliver)
			return errStreamEnded
		}})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(context.Cause(sctx), errStreamIdle):
		return &ConnError{Err: errStreamIdle}
	case errors.Is(err, errStreamEnded):
		return ended
	}
	return err
}

// readEvents delivers a stream's batches until it ends, and returns why:
// nil when deliver stopped it, the stream's last error line, or a
// *ConnError when the connection broke.
func readEvents(r io.Reader, idle *time.Timer, deliver func(wire.EventBatch) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		idle.Reset(EventsIdleTimeout)
		var b wire.EventBatch
		if err := unmarshal(sc.Bytes(), &b); err != nil {
			return &ConnError{Err: fmt.Errorf("event stream: %w", err)}
		}
		switch {
		case b.Error != nil:
			return &APIError{Code: b.Error.Code, Message: b.Error.Message, Retryable: b.Error.Retryable}
		case b.Heartbeat():
			continue
		}
		if !deliver(b) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return &ConnError{Err: err}
	}
	return &ConnError{Err: io.ErrUnexpectedEOF} // the node went away
}
