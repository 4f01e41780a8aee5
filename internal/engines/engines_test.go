package engines_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/testenv"
)

// Streams of one model share its engine and gate; a pool ("high") and a
// device get instances of their own; an unknown model is bad input.
func TestPoolSharesEngines(t *testing.T) {
	testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
	c := config.Default()
	c.Infer.Provider = "cpu"
	require.NoError(t, engines.OpenRuntime(&c))
	p := engines.New(&c)
	a, err := p.Get("blazeface")
	require.NoError(t, err)
	b, err := p.Instance("blazeface", "", c.Infer.Device)
	require.NoError(t, err)
	require.Same(t, a, b, "one engine per model")
	require.Same(t, p.Gate(a), p.Gate(b), "and one gate")
	high, err := p.Instance("blazeface", "high", c.Infer.Device)
	require.NoError(t, err)
	require.NotSame(t, a, high, "the high pool has its own instance")
	other, err := p.Instance("blazeface", "", 1)
	require.NoError(t, err)
	require.NotSame(t, a, other, "another device has its own instance")
	require.Len(t, p.ChoiceLines(), 3)
	require.Contains(t, p.ChoiceLines()[0], "execution provider cpu (infer.provider: cpu)")
	require.Zero(t, p.GateWaiting())
	_, err = p.Get("nosuchmodel")
	require.True(t, cli.IsBadInput(err), "%v", err)
	batcher, err := p.Batcher("blazeface", "", c.Infer.Device, a)
	require.NoError(t, err)
	require.Nil(t, batcher, "no batcher without infer.batch_sizes beyond 1")
	p.CloseLogging(zaptest.NewLogger(t))
}

// With decode.hwaccel hybrid a stream decodes on its GPU's NVDEC (auto:
// the CPU still takes what NVDEC cannot) or on the CPU, as placed; other
// settings pass through, decode.nvdec among them.
func TestWithHW(t *testing.T) {
	c := config.Default()
	c.Decode.HWAccel = "hybrid"
	o := engines.WithHW(decode.Options{URL: "x"}, &c, 3, true)
	require.Equal(t, decode.HWAuto, o.HWAccel)
	require.Equal(t, "3", o.HWDevice)
	require.Equal(t, "x", o.URL)
	require.Equal(t, decode.HWNone, engines.WithHW(decode.Options{}, &c, 3, false).HWAccel)
	require.Equal(t, decode.NVDECDirect, o.NVDEC, "decode.nvdec's default")
	c.Decode.HWAccel = "cuda"
	c.Decode.NVDECMode = "ffmpeg"
	o = engines.WithHW(decode.Options{}, &c, 0, false)
	require.Equal(t, decode.HWCUDA, o.HWAccel, "nvdec matters under hybrid only")
	require.Equal(t, decode.NVDECFFmpeg, o.NVDEC)
}

// Hybrid decoding's capacities, in pixels per second, default to the
// H200 figures (docs/performance.md) converted at 1080p, take the
// deprecated frame rates as frames of 1080p, and place streams in their
// proportion: with NVDEC 200 fps per GPU and the CPU 100, 2 of 3 streams
// of one GPU go to NVDEC. Streams weigh their pixel rate: one stream of
// 4 × 1080p30 fills the NVDEC side as four of 1080p30 would.
func TestDecodePlacement(t *testing.T) {
	const p1080 = 1920 * 1080
	c := config.Default()
	nv, cpu := engines.HybridCapacity(&c)
	require.Equal(t, 2150.0*p1080, nv)
	require.Equal(t, 62*p1080*float64(runtime.NumCPU()), cpu)
	require.Nil(t, engines.NewDecodePlacer(&c, 1), "no placer unless hybrid")
	c.Decode.HWAccel = "hybrid"
	c.Decode.NVDECFPS, c.Decode.CPUFPS = 200, 100
	nv, cpu = engines.HybridCapacity(&c)
	require.Equal(t, []float64{200 * p1080, 100 * p1080}, []float64{nv, cpu}, "deprecated keys: frames of 1080p")
	require.Len(t, c.Deprecations(), 2)
	require.Contains(t, c.Deprecations()[0], "decode.nvdec_pixel_rate: 414720000")
	p := engines.NewDecodePlacer(&c, 1)
	n := 0
	for _, id := range []string{"a", "b", "c"} {
		if engines.PlaceDecoder(p, id, 0, 1) {
			n++
		}
	}
	require.Equal(t, 2, n)
	require.Equal(t, engines.PlaceDecoder(p, "a", 0, 1), engines.PlaceDecoder(p, "a", 0, 1), "sticky")

	c.Decode.NVDECFPS, c.Decode.CPUFPS = 0, 0
	c.Decode.NVDECPixelRate, c.Decode.CPUPixelRate = 8*engines.DefaultStreamPixelRate, 4*engines.DefaultStreamPixelRate
	require.Empty(t, c.Deprecations())
	q := engines.NewDecodePlacer(&c, 1)
	big := engines.StreamPixelRate(3840, 2160, 30)
	require.Equal(t, 4.0*engines.DefaultStreamPixelRate, big)
	require.True(t, engines.PlaceDecoder(q, "4k", 0, 1))
	r := engines.NewReweigher()
	for range 2 { // two readings: the 4K stream's weight
		r.Observe(q, "4k", big)
	}
	require.Equal(t, []float64{big, 0}, q.Loads())
	got := map[bool]int{}
	for i := range 6 {
		got[engines.PlaceDecoder(q, fmt.Sprint("hd", i), 0, 1)]++
	}
	// NVDEC holds 8 units of 1080p30, the CPU 4, and the 4K stream is 4
	// of NVDEC's: each HD stream goes where the relative load would be
	// lower (ties to NVDEC), which ends at NVDEC 4+3 of 8 and CPU 3 of 4.
	// Counting streams instead would have put 4 of the 6 on NVDEC.
	require.Equal(t, map[bool]int{true: 3, false: 3}, got)
	require.Equal(t, []float64{7 * engines.DefaultStreamPixelRate, 3 * engines.DefaultStreamPixelRate}, q.Loads())
	require.Equal(t, 0.0, engines.StreamPixelRate(0, 1080, 30), "unknown size: no weight")
	require.Equal(t, 0.0, engines.StreamPixelRate(1920, 1080, 0), "no frames yet: no weight")
}

func TestGPUChain(t *testing.T) {
	require.Nil(t, engines.GPUChain("cpu"))
	require.Len(t, engines.GPUChain("cuda"), 1)
	require.Len(t, engines.GPUChain("auto"), 2)
	require.Len(t, engines.GPUChain("tensorrt"), 2)
}

// Labels reads a model's class names from its file through its adapter:
// BlazeFace's face, the default model for "", YOLOX-Nano's COCO names
// (../shared's copy, when it is there).
func TestLabels(t *testing.T) {
	testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
	c := config.Default()
	l, err := engines.Labels(&c, "blazeface")
	require.NoError(t, err)
	require.Equal(t, []string{"face"}, l)
	l, err = engines.Labels(&c, "")
	require.NoError(t, err)
	require.Equal(t, []string{"face"}, l, "pipeline.default_model is blazeface")
	_, err = engines.Labels(&c, "nosuchmodel")
	require.Error(t, err)
	_, err = engines.Labels(&c, "/nonexistent/m.onnx")
	require.Error(t, err)
	if p := filepath.Join(testenv.RepoRoot(), "..", "shared", "testdata", "models", "yolox_nano.onnx"); fileExists(p) {
		l, err = engines.Labels(&c, p)
		require.NoError(t, err)
		require.Len(t, l, 80)
		require.Equal(t, "person", l[0])
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// GPUSettingsOf fills in the defaults and reads the deprecated tf32 as
// precision tf32; GraphsWithDecode allows CUDA graphs unless FFmpeg's
// NVDEC hwaccel may decode.
func TestGPUSettings(t *testing.T) {
	c := config.Default()
	st := engines.GPUSettingsOf(c.Infer)
	// heuristic by default: infer.cudnn_conv_algo_search's doc says why.
	require.Equal(t, engines.GPUSettings{Precision: engines.DefaultPrecision, Instances: engines.DefaultInstances, ConvAlgoSearch: "HEURISTIC"}, st)
	c.Infer.TF32 = true
	require.Equal(t, gpu.PrecisionTF32, engines.GPUSettingsOf(c.Infer).Precision)
	c.Infer.Precision, c.Infer.Instances, c.Infer.PreferNHWC, c.Infer.CuDNNConvAlgoSearch = "fp16", 3, true, "exhaustive"
	require.Equal(t, engines.GPUSettings{Precision: gpu.PrecisionFP16, Instances: 3, NHWC: true, ConvAlgoSearch: "EXHAUSTIVE"}, engines.GPUSettingsOf(c.Infer))

	for _, tc := range []struct {
		hw, mode string
		graphs   bool
	}{{"none", "ffmpeg", true}, {"cuda", "direct", true}, {"hybrid", "direct", true}, {"cuda", "ffmpeg", false}, {"auto", "ffmpeg", false}} {
		require.Equal(t, tc.graphs, engines.GraphsWithDecode(config.Decode{HWAccel: tc.hw, NVDECMode: tc.mode}), "%s %s", tc.hw, tc.mode)
	}
}
