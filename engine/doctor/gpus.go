package doctor

// The GPU probe: the devices package gpu opens, their driver, and the NUMA
// node of each from the PCI tree.

import (
	"errors"

	"github.com/ddstore/ddstore/gpu"
)

// GPU is one device.
type GPU struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	PCI   string `json:"pci"`
	// Memory is the device's total memory in bytes.
	Memory int64 `json:"memory_bytes"`
	NUMA   int   `json:"numa"` // -1 unknown
	// NIC is the nearest up, non-loopback interface with a PCI device: on
	// the GPU's NUMA node where there is one ("" when none is known).
	NIC string `json:"nic,omitempty"`
}

// GPUs is what package gpu found.
type GPUs struct {
	Runtime string `json:"runtime,omitempty"`
	Driver  string `json:"driver,omitempty"`
	Library string `json:"library,omitempty"`
	Devices []GPU  `json:"devices"`
	Error   string `json:"error,omitempty"` // why there are none (no driver, no device)
	NoLib   bool   `json:"no_driver"`       // the error is a missing driver
}

// maxGPUs bounds the devices probed.
const maxGPUs = 64

// probeGPUs opens every device of runtime ("" or "auto": CUDA, else HIP)
// in turn; libs, when set, replaces the runtime's library names (tests).
func probeGPUs(runtime string, libs []string) GPUs {
	var out GPUs
	rt := gpu.Runtime("")
	switch runtime {
	case "cuda", "hip":
		rt = gpu.Runtime(runtime)
	case "rocm":
		rt = gpu.HIP
	}
	for i := 0; i < maxGPUs; i++ {
		d, err := gpu.Open(gpu.Options{Runtime: rt, Index: i, NoStreamProbe: true, Libraries: libs})
		if err != nil {
			if i == 0 {
				out.Error = err.Error()
				out.NoLib = errors.Is(err, gpu.ErrNoDriver)
			}
			break
		}
		out.Runtime, out.Driver, out.Library = string(d.Runtime), d.DriverVersionString(), d.Library
		rt = d.Runtime
		out.Devices = append(out.Devices, GPU{Index: i, Name: d.Name, PCI: d.PCIBusID, Memory: d.TotalMemory, NUMA: pciNUMA(d.PCIBusID)})
		d.Close()
	}
	return out
}

// nearestNIC is the interface a GPU on NUMA node numa should use: an up,
// non-loopback PCI interface on the same node, else any up PCI one ("").
func nearestNIC(numa int, ifaces []Iface) string {
	any := ""
	for _, i := range ifaces {
		if !i.Up || i.Loopback || i.PCI == "" {
			continue
		}
		if numa >= 0 && i.NUMA == numa {
			return i.Name
		}
		if any == "" {
			any = i.Name
		}
	}
	return any
}
