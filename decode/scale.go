package decode

/*
#cgo pkg-config: libswscale libavutil
#include <libswscale/swscale.h>

// vigil_sws_colour makes c read its YCbCr source with the matrix of
// libswscale's SWS_CS_* constant cs and in full (0..255) or limited range,
// keeping the rest of c's colour settings (destination table and range,
// brightness, contrast, saturation: swscale's defaults). It returns
// sws_setColorspaceDetails's result: 0, or -1 when swscale cannot.
static int vigil_sws_colour(struct SwsContext *c, int cs, int full) {
	int *inv, *tab, src_range, dst_range, bri, con, sat;
	if (sws_getColorspaceDetails(c, &inv, &src_range, &tab, &dst_range, &bri, &con, &sat) < 0)
		return -1;
	return sws_setColorspaceDetails(c, sws_getCoefficients(cs), full, tab, dst_range, bri, con, sat);
}

static struct SwsContext *vigil_sws_new(int sw, int sh, int sf, int dw, int dh, int df) {
	return sws_getContext(sw, sh, sf, dw, dh, df, SWS_BILINEAR, NULL, NULL, NULL);
}
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/asticode/go-astiav"

	"github.com/vigil-video/vigil/pipeline"
)

// Scaler resizes decoded pictures with libswscale (bilinear, SWS_BILINEAR)
// into packed 8-bit RGB24 or BGR24. YCbCr pictures are converted with the
// Picture's Colour (the stream's matrix and range, as the GPU engine's
// kernel uses them), set with sws_setColorspaceDetails: without it
// swscale reads every stream as BT.601 limited range unless its pixel
// format is a yuvj* one. It caches one SwsContext and one destination
// frame and rebuilds them only when the source size, pixel format or
// colour or the destination changes, so a mid-stream change is handled
// transparently. A Scaler is not safe for concurrent use.
type Scaler struct {
	sws *C.struct_SwsContext
	dst *astiav.Frame
	sw  *astiav.Frame // NVDEC frames are downloaded here first
	key scaleKey
}

type scaleKey struct {
	sw, sh int
	sf     astiav.PixelFormat
	col    Colour // zero for sources that are not YCbCr
	dw, dh int
	df     astiav.PixelFormat
}

// NewScaler returns an empty Scaler; contexts are created on first use.
func NewScaler() *Scaler { return &Scaler{} }

// Resize scales img (which must come from this package's Source) to w×h
// pixels in the given channel order and copies the packed result, row after
// row with no padding, into dst, which must hold at least w*h*3 bytes.
// Errors: a foreign Image type, a short dst, or an FFmpeg error from
// sws_getContext, sws_setColorspaceDetails or sws_scale_frame.
func (s *Scaler) Resize(img pipeline.Image, w, h int, order pipeline.PixelOrder, dst []byte) error {
	p, ok := img.(*Picture)
	if !ok {
		return fmt.Errorf("decode: Scaler needs a *decode.Picture, got %T", img)
	}
	if len(dst) < w*h*3 {
		return fmt.Errorf("decode: Resize to %dx%d needs %d bytes, dst has %d", w, h, w*h*3, len(dst))
	}
	df := astiav.PixelFormatRgb24
	if order == pipeline.BGR {
		df = astiav.PixelFormatBgr24
	}
	src := p.f
	if p.nv != nil {
		// A direct NVDEC frame: download it first, into the buffers of the
		// last download when the size and format are the same.
		if s.sw == nil {
			s.sw = astiav.AllocFrame()
		}
		if err := p.nv.download(s.sw); err != nil {
			s.sw.Unref()
			return fmt.Errorf("decode: downloading an NVDEC frame: %w", err)
		}
		src = s.sw
	} else if src.PixelFormat() == astiav.PixelFormatCuda {
		// An NVDEC surface: download it first (av_hwframe_transfer_data).
		// Into the buffers of the last download when the size is the
		// same: with none, FFmpeg allocates a frame per download (3.1 MB
		// at 1080p), which with MMapThreshold is an mmap and its page
		// faults every frame.
		if s.sw == nil {
			s.sw = astiav.AllocFrame()
		}
		if s.sw.Width() != src.Width() || s.sw.Height() != src.Height() {
			s.sw.Unref()
		}
		if err := src.TransferHardwareData(s.sw); err != nil {
			s.sw.Unref()
			return fmt.Errorf("decode: downloading an NVDEC frame: %w", err)
		}
		src = s.sw
	}
	k := scaleKey{sw: src.Width(), sh: src.Height(), sf: src.PixelFormat(), dw: w, dh: h, df: df}
	if isYUV(k.sf) {
		k.col = p.Colour() // p.f describes a downloaded NVDEC frame too
	}
	if k != s.key || s.sws == nil {
		if err := s.rebuild(k); err != nil {
			return err
		}
	}
	if r := C.sws_scale_frame(s.sws, (*C.struct_AVFrame)(s.dst.UnsafePointer()), (*C.struct_AVFrame)(src.UnsafePointer())); r < 0 {
		return fmt.Errorf("decode: sws_scale_frame: %w", avError(int(r)))
	}
	if _, err := s.dst.ImageCopyToBuffer(dst[:w*h*3], 1); err != nil {
		return fmt.Errorf("decode: copying scaled image: %w", err)
	}
	return nil
}

// Close frees the cached contexts and frames. It is idempotent; the
// Scaler may be used again afterwards.
func (s *Scaler) Close() {
	s.resetScale()
	if s.sw != nil {
		s.sw.Free()
		s.sw = nil
	}
}

// rebuild makes the SwsContext and destination frame for k.
func (s *Scaler) rebuild(k scaleKey) error {
	s.resetScale()
	s.sws = C.vigil_sws_new(C.int(k.sw), C.int(k.sh), C.int(k.sf), C.int(k.dw), C.int(k.dh), C.int(k.df))
	if s.sws == nil {
		return fmt.Errorf("decode: swscale %dx%d %s -> %dx%d %s: %w", k.sw, k.sh, k.sf, k.dw, k.dh, k.df, errNoSwsContext)
	}
	if isYUV(k.sf) {
		full := C.int(0)
		if k.col.FullRange {
			full = 1
		}
		if C.vigil_sws_colour(s.sws, C.int(k.col.Matrix.swsCS()), full) < 0 {
			s.resetScale()
			return fmt.Errorf("decode: swscale %s -> %s: sws_setColorspaceDetails refused matrix %s (full range %t)", k.sf, k.df, k.col.Matrix, k.col.FullRange)
		}
	}
	s.key = k
	s.dst = astiav.AllocFrame()
	s.dst.SetWidth(k.dw)
	s.dst.SetHeight(k.dh)
	s.dst.SetPixelFormat(k.df)
	if err := s.dst.AllocBuffer(0); err != nil {
		s.resetScale()
		return fmt.Errorf("decode: allocating %dx%d frame: %w", k.dw, k.dh, err)
	}
	return nil
}

// errNoSwsContext: sws_getContext returned NULL (it gives no reason:
// unsupported formats or sizes, or no memory).
var errNoSwsContext = errors.New("sws_getContext failed")

// resetScale frees the SwsContext and destination frame (not the
// download frame, which may be the current source).
func (s *Scaler) resetScale() {
	if s.sws != nil {
		C.sws_freeContext(s.sws)
		s.sws = nil
	}
	if s.dst != nil {
		s.dst.Free()
		s.dst = nil
	}
	s.key = scaleKey{}
}
