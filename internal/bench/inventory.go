package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/dmsc/dmsc/client"
)

// gpuModel is one GPU product of the synthetic inventory.
type gpuModel struct {
	model string
	memGB float64
}

// gpuModels are the GPU products, one per host in turn: half the GPUs
// have 80 GB, a quarter 40 GB, a quarter 16 GB.
var gpuModels = []gpuModel{
	{"A100-SXM4-80GB", 80},
	{"T4", 16},
	{"H100-80GB-HBM3", 80},
	{"A100-PCIE-40GB", 40},
}

// HostPrefix starts the ID of every host the bench registers.
const HostPrefix = "bench-"

// Host is one synthetic host and its GPUs.
type Host struct {
	ID      string
	Devices []client.DeviceSpec
}

// Inventory returns hosts synthetic hosts with gpusPerHost GPUs each; host
// i carries GPUs of model i mod 4, in zone a or b (HostDevices).
func Inventory(hosts, gpusPerHost int) []Host {
	out := make([]Host, hosts)
	for i := range out {
		id := fmt.Sprintf("%sh%04d", HostPrefix, i)
		out[i] = Host{ID: id, Devices: HostDevices(id, i, gpusPerHost)}
	}
	return out
}

// HostDevices are the gpus GPUs of synthetic host number i named id:
// <id>-gpu0, ..., all of model i mod 4, in zone a (i even) or b.
func HostDevices(id string, i, gpus int) []client.DeviceSpec {
	m := gpuModels[i%len(gpuModels)]
	out := make([]client.DeviceSpec, gpus)
	for g := range out {
		out[g] = client.DeviceSpec{
			ID:   fmt.Sprintf("%s-gpu%d", id, g),
			Type: client.GPU,
			Name: m.model,
			Capabilities: client.Capabilities{
				Resources: client.Resources{MemoryGB: m.memGB},
				Custom:    map[string]string{"model": m.model},
			},
			Labels: map[string]string{"zone": string(rune('a' + i%2))},
		}
	}
	return out
}

// requestShapes are the GPU requests the clients send, drawn in turn: any
// GPU, one with 40 GB or more, one with 80 GB.
var requestShapes = []client.Claim{
	{Type: client.GPU, Count: 1},
	{Type: client.GPU, Count: 1, Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: 40}}},
	{Type: client.GPU, Count: 1, Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: 80}}},
}

// registerParallel bounds the registrations in flight.
const registerParallel = 8

// Register registers the hosts (PUT /v1/hosts/{id}), a few at a time.
func Register(ctx context.Context, cl *client.Client, hosts []Host) error {
	return forEachHost(ctx, hosts, func(ctx context.Context, h Host) error {
		if _, _, err := cl.RegisterHost(ctx, h.ID, client.RegisterHostRequest{Devices: h.Devices}); err != nil {
			return fmt.Errorf("register host %s: %w", h.ID, err)
		}
		return nil
	})
}

// Unregister removes the hosts (their allocations end lost).
func Unregister(ctx context.Context, cl *client.Client, hosts []Host) error {
	return forEachHost(ctx, hosts, func(ctx context.Context, h Host) error {
		if _, err := cl.RemoveHost(ctx, h.ID); err != nil {
			return fmt.Errorf("remove host %s: %w", h.ID, err)
		}
		return nil
	})
}

// forEachHost calls fn for every host, registerParallel at a time, and
// returns the first error.
func forEachHost(ctx context.Context, hosts []Host, fn func(context.Context, Host) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		sem   = make(chan struct{}, registerParallel)
	)
	for _, h := range hosts {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, h); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}
