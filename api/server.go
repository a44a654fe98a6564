// Package api serves the dmsc HTTP API on every node: JSON under /v1/
// (allocations, devices, hosts, pools, policies, statistics, history,
// cluster operations, snapshots, health), Prometheus metrics on /metrics
// and, when enabled, /debug/pprof/. Reads come from the local replica with
// freshness headers and may block on an index; writes go through the
// node, which forwards them to the leader. docs/api.md is the reference;
// the bodies are those of package client/wire, which the Go SDK shares.
package api

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/events"
	"github.com/dmsc/dmsc/fsm"
)

// Backend is what the API needs from a node: the subset of *cluster.Node
// it calls.
type Backend interface {
	Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, opts cluster.ReadOptions, fn func(*fsm.State)) (cluster.ReadMeta, error)
	// ResolveToken finds an ACL token by its secret's hash ("" for the
	// anonymous token) and what it may do: from the replica on a server,
	// through a server (cached) on a host.
	ResolveToken(ctx context.Context, secretHash string) (fsm.ACLToken, *fsm.Authorizer, bool, error)
	Members() []cluster.Member
	Leader() (cluster.LeaderInfo, bool)
	RaftConfiguration() (cluster.RaftConfiguration, error)
	RemovePeer(ctx context.Context, id string) error
	ReadmitPeer(ctx context.Context, id string) error
	// SubscribeEvents reads the node's event buffer after an index (0:
	// from now on).
	SubscribeEvents(after uint64) (*events.Subscription, error)
	SnapshotSave(ctx context.Context, w io.Writer) (cluster.ReadMeta, error)
	SnapshotRestore(ctx context.Context, r io.Reader) error
	Keyring(ctx context.Context, op cluster.KeyringOp, key string) (cluster.KeyringResult, error)
	Status() cluster.Status
	Self() cluster.Member
}

var _ Backend = (*cluster.Node)(nil)

// Defaults of Options.
const (
	DefaultMaxInFlight     = 512
	DefaultMaxBlocking     = 4096
	DefaultMaxBodyBytes    = 1 << 20
	DefaultMaxHostBytes    = 16 << 20
	DefaultWriteTimeout    = 30 * time.Second
	DefaultWaitGrace       = 5 * time.Second
	DefaultMaxAllocateWait = cluster.MaxWait
)

// Options configure a Server. Zero values take the defaults above.
type Options struct {
	// Version and Role are reported by /v1/agent/self.
	Version string
	Role    string
	// Config is the configuration summary /v1/agent/self reports.
	Config map[string]any
	// Ready adds conditions of the agent to /v1/ready, checked after the
	// node's own readiness. Optional.
	Ready func() bool
	// EnableDebug serves /debug/pprof/.
	EnableDebug bool
	// ACLEnabled checks every request's token against its route's
	// capability (api/acl.go).
	ACLEnabled bool
	// MaxInFlight bounds the requests served at once, blocking queries
	// and probes aside; one more is answered 429 overloaded.
	MaxInFlight int
	// MaxBlocking bounds the blocking queries and waiting allocations
	// held at once.
	MaxBlocking int
	// MaxBodyBytes caps a request body (413 beyond); host registrations
	// may be up to MaxHostBytes, snapshot uploads up to the node RPC's
	// restore limit.
	MaxBodyBytes int64
	MaxHostBytes int64
	// WriteTimeout bounds one write; past it the answer is 504 timeout
	// (outcome unknown: retry with the same request ID).
	WriteTimeout time.Duration
	// WaitGrace is added to a request's timeout when an allocation waits
	// to be placed (the leader's tick ends it a little after its deadline).
	WaitGrace time.Duration
	// MaxAllocateWait caps how long an allocation waits.
	MaxAllocateWait time.Duration
	// Logger receives request logs at debug level and errors.
	Logger hclog.Logger
	// Logs, when set, is the agent's log that GET /v1/agent/monitor
	// streams (monitor.go).
	Logs LogSource

	// Abuse limits (guard.go, limits.go, audit.go, snapshot.go).

	// LoopbackOnly refuses requests whose Host is not a loopback name
	// (403 host_not_allowed): the agent listens on a loopback address.
	LoopbackOnly bool
	// MaxInFlightPerClient bounds the slots one client address holds at
	// once; one more is answered 429 overloaded. Default MaxInFlight/4;
	// negative: no bound.
	MaxInFlightPerClient int
	// BodyTimeout bounds reading a request body (408 body_timeout past
	// it); SnapshotBodyTimeout a snapshot upload's. ResponseTimeout bounds
	// writing an answer.
	BodyTimeout         time.Duration
	SnapshotBodyTimeout time.Duration
	ResponseTimeout     time.Duration
	// SnapshotDir is where snapshot uploads are spooled (default
	// os.TempDir()); MaxSnapshotBytes caps one (default
	// transport.MaxRestoreBytes); MaxSnapshotUploads bounds those at once
	// (default 1; one more is answered 429).
	SnapshotDir        string
	MaxSnapshotBytes   int64
	MaxSnapshotUploads int
	// Auditor, when set, receives a record of every write request.
	Auditor Auditor

	// The event stream (events.go): a heartbeat line after EventHeartbeat
	// without events; a reader that takes no line within
	// EventWriteTimeout is cut off; at most MaxEventStreams streams at
	// once (they hold no request slot).
	EventHeartbeat    time.Duration
	EventWriteTimeout time.Duration
	MaxEventStreams   int
}

func (o *Options) fillDefaults() {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.MaxBlocking <= 0 {
		o.MaxBlocking = DefaultMaxBlocking
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxHostBytes <= 0 {
		o.MaxHostBytes = DefaultMaxHostBytes
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.WaitGrace <= 0 {
		o.WaitGrace = DefaultWaitGrace
	}
	if o.MaxAllocateWait <= 0 {
		o.MaxAllocateWait = DefaultMaxAllocateWait
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.EventHeartbeat <= 0 {
		o.EventHeartbeat = DefaultEventHeartbeat
	}
	if o.EventWriteTimeout <= 0 {
		o.EventWriteTimeout = DefaultEventWriteTimeout
	}
	if o.MaxEventStreams <= 0 {
		o.MaxEventStreams = DefaultMaxEventStreams
	}
	o.fillLimitDefaults()
}

// Server is the HTTP API of one node. It is an http.Handler.
type Server struct {
	b    Backend
	opts Options
	log  hclog.Logger
	mux  *http.ServeMux
	// batchMux routes the requests of a batch (batch.go).
	batchMux *http.ServeMux
	inFlight chan struct{}
	blocking chan struct{}
	metrics  *metrics
	clients  *clientSlots
	load     *loadWindow
	uploads  chan struct{}
	streams  chan struct{}
	workers  *itemWorkers
}

// New returns the API over a node.
func New(b Backend, opts Options) *Server {
	opts.fillDefaults()
	s := &Server{
		b:        b,
		opts:     opts,
		log:      opts.Logger,
		mux:      http.NewServeMux(),
		batchMux: http.NewServeMux(),
		inFlight: make(chan struct{}, opts.MaxInFlight),
		blocking: make(chan struct{}, opts.MaxBlocking),
		clients:  &clientSlots{max: opts.MaxInFlightPerClient, n: map[string]int{}},
		load:     &loadWindow{now: time.Now},
		uploads:  make(chan struct{}, opts.MaxSnapshotUploads),
		streams:  make(chan struct{}, opts.MaxEventStreams),
		workers:  newItemWorkers(itemWorkerIdle),
	}
	s.metrics = newMetrics(s)
	table := routes()
	if fsm.TestNoopEnabled() {
		table = append(table, testRoutes()...)
	}
	for _, rt := range table {
		if rt.debug && !opts.EnableDebug {
			continue
		}
		s.mux.Handle(rt.pattern(), s.wrap(rt))
		if rt.batch {
			s.batchMux.Handle(rt.pattern(), s.wrapItem(rt))
		}
	}
	return s
}

// NodeHandler returns a function that makes a node's API with opts: the
// HTTP handler of a cluster.LocalCluster's nodes (cluster.LocalConfig.HTTP).
func NodeHandler(opts Options) func(*cluster.Node) http.Handler {
	return func(n *cluster.Node) http.Handler { return New(n, opts) }
}

// ServeHTTP serves a request. A request no route matches gets a JSON 404
// or 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	// Ask the mux what it would answer (404, or 405 with Allow), and say
	// it in JSON.
	probe := &probeWriter{header: http.Header{}}
	h.ServeHTTP(probe, r)
	start := time.Now()
	var err *apiError
	switch probe.code {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", probe.header.Get("Allow"))
		err = &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			msg: r.Method + " is not allowed on " + r.URL.Path + " (allowed: " + probe.header.Get("Allow") + ")"}
	case http.StatusMovedPermanently, http.StatusPermanentRedirect, http.StatusTemporaryRedirect, http.StatusFound:
		h.ServeHTTP(w, r)
		return
	default:
		err = &apiError{status: http.StatusNotFound, code: fsm.ErrNotFound.Code, msg: "no route for " + r.Method + " " + r.URL.Path}
	}
	code := s.writeError(w, r, err)
	s.metrics.observe("unmatched", code, time.Since(start))
}

// probeWriter records what a handler would answer, and drops the body.
type probeWriter struct {
	header http.Header
	code   int
}

func (p *probeWriter) Header() http.Header { return p.header }
func (p *probeWriter) Write(b []byte) (int, error) {
	if p.code == 0 {
		p.code = http.StatusOK
	}
	return len(b), nil
}
func (p *probeWriter) WriteHeader(code int) {
	if p.code == 0 {
		p.code = code
	}
}

// wrap adds to a route's handler what every request gets: the concurrency
// limit, the body cap, the ACL check, error answers, metrics and a debug log line.
func (s *Server) wrap(rt route) http.Handler {
	label := rt.pattern()
	limit := rt.bodyLimit(&s.opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		err := s.screen(rt, sw, r)
		sl := &slot{release: func() {}}
		if err == nil && !rt.exempt {
			if sl.release, err = s.admit(r); err == nil {
				r = r.WithContext(context.WithValue(r.Context(), slotKey{}, sl))
			}
		}
		if err == nil && r.Body != nil && limit > 0 {
			r.Body = http.MaxBytesReader(sw, r.Body, limit)
		}
		s.serve(rt, label, sw, r, start, err, sl)
	})
}

// serve is the part of a request's handling that a request of a batch
// gets too: the ACL check, the handler, the error answer, metrics, audit
// and the debug log line. err is a refusal from before (the handler is
// not run); sl is the request's slot, given back once it is served (the
// handler may trade it for a blocking one).
func (s *Server) serve(rt route, label string, sw *statusWriter, r *http.Request, start time.Time, err error, sl *slot) {
	if err == nil {
		if r, err = s.authorize(r, rt); err == nil {
			err = rt.handle(s, sw, r)
		}
	}
	sl.release()
	if err != nil {
		s.writeError(sw, r, err)
	}
	code := sw.status()
	d := time.Since(start)
	s.metrics.observe(label, code, d)
	s.audit(r, sw, code, start)
	if s.log.IsDebug() { // the arguments alone cost allocations per request
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "code", code, "duration", d)
	}
}

// acquire takes a slot for a regular or a blocking request; ok is false
// when none is free. release gives the slot back.
func (s *Server) acquire(blocking bool) (release func(), ok bool) {
	sem := s.inFlight
	if blocking {
		sem = s.blocking
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, true
	default:
		return func() {}, false
	}
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (pprof's
// profile and trace extend the write deadline).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes on a flush.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
