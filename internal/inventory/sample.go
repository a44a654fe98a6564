package inventory

import (
	"fmt"

	"github.com/dmsc/dmsc/fsm"
)

// gpuModel is one GPU product in the sample inventory.
type gpuModel struct {
	name, model, computeCap string
	memGB                   float64
}

var (
	t4GPU      = gpuModel{"Tesla T4", "T4", "7.5", 16}
	a100PCIe40 = gpuModel{"NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB", "8.0", 40}
	a100SXM80  = gpuModel{"NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "8.0", 80}
	h100SXM80  = gpuModel{"NVIDIA H100 80GB HBM3", "H100 80GB HBM3", "9.0", 80}
	cpuEPYC    = "AMD EPYC 7763 64-Core Processor"
	cpuXeon    = "Intel(R) Xeon(R) Platinum 8480+"
	cpuXeon2   = "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"
)

// sampleHost builds one host of the sample inventory.
func sampleHost(id, zone string, gpu gpuModel, gpus int, cpuModel string, cores, memGB float64) File {
	f := File{Host: fsm.HostSpec{ID: id, Labels: map[string]string{"zone": zone}}}
	for i := 0; i < gpus; i++ {
		f.Devices = append(f.Devices, fsm.DeviceSpec{
			ID:   fmt.Sprintf("%s-gpu%d", id, i),
			Type: fsm.GPU,
			Name: gpu.name,
			Capabilities: fsm.Capabilities{
				Resources: fsm.Resources{MemoryGB: gpu.memGB},
				Custom:    map[string]string{"model": gpu.model, "compute_cap": gpu.computeCap},
			},
		})
	}
	f.Devices = append(f.Devices,
		fsm.DeviceSpec{
			ID: id + "-cpu", Type: fsm.CPU, Name: cpuModel, Shareable: true,
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: cores}, Custom: map[string]string{"arch": "amd64"}},
		},
		fsm.DeviceSpec{
			ID: id + "-memory", Type: fsm.Memory, Name: "system memory", Shareable: true,
			Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: memGB}},
		},
	)
	return f
}

// Sample is the inventory of the dev agent: four hosts in two zones with
// GPUs of different models (4× T4 16 GB, 4× A100 40 GB, 8× A100 80 GB,
// 8× H100 80 GB), each with its CPU cores and memory as shareable devices.
// Every call returns a fresh copy.
func Sample() []File {
	return []File{
		sampleHost("dev-t4", "a", t4GPU, 4, cpuXeon2, 40, 192),
		sampleHost("dev-a100-40", "a", a100PCIe40, 4, cpuEPYC, 64, 512),
		sampleHost("dev-a100-80", "b", a100SXM80, 8, cpuEPYC, 128, 1024),
		sampleHost("dev-h100", "b", h100SXM80, 8, cpuXeon, 112, 2048),
	}
}
