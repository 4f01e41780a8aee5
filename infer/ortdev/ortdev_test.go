package ortdev_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/testenv"
)

func initORT(t *testing.T) string {
	t.Helper()
	lib := testenv.ORTLibrary(t)
	require.NoError(t, infer.InitRuntime(lib))
	require.NoError(t, ortdev.Init(lib))
	return lib
}

// On a machine without TensorRT or CUDA (CI, laptops) the default chain
// must end on the CPU provider and say why the GPU providers were skipped;
// the IoBinding path over C-heap buffers must give the same outputs as
// onnxruntime_go's session on the same input.
func TestChainFallsBackToCPUAndBindingMatches(t *testing.T) {
	initORT(t)
	model := testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
	s, err := ortdev.Open(ortdev.Options{
		Model:     model,
		CUDAGraph: true,
		TensorRT:  ortdev.TensorRTOptions{FP16: true, ProfileShapes: "input:1x128x128x3"},
	})
	require.NoError(t, err)
	defer s.Close()
	if s.Provider() != ortdev.CPU {
		t.Skipf("this machine has a GPU provider (%s); the fallback test is for CPU-only machines", s.Choice())
	}
	line := s.Choice()
	t.Log(line)
	require.True(t, strings.HasPrefix(line, "execution provider cpu ("), line)
	require.Contains(t, line, "tensorrt unavailable: Failed to load library")
	require.NotContains(t, line, "ONNXRuntimeError")
	require.Contains(t, line, "cuda unavailable: ")
	require.NotContains(t, line, "\n")

	ref, err := infer.Open(infer.Options{Path: model, Resizer: decode.NewScaler()})
	require.NoError(t, err)
	defer ref.Close()

	require.Equal(t, []string{"input:0"}, s.Inputs())
	in, err := ortdev.NewHostMem(1 * 128 * 128 * 3 * 4)
	require.NoError(t, err)
	defer in.Free()
	x := in.Float32s()
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.01)) * 0.9
	}
	require.NoError(t, s.BindHost("input:0", false, in, []int64{1, 128, 128, 3}, ortdev.Float32))
	want, err := ref.Raw(x)
	require.NoError(t, err)
	_, infos, err := ort.GetInputOutputInfo(model)
	require.NoError(t, err)
	outs := map[string][]int64{}
	for _, i := range infos {
		outs[i.Name] = i.Dimensions
	}
	names := ref.OutputNames()
	bufs := make([]*ortdev.HostMem, len(names))
	for i, n := range names {
		shape := outs[n]
		require.NotNil(t, shape, "output %s", n)
		bufs[i], err = ortdev.NewHostMem(len(want[i]) * 4)
		require.NoError(t, err)
		defer bufs[i].Free()
		require.NoError(t, s.BindHost(n, true, bufs[i], shape, ortdev.Float32))
	}
	require.NoError(t, s.Run())
	for i, n := range names {
		got := bufs[i].Float32s()
		require.Len(t, got, len(want[i]), n)
		nonzero := 0
		for j := range got {
			require.InDelta(t, want[i][j], got[j], 1e-4, "%s[%d]", n, j)
			if got[j] != 0 {
				nonzero++
			}
		}
		require.Positive(t, nonzero, "%s is all zeros", n)
	}
}

func TestBadBindingsAreRefused(t *testing.T) {
	initORT(t)
	s, err := ortdev.Open(ortdev.Options{Model: testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), Providers: []ortdev.Provider{ortdev.CPU}})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, "execution provider cpu (first choice)", s.Choice())
	h, err := ortdev.NewHostMem(16)
	require.NoError(t, err)
	defer h.Free()
	err = s.BindHost("input", false, h, []int64{1, 128, 128, 3}, ortdev.Float32)
	require.ErrorContains(t, err, "needs 196608 bytes, buffer has 16")
	err = s.BindDevice("input", false, 0x1000, 196608, []int64{1, 128, 128, 3}, ortdev.Float32)
	require.ErrorContains(t, err, "cannot bind device memory to a cpu session")
	big, err := ortdev.NewHostMem(196608)
	require.NoError(t, err)
	defer big.Free()
	err = s.BindHost("no_such_input", false, big, []int64{1, 128, 128, 3}, ortdev.Float32)
	if err == nil {
		// ORT checks names at run time.
		err = s.Run()
	}
	require.Error(t, err)
}

func TestOpenErrors(t *testing.T) {
	initORT(t)
	_, err := ortdev.Open(ortdev.Options{Model: "/nonexistent.onnx", Providers: []ortdev.Provider{ortdev.CPU}})
	require.ErrorContains(t, err, "/nonexistent.onnx")
	require.ErrorContains(t, err, "cpu unavailable")
	_, err = ortdev.Open(ortdev.Options{Model: "x.onnx", Providers: []ortdev.Provider{ortdev.TensorRT}, TensorRT: ortdev.TensorRTOptions{INT8: true}})
	require.ErrorContains(t, err, "INT8 needs a calibration table")
	_, err = ortdev.ParseProvider("vulkan")
	require.ErrorContains(t, err, `"vulkan"`)
	p, err := ortdev.ParseProvider(" TensorRT ")
	require.NoError(t, err)
	require.Equal(t, ortdev.TensorRT, p)
	require.NoError(t, ortdev.Init(testenv.ORTLibrary(t)), "idempotent")
	require.Error(t, ortdev.Init("/other/libonnxruntime.so"))
}

func TestParseConvAlgoSearch(t *testing.T) {
	for in, want := range map[string]string{"": "", "exhaustive": "EXHAUSTIVE", " Heuristic ": "HEURISTIC", "DEFAULT": "DEFAULT"} {
		got, err := ortdev.ParseConvAlgoSearch(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := ortdev.ParseConvAlgoSearch("fastest")
	require.ErrorContains(t, err, `"fastest"`)
}

func TestProviderOptions(t *testing.T) {
	o := ortdev.Options{DeviceID: 1, ComputeStream: 0xdeadbeef, CUDAGraph: true,
		TensorRT: ortdev.TensorRTOptions{FP16: true, INT8: true, INT8CalibrationTable: "calib.flatbuffers", EngineCacheDir: "/var/cache/vigil/trt",
			TimingCacheDir: "/var/cache/vigil/trt", CUDAGraph: true, ProfileShapes: ortdev.FixedProfile("images", []int64{8, 3, 416, 416})}}
	c := ortdev.ProviderOptions(o, ortdev.CUDA)
	require.Equal(t, map[string]string{"device_id": "1", "enable_cuda_graph": "1", "use_tf32": "0", "prefer_nhwc": "0", "has_user_compute_stream": "1", "user_compute_stream": "3735928559"}, c)
	o.NHWC, o.TF32, o.ConvAlgoSearch = true, true, ortdev.ConvSearchHeuristic
	c = ortdev.ProviderOptions(o, ortdev.CUDA)
	require.Equal(t, "1", c["prefer_nhwc"])
	require.Equal(t, "1", c["use_tf32"])
	require.Equal(t, "HEURISTIC", c["cudnn_conv_algo_search"])
	trt := ortdev.ProviderOptions(o, ortdev.TensorRT)
	require.Equal(t, "images:8x3x416x416", trt["trt_profile_min_shapes"])
	require.Equal(t, trt["trt_profile_min_shapes"], trt["trt_profile_max_shapes"])
	require.Equal(t, trt["trt_profile_min_shapes"], trt["trt_profile_opt_shapes"])
	for _, k := range []string{"trt_fp16_enable", "trt_int8_enable", "trt_engine_cache_enable", "trt_timing_cache_enable", "trt_cuda_graph_enable", "has_user_compute_stream"} {
		require.Equal(t, "1", trt[k], k)
	}
	require.Empty(t, ortdev.ProviderOptions(o, ortdev.CPU))
}
