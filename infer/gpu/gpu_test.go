//go:build gpu

// GPU tests: run on a machine with an NVIDIA driver, NVRTC and ONNX
// Runtime's CUDA provider (see README, "GPU tests"):
//
//	VIGIL_ORT_LIBRARY=<ORT GPU build>/libonnxruntime.so.1 go test -tags gpu ./infer/gpu ./internal/cuda
package gpu_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
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
// limited range, then the adapter's Fill), in 8-bit units. The bounds, a
// mean absolute difference ≤ 0.75 and a 99th percentile ≤ 3 levels over
// the whole input (padding included), with no value more than 8 levels
// off, are a regression guard, not a derived tolerance: they were set
// after seeing mean 0.37, P99 2, max 6 on the H200, at about twice those.
// (swscale alone is within 3.45 levels of the exact conversion on R and B
// and 4.62 on G at 1:1, decode/colour_test.go; its bilinear downscale adds
// differences that have not been bounded from its arithmetic.) swscale keeps chroma at half
// horizontal resolution and rounds to 8 bits before normalising; so does
// the kernel, which leaves the filters' fixed-point rounding (swscale
// computes in 14- and 15-bit integers) as the difference.
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
			require.LessOrEqual(t, mean, 0.75)
			require.LessOrEqual(t, p99, 3.0)
			require.LessOrEqual(t, maxd, 8.0)
		}
	}
}

// detectionsMatch runs the CPU engine and the GPU engine (eager and CUDA
// graph) on the same frames. With CPU preprocessing on the GPU engine the
// inputs are identical, and every detection must match (same count, IoU ≥
// 0.9, score within 0.02). With the GPU kernel, inputs differ from
// swscale's by 0.4 levels on average (TestKernelMatchesSwscale); a
// detection whose score sits at the threshold, or a small object, can
// then flip. The test logs each such case and requires that at least
// minShare of all detections match: the callers pass 0.95, the agreement
// goal issue 14 (item 19) set for the two engines, not a figure fitted to
// what this test saw.
func detectionsMatch(t *testing.T, model, video string, n int, step uint64, minShare float64) {
	imgs := frames(t, video, n, step)
	c := openCPU(t, model)
	want := make([][]pipeline.Detection, len(imgs))
	for i, img := range imgs {
		var st pipeline.StageTimes
		d, err := c.Detect(img, &st, nil)
		require.NoError(t, err)
		want[i] = d
	}
	for _, mode := range []struct {
		name          string
		graph, cpuPre bool
	}{{"eager, CPU preprocessing", false, true}, {"graph, CPU preprocessing", true, true}, {"eager, GPU kernel", false, false}, {"graph, GPU kernel", true, false}} {
		sc := decode.NewScaler()
		g, err := gpu.Open(gpu.Options{Path: model, CUDAGraph: mode.graph, CPUPreprocess: mode.cpuPre, Resizer: sc})
		require.NoError(t, err)
		var bad []string
		total := 0
		for i, img := range imgs {
			var st pipeline.StageTimes
			got, err := g.Detect(img, &st, nil)
			require.NoError(t, err)
			c := infer.Compare(want[i], got)
			for _, s := range c.Bad {
				bad = append(bad, fmt.Sprintf("frame %d: %s", i, s))
			}
			total += c.Total
		}
		require.NoError(t, g.Close())
		sc.Close()
		require.Positive(t, total)
		share := 1 - float64(len(bad))/float64(total)
		t.Logf("%s, %s: %d of %d detections match (%.1f%%)", filepath.Base(model), mode.name, total-len(bad), total, 100*share)
		for _, s := range bad {
			t.Logf("  %s", s)
		}
		if mode.cpuPre {
			require.Empty(t, bad, "identical inputs must give matching detections")
		} else {
			require.GreaterOrEqual(t, share, minShare)
		}
	}
}

func TestBlazeFaceGPUMatchesCPU(t *testing.T) {
	initORT(t)
	detectionsMatch(t, testenv.Model(t, "face_detection_back_256x256_barracuda.onnx"), testenv.Media(t, "Megamind.avi"), 20, 13, 0.95)
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
	detectionsMatch(t, model, video, 10, 37, 0.95)
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
		require.Empty(t, infer.Compare(want, batch[i]).Bad, "frame %d: batch 8 vs 1", i)
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

// Detections from NVDEC frames (read by the kernel in GPU memory, NV12)
// equal those from software-decoded frames of the same H.264 clip.
func TestNVDECFramesMatchSoftware(t *testing.T) {
	initORT(t)
	clip := os.Getenv("VIGIL_H264")
	model := os.Getenv("VIGIL_YOLOX")
	if clip == "" || model == "" {
		t.Skip("set VIGIL_H264 (an H.264 clip with people) and VIGIL_YOLOX")
	}
	g := openGPU(t, model, true)
	run := func(hw decode.HWAccel) [][]pipeline.Detection {
		src, err := decode.New(decode.Options{URL: clip, HWAccel: hw})
		require.NoError(t, err)
		var out [][]pipeline.Detection
		err = src.Run(context.Background(), func(f *pipeline.Frame) {
			defer f.Image.Release()
			if f.Seq%10 != 0 {
				return
			}
			var st pipeline.StageTimes
			d, err := g.Detect(f.Image, &st, nil)
			require.NoError(t, err)
			out = append(out, d)
		})
		require.ErrorIs(t, err, io.EOF)
		return out
	}
	sw, hw := run(decode.HWNone), run(decode.HWCUDA)
	require.Equal(t, len(sw), len(hw))
	var c infer.Comparison
	for i := range sw {
		c.Add(infer.Compare(sw[i], hw[i]))
	}
	t.Logf("NVDEC vs software frames: %d of %d detections match (worst IoU %.3f)", c.Matched(), c.Total, c.WorstIoU)
	require.Positive(t, c.Total)
	require.Empty(t, c.Bad)
}
