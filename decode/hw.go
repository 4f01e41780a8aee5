package decode

/*
#cgo pkg-config: libavutil
#include "hwdev.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime/cgo"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/asticode/go-astiav"
	"go.uber.org/zap"

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

// hwDevice is what an NVDEC decoder's FFmpeg CUDA device context runs on:
// a reference to the device's primary context (shared with the GPU engine
// and ONNX Runtime) and a non-blocking stream of the decoder's own. With
// that stream as AVCUDADeviceContext.stream, NVDEC's output mapping and
// vigil's copies stay off the legacy default stream, which synchronises
// with other work in the context. It is released by vigilCUDADeviceFree
// when FFmpeg frees the device context (after the decoder and every frame
// made on it).
type hwDevice struct {
	ctx    *cuda.Context
	stream *cuda.Stream
}

func (h *hwDevice) close() {
	_ = h.stream.Destroy()
	_ = h.ctx.Release()
}

//export vigilCUDADeviceFree
func vigilCUDADeviceFree(opaque C.uintptr_t) {
	h := cgo.Handle(opaque)
	h.Value().(*hwDevice).close()
	h.Delete()
}

// newHWDevice makes the FFmpeg CUDA device context for one decoder on GPU
// device (an ordinal; "" is 0). Errors: a bad ordinal, or CUDA or FFmpeg
// refusing.
func newHWDevice(device string) (*astiav.HardwareDeviceContext, *hwDevice, error) {
	ord := 0
	if device != "" {
		n, err := strconv.Atoi(device)
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("CUDA device %q: want a GPU ordinal (0, 1, ...)", device)
		}
		ord = n
	}
	ctx, err := cuda.Primary(ord)
	if err != nil {
		return nil, nil, fmt.Errorf("opening CUDA device %d for NVDEC: %w", ord, err)
	}
	st, err := ctx.NewStream()
	if err != nil {
		_ = ctx.Release()
		return nil, nil, fmt.Errorf("CUDA stream for NVDEC: %w", err)
	}
	hd := &hwDevice{ctx: ctx, stream: st}
	h := cgo.NewHandle(hd)
	var cerr, owned C.int
	ref := C.vigil_cuda_device_new(C.uintptr_t(ctx.Handle()), C.uintptr_t(st.Handle()), C.uintptr_t(h), &cerr, &owned)
	if ref == nil {
		if owned == 0 { // the free callback never ran
			hd.close()
			h.Delete()
		}
		return nil, nil, fmt.Errorf("FFmpeg CUDA device context: %w", avError(int(cerr)))
	}
	return wrapDevice(ref), hd, nil
}

// wrapDevice hands an AVBufferRef of a device context to go-astiav, which
// then owns that reference. go-astiav v0.16.0 has no constructor from C;
// its HardwareDeviceContext is a struct of that one pointer
// (hardware_device_context.go), as TestHardwareDeviceContextLayout checks.
func wrapDevice(ref *C.AVBufferRef) *astiav.HardwareDeviceContext {
	h := &astiav.HardwareDeviceContext{}
	*(**C.AVBufferRef)(unsafe.Pointer(h)) = ref
	return h
}

// avError is an AVERROR code as go-astiav's error type.
func avError(code int) error { return astiav.Error(code) }

// setupNVDEC gives cc a CUDA device context on GPU device (an ordinal,
// "" for 0) in the CUDA primary context, with a stream of its own, and
// asks for CUDA frames. Decoded surfaces are copied at once into frames
// of vigil's own pool (see hwFrames) and given back to NVDEC, so the two
// extra surfaces asked for here are enough however long the pipeline holds
// frames. Errors: no NVDEC for the codec, or the device not opening (no
// driver, no GPU).
func setupNVDEC(cc *astiav.CodecContext, codec *astiav.Codec, device string) (*hwDevice, error) {
	if !cudaHWConfig(codec) {
		return nil, fmt.Errorf("FFmpeg has no NVDEC (cuda hwaccel) for %s", codec.Name())
	}
	// Ask the driver first: FFmpeg's own attempt would log its warnings
	// (without the stream's name) and end in a vaguer error.
	if err := cuda.Init(); err != nil {
		return nil, err
	}
	// One device context per decoder, so that each decoder synchronises
	// only its own stream (and go-astiav v0.16.0's CodecContext.Free unrefs
	// the context it was given, so it could not be shared anyway).
	hdc, hd, err := newHWDevice(device)
	if err != nil {
		return nil, err
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
	cc.SetExtraHardwareFrames(2)
	// One decoder thread (overriding the stream's decode_threads): with
	// frame threads FFmpeg calls get_format on a
	// per-thread copy of the codec context, which go-astiav v0.16.0's
	// callback table (keyed by the context) does not know, so it answers
	// AV_PIX_FMT_NONE and every slice fails ("decode_slice_header error",
	// seen on the H200). NVDEC does the decoding work anyway.
	cc.SetThreadCount(1)
	return hd, nil
}

// hwFrames is one decoder's pool of device frames. FFmpeg 5.1's NVDEC
// output is a mapped decoder surface (cuvidMapVideoFrame) that stays
// mapped, and its decoder surface taken, until the frame is freed; a
// pipeline holding more frames than the decoder has surfaces makes NVDEC
// fail ("No decoder surfaces left"), and the packets it then skips break
// the reference chain. So each surface is copied on the GPU (3.1 MB for
// 1080p NV12, a few µs) into a frame of this pool and given back at once.
// At most max frames are out at a time (decode.hw_surfaces, raised by the
// service to the stream's queue size + 2): the decoder waits for one to be
// released beyond that, which with vigil's drop-oldest queues happens only
// when the pipeline is lossless and behind.
type hwFrames struct {
	dev  *hwDevice
	pool *C.AVBufferRef // AVHWFramesContext, made on the first frame
	sem  chan struct{}  // one token per frame out
	log  *zap.Logger
}

func newHWFrames(dev *hwDevice, max int, log *zap.Logger) *hwFrames {
	return &hwFrames{dev: dev, sem: make(chan struct{}, max), log: log}
}

// copy returns a pool frame holding src's picture (complete: the copy is
// synchronised), waiting while max frames are out. Errors: ctx ending,
// FFmpeg or CUDA failures.
func (h *hwFrames) copy(ctx context.Context, src *astiav.Frame) (*astiav.Frame, chan struct{}, error) {
	select {
	case h.sem <- struct{}{}:
	default:
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case h.sem <- struct{}{}:
		case <-t.C:
			h.log.Warn("NVDEC frames all held downstream: decoding waits", zap.Int("decode.hw_surfaces", cap(h.sem)))
			select {
			case h.sem <- struct{}{}:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	dst := astiav.AllocFrame()
	r := C.vigil_hw_copy(&h.pool, (*C.AVFrame)(src.UnsafePointer()), (*C.AVFrame)(dst.UnsafePointer()))
	err := error(nil)
	if r < 0 {
		err = fmt.Errorf("copying an NVDEC frame: %w", avError(int(r)))
	} else if err = h.dev.stream.Synchronize(); err != nil {
		err = fmt.Errorf("copying an NVDEC frame: %w", err)
	}
	if err != nil {
		dst.Free()
		<-h.sem
		return nil, nil, err
	}
	return dst, h.sem, nil
}

// close drops the decoder's reference to the pool; frames still out keep
// it (and the device) until they are released.
func (h *hwFrames) close() {
	C.av_buffer_unref(&h.pool)
}

// CUDAFrame is an NVDEC-decoded picture in device memory of the CUDA
// primary context: NV12, Y plane at Y (YStride bytes per row) and
// interleaved Cb,Cr at UV (UVStride bytes per row, half height). The
// pointers are CUdeviceptr values into a frame of vigil's pool (hwFrames),
// valid until the Picture is released; the pixels are complete (no GPU
// work on them is pending) when the frame is emitted. FullRange and Matrix
// are the Picture's Colour.
type CUDAFrame struct {
	Y, UV             uintptr
	YStride, UVStride int
	Width, Height     int
	FullRange         bool
	Matrix            Matrix
	// Deep: the samples are 16 bits wide, little-endian, the value in the
	// high bits (P016; 10-bit pictures decoded by NVDECDirect), instead of
	// 8 (NV12).
	Deep bool
}

// CUDA returns the picture's device planes when it was decoded by NVDEC
// into NV12 (8-bit) or, with NVDECDirect, P016 (deeper) surfaces, and
// false otherwise (software frames, and FFmpeg's 10-bit P010 surfaces).
func (p *Picture) CUDA() (CUDAFrame, bool) {
	if f := p.nv; f != nil {
		y := uintptr(f.buf.Ptr())
		return CUDAFrame{Y: y, UV: y + uintptr(f.pitch*f.h), YStride: f.pitch, UVStride: f.pitch, Width: f.w, Height: f.h,
			FullRange: f.col.FullRange, Matrix: f.col.Matrix, Deep: f.bps == 2}, true
	}
	if p.f == nil || p.f.PixelFormat() != astiav.PixelFormatCuda {
		return CUDAFrame{}, false
	}
	c := (*C.AVFrame)(p.f.UnsafePointer())
	if int(C.vigil_hw_sw_format(c)) != int(C.AV_PIX_FMT_NV12) {
		return CUDAFrame{}, false
	}
	ls := p.f.Linesize()
	out := CUDAFrame{Y: uintptr(unsafePointer(c.data[0])), UV: uintptr(unsafePointer(c.data[1])), YStride: ls[0], UVStride: ls[1],
		Width: p.f.Width(), Height: p.f.Height()}
	col := colourOf(p.f, p.cs)
	out.FullRange, out.Matrix = col.FullRange, col.Matrix
	return out, true
}

// OnGPU reports whether the picture's pixels are in GPU memory (NVDEC).
func (p *Picture) OnGPU() bool {
	return p.nv != nil || p.f != nil && p.f.PixelFormat() == astiav.PixelFormatCuda
}
