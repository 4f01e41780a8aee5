//go:build gpu

// GPU tests: run on a machine with an NVIDIA driver, NVRTC and ONNX
// Runtime's CUDA provider (see README, "GPU tests"):
//
//	VIGIL_ORT_LIBRARY=<ORT GPU build>/libonnxruntime.so.1 go test -tags gpu ./infer/gpu ./internal/cuda
package gpu_test

import (
	"context"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

func TestMain(m *testing.M) {
	decode.SetLogger(nil)
	os.Exit(m.Run())
}

func initORT(t *testing.T) {
	t.Helper()
	lib := testenv.ORTLibrary(t)
	require.NoError(t, infer.InitRuntime(lib))
	require.NoError(t, ortdev.Init(lib))
}

// frames decodes every step-th frame of src, n of them.
func frames(t *testing.T, src string, n int, step uint64) []pipeline.Image {
	t.Helper()
	s, err := decode.New(decode.Options{URL: src})
	require.NoError(t, err)
	var imgs []pipeline.Image
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = s.Run(ctx, func(f *pipeline.Frame) {
		if f.Seq%step == 0 && len(imgs) < n {
			imgs = append(imgs, f.Image)
			if len(imgs) == n {
				cancel()
			}
			return
		}
		f.Image.Release()
	})
	if err != nil && !strings.Contains(err.Error(), "context canceled") {
		require.ErrorIs(t, err, io.EOF)
	}
	require.Len(t, imgs, n)
	t.Cleanup(func() {
		for _, im := range imgs {
			im.Release()
		}
	})
	return imgs
}

func openGPU(t *testing.T, path string, graph bool) *gpu.Engine {
	t.Helper()
	sc := decode.NewScaler()
	t.Cleanup(sc.Close)
	e, err := gpu.Open(gpu.Options{Path: path, CUDAGraph: graph, Resizer: sc})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	t.Log(e.Choice())
	return e
}

func openCPU(t *testing.T, path string) *infer.Engine {
	t.Helper()
	sc := decode.NewScaler()
	t.Cleanup(sc.Close)
	e, err := infer.Open(infer.Options{Path: path, Resizer: sc})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// The TensorRT provider is asked for first; on a machine without TensorRT
// it must be skipped with its reason and the CUDA provider taken.
func TestTensorRTMissingFallsBackToCUDA(t *testing.T) {
	initORT(t)
	e := openGPU(t, testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), true)
	if e.Provider() == ortdev.TensorRT {
		t.Skip("TensorRT is installed here; the fallback cannot be shown")
	}
	require.Equal(t, ortdev.CUDA, e.Provider())
	require.Contains(t, e.Choice(), "execution provider cuda (tensorrt unavailable: ")
}

// The kernel's letterboxed tensor against swscale's (bilinear, BT.601
// limited range, then the adapter's Fill), in 8-bit units: the stated
// tolerance is a mean absolute difference ≤ 1.5 and a 99th percentile ≤ 8
// over the content, padding identical. swscale keeps chroma at half
// horizontal resolution and rounds to 8 bits before normalising; the
// kernel interpolates chroma and does not round.
func TestKernelMatchesSwscale(t *testing.T) {
	initORT(t)
	imgs := frames(t, testenv.Media(t, "Megamind.avi"), 4, 50)
	for _, model := range []string{"face_detection_front_128x128_barracuda.onnx", "face_detection_back_256x256_barracuda.onnx"} {
		path := testenv.Model(t, model)
		g, c := openGPU(t, path, false), openCPU(t, path)
		for i, img := range imgs {
			var st pipeline.StageTimes
			_, err := g.Detect(img, &st, nil)
			require.NoError(t, err)
			_, err = c.Detect(img, &st, nil)
			require.NoError(t, err)
			gt, err := g.InputTensor()
			require.NoError(t, err)
			ct := c.InputTensor()
			require.Len(t, gt, len(ct))
			// BlazeFace: v/127.5-1, so one 8-bit level is 1/127.5.
			diffs := make([]float64, len(ct))
			for k := range ct {
				diffs[k] = math.Abs(float64(gt[k]-ct[k])) * 127.5
			}
			mean := 0.0
			for _, d := range diffs {
				mean += d
			}
			mean /= float64(len(diffs))
			slices.Sort(diffs)
			p99, maxd := diffs[len(diffs)*99/100], diffs[len(diffs)-1]
			t.Logf("%s frame %d (%dx%d): |GPU-swscale| in 8-bit levels: mean %.3f, P99 %.2f, max %.2f", model, i, img.Width(), img.Height(), mean, p99, maxd)
			require.LessOrEqual(t, mean, 1.5)
			require.LessOrEqual(t, p99, 8.0)
		}
	}
}

func iou(a, b pipeline.Box) float64 {
	ix := math.Max(0, math.Min(float64(a.X2), float64(b.X2))-math.Max(float64(a.X1), float64(b.X1)))
	iy := math.Max(0, math.Min(float64(a.Y2), float64(b.Y2))-math.Max(float64(a.Y1), float64(b.Y1)))
	in := ix * iy
	return in / (float64((a.X2-a.X1)*(a.Y2-a.Y1)) + float64((b.X2-b.X1)*(b.Y2-b.Y1)) - in)
}

// matchDetections: the same count, and every CPU detection has a GPU one
// with IoU ≥ 0.9 and a score within 0.02.
func matchDetections(t *testing.T, what string, cpu, gpuDets []pipeline.Detection) {
	t.Helper()
	require.Len(t, gpuDets, len(cpu), "%s: detection count", what)
	for _, a := range cpu {
		best, score := 0.0, float32(0)
		for _, b := range gpuDets {
			if b.ClassID == a.ClassID && iou(a.Box, b.Box) > best {
				best, score = iou(a.Box, b.Box), b.Score
			}
		}
		require.GreaterOrEqual(t, best, 0.9, "%s: %+v", what, a)
		require.InDelta(t, a.Score, score, 0.02, "%s: %+v", what, a)
	}
}

func detectionsMatch(t *testing.T, model, video string, n int, step uint64) int {
	imgs := frames(t, video, n, step)
	c := openCPU(t, model)
	total := 0
	for _, graph := range []bool{false, true} {
		g := openGPU(t, model, graph)
		for i, img := range imgs {
			var st pipeline.StageTimes
			want, err := c.Detect(img, &st, nil)
			require.NoError(t, err)
			got, err := g.Detect(img, &st, nil)
			require.NoError(t, err)
			matchDetections(t, model, want, got)
			total += len(want)
			_ = i
		}
	}
	return total
}

func TestBlazeFaceGPUMatchesCPU(t *testing.T) {
	initORT(t)
	n := detectionsMatch(t, testenv.Model(t, "face_detection_back_256x256_barracuda.onnx"), testenv.Media(t, "Megamind.avi"), 20, 13)
	require.Positive(t, n)
}

func TestYOLOXGPUMatchesCPU(t *testing.T) {
	initORT(t)
	model := os.Getenv("VIGIL_YOLOX")
	if model == "" {
		model = testenv.Shared(t, "models/yolox_nano.onnx")
	}
	video := os.Getenv("VIGIL_VTEST")
	if video == "" {
		video = testenv.Shared(t, "video/vtest.avi")
	}
	n := detectionsMatch(t, model, video, 10, 37)
	require.Positive(t, n)
}

// A batch of 8 on the GPU gives each frame what batch 1 gives it.
func TestBatchMatchesBatch1OnGPU(t *testing.T) {
	initORT(t)
	b8 := testenv.Model(t, "face_detection_front_128x128_barracuda.b8.onnx")
	imgs := frames(t, testenv.Media(t, "Megamind.avi"), 8, 29)
	one := openGPU(t, testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), true)
	eight := openGPU(t, b8, true)
	sts := make([]*pipeline.StageTimes, 8)
	for i := range sts {
		sts[i] = &pipeline.StageTimes{}
	}
	batch, err := eight.DetectBatch(imgs, sts, make([][]pipeline.Detection, 8))
	require.NoError(t, err)
	for i, img := range imgs {
		var st pipeline.StageTimes
		want, err := one.Detect(img, &st, nil)
		require.NoError(t, err)
		matchDetections(t, "batch 8 vs 1", want, batch[i])
	}
}

// fp16 output of the kernel equals its fp32 output to half precision.
func TestKernelHalfOutput(t *testing.T) {
	require.NoError(t, cuda.Init())
	ctx, err := cuda.Primary(0)
	require.NoError(t, err)
	defer ctx.Release()
	pre, err := gpu.NewPreprocessor(ctx)
	require.NoError(t, err)
	defer pre.Close()
	s, err := ctx.NewStream()
	require.NoError(t, err)
	defer s.Destroy()
	const w, h = 64, 48
	planes := make([]byte, w*h+2*(w/2)*(h/2))
	for i := range planes {
		planes[i] = byte(i * 7)
	}
	src, err := ctx.Alloc(len(planes))
	require.NoError(t, err)
	defer src.Free()
	require.NoError(t, ctx.CopyHtoD(src.Ptr(), planes))
	p := gpu.Planes{Y: src.Ptr(), U: src.Ptr() + cuda.DevicePtr(w*h), V: src.Ptr() + cuda.DevicePtr(w*h+w*h/4),
		YStride: w, UVStride: w / 2, Width: w, Height: h, Matrix: decode.BT601}
	lb := infer.NewLetterbox(w, h, 32, 32)
	f := infer.TensorFormat{NCHW: true, Order: pipeline.BGR, Scale: 1, Pad: 114}
	d32, err := ctx.Alloc(32 * 32 * 3 * 4)
	require.NoError(t, err)
	defer d32.Free()
	d16, err := ctx.Alloc(32 * 32 * 3 * 2)
	require.NoError(t, err)
	defer d16.Free()
	require.NoError(t, pre.YUV420(s, p, lb, gpu.Target{Dst: d32.Ptr(), W: 32, H: 32, Format: f}))
	require.NoError(t, pre.YUV420(s, p, lb, gpu.Target{Dst: d16.Ptr(), W: 32, H: 32, Format: f, Half: true}))
	require.NoError(t, s.Synchronize())
	b32, b16 := make([]byte, d32.Len()), make([]byte, d16.Len())
	require.NoError(t, ctx.CopyDtoH(b32, d32.Ptr()))
	require.NoError(t, ctx.CopyDtoH(b16, d16.Ptr()))
	for i := 0; i < 32*32*3; i++ {
		v32 := math.Float32frombits(uint32(b32[4*i]) | uint32(b32[4*i+1])<<8 | uint32(b32[4*i+2])<<16 | uint32(b32[4*i+3])<<24)
		v16 := gpu.HalfToFloat(uint16(b16[2*i]) | uint16(b16[2*i+1])<<8)
		require.InDelta(t, v32, v16, math.Max(0.002*math.Abs(float64(v32)), 1e-3), "element %d", i)
	}
	// Padding rows (32x24 content in a 32x32 input) hold the pad value.
	pad := math.Float32frombits(uint32(b32[4*(31*32)]) | uint32(b32[4*(31*32)+1])<<8 | uint32(b32[4*(31*32)+2])<<16 | uint32(b32[4*(31*32)+3])<<24)
	require.Equal(t, float32(114), pad)
}
