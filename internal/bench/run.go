package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dmsc/dmsc/client"
)

// Config says how hard and how long to drive the cluster.
type Config struct {
	// Clients is the number of concurrent clients, each with one
	// operation in flight at a time.
	Clients int
	// Duration is how long clients start new operations; operations in
	// flight at the end are finished and counted.
	Duration time.Duration
	// Mix weighs the operations.
	Mix Mix
	// Hosts are the registered hosts the clients read from.
	Hosts []Host
	// Nodes is the number of nodes driven, reported as is.
	Nodes int
	// OpTimeout bounds one operation; 0 takes 10s.
	OpTimeout time.Duration
	// Seed makes the clients' draws repeatable.
	Seed uint64
	// Progress receives a line every ProgressInterval (default 1s) while
	// the clients run; nil prints nothing.
	Progress         io.Writer
	ProgressInterval time.Duration
	// EventStreams is the number of event stream subscribers that read
	// through the run, spread over the nodes as the client spreads reads;
	// EventTopics their topics (none: every topic).
	EventStreams int
	EventTopics  []string
	// EventRaw makes the streams ask for gzip and count the bytes without
	// inflating or decoding them, over plain HTTP without a token (a
	// local cluster's nodes), so that what is measured is the servers'
	// cost more than the readers'. EventBytesReceived then counts them.
	EventRaw bool
	// ServersCPU, when set, is the CPU time the servers (separate
	// processes) have used so far; the result then reports what they
	// spent during the run.
	ServersCPU func() time.Duration
	// Connections, when set, counts the HTTP connections the nodes have
	// accepted so far (cluster.LocalCluster.Connections); the
	// result then reports how many the run opened.
	Connections func() int64
}

// Result is what a run measured. Latencies are those of successful
// operations; a failed operation counts in Failed and in Errors by code.
type Result struct {
	OpsPerSec float64          `json:"ops_per_sec"`
	Ops       int64            `json:"ops"`
	Failed    int64            `json:"failed"`
	LatencyMS Latency          `json:"latency_ms"`
	Errors    map[string]int64 `json:"errors"`
	Clients   int              `json:"clients"`
	DurationS float64          `json:"duration_s"`
	Nodes     int              `json:"nodes"`
	Mix       string           `json:"mix"`
	Hosts     int              `json:"hosts"`
	Devices   int              `json:"devices"`
	// ProcessCPUS is the CPU time this process spent during the run (with
	// a local cluster, the servers' too), and CPUMSPerOp that per
	// successful operation: a measure less sensitive than throughput to
	// other load on the machine. Zero where the system does not say.
	ProcessCPUS float64 `json:"process_cpu_s"`
	CPUMSPerOp  float64 `json:"cpu_ms_per_op"`
	// ServersCPUS is the CPU time the servers spent during the run (only
	// with Config.ServersCPU). CPUMSPerWrite is this process's and the
	// servers' CPU time per successful write request, and
	// ServersCPUMSPerWrite the servers' share of it.
	ServersCPUS          float64 `json:"servers_cpu_s,omitempty"`
	CPUMSPerWrite        float64 `json:"cpu_ms_per_write,omitempty"`
	ServersCPUMSPerWrite float64 `json:"servers_cpu_ms_per_write,omitempty"`
	// NewConnections is the number of HTTP connections the nodes accepted
	// during the run (only with Config.Connections): with keep-alive
	// working, about one per client and node.
	NewConnections int64 `json:"new_connections,omitempty"`
	// EventStreams is Config.EventStreams; EventsReceived how many events
	// they read in all during the run (EventBytesReceived: how many bytes,
	// with Config.EventRaw).
	EventStreams       int   `json:"event_streams,omitempty"`
	EventsReceived     int64 `json:"events_received,omitempty"`
	EventBytesReceived int64 `json:"event_bytes_received,omitempty"`
	// ByOp breaks the figures down by operation.
	ByOp map[string]OpResult `json:"by_op"`
	// ByRequest breaks them down by HTTP request (an alloc operation is an
	// allocate and a release request), each request timed on its own.
	ByRequest map[string]OpResult `json:"by_request"`
	// WritesPerSec is the successful write requests (allocate, release,
	// renew: each one Raft entry) per second.
	WritesPerSec float64 `json:"writes_per_sec"`
}

// OpResult is the share of one operation in a run.
type OpResult struct {
	Ops       int64   `json:"ops"`
	Failed    int64   `json:"failed"`
	OpsPerSec float64 `json:"ops_per_sec"`
	LatencyMS Latency `json:"latency_ms"`
}

// requestKind is one HTTP request an operation sends.
type requestKind int

const (
	reqAllocate requestKind = iota
	reqRelease
	reqRead
	reqRenew
	numRequests
)

var requestNames = [numRequests]string{"allocate", "release", "read", "renew"}

// isWrite reports whether the request commits a Raft entry.
func (k requestKind) isWrite() bool { return k != reqRead }

// holdTTL is the lease of the allocation each client holds for reads and
// renewals; renewals extend it by as much.
const holdTTL = 10 * time.Minute

// worker is one client's loop and what it measured.
type worker struct {
	cl   *client.Client
	cfg  *Config
	rng  *rand.Rand
	held string // an allocation this client holds, for read and renew
	// heldAt makes reads of held wait for a node that has applied it.
	heldAt *client.QueryOptions
	lat    [numOps][]time.Duration
	fails  [numOps]int64
	reqLat [numRequests][]time.Duration
	reqErr [numRequests]int64
	errs   map[string]int64
	live   *liveCounters
}

// liveCounters feed the progress line.
type liveCounters struct {
	ops, failed, latNS atomic.Int64
}

// Run drives the cluster behind cl with cfg.Clients clients for
// cfg.Duration and returns what it measured. Each client first takes one
// allocation to read and renew (when the mix has reads or renewals) and
// releases it at the end, outside the measured window. ctx ends the run
// early: the figures then cover the time until it ended.
func Run(ctx context.Context, cl *client.Client, cfg Config) (*Result, error) {
	if cfg.Clients <= 0 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("bench: need clients > 0 and a duration > 0")
	}
	if cfg.Mix.total() == 0 {
		cfg.Mix = DefaultMix
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 10 * time.Second
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = time.Second
	}
	if len(cfg.Hosts) == 0 && cfg.Mix[OpRead] > 0 {
		return nil, fmt.Errorf("bench: reads need the registered hosts")
	}
	live := &liveCounters{}
	workers := make([]*worker, cfg.Clients)
	for i := range workers {
		workers[i] = &worker{cl: cl, cfg: &cfg, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i))),
			errs: map[string]int64{}, live: live}
	}
	if cfg.Mix.needsHeld() {
		if err := takeHeld(ctx, workers); err != nil {
			return nil, err
		}
		defer releaseHeld(workers)
	}

	var received streamCounts
	open := sdkStreams(cl, cfg.EventTopics)
	if cfg.EventRaw {
		open = rawStreams(cl, cfg.EventTopics)
	}
	stopStreams, err := startStreams(ctx, cfg.EventStreams, open, &received)
	if err != nil {
		return nil, err
	}
	defer stopStreams()
	var conns0 int64
	if cfg.Connections != nil {
		conns0 = cfg.Connections()
	}
	cpu0 := processCPU()
	var servers0 time.Duration
	if cfg.ServersCPU != nil {
		servers0 = cfg.ServersCPU()
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	stopProgress := startProgress(cfg.Progress, cfg.ProgressInterval, start, live)
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, end)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	var servers time.Duration
	if cfg.ServersCPU != nil {
		servers = cfg.ServersCPU() - servers0
	}
	stopProgress()
	r := summarize(&cfg, workers, elapsed)
	r.EventStreams, r.EventsReceived, r.EventBytesReceived = cfg.EventStreams, received.events.Load(), received.bytes.Load()
	r.ProcessCPUS = round3(cpu.Seconds())
	if cfg.Connections != nil {
		r.NewConnections = cfg.Connections() - conns0
	}
	if r.Ops > 0 {
		r.CPUMSPerOp = round3(ms(cpu) / float64(r.Ops))
	}
	if writes := float64(r.writes()); writes > 0 {
		r.CPUMSPerWrite = round3(ms(cpu+servers) / writes)
		if cfg.ServersCPU != nil {
			r.ServersCPUS = round3(servers.Seconds())
			r.ServersCPUMSPerWrite = round3(ms(servers) / writes)
		}
	}
	return r, nil
}

// streamCounts is what the run's event streams received.
type streamCounts struct{ events, bytes atomic.Int64 }

// streamOpener opens the i-th of the run's event streams; read then
// reads it, counting into received, until the stream ends.
type streamOpener func(ctx context.Context, i int, received *streamCounts) (read func(), err error)

// startStreams opens n event streams with open and reads them until stop
// is called.
func startStreams(ctx context.Context, n int, open streamOpener, received *streamCounts) (stop func(), err error) {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	for i := range n {
		read, err := open(sctx, i, received)
		if err != nil {
			stop()
			return nil, fmt.Errorf("bench: event stream: %w", err)
		}
		wg.Go(read)
	}
	return stop, nil
}

// sdkStreams opens streams of topics through the SDK, which decodes
// them, counting events.
func sdkStreams(cl *client.Client, topics []string) streamOpener {
	return func(ctx context.Context, _ int, received *streamCounts) (func(), error) {
		ch, err := cl.Events(ctx, topics, 0)
		if err != nil {
			return nil, err
		}
		return func() {
			for b := range ch {
				received.events.Add(int64(len(b.Events)))
			}
		}, nil
	}
}

// rawStreams opens streams of topics on the client's nodes in turn, over
// plain HTTP, gzip as a browser or the SDK asks for it, and counts their
// bytes without inflating them.
func rawStreams(cl *client.Client, topics []string) streamOpener {
	q := url.Values{"topic": topics}
	addrs := cl.Addresses()
	return func(ctx context.Context, i int, received *streamCounts) (func(), error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, addrs[i%len(addrs)]+"/v1/event/stream?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept-Encoding", "gzip") // set here, so the transport does not inflate it
		resp, err := http.DefaultClient.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			err = fmt.Errorf("status %s", resp.Status)
		}
		if err != nil {
			return nil, err
		}
		return func() {
			defer resp.Body.Close()
			buf := make([]byte, 64<<10)
			for {
				k, err := resp.Body.Read(buf)
				received.bytes.Add(int64(k))
				if err != nil {
					return
				}
			}
		}, nil
	}
}

// takeHeld gives every worker an allocation to read and renew.
func takeHeld(ctx context.Context, workers []*worker) error {
	var wg sync.WaitGroup
	errs := make([]error, len(workers))
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
			defer cancel()
			a, meta, err := w.cl.Allocate(octx, client.AllocateRequest{Request: client.Request{
				Claims: []client.Claim{requestShapes[0]}, LeaseTTL: client.Duration(holdTTL),
			}})
			if err != nil {
				errs[i] = fmt.Errorf("bench: client %d: take the allocation it reads and renews: %w", i, err)
				return
			}
			w.held = a.ID
			w.heldAt = &client.QueryOptions{WaitIndex: meta.Index - 1, WaitTime: w.cfg.OpTimeout}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		releaseHeld(workers)
		return err
	}
	return nil
}

// releaseHeld gives back what takeHeld took, best effort.
func releaseHeld(workers []*worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		if w.held == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = w.cl.Release(ctx, w.held)
		}()
	}
	wg.Wait()
}

// loop runs operations until end or until ctx ends.
func (w *worker) loop(ctx context.Context, end time.Time) {
	total := w.cfg.Mix.total()
	for ctx.Err() == nil && time.Now().Before(end) {
		op := w.cfg.Mix.pick(w.rng.IntN(total))
		octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		t0 := time.Now()
		err := w.do(octx, op)
		d := time.Since(t0)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return // cut short by the caller: neither a success nor a failure
			}
			w.fails[op]++
			w.errs[ErrorKind(err)]++
			w.live.failed.Add(1)
			continue
		}
		w.lat[op] = append(w.lat[op], d)
		w.live.ops.Add(1)
		w.live.latNS.Add(int64(d))
	}
}

// do performs one operation.
func (w *worker) do(ctx context.Context, op Op) error {
	switch op {
	case OpAlloc, OpAlloc4, OpAlloc8:
		claim := requestShapes[w.rng.IntN(len(requestShapes))]
		switch op {
		case OpAlloc4:
			claim = client.Claim{Type: client.GPU, Count: 4}
		case OpAlloc8:
			claim = client.Claim{Type: client.GPU, Count: 8}
		}
		var a *client.Allocation
		err := w.timed(reqAllocate, func() (err error) {
			a, _, err = w.cl.Allocate(ctx, client.AllocateRequest{Request: client.Request{Claims: []client.Claim{claim}}})
			return err
		})
		if err != nil {
			return err
		}
		return w.timed(reqRelease, func() error {
			_, _, err := w.cl.Release(ctx, a.ID)
			return err
		})
	case OpRead:
		return w.timed(reqRead, func() error {
			if w.rng.IntN(2) == 0 {
				// Read your write: a node that has not yet applied the
				// allocation answers once it has.
				_, _, err := w.cl.Allocation(ctx, w.held, w.heldAt)
				return err
			}
			h := w.cfg.Hosts[w.rng.IntN(len(w.cfg.Hosts))]
			_, _, err := w.cl.Devices(ctx, &client.DeviceFilter{Host: h.ID}, nil)
			return err
		})
	case OpRenew:
		return w.timed(reqRenew, func() error {
			_, _, err := w.cl.Renew(ctx, w.held, holdTTL)
			return err
		})
	}
	return fmt.Errorf("bench: unknown operation %v", op)
}

// timed sends one request with send and records its latency, or its
// failure.
func (w *worker) timed(k requestKind, send func() error) error {
	t0 := time.Now()
	if err := send(); err != nil {
		w.reqErr[k]++
		return err
	}
	w.reqLat[k] = append(w.reqLat[k], time.Since(t0))
	return nil
}

// ErrorKind names an error for the errors-by-kind count: the API's error
// code, "connection" for a failed exchange, "deadline" for an operation
// that ran past its timeout, else "other".
func ErrorKind(err error) string {
	var ae *client.APIError
	var ce *client.ConnError
	switch {
	case errors.As(err, &ae) && ae.Code != "":
		return ae.Code
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.As(err, &ce):
		return "connection"
	}
	return "other"
}

// startProgress prints a line every interval until the returned function
// is called: elapsed time, throughput and mean latency over the last
// interval, the totals so far.
func startProgress(out io.Writer, interval time.Duration, start time.Time, live *liveCounters) func() {
	if out == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		var lastOps, lastLat int64
		last := start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				ops, lat, failed := live.ops.Load(), live.latNS.Load(), live.failed.Load()
				dOps := ops - lastOps
				mean := time.Duration(0)
				if dOps > 0 {
					mean = time.Duration((lat - lastLat) / dOps)
				}
				fmt.Fprintf(out, "bench: %5.1fs  %8.0f ops/s  mean %7.2fms  total %d ops, %d failed\n",
					now.Sub(start).Seconds(), float64(dOps)/now.Sub(last).Seconds(), ms(mean), ops, failed)
				lastOps, lastLat, last = ops, lat, now
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// summarize merges the workers' measurements.
func summarize(cfg *Config, workers []*worker, elapsed time.Duration) *Result {
	secs := elapsed.Seconds()
	r := &Result{
		Errors: map[string]int64{}, Clients: cfg.Clients, DurationS: round3(secs), Nodes: cfg.Nodes,
		Mix: cfg.Mix.String(), Hosts: len(cfg.Hosts), ByOp: map[string]OpResult{},
	}
	for _, h := range cfg.Hosts {
		r.Devices += len(h.Devices)
	}
	var all []time.Duration
	for op := range numOps {
		lat, failed := merge(workers, func(w *worker) ([]time.Duration, int64) { return w.lat[op], w.fails[op] })
		if cfg.Mix[op] == 0 && len(lat) == 0 && failed == 0 {
			continue
		}
		all = append(all, lat...)
		r.Ops += int64(len(lat))
		r.Failed += failed
		r.ByOp[Op(op).String()] = opResult(lat, failed, secs)
	}
	r.ByRequest = map[string]OpResult{}
	for k := range numRequests {
		lat, failed := merge(workers, func(w *worker) ([]time.Duration, int64) { return w.reqLat[k], w.reqErr[k] })
		if len(lat) == 0 && failed == 0 {
			continue
		}
		r.ByRequest[requestNames[k]] = opResult(lat, failed, secs)
	}
	r.WritesPerSec = round3(float64(r.writes()) / secs)
	for _, w := range workers {
		for k, n := range w.errs {
			r.Errors[k] += n
		}
	}
	r.OpsPerSec = round3(float64(r.Ops) / secs)
	r.LatencyMS = Summarize(all)
	return r
}

// writes is the number of successful write requests.
func (r *Result) writes() int64 {
	var n int64
	for k := range numRequests {
		if k.isWrite() {
			n += r.ByRequest[requestNames[k]].Ops
		}
	}
	return n
}

// merge gathers one kind's latencies and failures over the workers.
func merge(workers []*worker, of func(*worker) ([]time.Duration, int64)) (lat []time.Duration, failed int64) {
	for _, w := range workers {
		l, f := of(w)
		lat = append(lat, l...)
		failed += f
	}
	return lat, failed
}

// opResult summarises one kind's latencies (sorting them) and failures
// over secs seconds.
func opResult(lat []time.Duration, failed int64, secs float64) OpResult {
	return OpResult{Ops: int64(len(lat)), Failed: failed, OpsPerSec: round3(float64(len(lat)) / secs), LatencyMS: Summarize(lat)}
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// Format writes the result as a short report for people.
func (r *Result) Format() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Nodes     %d\n", r.Nodes)
	fmt.Fprintf(&b, "Clients   %d\n", r.Clients)
	fmt.Fprintf(&b, "Inventory %d hosts, %d GPUs\n", r.Hosts, r.Devices)
	fmt.Fprintf(&b, "Mix       %s\n", r.Mix)
	fmt.Fprintf(&b, "Duration  %.1fs\n", r.DurationS)
	if r.EventStreams > 0 {
		fmt.Fprintf(&b, "Streams   %d event streams read %d events, %d bytes\n", r.EventStreams, r.EventsReceived, r.EventBytesReceived)
	}
	fmt.Fprintf(&b, "Ops       %d ok, %d failed\n", r.Ops, r.Failed)
	fmt.Fprintf(&b, "Ops/s     %.0f\n", r.OpsPerSec)
	fmt.Fprintf(&b, "Writes/s  %.0f\n", r.WritesPerSec)
	if r.ProcessCPUS > 0 {
		fmt.Fprintf(&b, "CPU       %.1fs in this process, %.3fms per op\n", r.ProcessCPUS, r.CPUMSPerOp)
	}
	if r.ServersCPUS > 0 {
		fmt.Fprintf(&b, "          %.1fs in the servers; %.3fms per write in all, %.3fms of it in the servers\n",
			r.ServersCPUS, r.CPUMSPerWrite, r.ServersCPUMSPerWrite)
	}
	fmt.Fprintf(&b, "Latency   p50 %.2fms  p95 %.2fms  p99 %.2fms  max %.2fms\n\n",
		r.LatencyMS.P50, r.LatencyMS.P95, r.LatencyMS.P99, r.LatencyMS.Max)
	writeTable(&b, "OP", r.ByOp)
	b.WriteString("\n")
	writeTable(&b, "REQUEST", r.ByRequest)
	if len(r.Errors) > 0 {
		b.WriteString("\nErrors\n")
		kinds := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			fmt.Fprintf(&b, "  %-20s %d\n", k, r.Errors[k])
		}
	}
	return b.String()
}

// writeTable writes one line per operation or request, by name.
func writeTable(b *strings.Builder, head string, rows map[string]OpResult) {
	fmt.Fprintf(b, "%-8s %10s %8s %10s %9s %9s %9s %9s\n", head, "COUNT", "FAILED", "PER S", "P50 MS", "P95 MS", "P99 MS", "MAX MS")
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		o := rows[k]
		fmt.Fprintf(b, "%-8s %10d %8d %10.0f %9.2f %9.2f %9.2f %9.2f\n", k, o.Ops, o.Failed, o.OpsPerSec,
			o.LatencyMS.P50, o.LatencyMS.P95, o.LatencyMS.P99, o.LatencyMS.Max)
	}
}
