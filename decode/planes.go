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
// live. A frame in device memory is copied out of it first: direct
// NVDEC's (decode.nvdec direct) by nvFrame.copyPicture, FFmpeg's NVDEC
// hwaccel's (decode.nvdec ffmpeg, and codecs direct NVDEC does not take)
// by copyHWFrame. Errors wrap pipeline.ErrNoPicture: a released picture, a
// failed device copy, or a pixel format other than 8-bit planar 4:2:0 on
// the CPU (NV12, P010 or P016 on the GPU).
func (p *Picture) CopyPicture() (*pipeline.Picture, error) {
	if p.nv != nil {
		return p.nv.copyPicture()
	}
	if p.OnGPU() {
		return p.copyHWFrame()
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

// copyHWFrame copies a frame of FFmpeg's NVDEC hwaccel out of FFmpeg's
// device frames with av_hwframe_transfer_data (a software frame of the
// surfaces' format: NV12, or P010 for 10-bit streams; 3.1 MB at 1080p
// NV12) and into a pipeline.Picture (semiPlanarPicture). Like
// nvFrame.copyPicture it runs only for a watched frame, on the stream's
// worker, before the frame is released. Errors wrap pipeline.ErrNoPicture:
// a failed transfer, or a surface format other than those two.
func (p *Picture) copyHWFrame() (*pipeline.Picture, error) {
	sw := astiav.AllocFrame()
	defer sw.Free()
	if err := p.f.TransferHardwareData(sw); err != nil {
		return nil, fmt.Errorf("%w: copying FFmpeg's NVDEC frame to the host: %v", pipeline.ErrNoPicture, err)
	}
	bps := 1
	switch pf := sw.PixelFormat(); pf {
	case astiav.PixelFormatNv12:
	case astiav.PixelFormatP010Le:
		bps = 2
	default:
		return nil, fmt.Errorf("%w: FFmpeg's NVDEC frame came out as %s, not NV12 or P010", pipeline.ErrNoPicture, pf)
	}
	// The picture's own size: the transfer's frame may be padded to the
	// surfaces' coded size.
	w, h := p.f.Width(), p.f.Height()
	ls := sw.Linesize()
	if ls[0] < w*bps || ls[1] < 2*((w+1)/2)*bps || sw.Height() < h {
		return nil, fmt.Errorf("%w: FFmpeg's NVDEC frame came out %dx%d with line sizes %d and %d for a %dx%d picture",
			pipeline.ErrNoPicture, sw.Width(), sw.Height(), ls[0], ls[1], w, h)
	}
	y := planeView(sw, 0, ls[0]*h)
	uv := planeView(sw, 1, ls[1]*((h+1)/2))
	pic := semiPlanarPicture(y, uv, ls[0], ls[1], w, h, bps)
	pic.FullRange = colourOf(p.f, p.cs).FullRange
	return pic, nil
}

// semiPlanarPicture copies a semi-planar 4:2:0 picture (NV12, or with bps
// 2 P010/P016: 16-bit little-endian samples whose value sits in the high
// bits) of w×h pixels into a new pipeline.Picture, 8 bits a sample (a
// 16-bit sample's high byte) and chroma de-interleaved: luma row i at
// y[i*yStride:], the ⌈h/2⌉ rows of interleaved Cb,Cr pairs at
// uv[i*uvStride:]. FullRange is left for the caller to set.
func semiPlanarPicture(y, uv []byte, yStride, uvStride, w, h, bps int) *pipeline.Picture {
	pic := pipeline.NewPicture(w, h)
	img := pic.Image
	hi := bps - 1 // the byte of a sample that is kept: 0 for 8 bits, 1 for 16
	for r := range h {
		row, out := y[r*yStride:], img.Y[r*img.YStride:]
		if bps == 1 {
			copy(out[:w], row)
			continue
		}
		for x := range w {
			out[x] = row[2*x+hi]
		}
	}
	cw, ch := (w+1)/2, (h+1)/2
	for r := range ch {
		row := uv[r*uvStride:]
		cb, cr := img.Cb[r*img.CStride:], img.Cr[r*img.CStride:]
		for x := range cw {
			cb[x] = row[(2*x)*bps+hi]
			cr[x] = row[(2*x+1)*bps+hi]
		}
	}
	return pic
}

var _ pipeline.Copier = (*Picture)(nil)
