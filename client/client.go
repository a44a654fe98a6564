// Package client is the Go SDK of dmsc: a Client talks to the HTTP API of
// a cluster given several node addresses. It spreads reads over the nodes,
// sends writes to the node that last answered one (following the leader
// when it moves), retries writes that failed for a reason worth retrying
// with the same request ID (so a retried allocate never takes a second
// device), backs off with jitter, takes a context everywhere and returns
// typed errors (errors.Is(err, client.ErrNoCapacity)). Watch and
// WatchAllocation follow state changes with blocking queries; LeaseRenewer
// keeps an allocation's lease alive. The bodies are those of package
// client/wire, most of them aliased here; the SDK imports nothing of the
// server.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/client/wire"
)

// Defaults of Config.
const (
	// DefaultAddress is the HTTP API of a local agent.
	DefaultAddress = "http://127.0.0.1:4646"
	// AddressEnv names the environment variable with comma-separated node
	// addresses, used when Config.Addresses is empty.
	AddressEnv = "DMSC_ADDR"
	// TokenEnv names the environment variable with the token, used when
	// Config.Token is empty.
	TokenEnv = "DMSC_TOKEN"
	// NamespaceEnv names the environment variable with the namespace,
	// used when Config.Namespace is empty.
	NamespaceEnv      = "DMSC_NAMESPACE"
	DefaultTimeout    = 60 * time.Second
	DefaultMaxRetries = 10
	DefaultRetryWait  = 50 * time.Millisecond
	// DefaultDialTimeout bounds one connection attempt to a node.
	DefaultDialTimeout  = 2 * time.Second
	DefaultRetryWaitMax = 2 * time.Second
	// DefaultWatchWait is how long one blocking query of a watch waits.
	DefaultWatchWait = 5 * time.Minute
)

// allocateWaitGrace is added to an attempt's timeout when an allocation
// waits to be placed: the server waits the request's timeout plus its own
// grace (5s by default) for the leader's tick to end the request.
const allocateWaitGrace = 15 * time.Second

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 1 << 20

// Config configures a Client. Zero values take the defaults.
type Config struct {
	// Addresses are the nodes' HTTP API addresses: "http://10.0.0.11:4646",
	// "10.0.0.11:4646" (http is assumed, https with TLS) or "https://...".
	// Empty takes $DMSC_ADDR (comma-separated), else DefaultAddress (its
	// https form with TLS).
	Addresses []string
	// Token is sent as "Authorization: Bearer <token>"; empty takes
	// $DMSC_TOKEN.
	Token string
	// Namespace is the namespace allocations, the queue, the history,
	// statistics and recommendations are asked in (sent as ?namespace=
	// unless a call names its own); empty takes $DMSC_NAMESPACE, else the
	// server's default ("default"). "*" reads every namespace the token
	// may read.
	Namespace string
	// Timeout bounds one attempt of a request; the wait of a blocking
	// query or of an allocation waiting to be placed is added to it. The
	// context bounds the whole call, retries included.
	Timeout time.Duration
	// HTTPClient sends the requests; nil uses a client of its own. Its own
	// Timeout, if set, applies to every attempt (blocking queries too).
	HTTPClient *http.Client
	// TLS secures connections to https:// addresses (tls.go); nil takes
	// $DMSC_CACERT, $DMSC_CLIENT_CERT, $DMSC_CLIENT_KEY and
	// $DMSC_TLS_SERVER_NAME when set. It configures the client's own
	// HTTP client: with HTTPClient set, configure that one instead.
	TLS *TLSConfig
	// Logger receives a debug line for every retry. Optional.
	Logger hclog.Logger
	// MaxRetries is how many times a failed request is sent again (to the
	// next node, with the same request ID); negative sends it once.
	MaxRetries int
	// RetryWait and RetryWaitMax bound the exponential backoff between
	// attempts; each wait is drawn between half and all of the bound.
	RetryWait    time.Duration
	RetryWaitMax time.Duration
	// BatchWrites gathers the allocates (those that do not wait for
	// placement), releases, renewals and cancels that goroutines send at
	// once into POST /v1/batch exchanges (batch.go): fewer HTTP exchanges
	// under concurrent load, each write answered and retried as if sent
	// alone. One batch is in flight per node; when it returns, the next
	// waits up to a quarter of its round trip (1 ms at most) for the
	// goroutines it answered to write again.
	BatchWrites bool
}

// Client is a dmsc API client. It is safe for concurrent use.
type Client struct {
	cfg   Config
	addrs []string
	http  *http.Client
	log   hclog.Logger
	// rr spreads reads over the nodes.
	rr atomic.Uint64
	// batches gathers writes into batches (Config.BatchWrites); nil sends
	// each alone.
	batches *batcher
	// writeNode is the index of the node writes go to: the last one that
	// answered a write, or the leader when a failover found it or a
	// server said it forwarded a write (seekLeader).
	writeNode atomic.Int64
	// leaderSought is when seekLeader last asked who leads (Unix
	// nanoseconds); it asks at most once per leaderRecheck.
	leaderSought atomic.Int64
}

// leaderRecheck is how often at most a client whose writes a follower
// forwards asks the nodes who leads.
const leaderRecheck = 10 * time.Second

// New returns a client for the nodes of cfg.
func New(cfg Config) (*Client, error) {
	tlsCfg := cfg.TLS
	if tlsCfg == nil && cfg.HTTPClient == nil {
		tlsCfg = tlsFromEnv()
	}
	if tlsCfg != nil && cfg.HTTPClient != nil {
		return nil, fmt.Errorf("dmsc client: TLS and HTTPClient both set; configure TLS on the HTTPClient's transport")
	}
	addrs := cfg.Addresses
	if len(addrs) == 0 {
		if env := os.Getenv(AddressEnv); env != "" {
			addrs = strings.Split(env, ",")
		} else {
			addrs = []string{DefaultAddress}
			if tlsCfg != nil {
				addrs = []string{"https://" + strings.TrimPrefix(DefaultAddress, "http://")}
			}
		}
	}
	c := &Client{cfg: cfg}
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if tlsCfg != nil && !strings.Contains(a, "://") {
			a = "https://" + a
		}
		norm, err := NormalizeAddress(a)
		if err != nil {
			return nil, err
		}
		c.addrs = append(c.addrs, norm)
	}
	if len(c.addrs) == 0 {
		return nil, fmt.Errorf("dmsc client: no node address")
	}
	if c.cfg.Token == "" {
		c.cfg.Token = os.Getenv(TokenEnv)
	}
	if c.cfg.Namespace == "" {
		c.cfg.Namespace = os.Getenv(NamespaceEnv)
	}
	if c.cfg.Timeout <= 0 {
		c.cfg.Timeout = DefaultTimeout
	}
	if c.cfg.MaxRetries == 0 {
		c.cfg.MaxRetries = DefaultMaxRetries
	}
	if c.cfg.RetryWait <= 0 {
		c.cfg.RetryWait = DefaultRetryWait
	}
	if c.cfg.RetryWaitMax < c.cfg.RetryWait {
		c.cfg.RetryWaitMax = max(DefaultRetryWaitMax, c.cfg.RetryWait)
	}
	c.http = cfg.HTTPClient
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 32
		// A dead node's address may swallow connection attempts: give up on
		// it quickly and try the next node.
		tr.DialContext = (&net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}).DialContext
		if tlsCfg != nil {
			tc, err := tlsCfg.TLSClientConfig()
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig = tc
		}
		c.http = &http.Client{Transport: tr}
	}
	c.log = cfg.Logger
	if c.log == nil {
		c.log = hclog.NewNullLogger()
	}
	c.writeNode.Store(-1)
	if cfg.BatchWrites {
		c.batches = newBatcher(c)
	}
	return c, nil
}

// NormalizeAddress turns "host:port" or a URL into the base URL of a
// node's API ("http://host:port").
func NormalizeAddress(a string) (string, error) {
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	u, err := url.Parse(a)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("dmsc client: bad node address %q: want http://host:port", a)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "4646")
	}
	return u.Scheme + "://" + u.Host + strings.TrimRight(u.Path, "/"), nil
}

// Addresses returns the node addresses the client uses.
func (c *Client) Addresses() []string { return append([]string(nil), c.addrs...) }

// NewRequestID returns a fresh request ID (a random UUID).
func NewRequestID() string { return uuid.NewString() }

// QueryOptions choose the consistency of a read and make it a blocking
// query. A nil *QueryOptions reads the answering node's replica as it is.
type QueryOptions struct {
	// Consistent makes the read linearizable (the leader confirms its
	// leadership; the answering node catches up first).
	Consistent bool
	// MaxStale bounds staleness: a node that heard from the leader longer
	// ago than this makes the read consistent.
	MaxStale time.Duration
	// WaitIndex makes a blocking query: the answer comes when the state
	// index passes WaitIndex, or after WaitTime.
	WaitIndex uint64
	WaitTime  time.Duration
}

func (q *QueryOptions) values(v url.Values) {
	if q == nil {
		return
	}
	if q.Consistent {
		v.Set("consistent", "")
	}
	if q.MaxStale > 0 {
		v.Set("max_stale", q.MaxStale.String())
	}
	if q.WaitIndex > 0 {
		v.Set("index", strconv.FormatUint(q.WaitIndex, 10))
		if q.WaitTime > 0 {
			v.Set("wait", q.WaitTime.String())
		}
	}
}

// blockingWait is how much longer than usual a read may take.
func (q *QueryOptions) blockingWait() time.Duration {
	if q == nil || q.WaitIndex == 0 {
		return 0
	}
	if q.WaitTime <= 0 {
		return DefaultWatchWait
	}
	return min(q.WaitTime, 10*time.Minute) + q.WaitTime/16
}

// QueryMeta says how fresh a read was.
type QueryMeta struct {
	// Index is the state index the read saw; pass it as WaitIndex to
	// block until the state changes.
	Index uint64
	// LastContact is the time since the answering node last heard from
	// the leader: 0 on the leader, negative when never.
	LastContact time.Duration
	// KnownLeader reports whether the answering node knew a leader.
	KnownLeader bool
	// Address is the node that answered.
	Address string
}

// WriteMeta describes an acknowledged write.
type WriteMeta struct {
	// Index is the log index of the write (or of the read that produced
	// the answer); a blocking query with WaitIndex one below it sees it.
	Index uint64
	// RequestID is the request ID the write was applied under.
	RequestID string
	// Address is the node that answered.
	Address string
}

// request is one API call, sent again as the retry rules allow.
type request struct {
	method string
	path   string
	query  url.Values
	body   []byte
	ctype  string
	// write sends the request to the write node, not round robin.
	write bool
	// idempotent requests (reads, writes with a request ID) may be sent
	// again when their outcome is unknown.
	idempotent bool
	requestID  string
	// batchable writes may travel in a batch (Config.BatchWrites).
	batchable bool
	// extra is added to the attempt timeout (blocking waits).
	extra time.Duration
	// out receives the JSON answer of a success; nil discards it.
	out any
	// stream, when set, consumes a success instead of out.
	stream func(io.Reader) error
	// raw, when set, receives the body of a success as it came, instead
	// of out.
	raw *[]byte
	// okStatus are extra statuses >= 400 decoded as a success into out.
	okStatus int
}

// answer is what the request machinery returns on success.
type answer struct {
	status  int
	header  http.Header
	address string
}

func (a *answer) queryMeta() *QueryMeta {
	m := &QueryMeta{Address: a.address}
	m.Index, _ = strconv.ParseUint(a.header.Get(wire.HeaderIndex), 10, 64)
	if lc, err := strconv.ParseInt(a.header.Get(wire.HeaderLastContact), 10, 64); err == nil {
		if lc < 0 {
			m.LastContact = -1
		} else {
			m.LastContact = time.Duration(lc) * time.Millisecond
		}
	}
	m.KnownLeader = a.header.Get(wire.HeaderKnownLeader) == "true"
	return m
}

func (a *answer) writeMeta() *WriteMeta {
	m := &WriteMeta{RequestID: a.header.Get(wire.HeaderRequestID), Address: a.address}
	m.Index, _ = strconv.ParseUint(a.header.Get(wire.HeaderIndex), 10, 64)
	return m
}

// namespacedPath reports whether a route acts in a namespace.
func namespacedPath(path string) bool {
	for _, p := range []string{"/v1/allocations", "/v1/queue", "/v1/history", "/v1/stats", "/v1/recommendations", "/v1/event/stream"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// get is a read with query options.
func (c *Client) get(ctx context.Context, path string, v url.Values, q *QueryOptions, out any) (*QueryMeta, error) {
	if v == nil {
		v = url.Values{}
	}
	q.values(v)
	ans, err := c.do(ctx, &request{method: http.MethodGet, path: path, query: v, idempotent: true, extra: q.blockingWait(), out: out})
	if err != nil {
		return nil, err
	}
	return ans.queryMeta(), nil
}

// write sends a write with a JSON body; requestID is the body's request
// ID, also sent as the X-Request-Id header.
func (c *Client) write(ctx context.Context, method, path string, body any, requestID string, out any) (*WriteMeta, error) {
	rq, err := writeRequest(method, path, body, requestID, out)
	if err != nil {
		return nil, err
	}
	ans, err := c.do(ctx, rq)
	if err != nil {
		return nil, err
	}
	return ans.writeMeta(), nil
}

// writeRequest is the request of a write with a JSON body.
func writeRequest(method, path string, body any, requestID string, out any) (*request, error) {
	b, err := jsonBody(body)
	if err != nil {
		return nil, err
	}
	return &request{method: method, path: path, body: b, ctype: "application/json",
		write: true, idempotent: true, requestID: requestID, out: out}, nil
}

// jsonBody encodes a request body.
func jsonBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("dmsc client: encode request: %w", err)
	}
	return b, nil
}

// orNewID returns id, or a fresh request ID when it is empty.
func orNewID(id string) string {
	if id == "" {
		return NewRequestID()
	}
	return id
}

// do sends a request, retrying on another node as the rules allow:
// retryable API errors (the envelope's flag, 429, 502, 503, 504) and
// connection failures, for idempotent requests; only failures that prove
// the request was not served otherwise.
func (c *Client) do(ctx context.Context, rq *request) (*answer, error) {
	n := len(c.addrs)
	readStart := int(c.rr.Add(1)-1) % n
	var last error
	failed := -1
	for attempt := 0; ; attempt++ {
		node := (readStart + attempt) % n
		if rq.write {
			node = c.writeTarget(ctx, failed)
		}
		ans, err, sent := c.once(ctx, c.addrs[node], rq)
		if err == nil {
			if rq.write {
				c.writeNode.Store(int64(node))
				if ans.header.Get(wire.HeaderForwarded) == "true" {
					c.seekLeader(ctx, node)
				}
			}
			return ans, nil
		}
		if ctx.Err() != nil {
			// The attempt the context cut short tells nothing new.
			if last == nil {
				last = err
			}
			return nil, ctxError(ctx, attempt+1, last)
		}
		last = err
		if attempt >= c.cfg.MaxRetries || !c.retryable(rq, err, sent) {
			if attempt > 0 {
				return nil, fmt.Errorf("dmsc client: %s %s: giving up after %d attempts: %w", rq.method, rq.path, attempt+1, err)
			}
			return nil, err
		}
		if rq.write {
			// Move on from the node that failed; the next attempt asks
			// the others who leads.
			c.writeNode.CompareAndSwap(int64(node), -1)
			failed = node
		}
		wait := c.backoff(attempt, err)
		c.log.Debug("retrying", "method", rq.method, "path", rq.path, "node", c.addrs[node],
			"request_id", rq.requestID, "attempt", attempt+1, "wait", wait, "error", err)
		if !sleepCtx(ctx, wait) {
			return nil, ctxError(ctx, attempt+1, last)
		}
	}
}

// ctxError is the error of a call its context ended; it matches both the
// context's error and the last attempt's.
func ctxError(ctx context.Context, attempts int, last error) error {
	if last == nil || errors.Is(last, ctx.Err()) {
		return ctx.Err()
	}
	return fmt.Errorf("dmsc client: %w after %d attempts; last error: %w", ctx.Err(), attempts, last)
}

// retryable decides whether a failed attempt is sent again. sent is false
// when the request surely never reached the node.
func (c *Client) retryable(rq *request, err error, sent bool) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		if !rq.idempotent {
			// Only answers that say nothing was done.
			return wire.NotAppliedCode(ae.Code)
		}
		return ae.Retryable || retryableStatus(ae.Status)
	}
	var ce *ConnError
	if errors.As(err, &ce) {
		return rq.idempotent || !sent
	}
	return false
}

// backoff is the wait before attempt+1: exponential, with jitter, at least
// a 429's Retry-After when there is one node to ask.
func (c *Client) backoff(attempt int, err error) time.Duration {
	bound := c.cfg.RetryWait << min(attempt, 20)
	if bound <= 0 || bound > c.cfg.RetryWaitMax {
		bound = c.cfg.RetryWaitMax
	}
	wait := bound/2 + rand.N(bound/2+1)
	var ae *APIError
	if len(c.addrs) == 1 && errors.As(err, &ae) && ae.Code == ErrOverloaded.Code {
		wait = max(wait, time.Second)
	}
	return wait
}

// writeTarget picks the node for a write: the last that answered one, or
// else the leader if a node names one among the configured addresses, or
// else the node after the one that failed last (failed < 0: the next in
// turn).
func (c *Client) writeTarget(ctx context.Context, failed int) int {
	if w := c.writeNode.Load(); w >= 0 {
		return int(w)
	}
	n := len(c.addrs)
	if n > 1 {
		if i, ok := c.findLeader(ctx, failed); ok {
			c.writeNode.CompareAndSwap(-1, int64(i))
			return i
		}
	}
	i := (failed + 1) % n
	if failed < 0 {
		i = int(c.rr.Add(1)-1) % n
	}
	c.writeNode.CompareAndSwap(-1, int64(i))
	return i
}

// leaderLookupTimeout bounds one question for the leader during failover.
const leaderLookupTimeout = time.Second

// seekLeader moves the writes to the leader after node, not the leader,
// answered one (X-Dmsc-Forwarded): after a failover the node a client
// writes to is often a follower that forwards every write, those of a
// batch one by one. It asks at most once per leaderRecheck, whatever the
// number of writers; a leader that is not among the addresses leaves the
// writes where they are.
func (c *Client) seekLeader(ctx context.Context, node int) {
	now := time.Now().UnixNano()
	last := c.leaderSought.Load()
	if now-last < int64(leaderRecheck) || !c.leaderSought.CompareAndSwap(last, now) {
		return
	}
	if i, ok := c.findLeader(ctx, -1); ok && i != node {
		c.writeNode.CompareAndSwap(int64(node), int64(i))
		c.log.Debug("writes move to the leader", "from", c.addrs[node], "to", c.addrs[i])
	}
}

// findLeader asks the nodes who leads, starting after the one that failed
// last and skipping it, and returns the index of the leader's address if
// it is one of ours.
func (c *Client) findLeader(ctx context.Context, failed int) (int, bool) {
	n := len(c.addrs)
	for k := range n {
		i := (failed + 1 + k) % n
		if i == failed {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, min(leaderLookupTimeout, c.cfg.Timeout))
		var l wire.Leader
		_, err, _ := c.once(lctx, c.addrs[i], &request{method: http.MethodGet, path: "/v1/cluster/leader", idempotent: true, out: &l})
		cancel()
		if err != nil || l.HTTPAddr == "" {
			continue
		}
		for j, a := range c.addrs {
			if u, err := url.Parse(a); err == nil && u.Host == l.HTTPAddr {
				return j, true
			}
		}
		return 0, false
	}
	return 0, false
}

// once sends one attempt to one node. sent is false when the request
// surely did not reach it (the connection could not be made).
func (c *Client) once(ctx context.Context, addr string, rq *request) (ans *answer, err error, sent bool) {
	if rq.batchable && c.batches != nil && !c.batches.off.Load() {
		return c.batches.send(ctx, addr, rq)
	}
	timeout := c.cfg.Timeout + rq.extra
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := addr + c.target(rq)
	var body io.Reader
	if rq.body != nil {
		body = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(actx, rq.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("dmsc client: %w", err), false
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "dmsc-go-client")
	if rq.ctype != "" {
		req.Header.Set("Content-Type", rq.ctype)
	}
	if rq.requestID != "" {
		req.Header.Set(wire.HeaderRequestID, rq.requestID)
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.connError(ctx, actx, addr, timeout, err), !isDialError(err)
	}
	defer resp.Body.Close()
	ans = &answer{status: resp.StatusCode, header: resp.Header, address: addr}
	if resp.StatusCode >= 400 && resp.StatusCode != rq.okStatus {
		return nil, readAPIError(resp, addr), true
	}
	switch {
	case rq.stream != nil:
		err = rq.stream(resp.Body)
	case rq.raw != nil:
		*rq.raw, err = io.ReadAll(resp.Body)
	case rq.out != nil:
		err = decode(resp.Body, rq.out)
	default:
		_, err = io.Copy(io.Discard, resp.Body)
	}
	if err != nil {
		if rq.stream != nil {
			// Part of the answer may be written already: no retry.
			return nil, fmt.Errorf("dmsc client: %s %s from %s: %w", rq.method, rq.path, addr, err), false
		}
		return nil, c.connError(ctx, actx, addr, timeout, err), true
	}
	return ans, nil, true
}

// target is the path of a request with its query, the client's
// namespace added where the route acts in one.
func (c *Client) target(rq *request) string {
	query := rq.query
	if c.cfg.Namespace != "" && namespacedPath(rq.path) && !query.Has("namespace") {
		query = url.Values{"namespace": {c.cfg.Namespace}}
		for k, v := range rq.query {
			query[k] = v
		}
	}
	if len(query) > 0 {
		return rq.path + "?" + query.Encode()
	}
	return rq.path
}

// connError names a failed exchange: an attempt timeout is ErrTimeout (the
// outcome of a write is unknown), anything else a *ConnError.
func (c *Client) connError(ctx, actx context.Context, addr string, timeout time.Duration, err error) error {
	if ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		return &APIError{Code: ErrTimeout.Code, Retryable: true, Address: addr,
			Message: fmt.Sprintf("no answer from %s within %v; outcome unknown", addr, timeout)}
	}
	return &ConnError{Address: addr, Err: err}
}

func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// readAPIError reads the JSON error envelope of an answer of 400 or more.
func readAPIError(resp *http.Response, addr string) *APIError {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return apiErrorOf(resp.StatusCode, data, addr)
}

// apiErrorOf reads the JSON error envelope of an answer of 400 or more.
func apiErrorOf(status int, data []byte, addr string) *APIError {
	ae := &APIError{Status: status, Address: addr}
	var env wire.ErrorResponse
	if err := unmarshal(data, &env); err == nil && env.Error.Code != "" {
		ae.Code, ae.Message, ae.Retryable = env.Error.Code, env.Error.Message, env.Error.Retryable
		ae.WhyNot, ae.AllocationID, ae.RequestID = env.Error.WhyNot, env.Error.AllocationID, env.Error.RequestID
		return ae
	}
	ae.Code = codeOfStatus(status)
	ae.Message = strings.TrimSpace(string(data))
	if ae.Message == "" {
		ae.Message = http.StatusText(status)
	}
	ae.Retryable = retryableStatus(status)
	return ae
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

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }
