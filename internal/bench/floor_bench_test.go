package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/events"
	"github.com/dmsc/dmsc/fsm"
)

// BenchmarkHTTPFloor measures the ceiling of an HTTP API on this machine,
// with 64 keep-alive clients in this process as `dmsc bench -clients 64`:
//
//   - noop: a bare net/http server whose handler reads the body and
//     answers a fixed JSON document of an allocation's size. No API
//     machinery, no JSON work: the cost of HTTP/1.1 on loopback alone.
//   - api: the dmsc API (routing, limits, JSON, the SDK client) over a
//     backend that applies each command at once to an in-memory state (one
//     encode and decode, no Raft, no disk): allocate+release pairs as the
//     bench's alloc operation. The ceiling of `dmsc bench -mix alloc=1`.
//
// Compare its pairs/s with BenchmarkLocalApply (replication without HTTP)
// and with `dmsc bench` (both).
func BenchmarkHTTPFloor(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		answer := bytes.Repeat([]byte("x"), 400)
		answer = append(append([]byte(`{"x":"`), answer...), `"}`...)
		url, conns, stop := serveHTTP(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
		}))
		defer stop()
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		hc := &http.Client{Transport: tr}
		body := bytes.Repeat([]byte("y"), 150)
		runFloor(b, conns, func(ctx context.Context) error {
			// Two exchanges per op, as an allocate and its release.
			for range 2 {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/noop", bytes.NewReader(body))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("api", func(b *testing.B) {
		be := newMemBackend()
		url, conns, stop := serveHTTP(b, api.New(be, api.Options{Version: "bench", Role: "server"}))
		defer stop()
		cl, err := client.New(client.Config{Addresses: []string{url}, MaxRetries: -1, Timeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := Register(ctx, cl, Inventory(64, 8)); err != nil {
			b.Fatal(err)
		}
		runFloor(b, conns, func(ctx context.Context) error {
			a, _, err := cl.Allocate(ctx, client.AllocateRequest{Request: client.Request{Claims: []client.Claim{{Type: client.GPU, Count: 1}}}})
			if err != nil {
				return err
			}
			_, _, err = cl.Release(ctx, a.ID)
			return err
		})
	})
}

// runFloor runs op b.N times from 64 goroutines and reports ops/s and the
// connections the server accepted.
func runFloor(b *testing.B, conns *atomic.Int64, op func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	c0 := conns.Load()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportPairs(b, start, cpu0)
	b.ReportMetric(float64(conns.Load()-c0), "conns")
}

// reportPairs reports the pairs per second and the CPU time per pair of
// this process (clients and servers together): the CPU figure depends
// less than the rate on other load on the machine.
func reportPairs(b *testing.B, start time.Time, cpu0 time.Duration) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(ms(cpu)/float64(b.N), "cpu-ms/pair")
	}
}

// serveHTTP serves h on a free port of 127.0.0.1 and counts the
// connections it accepts.
func serveHTTP(b *testing.B, h http.Handler) (url string, conns *atomic.Int64, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	conns = &atomic.Int64{}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), conns, func() { _ = srv.Close() }
}

// memBackend is a single server without Raft: a command is encoded,
// decoded and applied at once to an in-memory state under the next log
// index, stamped with the wall clock.
type memBackend struct {
	mu    sync.Mutex
	f     *cluster.RaftFSM
	index uint64
}

var _ api.Backend = (*memBackend)(nil)

func newMemBackend() *memBackend { return &memBackend{f: cluster.NewRaftFSM(fsm.New())} }

func (m *memBackend) Apply(_ context.Context, cmd fsm.Command) (fsm.Result, error) {
	if fsm.RequestIDOf(cmd) == "" {
		fsm.SetRequestID(cmd, client.NewRequestID())
	}
	fsm.Stamp(cmd, time.Now())
	data, err := cluster.EncodeLogEntry(cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	m.mu.Lock()
	m.index++
	out := m.f.ApplyBatch([]*raft.Log{{Index: m.index, Type: raft.LogCommand, Data: data}})
	m.mu.Unlock()
	res, ok := out[0].(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("unexpected apply response %T", out[0])
	}
	return res, nil
}

func (m *memBackend) Read(ctx context.Context, opts cluster.ReadOptions, fn func(*fsm.State)) (cluster.ReadMeta, error) {
	if opts.MinIndex > 0 {
		wctx, cancel := context.WithTimeout(ctx, min(max(opts.Wait, time.Millisecond), cluster.MaxWait))
		_ = m.f.WaitModified(wctx, opts.MinIndex)
		cancel()
	}
	applied, modified := m.f.Read(fn)
	return cluster.ReadMeta{Index: modified, AppliedIndex: applied, KnownLeader: true, Leader: "mem"}, nil
}

func (m *memBackend) ResolveToken(_ context.Context, hash string) (tok fsm.ACLToken, authz *fsm.Authorizer, found bool, err error) {
	m.f.Read(func(st *fsm.State) {
		tok, found = st.TokenOfSecret(hash)
		if found {
			authz = st.Authorizer(tok)
		}
	})
	return tok, authz, found, nil
}

func (m *memBackend) Members() []cluster.Member { return []cluster.Member{m.Self()} }
func (m *memBackend) Leader() (cluster.LeaderInfo, bool) {
	return cluster.LeaderInfo{ID: "mem"}, true
}
func (m *memBackend) RaftConfiguration() (cluster.RaftConfiguration, error) {
	return cluster.RaftConfiguration{}, nil
}
func (m *memBackend) RemovePeer(context.Context, string) error  { return cluster.ErrNotServer }
func (m *memBackend) ReadmitPeer(context.Context, string) error { return cluster.ErrNotServer }
func (m *memBackend) SnapshotSave(context.Context, io.Writer) (cluster.ReadMeta, error) {
	return cluster.ReadMeta{}, cluster.ErrNotServer
}
func (m *memBackend) SnapshotRestore(context.Context, io.Reader) error { return cluster.ErrNotServer }
func (m *memBackend) SubscribeEvents(after uint64) (*events.Subscription, error) {
	return m.f.Events().Subscribe(after)
}
func (m *memBackend) Keyring(context.Context, cluster.KeyringOp, string) (cluster.KeyringResult, error) {
	return cluster.KeyringResult{}, cluster.ErrNotServer
}
func (m *memBackend) Status() cluster.Status {
	applied, _ := m.f.Indexes()
	return cluster.Status{ID: "mem", Server: true, State: "Leader", Leader: "mem", KnownLeader: true,
		CommitIndex: applied, AppliedIndex: applied, Ready: true}
}
func (m *memBackend) Self() cluster.Member {
	return cluster.Member{ID: "mem", Server: true, Status: cluster.MemberAlive, Leader: true}
}
