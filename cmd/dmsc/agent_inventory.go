package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/internal/agentconfig"
	"github.com/dmsc/dmsc/internal/discover"
	"github.com/dmsc/dmsc/internal/inventory"
)

// inventoryTimeout bounds one reading of the inventory (nvidia-smi included).
const inventoryTimeout = time.Minute

// collectInventory reads the host's devices: the devices file first, then
// each discovery source. The host id is the node name; host labels are the
// file's, overridden by the configuration's. Warnings are worth logging
// but leave the inventory usable.
func collectInventory(ctx context.Context, cfg *agentconfig.Config) (fsm.HostSpec, []fsm.DeviceSpec, []string, error) {
	host := fsm.HostSpec{ID: cfg.NodeName}
	var devices []fsm.DeviceSpec
	var warnings []string
	labels := map[string]string{}
	if cfg.DevicesFile != "" {
		inv, err := inventory.Load(cfg.DevicesFile)
		if err != nil {
			return host, nil, nil, err
		}
		if inv.Host.ID != "" && inv.Host.ID != cfg.NodeName {
			warnings = append(warnings, fmt.Sprintf("%s names host %q but the node is %q; the node name is used", cfg.DevicesFile, inv.Host.ID, cfg.NodeName))
		}
		host.Address = inv.Host.Address
		for k, v := range inv.Host.Labels {
			labels[k] = v
		}
		devices = append(devices, inv.Devices...)
	}
	for _, src := range cfg.Discover {
		var found discover.Discovered
		var err error
		switch src {
		case agentconfig.DiscoverNVIDIA:
			found, err = discover.NVIDIA{Binary: cfg.NVIDIASMI, HostID: cfg.NodeName}.Discover(ctx)
			if err == nil && len(found.Devices) == 0 {
				warnings = append(warnings, "nvidia-smi reports no GPUs")
			}
		case agentconfig.DiscoverCPU, agentconfig.DiscoverMemory:
			found, err = discover.Local{HostID: cfg.NodeName, ReserveMemoryGB: cfg.ReserveMemoryGB}.Discover()
			want := fsm.CPU
			if src == agentconfig.DiscoverMemory {
				want = fsm.Memory
			}
			kept := found.Devices[:0]
			for _, d := range found.Devices {
				if d.Type == want {
					kept = append(kept, d)
				}
			}
			found.Devices = kept
		default:
			err = fmt.Errorf("unknown discovery source %q", src)
		}
		if err != nil {
			return host, nil, nil, fmt.Errorf("discover %s: %w", src, err)
		}
		devices = append(devices, found.Devices...)
		for _, w := range found.Warnings {
			warnings = append(warnings, src+": "+w)
		}
	}
	for k, v := range cfg.HostLabels {
		labels[k] = v
	}
	if len(labels) > 0 {
		host.Labels = labels
	}
	all := inventory.File{Host: host, Devices: devices}
	if err := all.Validate(true); err != nil {
		return host, nil, nil, err
	}
	return host, devices, warnings, nil
}

// hostInventory is the cluster's InventoryFunc for this agent. It logs
// warnings when they change rather than at every reading.
func hostInventory(cfg *agentconfig.Config, log hclog.Logger) cluster.InventoryFunc {
	var mu sync.Mutex
	last := ""
	return func() (fsm.HostSpec, []fsm.DeviceSpec, error) {
		ctx, cancel := context.WithTimeout(context.Background(), inventoryTimeout)
		defer cancel()
		host, devices, warnings, err := collectInventory(ctx, cfg)
		if err != nil {
			return host, nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if joined := strings.Join(warnings, "\n"); joined != last {
			last = joined
			for _, w := range warnings {
				log.Warn("device inventory", "warning", w)
			}
		}
		return host, devices, nil
	}
}

// describeInventory summarises devices for a log line: "4 GPU (T4), 1 CPU".
func describeInventory(devices []fsm.DeviceSpec) string {
	count := map[fsm.DeviceType]int{}
	models := map[fsm.DeviceType][]string{}
	for _, d := range devices {
		count[d.Type]++
		if m := d.Capabilities.Custom["model"]; m != "" && !containsString(models[d.Type], m) {
			models[d.Type] = append(models[d.Type], m)
		}
	}
	var parts []string
	for _, t := range fsm.DeviceTypes {
		if count[t] == 0 {
			continue
		}
		p := fmt.Sprintf("%d %s", count[t], t)
		if len(models[t]) > 0 {
			p += " (" + strings.Join(models[t], ", ") + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "no devices"
	}
	return strings.Join(parts, ", ")
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
