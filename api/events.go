package api

import (
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// keyed says whether the filter names a key of some topic, so that an
// event's topic alone does not decide.
func (f topicFilter) keyed() bool {
	for _, keys := range f {
		if !keys["*"] {
			return true
		}
	}
	return false
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
	sub.Quiet(s.opts.EventHeartbeat)
	sub.Spread() // the node's streams take turns to write, not all at each seal
	may := s.eventAccess(r.Context(), ns)
	f := streamFilter{
		keep: func(ev *fsm.Event) bool { return topics.match(ev) && may(ev) },
		// every segment read whole goes out as its shared encoding
		// without a look at its events
		everything: len(topics) == 0 && ns == "*" && authorizerOf(r.Context()) == nil,
		byKind:     !topics.keyed(),
	}

	body := s.startEventBody(w, r)
	line := func(b wire.EventBatch) []byte {
		l, _ := json.Marshal(b)
		return append(l, '\n')
	}
	body.add(line(wire.EventBatch{}))
	if body.flush() != nil { // the headers go out at once
		return nil
	}
	for {
		// The buffer wakes a stream once per sealed segment (at most
		// every events.DefaultSeal, at the stream's phase after the seal),
		// and all of it goes out in one write: a stream costs the node a
		// bounded number of wake-ups and writes per second however fast
		// the cluster changes, and the node's streams take turns.
		segs, err := sub.Next(r.Context())
		switch {
		case r.Context().Err() != nil:
			return nil // the reader left
		case errors.Is(err, events.ErrQuiet):
			if bad := s.tokenGone(r); bad != nil {
				_, eb := errorBody(bad)
				body.end(line(wire.EventBatch{Error: &eb}))
				return nil
			}
			body.add(line(wire.EventBatch{}))
		case err != nil:
			body.end(line(wire.EventBatch{Error: streamError(err)}))
			return nil
		default:
			body.addSegments(segs, f)
		}
		if body.flush() != nil {
			return nil // too slow to take the lines, or gone
		}
	}
}

// streamFilter is which events a stream sends: those keep keeps.
// everything says it keeps all, byKind that keep looks at an event's
// topic and namespace alone.
type streamFilter struct {
	keep       func(*fsm.Event) bool
	everything bool
	byKind     bool
}

// keepsAll says whether the filter keeps every event of sg.
func (f streamFilter) keepsAll(sg events.Segment) bool {
	if f.everything {
		return true
	}
	if f.byKind {
		return !slices.ContainsFunc(sg.Kinds(), func(ev *fsm.Event) bool { return !f.keep(ev) })
	}
	for _, bt := range sg.Batches {
		for i := range bt.Events {
			if !f.keep(&bt.Events[i]) {
				return false
			}
		}
	}
	return true
}

// addSegments adds the stream's lines of segs, of the events f keeps: a
// segment read whole and kept whole is its encoding made once for every
// reader (Segment.Memo); of the others, each batch kept whole is its
// line made once (Batch.Memo), and a batch none of whose events is kept
// is not encoded at all.
func (b *streamBody) addSegments(segs []events.Segment, f streamFilter) {
	var own []byte
	for _, sg := range segs {
		if sg.Whole() && f.keepsAll(sg) {
			if len(own) > 0 {
				b.add(own)
				own = nil
			}
			b.addShared(sg.Memo(encodeSegment).(*encodedSegment).lines(b.gzip))
			continue
		}
		for _, bt := range sg.Batches {
			own = appendBatchLine(own, bt, f.keep)
		}
	}
	if len(own) > 0 {
		b.add(own)
	}
}

// appendBatchLine appends the line of the events of batch b that keep
// keeps, if any.
func appendBatchLine(out []byte, b events.Batch, keep func(*fsm.Event) bool) []byte {
	var kept []int
	for i := range b.Events {
		if keep(&b.Events[i]) {
			kept = append(kept, i)
		}
	}
	if len(kept) == 0 {
		return out
	}
	enc := b.Memo(encodeBatch).(*encodedBatch)
	if len(kept) == len(b.Events) {
		return append(out, enc.line...)
	}
	evs := make([][]byte, len(kept))
	for j, i := range kept {
		evs[j] = enc.events[i]
	}
	return appendBatchJSON(out, b.Index, evs)
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
	// Not chunked (HTTP/1.1; HTTP/2 has no such header): a chunk is three
	// system calls (its head, its bytes, its end), a plain write one. The
	// connection then closes with the stream, which ends it anyway.
	w.Header().Set("Transfer-Encoding", "identity")
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

// encodedBatch is a batch as the stream sends it: each event's JSON, and
// the line of them all.
type encodedBatch struct {
	events [][]byte
	line   []byte
}

func encodeBatch(evs []fsm.Event) any {
	e := &encodedBatch{events: make([][]byte, len(evs))}
	for i := range evs {
		e.events[i] = appendEventJSON(nil, &evs[i])
	}
	if len(evs) > 0 {
		e.line = appendBatchJSON(nil, evs[0].Index, e.events)
	}
	return e
}

// appendBatchJSON appends the line of a wire.EventBatch of index and of
// events already encoded, as json.Marshal would write it, without
// encoding the events again.
func appendBatchJSON(dst []byte, index uint64, events [][]byte) []byte {
	dst = strconv.AppendUint(append(dst, `{"index":`...), index, 10)
	dst = append(dst, `,"events":[`...)
	for i, ev := range events {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, ev...)
	}
	return append(dst, "]}\n"...)
}

// appendEventJSON appends the wire.Event of ev as json.Marshal would
// write it: written here so that its payload is encoded once, not
// encoded and then checked and copied again as a json.RawMessage.
func appendEventJSON(dst []byte, ev *fsm.Event) []byte {
	dst = appendJSONString(append(dst, `{"topic":`...), string(ev.Topic))
	dst = appendJSONString(append(dst, `,"type":`...), ev.Type)
	dst = appendJSONString(append(dst, `,"key":`...), ev.Key)
	if ev.Namespace != "" {
		dst = appendJSONString(append(dst, `,"namespace":`...), ev.Namespace)
	}
	dst = strconv.AppendUint(append(dst, `,"index":`...), ev.Index, 10)
	payload, _ := json.Marshal(eventPayload(ev))
	return append(append(append(dst, `,"payload":`...), payload...), '}')
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // what needs escaping, as json.Marshal escapes it
			return append(dst, q...)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

// encodedSegment is a segment as the stream sends it: its batches'
// lines, and what a gzip stream needs of them (made the first time one
// asks).
type encodedSegment struct {
	once sync.Once
	l    sharedLines
}

func encodeSegment(bs []events.Batch) any {
	lines := make([][]byte, len(bs))
	n := 0
	for i, b := range bs {
		lines[i] = b.Memo(encodeBatch).(*encodedBatch).line
		n += len(lines[i])
	}
	e := &encodedSegment{}
	e.l.plain = make([]byte, 0, n) // one allocation, not one per doubling
	for _, l := range lines {
		e.l.plain = append(e.l.plain, l...)
	}
	return e
}

// lines is the segment's lines, with their deflate blocks and CRC when
// gz.
func (e *encodedSegment) lines(gz bool) sharedLines {
	if !gz {
		return sharedLines{plain: e.l.plain}
	}
	e.once.Do(func() {
		e.l.z = deflateBlocks(e.l.plain, true)
		e.l.crc = crc32.ChecksumIEEE(e.l.plain)
	})
	return e.l
}

// eventPayload is the payload of an event as the stream sends it.
func eventPayload(ev *fsm.Event) any {
	switch p := ev.Payload.(type) {
	case *fsm.Allocation:
		return allocationToWire(p)
	case fsm.Device:
		return deviceToWire(p)
	case fsm.Host:
		return hostToWire(p)
	case fsm.PolicyEvent:
		return wire.PolicyEvent{DeviceType: deviceTypeToWire(p.DeviceType), Pool: p.Pool, Config: policyConfigToWire(p.Config)}
	case fsm.LeaderEvent:
		return wire.LeaderEvent{ID: p.ID, Address: p.Address}
	}
	return nil
}
