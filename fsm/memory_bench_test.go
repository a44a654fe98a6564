package fsm

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkMemory measures what the replicated state costs in heap: bytes
// per host, per device, per live allocation and per history record (an
// ended allocation kept by retention), derived indexes included. Each is
// the HeapAlloc growth, after a full GC, over the count added. The
// figures back the estimates in memory.go (EstimatedBytes).
//
//	go test -run '^$' -bench Memory -benchtime 1x ./fsm/
func BenchmarkMemory(b *testing.B) {
	const (
		hosts   = 10000
		history = 200000
	)
	for b.Loop() {
		// Hosts of 1 and of 8 devices: the difference is 7 devices a host.
		one := heapGrowth(func() any { return memHosts(b, hosts, 1) })
		eight := heapGrowth(func() any { return memHosts(b, hosts, 8) })
		perDevice := (eight - one) / float64(7*hosts)
		perHost := one/hosts - perDevice

		// Live allocations: one single-GPU allocation on every device.
		c := memHosts(b, hosts/10, 8)
		live := heapGrowth(func() any {
			for range hosts / 10 * 8 {
				c.must(b, &Allocate{Request: Request{Claims: []Claim{gpuClaim(8, 1)}}})
			}
			return c
		})
		perLive := live / float64(hosts/10*8)

		// History: allocate and release on a small cluster.
		h := memHosts(b, 16, 8)
		h.must(b, &SetRetention{Retention: Retention{MaxCount: history, MaxAge: DefaultRetention.MaxAge}})
		grown := heapGrowth(func() any {
			for range history {
				r := h.must(b, &Allocate{Request: Request{Claims: []Claim{gpuClaim(8, 1)}}})
				h.must(b, &Release{AllocationID: r.Allocation.ID})
			}
			return h
		})
		if n := h.s.HistoryLen(); n != history {
			b.Fatalf("history holds %d records, want %d", n, history)
		}
		perRecord := grown / history

		b.ReportMetric(perHost, "B/host")
		b.ReportMetric(perDevice, "B/device")
		b.ReportMetric(perLive, "B/live-allocation")
		b.ReportMetric(perRecord, "B/history-record")
	}
}

// heapGrowth returns how much the live heap grew while build ran, keeping
// what build returned alive until it is measured.
func heapGrowth(build func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
}

// memHosts builds a state of n hosts with perHost GPUs each.
func memHosts(b *testing.B, n, perHost int) *benchCluster {
	b.Helper()
	c := &benchCluster{s: New(), now: t0}
	for i := range n {
		id := fmt.Sprintf("host-%06d", i)
		h := &RegisterHost{
			Host:          HostSpec{ID: id, Address: fmt.Sprintf("10.%d.%d.%d:4647", i>>16&255, i>>8&255, i&255), Labels: map[string]string{"zone": fmt.Sprintf("zone-%d", i%4)}},
			InventoryHash: "0123456789abcdef",
		}
		for j := range perHost {
			h.Devices = append(h.Devices, DeviceSpec{
				ID: fmt.Sprintf("%s-gpu%d", id, j), Type: GPU, Name: "A100-80",
				Capabilities: Capabilities{Resources: Resources{MemoryGB: 80, ComputeUnits: 108}},
			})
		}
		c.must(b, h)
	}
	return c
}
