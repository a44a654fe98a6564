package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// BenchmarkLocalApply measures what replication alone costs, without the
// HTTP API: allocate+release pairs applied through the leader of a local
// cluster (Raft log on disk), 64 at a time. Compare its pairs/s with
// `dmsc bench -mix alloc=1` to split the time between the API and the
// replicated log.
func BenchmarkLocalApply(b *testing.B) {
	for _, servers := range []int{1, 3} {
		b.Run(fmt.Sprintf("servers=%d", servers), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			lc, err := cluster.StartLocal(ctx, cluster.LocalConfig{Servers: servers, Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer lc.Close(context.Background())
			leader := lc.Leader()
			if leader == nil {
				b.Fatal("no leader")
			}
			for _, h := range Inventory(64, 8) {
				devices := make([]fsm.DeviceSpec, len(h.Devices))
				for i, d := range h.Devices {
					devices[i] = api.DeviceSpecFromWire(d)
				}
				res, err := leader.Apply(ctx, &fsm.RegisterHost{Host: fsm.HostSpec{ID: h.ID}, Devices: devices})
				if err == nil {
					err = res.Err
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			// 64 pairs in flight, as `dmsc bench -clients 64`.
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start, cpu0 := time.Now(), processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := applyPair(ctx, leader); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer() // not the shutdown
			reportPairs(b, start, cpu0)
		})
	}
}

// applyPair allocates one GPU and releases it.
func applyPair(ctx context.Context, n *cluster.Node) error {
	res, err := n.Apply(ctx, &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return err
	}
	res, err = n.Apply(ctx, &fsm.Release{AllocationID: res.Allocation.ID})
	if err == nil {
		err = res.Err
	}
	return err
}
