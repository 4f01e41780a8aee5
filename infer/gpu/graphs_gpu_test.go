//go:build gpu

package gpu_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// CUDA graphs and direct NVDEC together: engines with graphs open (and
// capture their graphs) while four direct NVDEC sessions decode, and
// their detections on NVDEC frames are those of an eager engine.
// Before cuda.Exclusive/Shared a capture beside NVDEC's calls ended in
// cudaErrorStreamCaptureInvalidated and illegal memory accesses, and
// internal/engines switched graphs off whenever NVDEC decoded.
func TestGraphsWithDirectNVDEC(t *testing.T) {
	initORT(t)
	clip, model := os.Getenv("VIGIL_H264"), os.Getenv("VIGIL_YOLOX")
	if clip == "" || model == "" {
		t.Skip("set VIGIL_H264 (an H.264 clip with people) and VIGIL_YOLOX")
	}
	// Background decoding: four looping direct NVDEC sessions.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		src, err := decode.New(decode.Options{URL: clip, Loop: true, HWAccel: decode.HWCUDA, NVDEC: decode.NVDECDirect,
			HWSurfaces: 4, StreamID: "bg" + strconv.Itoa(i)})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = src.Run(ctx, func(f *pipeline.Frame) { f.Image.Release() })
		}()
	}
	stop := func() {
		cancel()
		wg.Wait()
		for i, err := range errs {
			require.ErrorIs(t, err, context.Canceled, "background source %d", i)
		}
	}
	defer func() {
		if ctx.Err() == nil {
			stop()
		}
	}()
	sc := decode.NewScaler()
	t.Cleanup(sc.Close)
	open := func(graph bool, instances int) *gpu.Engine {
		e, err := gpu.Open(gpu.Options{Path: model, CUDAGraph: graph, Instances: instances, Resizer: sc})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Close()) })
		return e
	}
	// Captures while NVDEC decodes: open and close a few.
	for range 3 {
		e, err := gpu.Open(gpu.Options{Path: model, CUDAGraph: true, Instances: 2, Resizer: sc})
		require.NoError(t, err)
		require.NoError(t, e.Close())
	}
	graph, eager := open(true, 2), open(false, 1)
	src, err := decode.New(decode.Options{URL: clip, HWAccel: decode.HWCUDA, NVDEC: decode.NVDECDirect})
	require.NoError(t, err)
	var cmp infer.Comparison
	frames := 0
	_ = src.Run(context.Background(), func(f *pipeline.Frame) {
		defer f.Image.Release()
		if f.Seq%5 != 0 {
			return
		}
		require.True(t, f.Image.(*decode.Picture).OnGPU())
		var st pipeline.StageTimes
		a, err := eager.Detect(f.Image, &st, nil)
		require.NoError(t, err)
		b, err := graph.Detect(f.Image, &st, nil)
		require.NoError(t, err)
		cmp.Add(infer.Compare(a, b))
		frames++
	})
	stop()
	t.Logf("graphs vs eager on %d NVDEC frames: %d of %d detections match (worst IoU %.4f, worst score difference %.5f)",
		frames, cmp.Matched(), cmp.Total, cmp.WorstIoU, cmp.WorstScore)
	require.Positive(t, frames)
	require.Positive(t, cmp.Total, "the clip has people")
	require.Empty(t, cmp.Bad)
}

// Precision fp16 on the CUDA provider: the engine keeps fp16 (its start-up
// check passes on the built-in frame) and its detections on vtest agree
// with fp32's by infer.CompareAt; the batches of a 2-instance engine give
// the same detections as one instance's.
func TestFP16AgreesOnGPU(t *testing.T) {
	initORT(t)
	model := os.Getenv("VIGIL_YOLOX")
	if model == "" {
		model = testenv.Shared(t, "models/yolox_nano.onnx")
	}
	sc := decode.NewScaler()
	t.Cleanup(sc.Close)
	open := func(p gpu.Precision, instances int) *gpu.Engine {
		e, err := gpu.Open(gpu.Options{Path: model, Providers: []ortdev.Provider{ortdev.CUDA}, Precision: p,
			CacheDir: t.TempDir(), CUDAGraph: true, Instances: instances, Resizer: sc})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Close()) })
		t.Log(e.Choice())
		return e
	}
	f32, f16 := open(gpu.PrecisionFP32, 1), open(gpu.PrecisionFP16, 2)
	require.Equal(t, gpu.PrecisionFP16, f16.Precision(), f16.Choice())
	imgs := frames(t, testenv.Media(t, "vtest.avi"), 40, 20)
	defer func() {
		for _, im := range imgs {
			im.Release()
		}
	}()
	var cmp infer.Comparison
	for _, im := range imgs {
		var st pipeline.StageTimes
		a, err := f32.Detect(im, &st, nil)
		require.NoError(t, err)
		b, err := f16.Detect(im, &st, nil)
		require.NoError(t, err)
		cmp.Add(infer.CompareAt(a, b, f32.ScoreThreshold()))
	}
	t.Logf("fp16 vs fp32 on %d frames: %d of %d detections match, %d at the threshold on one side only; worst IoU %.3f, worst score difference %.4f",
		len(imgs), cmp.Matched()-cmp.Marginal, cmp.Total-cmp.Marginal, cmp.Marginal, cmp.WorstIoU, cmp.WorstScore)
	require.Positive(t, cmp.Total)
	// fp16 does move some boxes past IoU 0.9 (401 of 406 matched on these
	// 40 frames, 98.8 % and 97.2 % over 1,000 frames of vtest and cam1080:
	// docs/h200-runs/2026-12-01-acceptance/agreement.txt), so every
	// detection cannot be asked to match; 95 % is a regression guard set
	// below those measurements, not a published bound.
	share := float64(cmp.Matched()-cmp.Marginal) / float64(cmp.Total-cmp.Marginal)
	require.GreaterOrEqual(t, share, 0.95, "fp16 detections matching fp32's (regression guard): %v", cmp.Bad)
}
