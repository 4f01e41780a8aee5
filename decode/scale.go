package decode

import (
	"fmt"

	"github.com/asticode/go-astiav"

	"github.com/vigil-video/vigil/pipeline"
)

// Scaler resizes decoded pictures with libswscale (bilinear, SWS_BILINEAR)
// into packed 8-bit RGB24 or BGR24. It caches one SwsContext and one
// destination frame and rebuilds them only when the source size or pixel
// format or the destination changes, so a mid-stream resolution change is
// handled transparently. A Scaler is not safe for concurrent use.
type Scaler struct {
	sws *astiav.SoftwareScaleContext
	dst *astiav.Frame
	sw  *astiav.Frame // NVDEC frames are downloaded here first
	key scaleKey
}

type scaleKey struct {
	sw, sh int
	sf     astiav.PixelFormat
	dw, dh int
	df     astiav.PixelFormat
}

// NewScaler returns an empty Scaler; contexts are created on first use.
func NewScaler() *Scaler { return &Scaler{} }

// Resize scales img (which must come from this package's Source) to w×h
// pixels in the given channel order and copies the packed result, row after
// row with no padding, into dst, which must hold at least w*h*3 bytes.
// Errors: a foreign Image type, a short dst, or an FFmpeg error from
// sws_getContext/sws_scale_frame.
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
	if src.PixelFormat() == astiav.PixelFormatCuda {
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
	k := scaleKey{src.Width(), src.Height(), src.PixelFormat(), w, h, df}
	if k != s.key || s.sws == nil {
		s.resetScale()
		sws, err := astiav.CreateSoftwareScaleContext(k.sw, k.sh, k.sf, w, h, df,
			astiav.NewSoftwareScaleContextFlags(astiav.SoftwareScaleContextFlagBilinear))
		if err != nil {
			return fmt.Errorf("decode: swscale %dx%d %s -> %dx%d %s: %w", k.sw, k.sh, k.sf, w, h, df, err)
		}
		s.sws, s.key = sws, k
		s.dst = astiav.AllocFrame()
		s.dst.SetWidth(w)
		s.dst.SetHeight(h)
		s.dst.SetPixelFormat(df)
		if err := s.dst.AllocBuffer(0); err != nil {
			s.resetScale()
			return fmt.Errorf("decode: allocating %dx%d frame: %w", w, h, err)
		}
	}
	if err := s.sws.ScaleFrame(src, s.dst); err != nil {
		return fmt.Errorf("decode: sws_scale_frame: %w", err)
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

// resetScale frees the SwsContext and destination frame (not the
// download frame, which may be the current source).
func (s *Scaler) resetScale() {
	if s.sws != nil {
		s.sws.Free()
		s.sws = nil
	}
	if s.dst != nil {
		s.dst.Free()
		s.dst = nil
	}
	s.key = scaleKey{}
}
