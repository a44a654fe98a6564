package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/events"
	"github.com/dmsc/dmsc/fsm"
)

// fakeBackend is a node without a network: commands are applied at once
// to a RaftFSM (so indexes and blocking reads behave as on a node) with
// increasing log indexes and a clock the test moves.
type fakeBackend struct {
	mu    sync.Mutex
	f     *cluster.RaftFSM
	index uint64
	now   time.Time
	// applyErr, when set, answers every Apply instead of applying.
	applyErr error
	// applyGate, when set, holds every Apply until it is closed.
	applyGate chan struct{}
	// gated counts the applies that reached the gate.
	gated   int
	applies int
	leader  bool
	// leaderID, when set, names another node as the leader (this one,
	// n1, a follower).
	leaderID string
	removed  []string
	// host makes the fake a host agent: reads answer not_server, and
	// tokens are resolved as a host resolves them, from the token and
	// its policies a server sends (counted in resolves).
	host     bool
	resolves int
}

func newFake() *fakeBackend {
	return &fakeBackend{
		f:      cluster.NewRaftFSM(fsm.New()),
		now:    time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		leader: true,
	}
}

func (b *fakeBackend) Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	b.mu.Lock()
	gate, applyErr := b.applyGate, b.applyErr
	if gate != nil {
		b.gated++
	}
	b.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return fsm.Result{}, fmt.Errorf("%w: %w", cluster.ErrTimeout, ctx.Err())
		}
	}
	if applyErr != nil {
		return fsm.Result{}, applyErr
	}
	if fsm.RequestIDOf(cmd) == "" {
		fsm.SetRequestID(cmd, uuid.NewString())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.applies++
	b.index++
	fsm.Stamp(cmd, b.now)
	data, err := cluster.EncodeLogEntry(cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	res := b.f.Apply(&raft.Log{Index: b.index, Type: raft.LogCommand, Data: data})
	return res.(fsm.Result), nil
}

// advance moves the clock and applies a tick.
func (b *fakeBackend) advance(t *testing.T, d time.Duration) {
	t.Helper()
	b.mu.Lock()
	b.now = b.now.Add(d)
	b.mu.Unlock()
	if _, err := b.Apply(context.Background(), &fsm.Tick{}); err != nil {
		t.Fatal(err)
	}
}

func (b *fakeBackend) Read(ctx context.Context, opts cluster.ReadOptions, fn func(*fsm.State)) (cluster.ReadMeta, error) {
	b.mu.Lock()
	host := b.host
	b.mu.Unlock()
	if host {
		return cluster.ReadMeta{}, cluster.ErrNotServer
	}
	if opts.MinIndex > 0 {
		wait := opts.Wait
		if wait <= 0 {
			wait = cluster.DefaultWait
		}
		wctx, cancel := context.WithTimeout(ctx, min(wait, cluster.MaxWait))
		_ = b.f.WaitModified(wctx, opts.MinIndex)
		cancel()
		if err := ctx.Err(); err != nil {
			return cluster.ReadMeta{}, fmt.Errorf("%w: %w", cluster.ErrTimeout, err)
		}
	}
	applied, modified := b.f.Read(fn)
	b.mu.Lock()
	leader := b.leader
	b.mu.Unlock()
	m := cluster.ReadMeta{Index: modified, AppliedIndex: applied, KnownLeader: leader}
	if leader {
		m.Leader = "n1"
	} else {
		m.LastContact = -1
	}
	return m, nil
}

func (b *fakeBackend) ResolveToken(ctx context.Context, hash string) (tok fsm.ACLToken, authz *fsm.Authorizer, found bool, err error) {
	b.mu.Lock()
	host := b.host
	b.resolves++
	b.mu.Unlock()
	var pols []fsm.ACLPolicy
	b.f.Read(func(st *fsm.State) {
		tok, found = st.TokenOfSecret(hash)
		switch {
		case !found:
		case host:
			pols = st.ACLTokenPolicies(tok)
		default:
			authz = st.Authorizer(tok)
		}
	})
	if found && host {
		tok.SecretHash = "" // as the node RPC answers it
		authz = fsm.NewAuthorizer(tok, pols)
	}
	return tok, authz, found, nil
}

func (b *fakeBackend) Members() []cluster.Member {
	return []cluster.Member{{ID: "n1", Server: true, GossipAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2",
		RPCAddr: "127.0.0.1:3", Version: "test", Status: cluster.MemberAlive, Leader: true}}
}

func (b *fakeBackend) Leader() (cluster.LeaderInfo, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.leader {
		return cluster.LeaderInfo{}, false
	}
	if b.leaderID != "" {
		return cluster.LeaderInfo{ID: b.leaderID, RaftAddr: "127.0.0.9:2", RPCAddr: "127.0.0.9:3"}, true
	}
	return cluster.LeaderInfo{ID: "n1", RaftAddr: "127.0.0.1:2", RPCAddr: "127.0.0.1:3"}, true
}

func (b *fakeBackend) RaftConfiguration() (cluster.RaftConfiguration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cfg := cluster.RaftConfiguration{Index: 1, Servers: []cluster.RaftServer{{ID: "n1", Address: "127.0.0.1:2", Voter: true, Leader: true}}}
	for _, id := range []string{"n2"} {
		if !contains(b.removed, id) {
			cfg.Servers = append(cfg.Servers, cluster.RaftServer{ID: id, Address: "127.0.0.1:5", Voter: true})
		}
	}
	for _, id := range b.removed {
		cfg.Removed = append(cfg.Removed, cluster.RemovedServer{ID: id, Since: time.Unix(1, 0).UTC()})
	}
	return cfg, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (b *fakeBackend) RemovePeer(ctx context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id != "n2" || contains(b.removed, id) {
		return &fsm.Error{Code: fsm.ErrNotFound.Code, Message: "server " + id + " is not in the raft configuration"}
	}
	b.removed = append(b.removed, id)
	return nil
}

func (b *fakeBackend) ReadmitPeer(ctx context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !contains(b.removed, id) {
		return &fsm.Error{Code: fsm.ErrNotFound.Code, Message: "server " + id + " is not removed"}
	}
	b.removed = slices.DeleteFunc(b.removed, func(x string) bool { return x == id })
	return nil
}

func (b *fakeBackend) SnapshotSave(ctx context.Context, w io.Writer) (cluster.ReadMeta, error) {
	var data []byte
	meta, err := b.Read(ctx, cluster.ReadOptions{Consistent: true}, func(s *fsm.State) { data = s.SnapshotBytes() })
	if err != nil {
		return meta, err
	}
	_, err = w.Write(data)
	return meta, err
}

func (b *fakeBackend) SnapshotRestore(ctx context.Context, r io.Reader) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if _, err := fsm.Restore(bytes.NewReader(data)); err != nil {
		return err
	}
	b.index += 2
	var buf bytes.Buffer
	cluster.WriteRaftSnapshotHeader(&buf, b.index, b.index)
	buf.Write(data)
	return b.f.Restore(io.NopCloser(&buf))
}

func (b *fakeBackend) Status() cluster.Status {
	b.mu.Lock()
	leader := b.leader
	b.mu.Unlock()
	applied, _ := b.f.Indexes()
	st := cluster.Status{ID: "n1", Server: true, State: "Follower", AppliedIndex: applied, CommitIndex: applied, Term: 2, LastContact: -1,
		HostRegistrations: b.f.CommandsApplied(fsm.RegisterHostType)}
	if leader {
		st.State, st.Leader, st.KnownLeader, st.Ready, st.LastContact = "Leader", "n1", true, true, 0
	}
	return st
}

func (b *fakeBackend) Self() cluster.Member { return b.Members()[0] }

func (b *fakeBackend) stateIndex() uint64 {
	_, m := b.f.Indexes()
	return m
}

func (b *fakeBackend) applyCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applies
}

// testEnv is a Server over a fake backend with a sample inventory.
type testEnv struct {
	t   *testing.T
	b   *fakeBackend
	srv *Server
	// token, when set, is sent with every request that names none.
	token string
}

func newEnv(t *testing.T, opts Options) *testEnv {
	t.Helper()
	e := &testEnv{t: t, b: newFake()}
	if opts.Version == "" {
		opts.Version = "test"
	}
	e.srv = New(e.b, opts)
	return e
}

// seed registers two hosts: h1 with two 40 GB GPUs, h2 with one 80 GB GPU
// (pool big) and a CPU.
func (e *testEnv) seed() {
	e.t.Helper()
	e.do("PUT", "/v1/hosts/h1", `{"devices":[
		{"id":"g1","type":"GPU","name":"A100-40","capabilities":{"memory_gb":40}},
		{"id":"g2","type":"GPU","name":"A100-40","capabilities":{"memory_gb":40}}]}`).ok(200)
	e.do("PUT", "/v1/hosts/h2", `{"labels":{"rack":"r2"},"devices":[
		{"id":"g3","type":"GPU","name":"A100-80","pool":"big","capabilities":{"memory_gb":80}},
		{"id":"c1","type":"CPU","shareable":true,"capabilities":{"compute_units":64}}]}`).ok(200)
}

// resp is an answer under test.
type resp struct {
	t    *testing.T
	code int
	hdr  http.Header
	body []byte
}

func (e *testEnv) do(method, path, body string, headers ...string) *resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		ct := "application/json"
		if method == "PUT" && path == "/v1/snapshot" {
			ct = "application/octet-stream"
		}
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if e.token != "" && req.Header.Get(wire.HeaderToken) == "" && req.Header.Get("Authorization") == "" {
		req.Header.Set(wire.HeaderToken, e.token)
	}
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	return &resp{t: e.t, code: rec.Code, hdr: rec.Header(), body: rec.Body.Bytes()}
}

// ok fails the test unless the status is code; it returns the answer.
func (r *resp) ok(code int) *resp {
	r.t.Helper()
	if r.code != code {
		r.t.Fatalf("status %d, want %d: %s", r.code, code, r.body)
	}
	return r
}

func (r *resp) decode(v any) {
	r.t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		r.t.Fatalf("decode %s: %v", r.body, err)
	}
}

// apiErr checks an error answer's status and code and returns its body.
func (r *resp) apiErr(code int, errCode string) wire.Error {
	r.t.Helper()
	r.ok(code)
	if ct := r.hdr.Get("Content-Type"); ct != "application/json" {
		r.t.Fatalf("Content-Type %q", ct)
	}
	var body wire.ErrorResponse
	r.decode(&body)
	if body.Error.Code != errCode {
		r.t.Fatalf("error code %q, want %q: %s", body.Error.Code, errCode, r.body)
	}
	if body.Error.Message == "" {
		r.t.Fatalf("error without a message: %s", r.body)
	}
	return body.Error
}

func (r *resp) index() uint64 {
	r.t.Helper()
	n, err := strconv.ParseUint(r.hdr.Get(wire.HeaderIndex), 10, 64)
	if err != nil {
		r.t.Fatalf("%s header %q: %v", wire.HeaderIndex, r.hdr.Get(wire.HeaderIndex), err)
	}
	return n
}

// noSideEffect runs f and fails if the state index moved.
func (e *testEnv) noSideEffect(f func()) {
	e.t.Helper()
	before := e.b.stateIndex()
	f()
	if after := e.b.stateIndex(); after != before {
		e.t.Fatalf("state index moved from %d to %d", before, after)
	}
}

var errInjected = errors.New("injected")

func httptestRequest(method, path string) *http.Request {
	return httptest.NewRequest(method, path, nil)
}

func (b *fakeBackend) SubscribeEvents(after uint64) (*events.Subscription, error) {
	if b.host {
		return nil, cluster.ErrNotServer
	}
	return b.f.Events().Subscribe(after)
}
