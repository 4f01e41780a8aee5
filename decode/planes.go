package decode

/*
#cgo pkg-config: libavutil
#include <libavutil/frame.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/asticode/go-astiav"

	"github.com/vigil-video/vigil/pipeline"
)

// planeView is plane i of f as a slice of n bytes over FFmpeg's buffer,
// without copying; valid while f holds its reference.
func planeView(f *astiav.Frame, i, n int) []byte {
	c := (*C.AVFrame)(f.UnsafePointer())
	return unsafe.Slice((*byte)(unsafe.Pointer(c.data[i])), n)
}

// YUV420 is a view, without copying, of a decoded 8-bit 4:2:0 picture's
// planes: Width×Height luma samples in Y (row i at Y[i*YStride:]) and
// ⌈Width/2⌉×⌈Height/2⌉ chroma samples per plane. For planar formats
// (yuv420p, yuvj420p) U holds Cb and V holds Cr, each with UVStride; for
// NV12 (hardware decoders' surfaces) U holds interleaved Cb,Cr pairs and
// V is nil. The slices alias the frame and are valid until the Picture is
// released. FullRange and Matrix are the Picture's Colour.
type YUV420 struct {
	Y, U, V           []byte
	YStride, UVStride int
	NV12              bool
	Width, Height     int
	// FullRange: samples use 0..255 (JPEG/"full" range) rather than
	// 16..235 luma and 16..240 chroma (MPEG/"limited" range).
	FullRange bool
	Matrix    Matrix
}

// YUV420 returns the picture's planes when it is planar 8-bit 4:2:0
// (yuv420p, yuvj420p), and false otherwise (other formats need swscale).
// The matrix and range are the Picture's Colour, as the Scaler uses them.
func (p *Picture) YUV420() (YUV420, bool) {
	if p.f == nil {
		return YUV420{}, false
	}
	pf := p.f.PixelFormat()
	out := YUV420{Width: p.f.Width(), Height: p.f.Height()}
	switch pf {
	case astiav.PixelFormatYuv420P, astiav.PixelFormatYuvj420P:
		// Not FrameData.ToImage: in go-astiav v0.16.0 it copies each plane
		// as linesize × full height, reading past the end of the half-height
		// chroma planes.
		ls := p.f.Linesize()
		if ls[0] <= 0 || ls[1] <= 0 || ls[2] <= 0 || ls[1] != ls[2] {
			return YUV420{}, false
		}
		ch := (out.Height + 1) / 2
		out.Y = planeView(p.f, 0, ls[0]*out.Height)
		out.U = planeView(p.f, 1, ls[1]*ch)
		out.V = planeView(p.f, 2, ls[2]*ch)
		out.YStride, out.UVStride = ls[0], ls[1]
	default:
		return YUV420{}, false
	}
	c := colourOf(p.f, p.cs)
	out.FullRange, out.Matrix = c.FullRange, c.Matrix
	return out, true
}

func unsafePointer(p *C.uint8_t) unsafe.Pointer { return unsafe.Pointer(p) }

// CopyPicture implements pipeline.Copier: it copies the picture's planes
// into Go memory (image.YCbCr, 4:2:0, at the frame's size) for package
// live. A frame of direct NVDEC (decode.nvdec direct) is copied out of
// device memory first (nvFrame.copyPicture). Errors wrap
// pipeline.ErrNoPicture: a released picture, a frame of FFmpeg's NVDEC
// hwaccel (in FFmpeg's device frames; not copied, see docs/api.md), a
// failed device copy, or a pixel format other than 8-bit planar 4:2:0.
func (p *Picture) CopyPicture() (*pipeline.Picture, error) {
	if p.nv != nil {
		return p.nv.copyPicture()
	}
	if p.OnGPU() {
		return nil, fmt.Errorf("%w: the frame is in FFmpeg's GPU memory (decode.nvdec ffmpeg)", pipeline.ErrNoPicture)
	}
	v, ok := p.YUV420()
	if !ok || v.NV12 {
		if p.f == nil {
			return nil, fmt.Errorf("%w: the frame was released", pipeline.ErrNoPicture)
		}
		return nil, fmt.Errorf("%w: pixel format %s is not 8-bit planar 4:2:0", pipeline.ErrNoPicture, p.f.PixelFormat())
	}
	pic := pipeline.NewPicture(v.Width, v.Height)
	img := pic.Image
	for y := range v.Height {
		copy(img.Y[y*img.YStride:y*img.YStride+v.Width], v.Y[y*v.YStride:])
	}
	cw, ch := (v.Width+1)/2, (v.Height+1)/2
	for y := range ch {
		copy(img.Cb[y*img.CStride:y*img.CStride+cw], v.U[y*v.UVStride:])
		copy(img.Cr[y*img.CStride:y*img.CStride+cw], v.V[y*v.UVStride:])
	}
	pic.FullRange = v.FullRange
	return pic, nil
}

var _ pipeline.Copier = (*Picture)(nil)
