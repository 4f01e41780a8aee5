package engines

import (
	"fmt"
	"runtime"
	"strconv"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/pipeline"
)

// PlacementDevices are the CUDA ordinals streams are placed on:
// infer.devices when set, else every visible GPU when the GPU engine may
// be used, else just infer.device. With the CPU engine a device is only a
// label: each gets its own CPU engine instance (which is how the placement
// is tested on machines without GPUs).
func PlacementDevices(c *config.Config) ([]int, error) {
	if len(c.Infer.Devices) > 0 {
		if GPUChain(c.Infer.Provider) != nil && cuda.Init() == nil {
			if n, err := cuda.DeviceCount(); err == nil {
				for _, d := range c.Infer.Devices {
					if d >= n {
						return nil, cli.BadInput(fmt.Errorf("infer.devices: device %d does not exist (%d GPUs visible)", d, n))
					}
				}
			}
		}
		return c.Infer.Devices, nil
	}
	if GPUChain(c.Infer.Provider) != nil && cuda.Init() == nil {
		if n, err := cuda.DeviceCount(); err == nil && n > 1 {
			devs := make([]int, n)
			for i := range devs {
				devs[i] = i
			}
			return devs, nil
		}
	}
	return []int{c.Infer.Device}, nil
}

// WithHW sets on o the config's NVDEC settings (decode.hwaccel,
// decode.nvdec, decode.hw_surfaces) for CUDA device dev. With decode.hwaccel hybrid,
// nvdec says where the stream was placed: on NVDEC (auto, so that a stream
// NVDEC cannot take still falls back to the CPU) or on the CPU (none).
func WithHW(o decode.Options, c *config.Config, dev int, nvdec bool) decode.Options {
	o.HWAccel, o.HWDevice, o.HWSurfaces = decode.HWAccel(c.Decode.HWAccel), strconv.Itoa(dev), c.Decode.HWSurfaces
	o.NVDEC = decode.NVDECMode(c.Decode.NVDECMode)
	if c.Decode.HWAccel == "hybrid" {
		o.HWAccel = decode.HWNone
		if nvdec {
			o.HWAccel = decode.HWAuto
		}
	}
	return o
}

// HybridCapacity returns hybrid decoding's capacities in frames per
// second: one GPU's NVDEC and all CPU cores (decode.nvdec_fps and
// decode.cpu_fps, or their defaults). The defaults come from `vigil bench
// --streams` on the H200 machine (16 cores, 1080p30 H.264 High at 6 Mbit/s,
// YOLOX-Nano, docs/performance.md): NVDEC alone carried 2,176 fps, and the
// split that carried the most streams in hybrid gave the CPU 1,000 fps,
// i.e. 62 per core (CPU-only carried 1,189, but under hybrid decoding the
// cores also serve the NVDEC streams and the engine's staging).
func HybridCapacity(c *config.Config) (nvdec, cpu float64) {
	nvdec, cpu = c.Decode.NVDECFPS, c.Decode.CPUFPS
	if nvdec <= 0 {
		nvdec = 2150
	}
	if cpu <= 0 {
		cpu = 62 * float64(runtime.NumCPU())
	}
	return nvdec, cpu
}

// NewDecodePlacer returns hybrid decoding's placer: devices 0..gpus-1 are
// the GPUs' NVDEC engines, device gpus the CPU cores; nil unless
// decode.hwaccel is hybrid.
func NewDecodePlacer(c *config.Config, gpus int) *pipeline.Placer {
	if c.Decode.HWAccel != "hybrid" {
		return nil
	}
	nv, cpu := HybridCapacity(c)
	caps := make([]float64, gpus+1)
	for i := range gpus {
		caps[i] = nv
	}
	caps[gpus] = cpu
	return pipeline.NewPlacerCapacity(caps)
}

// PlaceDecoder places stream id, on GPU gi of gpus, on that GPU's NVDEC or
// on the CPU with the placer of NewDecodePlacer (sticky, like
// Placer.PlaceAmong); true for NVDEC.
func PlaceDecoder(p *pipeline.Placer, id string, gi, gpus int) (nvdec bool) {
	return p.PlaceAmong(id, 1, []int{gi, gpus}) != gpus
}
