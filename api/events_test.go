package api

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// eventStream is an open GET /v1/event/stream.
type eventStream struct {
	t      *testing.T
	resp   *http.Response
	lines  chan wire.EventBatch
	ended  chan error
	cancel context.CancelFunc
}

// openStream opens the stream of srv with query q, with token when set,
// and checks the answer is a stream.
func openStream(t *testing.T, srv *httptest.Server, q, token string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/event/stream?"+q, nil)
	if token != "" {
		req.Header.Set(wire.HeaderToken, token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("stream answered %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &eventStream{t: t, resp: resp, lines: make(chan wire.EventBatch, 1<<16), ended: make(chan error, 1), cancel: cancel}
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var b wire.EventBatch
			if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
				s.ended <- fmt.Errorf("line %q: %w", sc.Text(), err)
				return
			}
			s.lines <- b
		}
		s.ended <- sc.Err()
	}()
	return s
}

// next returns the next line that is not a heartbeat.
func (s *eventStream) next() wire.EventBatch {
	s.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case b := <-s.lines:
			if !b.Heartbeat() {
				return b
			}
		case err := <-s.ended:
			s.t.Fatalf("stream ended: %v", err)
		case <-deadline:
			s.t.Fatal("no event within 5 s")
		}
	}
}

// events reads lines until it has n events and returns them.
func (s *eventStream) events(n int) []wire.Event {
	s.t.Helper()
	var out []wire.Event
	var last uint64
	for len(out) < n {
		b := s.next()
		if b.Error != nil {
			s.t.Fatalf("stream error %+v after %d events", b.Error, len(out))
		}
		if b.Index <= last {
			s.t.Fatalf("batch %d after batch %d", b.Index, last)
		}
		last = b.Index
		for _, ev := range b.Events {
			if ev.Index != b.Index {
				s.t.Fatalf("event of index %d in batch %d", ev.Index, b.Index)
			}
		}
		out = append(out, b.Events...)
	}
	return out
}

// newStreamServer serves e over HTTP until the test ends, after its
// streams are closed.
func newStreamServer(t *testing.T, e *testEnv) *httptest.Server {
	srv := httptest.NewServer(e.srv)
	t.Cleanup(srv.Close)
	return srv
}

// summary is "Topic/type/key" per event.
func summary(evs []wire.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Topic+"/"+ev.Type+"/"+ev.Key)
	}
	return out
}

func allocate(t *testing.T, e *testEnv, body string) wire.Allocation {
	t.Helper()
	var a wire.Allocation
	e.do("POST", "/v1/allocations", body).ok(200).decode(&a)
	return a
}

func TestEventStreamOrderAndResume(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	srv := newStreamServer(t, e)

	s := openStream(t, srv, "", "")
	a := allocate(t, e, `{"claims":[{"type":"GPU","count":1,"pool":"big"}]}`)
	e.do("POST", "/v1/allocations/"+a.ID+"/release", "").ok(200)
	e.do("POST", "/v1/devices/g1/drain", "").ok(200)
	e.do("PUT", "/v1/policies/GPU", `{"policy":"BestFit"}`).ok(200)
	got := summary(s.events(5))
	want := []string{
		"Allocation/created/" + a.ID, "Allocation/placed/" + a.ID, "Allocation/released/" + a.ID,
		"Device/updated/g1", "Policy/updated/type:GPU",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v\nwant %v", got, want)
	}

	// The payload is the allocation as the API shows it.
	var placed wire.Allocation
	s2 := openStream(t, srv, "topic=Allocation:"+a.ID+"&index=1", "")
	evs := s2.events(3)
	if err := json.Unmarshal(evs[1].Payload, &placed); err != nil || placed.ID != a.ID || placed.Status != wire.AllocStatus(fsm.Active) || len(placed.Devices) != 1 {
		t.Fatalf("placed payload %s: %v", evs[1].Payload, err)
	}

	// Resuming after the placement gives what followed, nothing before.
	s3 := openStream(t, srv, fmt.Sprintf("index=%d", evs[1].Index), "")
	if got := summary(s3.events(3)); got[0] != "Allocation/released/"+a.ID || got[2] != "Policy/updated/type:GPU" {
		t.Fatalf("resumed after %d: %v", evs[1].Index, got)
	}

	// Topic filters: only the devices, after h1's registration at index 1.
	s4 := openStream(t, srv, "topic=Device&index=1", "")
	if got := strings.Join(summary(s4.events(3)), " "); got != "Device/registered/g3 Device/registered/c1 Device/updated/g1" {
		t.Fatalf("a Device stream after index 1: %s", got)
	}
}

func TestEventStreamQueue(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	srv := newStreamServer(t, e)
	s := openStream(t, srv, "topic=Queue&topic=Allocation", "")
	a := allocate(t, e, `{"claims":[{"type":"GPU","count":1,"pool":"big"}]}`)
	var q wire.Allocation
	e.do("POST", "/v1/allocations", `{"claims":[{"type":"GPU","count":1,"pool":"big"}],"timeout":"1h"}`).ok(202).decode(&q)
	e.do("POST", "/v1/allocations/"+a.ID+"/release", "").ok(200)
	got := strings.Join(summary(s.events(8)), " ")
	want := strings.Join([]string{
		"Allocation/created/" + a.ID, "Allocation/placed/" + a.ID,
		"Allocation/created/" + q.ID, "Allocation/queued/" + q.ID, "Queue/enqueued/" + q.ID,
		"Allocation/released/" + a.ID, "Queue/dequeued/" + q.ID, "Allocation/placed/" + q.ID,
	}, " ")
	if got != want {
		t.Fatalf("events\n%s\nwant\n%s", got, want)
	}
}

func TestEventStreamIndexTooOldAndBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	// The replica restored a snapshot at index 2: what came before is not
	// known to the buffer.
	e.b.f.Events().Reset(2)
	er := e.do("GET", "/v1/event/stream?index=1", "").apiErr(410, wire.CodeIndexTooOld)
	if !strings.Contains(er.Message, "index 1") {
		t.Fatalf("message %q", er.Message)
	}
	for _, q := range []string{"topic=Bogus", "index=x", "index=-1", "namespace=a/b"} {
		e.do("GET", "/v1/event/stream?"+q, "").apiErr(400, wire.CodeBadRequest)
	}
	e.b.host = true
	e.do("GET", "/v1/event/stream", "").apiErr(503, "not_server")
}

func TestEventStreamHeartbeat(t *testing.T) {
	e := newEnv(t, Options{EventHeartbeat: 30 * time.Millisecond})
	srv := newStreamServer(t, e)
	s := openStream(t, srv, "", "")
	beats := 0
	deadline := time.After(5 * time.Second)
	for beats < 3 {
		select {
		case b := <-s.lines:
			if !b.Heartbeat() {
				t.Fatalf("line %+v on an idle stream", b)
			}
			beats++
		case <-deadline:
			t.Fatalf("%d heartbeats in 5 s", beats)
		}
	}
}

// A token sees the events of what it may read: allocations of its
// namespaces, devices and hosts with devices read. A token deleted
// mid-stream ends the stream at the next heartbeat.
func TestEventStreamACL(t *testing.T) {
	e, mgmt := newACLEnv(t, Options{EventHeartbeat: 50 * time.Millisecond})
	srv := newStreamServer(t, e)
	e.policy("team-a", wire.ACLRules{Namespaces: map[string]string{"team-a": "write"}})
	teamA := e.newToken("team-a")
	var tok wire.ACLToken
	b, _ := json.Marshal(wire.ACLTokenRequest{Policies: []string{"team-a"}})
	e.do("POST", "/v1/acl/token", string(b)).ok(200).decode(&tok)

	all := openStream(t, srv, "namespace=*", mgmt)
	mine := openStream(t, srv, "namespace=*", teamA)
	doomed := openStream(t, srv, "namespace=team-a", tok.SecretID)
	other := allocate(t, e, `{"claims":[{"type":"GPU","count":1}]}`)
	e.do("POST", "/v1/devices/g1/drain", "").ok(200)
	ours := allocate(t, e, `{"namespace":"team-a","claims":[{"type":"GPU","count":1}]}`)

	if got := strings.Join(summary(all.events(5)), " "); got != strings.Join([]string{
		"Allocation/created/" + other.ID, "Allocation/placed/" + other.ID, "Device/updated/g1",
		"Allocation/created/" + ours.ID, "Allocation/placed/" + ours.ID}, " ") {
		t.Fatalf("management token: %s", got)
	}
	if got := strings.Join(summary(mine.events(2)), " "); got != "Allocation/created/"+ours.ID+" Allocation/placed/"+ours.ID {
		t.Fatalf("team-a token: %s", got)
	}
	if got := doomed.events(2); got[0].Namespace != "team-a" {
		t.Fatalf("team-a stream: %+v", got)
	}
	e.do("DELETE", "/v1/acl/token/"+tok.AccessorID, "").ok(200)
	for {
		b := doomed.next()
		if b.Error != nil {
			if b.Error.Code != wire.CodeUnauthorized {
				t.Fatalf("stream of a deleted token ended with %+v", b.Error)
			}
			break
		}
	}
	// An unknown token is refused before the stream starts.
	e.token = ""
	e.do("GET", "/v1/event/stream", "", wire.HeaderToken, "not-a-token").apiErr(401, wire.CodeUnauthorized)
}

// A reader that stops reading is cut off, and the writes go on without
// waiting for it.
func TestEventStreamSlowReaderCut(t *testing.T) {
	e := newEnv(t, Options{EventWriteTimeout: 200 * time.Millisecond})
	e.b.f = cluster.NewRaftFSMBuffering(fsm.New(), 1000) // a round is 4,000 events
	srv := newStreamServer(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/event/stream", nil)
	req.Header.Set("Accept-Encoding", "identity") // compressed, the rounds would fit in the sockets' buffers
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	// Registrations of a host of 2,000 devices, removed and registered
	// again: some 4,000 events, about 2 MB, per round; nobody reads them.
	// Were a write to wait for the reader, this would never end.
	var devs []string
	for i := range 2000 {
		devs = append(devs, fmt.Sprintf(`{"id":"d%d","type":"GPU","name":"a-rather-long-model-name-%d","labels":{"rack":"r1","row":"7"}}`, i, i))
	}
	host := `{"devices":[` + strings.Join(devs, ",") + `]}`
	for range 6 {
		e.do("PUT", "/v1/hosts/big", host).ok(200)
		e.do("DELETE", "/v1/hosts/big", "").ok(200)
	}
	last := e.b.stateIndex()
	// Now read: the stream ends before the last write's events.
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	var seen uint64
	for sc.Scan() {
		var b wire.EventBatch
		if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
			break // cut in the middle of a line
		}
		if b.Error != nil {
			if b.Error.Code != wire.CodeSlowConsumer {
				t.Fatalf("stream ended with %+v", b.Error)
			}
			break
		}
		if seen = max(seen, b.Index); seen >= last {
			break
		}
	}
	if seen >= last {
		t.Fatalf("the stalled reader got every event (through index %d)", seen)
	}
}

// A reader that accepts gzip gets the same lines compressed, as one gzip
// member that ends, trailer checked, when the stream ends; one that does
// not gets them plain.
func TestEventStreamGzip(t *testing.T) {
	e := newEnv(t, Options{})
	e.seed()
	srv := newStreamServer(t, e)
	open := func(encoding string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/event/stream?index=1", nil)
		req.Header.Set("Accept-Encoding", encoding) // set: the transport leaves the body as it came
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	plain, zipped, refused := open("identity"), open("br, gzip;q=0.5"), open("gzip;q=0")
	if plain.Header.Get("Content-Encoding") != "" || zipped.Header.Get("Content-Encoding") != "gzip" || refused.Header.Get("Content-Encoding") != "" {
		t.Fatalf("Content-Encoding %q %q %q", plain.Header.Get("Content-Encoding"), zipped.Header.Get("Content-Encoding"), refused.Header.Get("Content-Encoding"))
	}
	for range 20 {
		a := allocate(t, e, `{"claims":[{"type":"GPU","count":1,"pool":"big"}]}`)
		e.do("POST", "/v1/allocations/"+a.ID+"/release", "").ok(200)
	}
	last := fmt.Sprintf(`{"index":%d,`, e.b.stateIndex())
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	zr.Multistream(false)
	streams := []*bufio.Reader{bufio.NewReader(plain.Body), bufio.NewReader(zr), bufio.NewReader(refused.Body)}
	lines := make([][]string, len(streams))
	// readLines reads s's lines, but heartbeats, through the one that
	// starts with upTo ("": to the end).
	readLines := func(i int, upTo string) {
		for {
			l, err := streams[i].ReadString('\n')
			if err == io.EOF && upTo == "" && l == "" {
				return
			}
			if err != nil {
				t.Fatalf("stream %d after %d lines: %v", i, len(lines[i]), err) // a bad checksum or length too
			}
			if l != "{}\n" {
				lines[i] = append(lines[i], l)
			}
			if upTo != "" && strings.HasPrefix(l, upTo) {
				return
			}
		}
	}
	for i := range streams {
		readLines(i, last)
	}
	e.b.f.Events().Close() // the node shuts down: every stream ends with a last line
	for i := range streams {
		readLines(i, "")
	}
	want := lines[0]
	if len(want) < 41 || !strings.Contains(want[len(want)-1], wire.CodeShutdown) {
		t.Fatalf("%d plain lines, the last %q", len(want), want[len(want)-1])
	}
	for i, got := range lines[1:] {
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Fatalf("stream %d's lines differ from the plain ones:\n%s\nwant\n%s", i+1, strings.Join(got, ""), strings.Join(want, ""))
		}
	}
	if rest, _ := io.ReadAll(zipped.Body); len(rest) != 0 {
		t.Fatalf("%d bytes after the gzip member", len(rest))
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"": false, "gzip": true, "GZIP": true, "deflate, gzip": true, "br;q=1.0, gzip;q=0.8": true,
		"gzip;q=0": false, "gzip; q=0.000": false, "identity": false, "x-gzip": false, "*": false,
	} {
		if acceptsGzip(h) != want {
			t.Errorf("acceptsGzip(%q) = %v", h, !want)
		}
	}
}

// deflateBlocks made apart and joined are one deflate stream.
func TestDeflateBlocksJoin(t *testing.T) {
	parts := []string{"{\"index\":1}\n", strings.Repeat("{\"index\":2,\"events\":[]}\n", 50), "", "{}\n"}
	var joined []byte
	for _, p := range parts {
		joined = append(joined, deflateBlocks([]byte(p), len(p)%2 == 0)...)
	}
	joined = append(joined, 0x03, 0x00) // the final block end adds
	got, err := io.ReadAll(flate.NewReader(bytes.NewReader(joined)))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != strings.Join(parts, "") {
		t.Fatalf("got %q", got)
	}
}

// The stream's hand-written lines are what json.Marshal writes of the
// same wire.EventBatch, byte for byte.
func TestEventLinesAsMarshalled(t *testing.T) {
	a := &fsm.Allocation{ID: "a1", Namespace: "team-<a>", Status: fsm.Active}
	evs := []fsm.Event{
		{Topic: fsm.TopicAllocation, Type: fsm.EventPlaced, Key: "a1", Namespace: "team-<a>", Index: 7, Payload: a},
		{Topic: fsm.TopicDevice, Type: "updated", Key: "g\"1\\ é\n", Index: 7, Payload: fsm.Device{DeviceSpec: fsm.DeviceSpec{ID: "g\"1\\ é\n"}, Host: "h<1>"}},
		{Topic: fsm.TopicLeader, Type: fsm.EventElected, Key: "s1", Index: 7, Payload: fsm.LeaderEvent{ID: "s1", Address: "127.0.0.1:1&2"}},
		{Topic: fsm.TopicQueue, Type: "dequeued", Key: "", Index: 7},
	}
	var want wire.EventBatch
	want.Index = 7
	for i := range evs {
		payload, _ := json.Marshal(eventPayload(&evs[i]))
		want.Events = append(want.Events, wire.Event{Topic: string(evs[i].Topic), Type: evs[i].Type, Key: evs[i].Key,
			Namespace: evs[i].Namespace, Index: evs[i].Index, Payload: payload})
	}
	line, _ := json.Marshal(want)
	got := encodeBatch(evs).(*encodedBatch)
	if string(got.line) != string(line)+"\n" {
		t.Fatalf("line\n%s\nwant\n%s", got.line, line)
	}
	part := appendBatchJSON(nil, 7, [][]byte{got.events[1]})
	want.Events = want.Events[1:2]
	if line, _ = json.Marshal(want); string(part) != string(line)+"\n" {
		t.Fatalf("a part\n%s\nwant\n%s", part, line)
	}
}
