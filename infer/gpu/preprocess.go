package gpu

import (
	_ "embed"
	"fmt"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/pipeline"
)

//go:embed preprocess.cu
var preprocessSource string

// Preprocessor runs vigil's preprocessing kernels (preprocess.cu, compiled
// with NVRTC for the context's device when it is created): letterbox and
// colour conversion of 4:2:0 frames, and normalisation of frames already
// resized on the CPU.
type Preprocessor struct {
	mod    *cuda.Module
	yuv    *cuda.Function
	packed *cuda.Function
}

// NewPreprocessor compiles the kernels. Errors: cuda.ErrNoNVRTC when no
// NVRTC library loads, or a *cuda.NVRTCError with the compile log.
func NewPreprocessor(c *cuda.Context) (*Preprocessor, error) {
	m, err := c.CompileModule(preprocessSource, "preprocess.cu", "--use_fast_math")
	if err != nil {
		return nil, fmt.Errorf("gpu: compiling preprocess.cu: %w", err)
	}
	p := &Preprocessor{mod: m}
	if p.yuv, err = m.Function("yuv420_letterbox"); err == nil {
		p.packed, err = m.Function("packed_letterbox")
	}
	if err != nil {
		m.Unload()
		return nil, err
	}
	return p, nil
}

// Close unloads the module; it is idempotent.
func (p *Preprocessor) Close() {
	if p.mod != nil {
		p.mod.Unload()
		p.mod = nil
	}
}

// Planes are a 4:2:0 picture's planes in device memory (see decode.YUV420
// for the layout; V is unused for NV12). Deep pictures have 16-bit
// little-endian samples with the value in the high bits, interleaved
// chroma (P016, as NVDEC gives 10-bit streams; decode.CUDAFrame.Deep);
// strides are in bytes.
type Planes struct {
	Y, U, V           cuda.DevicePtr
	YStride, UVStride int
	NV12              bool
	Deep              bool
	Width, Height     int
	FullRange         bool
	Matrix            decode.Matrix
}

// Target is one item's slice of the model input in device memory: W×H
// pixels written as Format says, fp16 when Half, else fp32.
type Target struct {
	Dst    cuda.DevicePtr
	W, H   int
	Format infer.TensorFormat
	Half   bool
}

// Coefficients returns the YCbCr→RGB constants the kernel uses (see
// preprocess.cu): ky scales Y-yoff; krv, kgu, kgv, kbu scale the centred
// chroma. The luma weights are the matrix's (decode.Matrix.Weights: ITU-R
// BT.601-7, BT.709-6, BT.2020-2, ...); limited range maps Y 16..235 and
// C 16..240 to full scale, i.e. ×255/219 and ×255/224.
func Coefficients(m decode.Matrix, full bool) (ky, yoff, krv, kgu, kgv, kbu float32) {
	kr, kb := m.Weights()
	kg := 1 - kr - kb
	cy, cc, off := 1.0, 1.0, 0.0
	if !full {
		cy, cc, off = 255.0/219, 255.0/224, 16
	}
	rv := 2 * (1 - kr)
	bu := 2 * (1 - kb)
	gu := bu * kb / kg
	gv := rv * kr / kg
	return float32(cy), float32(off), float32(rv * cc), float32(gu * cc), float32(gv * cc), float32(bu * cc)
}

// SwscaleBias is added to R, G and B (8-bit levels) for limited-range
// input so that the kernel agrees with libswscale, whose CPU output vigil's
// other path uses: swscale's fixed-point YUV→RGB (libswscale/yuv2rgb.c and
// its SIMD versions) lands below the exact conversion, because it
// truncates each term (luma, and each chroma term) to a whole level, which
// costs half a level per term on average whatever the matrix. Measured on
// every pixel of Megamind.avi frame 120 (BT.601) at 1:1 scale against the
// exact formula: a least-squares fit gives slope 1.000 and offsets −1.10
// (R), −1.53 (G), −1.11 (B). With them, GPU-vs-swscale differences are
// centred on zero instead of sitting about one level high.
var SwscaleBias = [3]float32{-1.10, -1.53, -1.11}

func grid(w, h int) (g, b [3]uint32) {
	b = [3]uint32{16, 16, 1}
	g = [3]uint32{uint32((w + 15) / 16), uint32((h + 15) / 16), 1}
	return g, b
}

func b2i(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

// YUV420 enqueues the letterbox of src into t on s, for the mapping lb
// (lb.InW×lb.InH must equal t.W×t.H). Errors come from cuLaunchKernel.
func (p *Preprocessor) YUV420(s *cuda.Stream, src Planes, lb infer.Letterbox, t Target) error {
	if lb.InW != t.W || lb.InH != t.H || lb.SrcW != src.Width || lb.SrcH != src.Height {
		return fmt.Errorf("gpu: letterbox %+v does not fit %dx%d source and %dx%d target", lb, src.Width, src.Height, t.W, t.H)
	}
	ky, yoff, krv, kgu, kgv, kbu := Coefficients(src.Matrix, src.FullRange)
	bias := [3]float32{}
	if !src.FullRange {
		bias = SwscaleBias
	}
	g, b := grid(t.W, t.H)
	f := t.Format
	return p.yuv.Launch(s, g, b, 0,
		src.Y, src.U, src.V, int32(src.YStride), int32(src.UVStride), b2i(src.NV12 || src.Deep), b2i(src.Deep), int32(src.Width), int32(src.Height),
		int32(lb.ContentW), int32(lb.ContentH), int32(t.W), int32(t.H),
		ky, yoff, krv, kgu, kgv, kbu, bias[0], bias[1], bias[2],
		b2i(f.NCHW), b2i(f.Order == pipeline.BGR), f.Scale, f.Bias, f.Pad, b2i(t.Half), t.Dst)
}

// Packed enqueues the normalisation of lb.ContentW×lb.ContentH packed
// 8-bit pixels at src (already in t.Format.Order) into t on s.
func (p *Preprocessor) Packed(s *cuda.Stream, src cuda.DevicePtr, lb infer.Letterbox, t Target) error {
	g, b := grid(t.W, t.H)
	f := t.Format
	return p.packed.Launch(s, g, b, 0, src, int32(lb.ContentW), int32(lb.ContentH), int32(t.W), int32(t.H),
		b2i(f.NCHW), f.Scale, f.Bias, f.Pad, b2i(t.Half), t.Dst)
}
