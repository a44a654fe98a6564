package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/events"
	"github.com/dmsc/dmsc/fsm"
)

// The event stream: GET /v1/event/stream answers newline-delimited JSON,
// one wire.EventBatch per line, from this node's event buffer (its own
// replica's changes; events.Buffer). It never holds up the state
// machine: a reader that falls behind by more than the buffer, or that
// does not take a line within EventWriteTimeout, is cut off.

// Defaults of the event stream's Options.
const (
	DefaultEventHeartbeat    = 5 * time.Second
	DefaultEventWriteTimeout = 10 * time.Second
	DefaultMaxEventStreams   = 4096
	DefaultEventCoalesce     = 50 * time.Millisecond
)

func errIndexTooOld(msg string) *apiError {
	return &apiError{status: http.StatusGone, code: wire.CodeIndexTooOld, msg: msg}
}

var errTooManyStreams = &apiError{
	status: http.StatusTooManyRequests, code: wire.CodeOverloaded,
	msg: "too many event streams open on this node; retry shortly",
}

// topicFilter is what a stream asked for: per topic, every key ("*") or
// the keys listed. Empty: every topic.
type topicFilter map[fsm.Topic]map[string]bool

// parseTopics reads ?topic= values: Topic, Topic:* or Topic:key.
func parseTopics(vals []string) (topicFilter, error) {
	f := topicFilter{}
	for _, v := range vals {
		name, key, _ := strings.Cut(v, ":")
		t := fsm.Topic(name)
		if !t.Valid() {
			return nil, badParam("topic", v, "want one of Allocation, Device, Host, Policy, Queue, Leader, optionally :key")
		}
		if key == "" {
			key = "*"
		}
		if f[t] == nil {
			f[t] = map[string]bool{}
		}
		f[t][key] = true
	}
	return f, nil
}

func (f topicFilter) match(ev *fsm.Event) bool {
	if len(f) == 0 {
		return true
	}
	keys := f[ev.Topic]
	return keys != nil && (keys["*"] || keys[ev.Key])
}

// GET /v1/event/stream
func (s *Server) eventStream(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	topics, err := parseTopics(q["topic"])
	if err != nil {
		return err
	}
	var after uint64
	if v := q.Get("index"); v != "" {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return badParam("index", v, "want a log index")
		}
	}
	ns, err := requestNamespace(r, route{}) // a read: "*" is every namespace the token may read
	if err != nil {
		return err
	}
	release, err := s.takeStream()
	if err != nil {
		return err
	}
	defer release()
	sub, err := s.b.SubscribeEvents(after)
	if errors.Is(err, events.ErrIndexTooOld) {
		return errIndexTooOld(err.Error())
	}
	if err != nil {
		return err
	}
	if len(topics) == 1 {
		for t := range topics {
			sub.Only(t) // batches without it need not wake this stream
		}
	}
	may := s.eventAccess(r.Context(), ns)

	sendLine := s.startStream(w, "application/x-ndjson")
	send := func(b wire.EventBatch) error {
		line, _ := json.Marshal(b)
		return sendLine(append(line, '\n'))
	}
	if err := send(wire.EventBatch{}); err != nil { // the headers go out at once
		return nil
	}
	for {
		// Reads at most every EventCoalesce: under a high write rate each
		// wake-up then takes many batches in one write, so a stream costs
		// the node a bounded number of wake-ups and writes per second
		// however fast the cluster changes.
		if !sleepCtx(r.Context(), s.opts.EventCoalesce) {
			return nil
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.EventHeartbeat)
		batches, err := sub.Next(ctx)
		cancel()
		switch {
		case r.Context().Err() != nil:
			return nil // the reader left
		case errors.Is(err, context.DeadlineExceeded):
			if bad := s.tokenGone(r); bad != nil {
				_, body := errorBody(bad)
				_ = send(wire.EventBatch{Error: &body})
				return nil
			}
			if send(wire.EventBatch{}) != nil {
				return nil
			}
			continue
		case err != nil:
			_ = send(wire.EventBatch{Error: streamError(err)})
			return nil
		}
		// What Next returned goes out in one write: under load that is
		// many batches per system call, not one.
		out := streamLines(batches, func(ev *fsm.Event) bool { return topics.match(ev) && may(ev) })
		if len(out) > 0 && sendLine(out) != nil {
			return nil // too slow to take the lines, or gone
		}
	}
}

// streamLines is the stream's lines of batches, of the events keep keeps:
// a batch kept whole is its line made once for every reader (Memo); a
// batch none of whose events is kept is not encoded at all.
func streamLines(batches []events.Batch, keep func(*fsm.Event) bool) []byte {
	var out []byte
	for _, b := range batches {
		var kept []int
		for i := range b.Events {
			if keep(&b.Events[i]) {
				kept = append(kept, i)
			}
		}
		if len(kept) == 0 {
			continue
		}
		enc := b.Memo(encodeBatch).(*encodedBatch)
		if len(kept) == len(b.Events) {
			out = append(out, enc.line...)
			continue
		}
		evs := make([]wire.Event, len(kept))
		for j, i := range kept {
			evs[j] = enc.events[i]
		}
		line, _ := json.Marshal(wire.EventBatch{Index: b.Index, Events: evs})
		out = append(append(out, line...), '\n')
	}
	return out
}

// takeStream takes one of the node's stream slots (event streams and
// monitors); release gives it back.
func (s *Server) takeStream() (release func(), err error) {
	select {
	case s.streams <- struct{}{}:
		return func() { <-s.streams }, nil
	default:
		return nil, errTooManyStreams
	}
}

// startStream answers 200 with a body of ctype that goes on, and returns
// the function that writes a piece of it at once; a reader that does not
// take it within EventWriteTimeout makes it fail.
func (s *Server) startStream(w http.ResponseWriter, ctype string) func([]byte) error {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	return func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.EventWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
}

// streamError is the last line of a stream the buffer ended.
func streamError(err error) *wire.Error {
	code := wire.CodeShutdown
	switch {
	case errors.Is(err, events.ErrSlow):
		code = wire.CodeSlowConsumer
	case errors.Is(err, events.ErrReset):
		code = wire.CodeStreamReset
	}
	return &wire.Error{Code: code, Message: err.Error(), Retryable: true}
}

// tokenGone re-checks a stream's token (with ACLs on): one deleted or
// expired since the stream began ends it.
func (s *Server) tokenGone(r *http.Request) error {
	if !s.opts.ACLEnabled {
		return nil
	}
	_, _, err := s.resolveToken(r)
	return err
}

// eventAccess returns what the request's token may see of the events:
// allocations and the queue in namespace ns ("*": every namespace the
// token may read), hosts and devices, policies, and the leader with
// their areas' read.
func (s *Server) eventAccess(ctx context.Context, ns string) func(*fsm.Event) bool {
	authz := authorizerOf(ctx)
	area := func(a fsm.Area) bool { return authz == nil || authz.Allowed(a, "", false) }
	devices, policies, operator := area(fsm.AreaDevices), area(fsm.AreaPolicies), area(fsm.AreaOperator)
	return func(ev *fsm.Event) bool {
		switch ev.Topic {
		case fsm.TopicAllocation, fsm.TopicQueue:
			if ns != "*" {
				return ev.Namespace == ns && (authz == nil || authz.Allowed(fsm.AreaAllocations, ns, false))
			}
			return authz == nil || authz.Allowed(fsm.AreaAllocations, ev.Namespace, false)
		case fsm.TopicDevice, fsm.TopicHost:
			return devices
		case fsm.TopicPolicy:
			return policies
		case fsm.TopicLeader:
			return operator
		}
		return false
	}
}

// encodedBatch is a batch as the stream sends it: each event, and the
// line of them all.
type encodedBatch struct {
	events []wire.Event
	line   []byte
}

func encodeBatch(evs []fsm.Event) any {
	e := &encodedBatch{events: make([]wire.Event, len(evs))}
	for i := range evs {
		e.events[i] = eventToWire(&evs[i])
	}
	if len(evs) > 0 {
		line, _ := json.Marshal(wire.EventBatch{Index: evs[0].Index, Events: e.events})
		e.line = append(line, '\n')
	}
	return e
}

// eventToWire is an event as the stream sends it.
func eventToWire(ev *fsm.Event) wire.Event {
	var payload any
	switch p := ev.Payload.(type) {
	case *fsm.Allocation:
		payload = allocationToWire(p)
	case fsm.Device:
		payload = deviceToWire(p)
	case fsm.Host:
		payload = hostToWire(p)
	case fsm.PolicyEvent:
		payload = wire.PolicyEvent{DeviceType: deviceTypeToWire(p.DeviceType), Pool: p.Pool, Config: policyConfigToWire(p.Config)}
	case fsm.LeaderEvent:
		payload = wire.LeaderEvent{ID: p.ID, Address: p.Address}
	}
	raw, _ := json.Marshal(payload)
	return wire.Event{Topic: string(ev.Topic), Type: ev.Type, Key: ev.Key, Namespace: ev.Namespace, Index: ev.Index, Payload: raw}
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
