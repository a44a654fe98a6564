package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// TestClusterFailover runs a real three-node cluster in this process. A
// client given all three addresses keeps allocating and releasing while
// the leader is stopped and another is elected; afterwards every
// acknowledged allocation exists, each device is held by at most one
// active allocation, and there is exactly one allocation per
// acknowledged request: no retry took a second device.
//
// With BatchWrites the workers' writes travel in batches; the same holds.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Raft cluster")
	}
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) { testClusterFailover(t, batch) })
	}
}

func testClusterFailover(t *testing.T, batch bool) {
	lc := localCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	first, err := lc.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}

	sent := &countingTransport{next: http.DefaultTransport.(*http.Transport).Clone(), byID: map[string]int{}}
	c, err := client.New(client.Config{
		HTTPClient:   &http.Client{Transport: sent},
		Addresses:    lc.Addresses(),
		Timeout:      5 * time.Second,
		MaxRetries:   100,
		RetryWait:    20 * time.Millisecond,
		RetryWaitMax: 300 * time.Millisecond,
		BatchWrites:  batch,
	})
	if err != nil {
		t.Fatal(err)
	}
	const gpus = 32
	var devices []client.DeviceSpec
	for i := range gpus {
		devices = append(devices, gpuSpec(fmt.Sprintf("g%02d", i), 80))
	}
	if _, _, err := c.RegisterHost(ctx, "h1", client.RegisterHostRequest{Devices: devices}); err != nil {
		t.Fatal(err)
	}

	// Workers allocate one GPU at a time, keep at most three each, and
	// release the oldest.
	type acked struct {
		id, requestID, device string
	}
	var (
		mu       sync.Mutex
		all      []acked
		held     = map[string]acked{}
		failures []error
		stop     atomic.Bool
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(all)
	}
	var wg sync.WaitGroup
	workers := 3
	if batch {
		workers = 8 // enough at once for batches of several writes
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []acked
			for !stop.Load() && ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				a, meta, err := c.Allocate(cctx, gpuRequest)
				ccancel()
				if err != nil {
					fail(fmt.Errorf("worker %d: allocate: %w", w, err))
					return
				}
				if a.Status != client.Active || len(a.Devices) != 1 || a.RequestID != meta.RequestID {
					fail(fmt.Errorf("worker %d: allocation %+v meta %+v", w, a, meta))
					return
				}
				ak := acked{id: a.ID, requestID: meta.RequestID, device: a.Devices[0].DeviceID}
				mine = append(mine, ak)
				mu.Lock()
				all = append(all, ak)
				held[ak.id] = ak
				mu.Unlock()
				if len(mine) < 3 {
					continue
				}
				oldest := mine[0]
				mine = mine[1:]
				cctx, ccancel = context.WithTimeout(ctx, 20*time.Second)
				r, _, err := c.Release(cctx, oldest.id)
				ccancel()
				if err != nil || r.Status != client.Released {
					fail(fmt.Errorf("worker %d: release %s: %v %v", w, oldest.id, r, err))
					return
				}
				mu.Lock()
				delete(held, oldest.id)
				mu.Unlock()
			}
		}()
	}
	progress := func(target int, what string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() error {
			mu.Lock()
			nf := len(failures)
			mu.Unlock()
			if nf > 0 {
				return nil // reported below
			}
			if n := count(); n < target {
				return fmt.Errorf("%d of %d allocations", n, target)
			}
			return nil
		})
	}
	progress(20, "allocations before the failover")

	// Stop the leader: its API drops every connection at once.
	before := count()
	firstID := first.Self().ID
	if err := lc.Stop(ctx, firstID); err != nil {
		t.Errorf("stop %s: %v", firstID, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	second, err := lc.WaitLeader(wctx)
	wcancel()
	if err != nil {
		t.Fatal(err)
	}
	progress(count()+20, "allocations after the failover")
	stop.Store(true)
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	resent := sent.resent()
	t.Logf("%d allocations (%d before the failover); leader %s stopped, %s elected; %d writes sent more than once",
		len(all), before, firstID, second.Self().ID, resent)
	if batch {
		sent.mu.Lock()
		batches, batched := sent.batches, sent.batched
		sent.mu.Unlock()
		t.Logf("%d writes in %d batches", batched, batches)
		if batches == 0 || batched <= batches {
			t.Errorf("%d writes in %d batches: the writes did not travel together", batched, batches)
		}
	}
	if resent == 0 {
		// Writes went to the leader, so the failover must have made the
		// client send at least one again.
		t.Error("no write was retried across the failover")
	}

	// Every acknowledged allocation exists, active if held, else released.
	consistent := &client.QueryOptions{Consistent: true}
	for _, ak := range all {
		a, _, err := c.Allocation(ctx, ak.id, consistent)
		if err != nil {
			t.Fatalf("acknowledged allocation %s: %v", ak.id, err)
		}
		want := client.Released
		if _, ok := held[ak.id]; ok {
			want = client.Active
		}
		if a.Status != want || a.RequestID != ak.requestID || a.Devices[0].DeviceID != ak.device {
			t.Errorf("allocation %s is %s on %v (request %s), want %s on %s (request %s)",
				ak.id, a.Status, a.Devices, a.RequestID, want, ak.device, ak.requestID)
		}
	}
	// Exactly one allocation per acknowledged request, and no device in two
	// active allocations.
	var everything []client.Allocation
	f := &client.AllocationFilter{History: true, Limit: 1000}
	for {
		page, _, err := c.Allocations(ctx, f, consistent)
		if err != nil {
			t.Fatal(err)
		}
		everything = append(everything, page.Allocations...)
		if page.Next == "" {
			break
		}
		f.Next = page.Next
	}
	if len(everything) != len(all) {
		t.Errorf("the cluster holds %d allocations for %d acknowledged requests", len(everything), len(all))
	}
	byRequest := map[string]int{}
	holder := map[string]string{}
	for _, a := range everything {
		byRequest[a.RequestID]++
		if a.Status != client.Active {
			continue
		}
		for _, d := range a.Devices {
			if other, ok := holder[d.DeviceID]; ok {
				t.Errorf("device %s is held by %s and %s", d.DeviceID, other, a.ID)
			}
			holder[d.DeviceID] = a.ID
		}
	}
	for rid, n := range byRequest {
		if n != 1 {
			t.Errorf("request %s made %d allocations", rid, n)
		}
	}
	if len(holder) != len(held) {
		t.Errorf("%d devices in use, %d allocations held", len(holder), len(held))
	}
	devs, _, err := c.Devices(ctx, nil, consistent)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if len(d.Allocations) > 1 {
			t.Errorf("device %s holds %v", d.ID, d.Allocations)
		}
	}
	// The client's writes now go to the new leader's replica set: a last
	// write works and is visible everywhere.
	if _, _, err := c.SetPolicy(ctx, client.GPU, client.PolicyConfig{Policy: client.WorstFit}); err != nil {
		t.Fatal(err)
	}
	if ls, err := c.Leader(ctx); err != nil || ls.ID != second.Self().ID {
		t.Fatalf("leader %+v %v, want %s", ls, err, second.Self().ID)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}

// countingTransport counts the attempts of each request ID, and the
// batches and the writes they carried.
type countingTransport struct {
	next    http.RoundTripper
	mu      sync.Mutex
	byID    map[string]int
	batches int
	batched int
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ids := []string{r.Header.Get(wire.HeaderRequestID)}
	if r.URL.Path == "/v1/batch" {
		data, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		var b wire.BatchRequest
		if err := json.Unmarshal(data, &b); err != nil {
			return nil, err
		}
		ids = ids[:0]
		for _, it := range b.Requests {
			ids = append(ids, it.RequestID)
		}
		ct.mu.Lock()
		ct.batches++
		ct.batched += len(ids)
		ct.mu.Unlock()
	}
	ct.mu.Lock()
	for _, id := range ids {
		if id != "" {
			ct.byID[id]++
		}
	}
	ct.mu.Unlock()
	return ct.next.RoundTrip(r)
}

// resent counts the request IDs sent more than once.
func (ct *countingTransport) resent() int {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	n := 0
	for _, k := range ct.byID {
		if k > 1 {
			n++
		}
	}
	return n
}
