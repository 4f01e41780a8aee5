package decode

/*
#cgo pkg-config: libavutil
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>

static int vigil_frame_colorspace(const AVFrame *f) { return f->colorspace; }

// 1 when fmt is a YCbCr format (neither RGB, palette, greyscale nor a
// hardware surface), the only kind whose conversion to RGB needs a matrix.
static int vigil_pix_is_yuv(int fmt) {
	const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(fmt);
	return d && !(d->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_HWACCEL)) &&
		d->nb_components >= 3;
}
*/
import "C"

import (
	"fmt"

	"github.com/asticode/go-astiav"
)

// Matrix is a YCbCr→RGB conversion matrix, named after the recommendation
// that defines its luma weights Kr and Kb (see Weights).
type Matrix int

// The matrices vigil converts with. Streams say which one they use in
// their colour description (H.264/HEVC VUI matrix_coefficients, ITU-T
// H.273 table 4; FFmpeg's AVColorSpace); unmarked streams get
// MatrixFor's rule.
const (
	// BT601 is ITU-R BT.601-7 (Kr 0.299, Kb 0.114): SD video, JPEG/JFIF
	// (ITU-T T.871) and therefore MJPEG cameras, and FFmpeg's default.
	// H.273 codes 5 (BT.470 System B/G) and 6 (SMPTE 170M) both mean it.
	BT601 Matrix = iota
	// BT709 is ITU-R BT.709-6 (Kr 0.2126, Kb 0.0722): HD video.
	BT709
	// BT2020 is ITU-R BT.2020-2 non-constant luminance (Kr 0.2627,
	// Kb 0.0593): UHD video. Constant-luminance BT.2020 streams (rare)
	// are converted with it too, as libswscale does.
	BT2020
	// SMPTE240M is SMPTE ST 240:1999 (Kr 0.212, Kb 0.087), an early
	// 1035i HD standard.
	SMPTE240M
	// FCC is the US FCC's NTSC matrix, 47 CFR §73.682(a)(20) (Kr 0.30,
	// Kb 0.11).
	FCC
)

// Weights returns the matrix's luma weights of red and blue (Kr, Kb;
// Kg = 1 − Kr − Kb), from the recommendation each constant names. From
// them, with E'Y in 0..1 and E'Pb, E'Pr in −0.5..0.5, as ITU-R BT.601-7
// and BT.709-6 derive the colour-difference signals:
//
//	R = Y + 2(1−Kr)·Pr,  B = Y + 2(1−Kb)·Pb,
//	G = Y − 2Kb(1−Kb)/Kg·Pb − 2Kr(1−Kr)/Kg·Pr.
func (m Matrix) Weights() (kr, kb float64) {
	switch m {
	case BT709:
		return 0.2126, 0.0722
	case BT2020:
		return 0.2627, 0.0593
	case SMPTE240M:
		return 0.212, 0.087
	case FCC:
		return 0.30, 0.11
	}
	return 0.299, 0.114
}

// String is the matrix's name as FFmpeg's -colorspace option spells it.
func (m Matrix) String() string {
	switch m {
	case BT601:
		return "bt470bg"
	case BT709:
		return "bt709"
	case BT2020:
		return "bt2020nc"
	case SMPTE240M:
		return "smpte240m"
	case FCC:
		return "fcc"
	}
	return fmt.Sprintf("Matrix(%d)", int(m))
}

// swsCS is the matrix's SWS_CS_* constant (libswscale/swscale.h), whose
// coefficient table sws_getCoefficients returns.
func (m Matrix) swsCS() int {
	switch m {
	case BT709:
		return 1 // SWS_CS_ITU709
	case BT2020:
		return 9 // SWS_CS_BT2020
	case SMPTE240M:
		return 7 // SWS_CS_SMPTE240M
	case FCC:
		return 4 // SWS_CS_FCC
	}
	return 5 // SWS_CS_ITU601
}

// Colour says how a picture's YCbCr samples become RGB: the matrix, and
// whether samples span 0..255 ("full" or JPEG range, ITU-T T.871; ITU-T
// H.273 VideoFullRangeFlag 1) instead of 16..235 luma and 16..240 chroma
// ("limited" or MPEG range: the 8-bit quantisation of ITU-R BT.601-7 and
// BT.709-6). Both the CPU path (Scaler, through
// libswscale) and the GPU engine's kernel (through YUV420 and CUDA)
// convert with the Picture's Colour.
type Colour struct {
	Matrix    Matrix
	FullRange bool
	// Signalled reports that the stream named the matrix (in its frames
	// or codec parameters); false means MatrixFor's rule chose it.
	Signalled bool
}

// MatrixFor is the rule for streams that do not name their matrix: BT.709
// when the picture is at least 1280 pixels wide or taller than 576 lines,
// BT.601 otherwise. It is mpv's rule (video/csputils.c,
// mp_csp_guess_colorspace), the reading of players and browsers: SD video
// (480 and 576 lines, ITU-R BT.601) uses BT.601 and HD video (ITU-R
// BT.709) BT.709. FFmpeg 5.1's own scale filter does not guess: it takes
// BT.601 for every unmarked stream (libavfilter/vf_scale.c,
// parse_yuv_type), which is what vigil's CPU path did before.
func MatrixFor(width, height int) Matrix {
	if width >= 1280 || height > 576 {
		return BT709
	}
	return BT601
}

// signalledMatrix maps FFmpeg's AVColorSpace to a Matrix; false for
// "unspecified" and for values vigil has no matrix for (RGB, YCgCo,
// ICtCp, chroma-derived), which then take MatrixFor's rule.
func signalledMatrix(cs astiav.ColorSpace) (Matrix, bool) {
	switch cs {
	case astiav.ColorSpaceBt709:
		return BT709, true
	case astiav.ColorSpaceBt470Bg, astiav.ColorSpaceSmpte170M:
		return BT601, true
	case astiav.ColorSpaceBt2020Ncl, astiav.ColorSpaceBt2020Cl:
		return BT2020, true
	case astiav.ColorSpaceSmpte240M:
		return SMPTE240M, true
	case astiav.ColorSpaceFcc:
		return FCC, true
	}
	return BT601, false
}

// colourOf is f's Colour: the matrix the frame names (AVFrame.colorspace,
// which FFmpeg's decoders fill from the bitstream or container), else the
// one the codec context names (cs), else MatrixFor's; full range when the
// frame says so (AVFrame.color_range = AVCOL_RANGE_JPEG) or its pixel
// format is one of the deprecated yuvj* formats, limited otherwise
// (FFmpeg's default for unmarked YCbCr too).
func colourOf(f *astiav.Frame, cs astiav.ColorSpace) Colour {
	var c Colour
	fcs := astiav.ColorSpace(C.vigil_frame_colorspace((*C.AVFrame)(f.UnsafePointer())))
	if c.Matrix, c.Signalled = signalledMatrix(fcs); !c.Signalled {
		c.Matrix, c.Signalled = signalledMatrix(cs)
	}
	if !c.Signalled {
		c.Matrix = MatrixFor(f.Width(), f.Height())
	}
	switch f.PixelFormat() {
	case astiav.PixelFormatYuvj420P, astiav.PixelFormatYuvj422P, astiav.PixelFormatYuvj444P,
		astiav.PixelFormatYuvj440P, astiav.PixelFormatYuvj411P:
		c.FullRange = true
	default:
		c.FullRange = f.ColorRange() == astiav.ColorRangeJpeg
	}
	return c
}

// Colour returns how the picture's samples become RGB (see Colour); the
// zero Colour for a released picture.
func (p *Picture) Colour() Colour {
	if p.nv != nil {
		return p.nv.col
	}
	if p.f == nil {
		return Colour{}
	}
	return colourOf(p.f, p.cs)
}

// isYUV reports whether pixels of format pf need a matrix to become RGB.
func isYUV(pf astiav.PixelFormat) bool { return C.vigil_pix_is_yuv(C.int(pf)) != 0 }
