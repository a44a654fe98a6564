package bench

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

func TestRawApply(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("RAW_NODES"))
	if n == 0 {
		t.Skip()
	}
	ctx := context.Background()
	lc, err := StartLocal(ctx, LocalConfig{Servers: n, Dir: t.TempDir(), InMemory: os.Getenv("RAW_MEM") != ""})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close(ctx)
	node := lc.nodes[0]
	for _, nd := range lc.nodes {
		if nd.IsLeader() {
			node = nd
		}
	}
	for _, h := range Inventory(64, 8) {
		res, err := node.Apply(ctx, &fsm.RegisterHost{Host: fsm.HostSpec{ID: h.ID}, Devices: h.Devices})
		if err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
	}
	var ops atomic.Int64
	end := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				res, err := node.Apply(ctx, &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}}})
				if err != nil || res.Err != nil {
					t.Error(err, res.Err)
					return
				}
				res, err = node.Apply(ctx, &fsm.Release{AllocationID: res.Allocation.ID})
				if err != nil || res.Err != nil {
					t.Error(err, res.Err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d nodes: %.0f alloc+release pairs/s", n, float64(ops.Load())/time.Since(start).Seconds())
}

func workers() int {
	n, _ := strconv.Atoi(os.Getenv("RAW_WORKERS"))
	if n == 0 {
		return 64
	}
	return n
}
