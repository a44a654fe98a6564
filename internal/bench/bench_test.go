package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
)

func TestParseMix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mix
		bad  bool
	}{
		{in: "alloc=80,read=15,renew=5", want: Mix{OpAlloc: 80, OpRead: 15, OpRenew: 5}},
		{in: "alloc=1,alloc4=1,alloc8=1", want: Mix{OpAlloc: 1, OpAlloc4: 1, OpAlloc8: 1}},
		{in: "alloc=1", want: Mix{OpAlloc: 1}},
		{in: " read = 3 , ALLOC=2 ", want: Mix{OpAlloc: 2, OpRead: 3}},
		{in: "alloc=0,renew=7,", want: Mix{OpRenew: 7}},
		{in: "", bad: true},
		{in: "alloc=0", bad: true},
		{in: "alloc", bad: true},
		{in: "alloc=-1,read=2", bad: true},
		{in: "alloc=x", bad: true},
		{in: "alloc=1,alloc=2", bad: true},
		{in: "write=5", bad: true},
	} {
		got, err := ParseMix(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseMix(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMix(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseMix(got.String()); err != nil || back != got {
			t.Errorf("ParseMix(%q.String()) = %v, %v; want %v", tc.in, back, err, got)
		}
	}
}

func TestMixPick(t *testing.T) {
	m := Mix{OpAlloc: 2, OpRead: 0, OpRenew: 3}
	want := []Op{OpAlloc, OpAlloc, OpRenew, OpRenew, OpRenew}
	for r, op := range want {
		if got := m.pick(r); got != op {
			t.Errorf("pick(%d) = %v, want %v", r, got, op)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value", ms(7), 99, 7 * time.Millisecond},
		{"median of odd", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"median of even takes the lower", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 1..100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p95 of 1..100", ms(hundred...), 95, 95 * time.Millisecond},
		{"p100 is the max", ms(hundred...), 100, 100 * time.Millisecond},
		{"p0 is the min", ms(hundred...), 0, 1 * time.Millisecond},
		{"p99 of 10 values is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
	} {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	lat := []time.Duration{4 * time.Millisecond, 1 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 1500 * time.Microsecond}
	got := Summarize(lat)
	want := Latency{P50: 2, P95: 4, P99: 4, Max: 4, Mean: 2.3}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if (Summarize(nil) != Latency{}) {
		t.Error("Summarize(nil) is not zero")
	}
}

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.APIError{Status: 409, Code: client.ErrNoCapacity.Code}, "no_capacity"},
		{fmt.Errorf("giving up: %w", &client.APIError{Status: 429, Code: "overloaded"}), "overloaded"},
		{&client.ConnError{Address: "x", Err: errors.New("refused")}, "connection"},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), "deadline"},
		{errors.New("boom"), "other"},
	} {
		if got := ErrorKind(tc.err); got != tc.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestInventory(t *testing.T) {
	hosts := Inventory(5, 3)
	if len(hosts) != 5 {
		t.Fatalf("%d hosts, want 5", len(hosts))
	}
	ids := map[string]bool{}
	models := map[string]bool{}
	for _, h := range hosts {
		if len(h.Devices) != 3 {
			t.Errorf("host %s has %d devices, want 3", h.ID, len(h.Devices))
		}
		for _, d := range h.Devices {
			if ids[d.ID] {
				t.Errorf("device ID %s repeats", d.ID)
			}
			ids[d.ID] = true
			models[d.Name] = true
			if d.Type != client.GPU || d.Capabilities.MemoryGB <= 0 {
				t.Errorf("device %+v is not a GPU with memory", d)
			}
		}
	}
	if len(models) != len(gpuModels) {
		t.Errorf("%d GPU models, want %d", len(models), len(gpuModels))
	}
}

// TestRunLocal runs a short bench against a one-node cluster on disk and
// checks that every operation kind succeeded and nothing failed.
func TestRunLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{
		Servers: 1, Dir: t.TempDir(), Version: "test", HTTP: api.NodeHandler(api.Options{Version: "test", Role: "server"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		if err := lc.Close(cctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	cl, err := client.New(client.Config{Addresses: lc.Addresses()})
	if err != nil {
		t.Fatal(err)
	}
	hosts := Inventory(4, 8)
	if err := Register(ctx, cl, hosts); err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, cl, Config{Clients: 4, Duration: 700 * time.Millisecond, Mix: Mix{OpAlloc: 4, OpAlloc4: 2, OpRead: 3, OpRenew: 3}, Hosts: hosts, Nodes: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || len(res.Errors) != 0 {
		t.Errorf("%d operations failed: %v", res.Failed, res.Errors)
	}
	for _, op := range []string{"alloc", "alloc4", "read", "renew"} {
		if res.ByOp[op].Ops == 0 {
			t.Errorf("no %s operation succeeded: %+v", op, res.ByOp)
		}
	}
	// Each request is timed on its own: every alloc operation is an
	// allocate and a release, and the writes are those and the renewals.
	req := res.ByRequest
	allocs := res.ByOp["alloc"].Ops + res.ByOp["alloc4"].Ops
	if req["allocate"].Ops != allocs || req["release"].Ops != allocs || req["read"].Ops != res.ByOp["read"].Ops || req["renew"].Ops != res.ByOp["renew"].Ops {
		t.Errorf("requests %+v do not add up to the operations %+v", req, res.ByOp)
	}
	if req["allocate"].LatencyMS.P50 <= 0 || req["allocate"].LatencyMS.P50 > res.ByOp["alloc"].LatencyMS.Max {
		t.Errorf("allocate latency %+v against alloc %+v", req["allocate"].LatencyMS, res.ByOp["alloc"].LatencyMS)
	}
	writes := float64(2*allocs+req["renew"].Ops) / res.DurationS
	if res.WritesPerSec < 0.99*writes || res.WritesPerSec > 1.01*writes {
		t.Errorf("writes/s %.1f, want %.1f", res.WritesPerSec, writes)
	}
	if res.OpsPerSec <= 0 || res.LatencyMS.P50 <= 0 || res.LatencyMS.Max < res.LatencyMS.P99 || res.Devices != 32 {
		t.Errorf("implausible result %+v", res)
	}
	// Every allocation is back: the held ones were released at the end.
	devs, _, err := cl.Devices(ctx, nil, &client.QueryOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if len(d.Allocations) != 0 {
			t.Errorf("device %s still holds %v", d.ID, d.Allocations)
		}
	}
	if err := Unregister(ctx, cl, hosts); err != nil {
		t.Fatal(err)
	}
	if hs, _, err := cl.Hosts(ctx, &client.QueryOptions{Consistent: true}); err != nil || len(hs) != 0 {
		t.Errorf("hosts after Unregister: %v %v", hs, err)
	}
}
