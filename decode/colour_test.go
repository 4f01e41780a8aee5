package decode_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/pipeline"
)

// Luma weights (Kr, Kb) as the standards publish them: ITU-R BT.601-7,
// BT.709-6, BT.2020-2, SMPTE ST 240 and 47 CFR §73.682 (FCC). The test's
// reference conversion uses these, not decode.Matrix.Weights, so that it
// is independent of the code under test.
var publishedWeights = map[string][2]float64{
	"bt601":     {0.299, 0.114},
	"bt709":     {0.2126, 0.0722},
	"bt2020":    {0.2627, 0.0593},
	"smpte240m": {0.212, 0.087},
	"fcc":       {0.30, 0.11},
}

// matrices maps publishedWeights' names to decode's.
var matrices = map[string]decode.Matrix{"bt601": decode.BT601, "bt709": decode.BT709, "bt2020": decode.BT2020,
	"smpte240m": decode.SMPTE240M, "fcc": decode.FCC}

// referenceRGB converts one 8-bit Y, Cb, Cr sample to R, G, B in 8-bit
// levels (not rounded, clipped to 0..255) with the published equations:
// E'Y = (Y−16)/219 and E'Pb,Pr = (C−128)/224 in limited range, Y/255 and
// (C−128)/255 in full range (ITU-T H.273, VideoFullRangeFlag 0 and 1, at
// 8 bits); R = Y + 2(1−Kr)·Pr, B = Y + 2(1−Kb)·Pb,
// G = Y − 2Kb(1−Kb)/Kg·Pb − 2Kr(1−Kr)/Kg·Pr (ITU-R BT.601-7, BT.709-6).
func referenceRGB(matrix string, full bool, y, cb, cr byte) [3]float64 {
	w := publishedWeights[matrix]
	kr, kb := w[0], w[1]
	kg := 1 - kr - kb
	ey, pb, pr := (float64(y)-16)/219, (float64(cb)-128)/224, (float64(cr)-128)/224
	if full {
		ey, pb, pr = float64(y)/255, (float64(cb)-128)/255, (float64(cr)-128)/255
	}
	rgb := [3]float64{
		ey + 2*(1-kr)*pr,
		ey - 2*kb*(1-kb)/kg*pb - 2*kr*(1-kr)/kg*pr,
		ey + 2*(1-kb)*pb,
	}
	for i, v := range rgb {
		rgb[i] = math.Min(math.Max(255*v, 0), 255)
	}
	return rgb
}

// Tolerances of swscale's conversion against the exact one, in 8-bit
// levels, derived from libswscale 5.1's arithmetic (FFmpeg 5.1, the
// version vigil builds against), not from this test's results. Inputs are
// exact 8-bit samples: at 1:1 swscale reads the nearest samples (one
// chroma sample per 2×2 pixels), and when scaling the test reads flat
// patches only, where SWS_BILINEAR's filters (taps summing to one) return
// the sample itself. Then R = Y + r(V), B = Y + b(U), G = Y + g(U) + g(V)
// are computed one of two ways:
//   - SIMD (x86/yuv_2_rgb.asm at 1:1; the MMXEXT BGR24 output of
//     x86/swscale_template.c when scaling): pmulhw of 8·sample by a
//     13-bit coefficient keeps the high 16 bits, so each term is floored
//     to a whole level (error in (−1, 0]), and rounding the coefficient
//     to 1/8192 adds at most 8·255·0.5/65536 = 0.016 level per term:
//     R and B within 2.04 levels, G within 3.05;
//   - tables (yuv2rgb.c, ff_yuv2rgb_c_init_tables; RGB24 when scaling):
//     each chroma term becomes a whole number of luma steps, off by less
//     than one step (255/219 = 1.164 levels in limited range, 1 in full
//     range), and the sum is rounded (0.5);
//     in limited range the luma table also sits 1.78 levels low (entry
//     i is round(i·1.164383 − 400) and luma Y is read at i = Y + 326,
//     where Y + 400/1.164383 − 16 = Y + 327.53 would be exact), so R and
//     B are within 1.78 + 1.164 + 0.5 = 3.45 levels, G within
//     1.78 + 2·1.164 + 0.5 = 4.62.
//
// The tolerances are the larger bounds; a wrong matrix is off by tens of
// levels on saturated colours.
const (
	tolRB = 3.45
	tolG  = 4.62
)

// colourCase is one encoded test picture: a grid of flat patches whose
// colours span the RGB cube (five levels per channel), converted to YCbCr
// with matrix/range by FFmpeg's scale filter and encoded with codec args.
type colourCase struct {
	name      string
	w, h      int
	matrix    string // what the stream says or implies, as publishedWeights names it
	full      bool
	signalled bool     // the stream names its matrix
	only1to1  bool     // planes not flat inside the patches (lossy), or a rare matrix: compared at 1:1 only
	args      []string // encoder and tags
}

// patch is the side of the pattern's flat squares: a multiple of 16 (a
// 4:2:0 JPEG MCU), so that MJPEG's blocks do not straddle two colours.
func patch(w int) int {
	if w >= 1280 {
		return 80
	}
	return 48
}

// pattern makes the RGB test picture at w×h as a PNG.
func pattern(t *testing.T, w, h int) string {
	t.Helper()
	p := patch(w)
	cols := w / p
	idx := fmt.Sprintf("(floor(X/%d)+%d*floor(Y/%d))", p, cols, p)
	lv := func(div int) string { return fmt.Sprintf("min(255\\,64*mod(floor(%s/%d)\\,5))", idx, div) }
	src := fmt.Sprintf("nullsrc=s=%dx%d:d=0.04:r=25,format=gbrp,geq=r='%s':g='%s':b='%s'", w, h, lv(1), lv(5), lv(25))
	return makeMedia(t, fmt.Sprintf("pattern%dx%d.png", w, h), "-f", "lavfi", "-i", src, "-frames:v", "1")
}

// firstPicture decodes the first frame of path; the picture is released
// when the test ends.
func firstPicture(t *testing.T, path string) *decode.Picture {
	t.Helper()
	src, err := decode.New(decode.Options{URL: path})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var p *decode.Picture
	_ = src.Run(ctx, func(f *pipeline.Frame) {
		if p != nil {
			f.Image.Release()
			return
		}
		p = f.Image.(*decode.Picture)
		cancel()
	})
	require.NotNil(t, p, "no frame decoded from %s", path)
	t.Cleanup(p.Release)
	return p
}

// colourCases are the pictures of TestScalerColourMatchesReference.
func colourCases() []colourCase {
	x264 := []string{"-c:v", "libx264", "-qp", "0"} // lossless
	tags := func(cs, rng string) []string {
		return []string{"-colorspace", cs, "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", rng}
	}
	cat := func(a ...[]string) []string {
		var out []string
		for _, x := range a {
			out = append(out, x...)
		}
		return out
	}
	return []colourCase{
		{"hd-bt709", 1920, 1080, "bt709", false, true, false, cat(x264, tags("bt709", "tv"))},
		{"hd-unmarked", 1920, 1080, "bt709", false, false, false, x264}, // HD: BT.709 (decode.MatrixFor)
		{"hd-bt601", 1920, 1080, "bt601", false, true, false, cat(x264, tags("bt470bg", "tv"))},
		{"hd-bt2020", 1920, 1080, "bt2020", false, true, false, cat(x264, tags("bt2020nc", "tv"))},
		{"hd-smpte240m", 1920, 1080, "smpte240m", false, true, true, cat(x264, tags("smpte240m", "tv"))},
		{"sd-unmarked", 720, 576, "bt601", false, false, false, x264}, // SD: BT.601
		{"sd-bt709", 720, 576, "bt709", false, true, false, cat(x264, tags("bt709", "tv"))},
		{"sd-fcc", 720, 576, "fcc", false, true, true, cat(x264, tags("fcc", "tv"))},
		// Full range, three ways: HEVC's VUI flag (decoded as yuvj420p),
		// the container's colour description on yuv420p (FFV1 in
		// Matroska), and MJPEG (JFIF: BT.601 full range; FFmpeg's decoder
		// says bt470bg, pc).
		{"hd-full-hevc", 1920, 1080, "bt709", true, true, false, cat([]string{"-c:v", "libx265", "-x265-params", "lossless=1:log-level=error"}, tags("bt709", "pc"))},
		{"hd-full-ffv1", 1920, 1080, "bt709", true, true, false, cat([]string{"-c:v", "ffv1"}, tags("bt709", "pc"))},
		{"hd-mjpeg", 1920, 1080, "bt601", true, true, true, []string{"-c:v", "mjpeg", "-q:v", "2"}},
	}
}

// encodeCase encodes c from the RGB pattern png.
func encodeCase(t *testing.T, c colourCase, png string) string {
	t.Helper()
	rng, pf := "tv", "yuv420p"
	if c.full {
		rng = "pc"
	}
	if c.name == "hd-mjpeg" {
		pf = "yuvj420p"
	}
	vf := fmt.Sprintf("scale=out_color_matrix=%s:out_range=%s,format=%s", c.matrix, rng, pf)
	return makeMedia(t, c.name+".mkv", append([]string{"-i", png, "-vf", vf, "-frames:v", "1"}, c.args...)...)
}

// convErr is the result of comparing one scaled picture with a
// reference: the worst absolute difference per channel (R, G, B), the
// mean signed difference, and the pixels compared.
type convErr struct {
	worst, mean [3]float64
	n           int
}

func (e *convErr) add(got, want [3]float64) {
	for k := range got {
		d := got[k] - want[k]
		e.worst[k] = math.Max(e.worst[k], math.Abs(d))
		e.mean[k] += d
	}
	e.n++
}

// compare scales p to dw×p.Height() in order and compares it with
// referenceRGB(matrix, full) of the decoded samples. At 1:1 (dw = width)
// every other pixel (a checkerboard) is compared with the conversion of
// its nearest samples; at other widths only the interiors of flat patches
// are (see tolRB), and patches whose planes are not flat around the
// interior (lossy coding) are skipped and counted.
func compare(t *testing.T, sc *decode.Scaler, p *decode.Picture, dw int, order pipeline.PixelOrder, matrix string, full bool) (e convErr, skipped int) {
	t.Helper()
	v, ok := p.YUV420()
	require.True(t, ok, "4:2:0 planes")
	w, h := v.Width, v.Height
	out := make([]byte, dw*h*3)
	require.NoError(t, sc.Resize(p, dw, h, order, out))
	pixel := func(x, y int) [3]float64 {
		px := out[(y*dw+x)*3:]
		if order == pipeline.BGR {
			return [3]float64{float64(px[2]), float64(px[1]), float64(px[0])}
		}
		return [3]float64{float64(px[0]), float64(px[1]), float64(px[2])}
	}
	sample := func(x, y int) [3]float64 {
		c := (y/2)*v.UVStride + x/2
		return referenceRGB(matrix, full, v.Y[y*v.YStride+x], v.U[c], v.V[c])
	}
	if dw == w {
		for y := 0; y < h; y++ {
			for x := y % 2; x < w; x += 2 {
				e.add(pixel(x, y), sample(x, y))
			}
		}
	} else {
		ps := patch(w)
		const margin = 8 // > SWS_BILINEAR's reach when halving the width (2 source pixels), and chroma's
		for py := 0; py+ps <= h; py += ps {
			for px := 0; px+ps <= w; px += ps {
				y0, y1, x0, x1 := py+margin, py+ps-margin, px+margin, px+ps-margin
				if !flat(v, x0-margin/2, y0-margin/2, x1+margin/2, y1+margin/2) {
					skipped++
					continue
				}
				want := sample(x0, y0) // the planes are flat here
				for y := y0; y < y1; y++ {
					for x := x0*dw/w + y%2; x < x1*dw/w; x += 2 {
						e.add(pixel(x, y), want)
					}
				}
			}
		}
	}
	for k := range e.mean {
		e.mean[k] /= float64(max(e.n, 1))
	}
	return e, skipped
}

// flat reports whether the luma in [x0,x1)×[y0,y1) and the chroma over it
// each hold one value.
func flat(v decode.YUV420, x0, y0, x1, y1 int) bool {
	y, u, c := v.Y[y0*v.YStride+x0], v.U[(y0/2)*v.UVStride+x0/2], v.V[(y0/2)*v.UVStride+x0/2]
	for j := y0; j < y1; j++ {
		for i := x0; i < x1; i++ {
			if v.Y[j*v.YStride+i] != y || v.U[(j/2)*v.UVStride+i/2] != u || v.V[(j/2)*v.UVStride+i/2] != c {
				return false
			}
		}
	}
	return true
}

// The Scaler converts with the stream's matrix and range: pictures
// encoded by the ffmpeg CLI as BT.709, BT.601, BT.2020, SMPTE 240M, FCC,
// full range (three ways) and unmarked HD and SD, scaled 1:1 and to half
// width (swscale's SIMD and table paths) in RGB and BGR order, match the
// published conversion of their decoded samples within tolRB/tolG, and
// the Picture reports that Colour (the GPU engine converts with it). The
// same comparison against another matrix must fail by a wide margin, so
// the pattern tells matrices apart. Before vigil gave swscale the
// stream's matrix, every case but the BT.601 ones in limited range or in
// a yuvj* pixel format (MJPEG) failed here.
func TestScalerColourMatchesReference(t *testing.T) {
	pngs := map[[2]int]string{}
	for _, c := range colourCases() {
		if sz := [2]int{c.w, c.h}; pngs[sz] == "" {
			pngs[sz] = pattern(t, c.w, c.h)
		}
	}
	for _, c := range colourCases() {
		t.Run(c.name, func(t *testing.T) {
			file := encodeCase(t, c, pngs[[2]int{c.w, c.h}])
			other := "bt601"
			if c.matrix == "bt601" || c.matrix == "fcc" { // FCC is within a few levels of BT.601
				other = "bt709"
			}
			p := firstPicture(t, file)
			require.Equal(t, decode.Colour{Matrix: matrices[c.matrix], FullRange: c.full, Signalled: c.signalled}, p.Colour())
			sc := decode.NewScaler()
			defer sc.Close()
			widths := []int{c.w, c.w / 2}
			if c.only1to1 {
				widths = widths[:1]
			}
			for _, dw := range widths {
				for order, name := range map[pipeline.PixelOrder]string{pipeline.RGB: "RGB", pipeline.BGR: "BGR"} {
					e, skipped := compare(t, sc, p, dw, order, c.matrix, c.full)
					wrong, _ := compare(t, sc, p, dw, order, other, c.full)
					total := (c.w / patch(c.w)) * (c.h / patch(c.w))
					t.Logf("%s to %dx%d %s: |swscale − %s| worst R %.2f G %.2f B %.2f, mean %+.2f %+.2f %+.2f levels over %d pixels (%d of %d patches not flat); |swscale − %s| worst %.1f",
						c.name, dw, c.h, name, c.matrix, e.worst[0], e.worst[1], e.worst[2], e.mean[0], e.mean[1], e.mean[2], e.n, skipped, total,
						other, max(wrong.worst[0], wrong.worst[1], wrong.worst[2]))
					require.Positive(t, e.n)
					require.LessOrEqual(t, skipped, total/10, "too few flat patches")
					require.LessOrEqual(t, e.worst[0], tolRB, "R")
					require.LessOrEqual(t, e.worst[1], tolG, "G")
					require.LessOrEqual(t, e.worst[2], tolRB, "B")
					require.Greater(t, max(wrong.worst[0], wrong.worst[1], wrong.worst[2]), 2*tolG,
						"the pattern must tell %s from %s", c.matrix, other)
				}
			}
		})
	}
}

// Unmarked streams: BT.709 for HD (1280 wide or more, or more than 576
// lines), BT.601 for SD, as mpv decides.
func TestMatrixFor(t *testing.T) {
	for _, tc := range []struct {
		w, h int
		want decode.Matrix
	}{
		{640, 480, decode.BT601}, {704, 576, decode.BT601}, {720, 576, decode.BT601}, {768, 576, decode.BT601},
		{1024, 576, decode.BT601}, {800, 600, decode.BT709}, {960, 720, decode.BT709}, {1280, 544, decode.BT709},
		{1280, 720, decode.BT709}, {1920, 1080, decode.BT709}, {3840, 2160, decode.BT709},
	} {
		require.Equal(t, tc.want, decode.MatrixFor(tc.w, tc.h), "%dx%d", tc.w, tc.h)
	}
}
