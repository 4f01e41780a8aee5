package decode

/*
#cgo pkg-config: libavutil
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>

static int vigil_hw_sw_format(const AVFrame *f) {
	if (f->hw_frames_ctx == NULL) return -1;
	return ((AVHWFramesContext *)f->hw_frames_ctx->data)->sw_format;
}
*/
import "C"

import (
	"fmt"
	"strings"

	"github.com/asticode/go-astiav"

	"github.com/vigil-video/vigil/internal/cuda"
)

// HWAccel selects hardware decoding (decode.hwaccel in the config).
type HWAccel string

// The hardware decoding choices.
const (
	// HWNone decodes on the CPU (the default).
	HWNone HWAccel = "none"
	// HWAuto decodes with NVDEC (FFmpeg's cuda hwaccel) when the codec
	// has it and a device opens, else on the CPU, saying why in one log
	// line; a stream whose first frame NVDEC cannot decode (an unsupported
	// profile, say) is reopened on the CPU.
	HWAuto HWAccel = "auto"
	// HWCUDA requires NVDEC: a stream that cannot use it fails.
	HWCUDA HWAccel = "cuda"
)

// ParseHWAccel checks a decode.hwaccel value; "" means none.
func ParseHWAccel(s string) (HWAccel, error) {
	switch h := HWAccel(strings.ToLower(strings.TrimSpace(s))); h {
	case "", HWNone:
		return HWNone, nil
	case HWAuto, HWCUDA:
		return h, nil
	}
	return "", fmt.Errorf("decode.hwaccel %q: want auto, cuda or none", s)
}

// cudaHWConfig reports whether FFmpeg can decode codec with NVDEC into
// CUDA frames.
func cudaHWConfig(codec *astiav.Codec) bool {
	for _, c := range codec.HardwareConfigs() {
		if c.HardwareDeviceType() == astiav.HardwareDeviceTypeCUDA && c.PixelFormat() == astiav.PixelFormatCuda {
			return true
		}
	}
	return false
}

// setupNVDEC gives cc a CUDA device context on GPU device (an ordinal,
// "" for 0) in the CUDA primary context, so that decoded surfaces are
// device pointers the GPU engine can read, and asks for CUDA frames with
// surfaces extra decoder surfaces beyond what the codec needs (frames
// held downstream each keep one). Errors: no NVDEC for the codec, or the
// device not opening (no driver, no GPU).
func setupNVDEC(cc *astiav.CodecContext, codec *astiav.Codec, device string, surfaces int) error {
	if !cudaHWConfig(codec) {
		return fmt.Errorf("FFmpeg has no NVDEC (cuda hwaccel) for %s", codec.Name())
	}
	// Ask the driver first: FFmpeg's own attempt would log its warnings
	// (without the stream's name) and end in a vaguer error.
	if err := cuda.Init(); err != nil {
		return err
	}
	opts := astiav.NewDictionary()
	defer opts.Free()
	_ = opts.Set("primary_ctx", "1", 0)
	// One device context per decoder: go-astiav v0.16.0's CodecContext.Free
	// unrefs the context it was given, so it cannot be shared.
	hdc, err := astiav.CreateHardwareDeviceContext(astiav.HardwareDeviceTypeCUDA, device, opts)
	if err != nil {
		return fmt.Errorf("opening CUDA device %q for NVDEC: %w", device, err)
	}
	cc.SetHardwareDeviceContext(hdc)
	cc.SetPixelFormatCallback(func(pfs []astiav.PixelFormat) astiav.PixelFormat {
		for _, pf := range pfs {
			if pf == astiav.PixelFormatCuda {
				return pf
			}
		}
		return pfs[0] // software
	})
	cc.SetExtraHardwareFrames(surfaces)
	// One decoder thread (overriding the stream's decode_threads): with
	// frame threads FFmpeg calls get_format on a
	// per-thread copy of the codec context, which go-astiav v0.16.0's
	// callback table (keyed by the context) does not know, so it answers
	// AV_PIX_FMT_NONE and every slice fails ("decode_slice_header error",
	// seen on the H200). NVDEC does the decoding work anyway.
	cc.SetThreadCount(1)
	return nil
}

// CUDAFrame is an NVDEC-decoded picture in device memory of the CUDA
// primary context: NV12, Y plane at Y (YStride bytes per row) and
// interleaved Cb,Cr at UV (UVStride bytes per row, half height). The
// pointers are CUdeviceptr values, valid until the Picture is released.
type CUDAFrame struct {
	Y, UV             uintptr
	YStride, UVStride int
	Width, Height     int
	FullRange         bool
	Matrix            Matrix
}

// CUDA returns the picture's device planes when it was decoded by NVDEC
// into 8-bit NV12 surfaces, and false otherwise (software frames, or
// 10-bit P010 surfaces, which the GPU engine does not read yet).
func (p *Picture) CUDA() (CUDAFrame, bool) {
	if p.f == nil || p.f.PixelFormat() != astiav.PixelFormatCuda {
		return CUDAFrame{}, false
	}
	c := (*C.AVFrame)(p.f.UnsafePointer())
	if int(C.vigil_hw_sw_format(c)) != int(C.AV_PIX_FMT_NV12) {
		return CUDAFrame{}, false
	}
	ls := p.f.Linesize()
	out := CUDAFrame{Y: uintptr(unsafePointer(c.data[0])), UV: uintptr(unsafePointer(c.data[1])), YStride: ls[0], UVStride: ls[1],
		Width: p.f.Width(), Height: p.f.Height(), FullRange: p.f.ColorRange() == astiav.ColorRangeJpeg}
	out.Matrix = matrixFor(p.cs, out.Height)
	return out, true
}

// OnGPU reports whether the picture's pixels are in GPU memory (NVDEC).
func (p *Picture) OnGPU() bool { return p.f != nil && p.f.PixelFormat() == astiav.PixelFormatCuda }
