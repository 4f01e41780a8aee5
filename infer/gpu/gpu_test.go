//go:build gpu

// GPU tests: run on a machine with an NVIDIA driver, NVRTC and ONNX
// Runtime's CUDA provider (see README, "GPU tests"):
//
//	VIGIL_ORT_LIBRARY=<ORT GPU build>/libonnxruntime.so.1 go test -tags gpu ./infer/gpu ./internal/cuda
package gpu_test

import (
	"context"
	"encoding/binary"
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

// TestKernelDeepMatchesNV12: a P016 picture (16-bit samples, the value in
// the high bits, as NVDEC gives 10-bit streams) whose samples are an NV12
// picture's shifted up by 8 bits letterboxes to exactly the NV12 picture's
// input, at 1:1 and downscaled, NCHW and NHWC; and the low bits a 10-bit
// sample adds (+64 per level of 10 bits) move the output by a quarter
// level of 8 bits.
func TestKernelDeepMatchesNV12(t *testing.T) {
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
	const w, h = 96, 54
	pitch8, pitch16 := 128, 256 // bytes per row, as the NVDEC pool aligns them
	nv12 := make([]byte, pitch8*(h+h/2))
	p016 := make([]byte, pitch16*(h+h/2))
	deep := make([]byte, pitch16*(h+h/2)) // p016 plus one 10-bit level
	for r := range h + h/2 {
		for x := range w {
			v := byte(16 + (r*37+x*11)%220)
			nv12[r*pitch8+x] = v
			binary.LittleEndian.PutUint16(p016[r*pitch16+2*x:], uint16(v)<<8)
			binary.LittleEndian.PutUint16(deep[r*pitch16+2*x:], uint16(v)<<8+64)
		}
	}
	up := func(b []byte) cuda.DevicePtr {
		d, err := ctx.Alloc(len(b))
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Free() })
		require.NoError(t, ctx.CopyHtoD(d.Ptr(), b))
		return d.Ptr()
	}
	d8, d16, dd := up(nv12), up(p016), up(deep)
	planes := func(base cuda.DevicePtr, pitch int, isDeep bool) gpu.Planes {
		return gpu.Planes{Y: base, U: base + cuda.DevicePtr(pitch*h), NV12: true, Deep: isDeep, YStride: pitch, UVStride: pitch,
			Width: w, Height: h, Matrix: decode.BT709}
	}
	for _, c := range []struct {
		in   int
		nchw bool
	}{{96, true}, {96, false}, {40, true}} {
		lb := infer.NewLetterbox(w, h, c.in, c.in)
		f := infer.TensorFormat{NCHW: c.nchw, Order: pipeline.RGB, Scale: 1, Pad: 114}
		n := c.in * c.in * 3
		run := func(p gpu.Planes) []float32 {
			dst, err := ctx.Alloc(4 * n)
			require.NoError(t, err)
			defer dst.Free()
			require.NoError(t, pre.YUV420(s, p, lb, gpu.Target{Dst: dst.Ptr(), W: c.in, H: c.in, Format: f}))
			require.NoError(t, s.Synchronize())
			b := make([]byte, 4*n)
			require.NoError(t, ctx.CopyDtoH(b, dst.Ptr()))
			out := make([]float32, n)
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
			return out
		}
		a, b, more := run(planes(d8, pitch8, false)), run(planes(d16, pitch16, true)), run(planes(dd, pitch16, true))
		require.Equal(t, a, b, "input %d, NCHW %t: P016 of the same samples", c.in, c.nchw)
		moved := 0
		for i := range more {
			// RGB is rounded to whole levels: a quarter level changes some.
			require.InDelta(t, a[i], more[i], 1, "input %d element %d", c.in, i)
			if more[i] != a[i] {
				moved++
			}
		}
		require.Positive(t, moved, "input %d: the low bits of 10-bit samples are read", c.in)
	}
}

// TestNVDECFramesMatchSoftware: YOLOX-Nano finds the same detections
// (same count, IoU >= 0.9, score within 0.02: infer.Compare) in every 10th
// frame whether NVDEC or FFmpeg's software decoder decoded it: on
// VIGIL_H264 with NVDEC driven directly and through FFmpeg's hwaccel, and
// with direct NVDEC on VIGIL_HEVC and VIGIL_HEVC10 (HEVC Main and Main 10
// copies of the same scene) when set. 8-bit NVDEC frames are the software
// frames bit for bit, and both go through the preprocessing kernel, so
// they must agree exactly. A 10-bit software frame goes through swscale
// on the CPU (the kernel reads 8-bit planes only) while NVDEC's P016 frame
// goes through the kernel: the two preprocessings agreed on 95.1 % of HD
// detections in TestGPUAgreesWithCPUOnHDAndSD, so 10-bit is held to 90 %,
// a regression guard.
func TestNVDECFramesMatchSoftware(t *testing.T) {
	initORT(t)
	clip := os.Getenv("VIGIL_H264")
	model := os.Getenv("VIGIL_YOLOX")
	if clip == "" || model == "" {
		t.Skip("set VIGIL_H264 (an H.264 clip with people) and VIGIL_YOLOX")
	}
	g := openGPU(t, model, true)
	run := func(clip string, hw decode.HWAccel, mode decode.NVDECMode) [][]pipeline.Detection {
		src, err := decode.New(decode.Options{URL: clip, HWAccel: hw, NVDEC: mode})
		require.NoError(t, err)
		var out [][]pipeline.Detection
		err = src.Run(context.Background(), func(f *pipeline.Frame) {
			defer f.Image.Release()
			if f.Seq%10 != 0 {
				return
			}
			p := f.Image.(*decode.Picture)
			require.Equal(t, hw != decode.HWNone, p.OnGPU())
			var st pipeline.StageTimes
			d, err := g.Detect(f.Image, &st, nil)
			require.NoError(t, err)
			out = append(out, d)
		})
		require.ErrorIs(t, err, io.EOF)
		if hw != decode.HWNone {
			require.Equal(t, mode == decode.NVDECDirect, src.Info().Direct)
		}
		return out
	}
	cases := []struct {
		name, clip string
		mode       decode.NVDECMode
		least      float64 // the share of detections that must match
	}{
		{"h264 direct", clip, decode.NVDECDirect, 1},
		{"h264 ffmpeg", clip, decode.NVDECFFmpeg, 1},
		{"hevc direct", os.Getenv("VIGIL_HEVC"), decode.NVDECDirect, 1},
		{"hevc10 direct", os.Getenv("VIGIL_HEVC10"), decode.NVDECDirect, 0.9},
	}
	sw := map[string][][]pipeline.Detection{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.clip == "" {
				t.Skip("clip not set")
			}
			if sw[c.clip] == nil {
				sw[c.clip] = run(c.clip, decode.HWNone, "")
			}
			ref, hw := sw[c.clip], run(c.clip, decode.HWCUDA, c.mode)
			require.Equal(t, len(ref), len(hw))
			var cmp infer.Comparison
			for i := range ref {
				cmp.Add(infer.Compare(ref[i], hw[i]))
			}
			t.Logf("%s vs software frames: %d of %d detections match (worst IoU %.3f)", c.name, cmp.Matched(), cmp.Total, cmp.WorstIoU)
			for _, b := range cmp.Bad {
				t.Logf("  %s", b)
			}
			require.Positive(t, cmp.Total)
			require.GreaterOrEqual(t, float64(cmp.Matched()), c.least*float64(cmp.Total))
		})
	}
}
