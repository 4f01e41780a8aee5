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
// NVDEC cannot take still falls back to the CPU) or on the CPU (none), and
// software decoding runs at decode.cpu_nice.
func WithHW(o decode.Options, c *config.Config, dev int, nvdec bool) decode.Options {
	o.HWAccel, o.HWDevice, o.HWSurfaces = decode.HWAccel(c.Decode.HWAccel), strconv.Itoa(dev), c.Decode.HWSurfaces
	o.NVDEC = decode.NVDECMode(c.Decode.NVDECMode)
	o.NVDECPoll = c.Decode.NVDECPoll.Duration
	if c.Decode.HWAccel == "hybrid" {
		o.CPUNice = c.Decode.CPUNice
		o.HWAccel = decode.HWNone
		if nvdec {
			o.HWAccel = decode.HWAuto
		}
	}
	return o
}

// HybridCapacity returns hybrid decoding's capacities in pixels per
// second: one GPU's NVDEC and all CPU cores (decode.nvdec_pixel_rate and
// decode.cpu_pixel_rate; else the deprecated decode.nvdec_fps and
// decode.cpu_fps read as frames of 1080p; else the defaults). The defaults
// are the frame rates measured before placement counted pixels, converted
// at 1080p: `vigil bench --streams` on the H200 machine (16 cores, 1080p30
// H.264 High at 6 Mbit/s, YOLOX-Nano, docs/performance.md) carried 2,176
// fps with NVDEC alone (through FFmpeg's hwaccel), and the split that
// carried the most streams in hybrid gave the CPU 1,000 fps, i.e. 62 per
// core (CPU-only carried 1,189, but under hybrid decoding the cores also
// serve the NVDEC streams and the engine's staging).
func HybridCapacity(c *config.Config) (nvdec, cpu float64) {
	const ref = config.ReferenceFramePixels
	nvdec, cpu = c.Decode.NVDECPixelRate, c.Decode.CPUPixelRate
	if nvdec <= 0 {
		nvdec = c.Decode.NVDECFPS * ref
	}
	if nvdec <= 0 {
		nvdec = 2150 * ref
	}
	if cpu <= 0 {
		cpu = c.Decode.CPUFPS * ref
	}
	if cpu <= 0 {
		cpu = 62 * ref * float64(runtime.NumCPU())
	}
	return nvdec, cpu
}

// DefaultStreamPixelRate is a stream's weight under hybrid decoding before
// its first measurement (decode.reweigh_interval): 1920 × 1080 at 30 fps,
// the commonest camera stream. A stream placed again (restarted, moved)
// keeps the weight it had.
const DefaultStreamPixelRate = config.ReferenceFramePixels * 30

// Hybrid placement's hysteresis (decode.reweigh_interval's doc, docs/gpu.md):
// a measured pixel rate replaces a stream's weight when it is more than
// reweighBand off for reweighConfirm readings in a row (jitter of a 5 s
// frame count is about 1 %, a camera's change of resolution or rate 20 %
// or more: 25 fps to 30 is 20 %, 720p to 1080p 125 %); a stream moves only
// when that evens the load by more than moveMargin of a side's capacity
// (pipeline.Placer.SetMoveRule), at most maxMovesPerRebalance streams per
// rebalance, each move restarting its stream.
const (
	reweighBand          = 0.25
	reweighConfirm       = 2
	moveMargin           = 0.05
	maxMovesPerRebalance = 2
)

// NewDecodePlacer returns hybrid decoding's placer: devices 0..gpus-1 are
// the GPUs' NVDEC engines, device gpus the CPU cores, with capacities in
// pixels per second (HybridCapacity) and the move rule above; nil unless
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
	p := pipeline.NewPlacerCapacity(caps)
	p.SetMoveRule(moveMargin, maxMovesPerRebalance)
	return p
}

// NewReweigher returns the hysteresis that reweighs hybrid decoding's
// streams by their measured pixel rates (see the constants above); vigil
// run holds the weights it reports to the fleet's placer with another.
func NewReweigher() *pipeline.Reweigher {
	return &pipeline.Reweigher{Band: reweighBand, Confirm: reweighConfirm}
}

// PlaceDecoder places stream id, on GPU gi of gpus, on that GPU's NVDEC or
// on the CPU with the placer of NewDecodePlacer (sticky, like
// Placer.PlaceAmong); true for NVDEC. A new stream weighs
// DefaultStreamPixelRate; a placed one keeps its weight.
func PlaceDecoder(p *pipeline.Placer, id string, gi, gpus int) (nvdec bool) {
	w, ok := p.Weight(id)
	if !ok {
		w = DefaultStreamPixelRate
	}
	return p.PlaceAmong(id, w, []int{gi, gpus}) != gpus
}

// StreamPixelRate is a running stream's measured weight: its frame size
// times the frames it decoded per second; 0 when either is unknown.
func StreamPixelRate(width, height int, fps float64) float64 {
	if width <= 0 || height <= 0 || !(fps > 0) {
		return 0
	}
	return float64(width) * float64(height) * fps
}
