//go:build gpu

package gpu_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/pipeline"
)

// TestNVDECLoad decodes N looping copies of an H.264 clip at once with
// NVDEC, unpaced, and reports the aggregate frames per second of each
// phase named in VIGIL_NVDEC_PHASES (default all):
//
//   - decode: frames released as soon as they arrive (decode only);
//   - kernel: each frame letterboxed by the preprocessing kernel where
//     NVDEC left it, one CUDA stream per source (no ONNX Runtime);
//   - engine: every frame through one cross-stream Batcher over YOLOX
//     engines (VIGIL_YOLOX, with .b8/.b32 copies beside it when present);
//   - engine-sw: the same with software decoding, as the baseline.
//
// It fails on any decode or CUDA error, and when a source delivered no
// frame in a phase (starved or stuck behind the others); the frame rates
// are measurements to read, not pass/fail criteria (machines differ, and
// speed targets live in benchmarks). VIGIL_NVDEC_STREAMS sets N (the
// test is skipped without it) and VIGIL_NVDEC_SECONDS each phase's length
// (default 6). It is the load the sweep put on NVDEC when 16 or more
// streams ended in illegal memory accesses; run it under
// compute-sanitizer to name the access.
func TestNVDECLoad(t *testing.T) {
	clip := os.Getenv("VIGIL_H264")
	n, _ := strconv.Atoi(os.Getenv("VIGIL_NVDEC_STREAMS"))
	if clip == "" || n <= 0 {
		t.Skip("set VIGIL_H264 and VIGIL_NVDEC_STREAMS")
	}
	secs, _ := strconv.Atoi(os.Getenv("VIGIL_NVDEC_SECONDS"))
	if secs <= 0 {
		secs = 6
	}
	phases := strings.Split(os.Getenv("VIGIL_NVDEC_PHASES"), ",")
	if phases[0] == "" {
		phases = []string{"decode", "kernel", "engine", "engine-sw"}
	}
	// load runs n sources for secs seconds, calling each on every frame
	// from source i's goroutine, and returns frames per second.
	load := func(hw decode.HWAccel, each func(i int, f *pipeline.Frame) error) float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
		defer cancel()
		var frames atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, n)
		per := make([]int64, n) // frames of source i, written by its goroutine only
		for i := range n {
			src, err := decode.New(decode.Options{URL: clip, Loop: true, HWAccel: hw, HWSurfaces: 4, StreamID: strconv.Itoa(i)})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := src.Run(ctx, func(f *pipeline.Frame) {
					if errs[i] == nil && ctx.Err() == nil {
						errs[i] = each(i, f)
						frames.Add(1)
						per[i]++
					}
					f.Image.Release()
				})
				if errs[i] == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					errs[i] = err
				}
			}()
		}
		t0 := time.Now()
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "source %d", i)
			require.Positive(t, per[i], "source %d delivered no frame in %d s", i, secs)
		}
		return float64(frames.Load()) / time.Since(t0).Seconds()
	}
	for _, ph := range phases {
		switch ph {
		case "decode":
			fps := load(decode.HWCUDA, func(int, *pipeline.Frame) error { return nil })
			t.Logf("%d NVDEC sources, decode only: %.0f fps", n, fps)
		case "kernel":
			ctx, err := cuda.Primary(0)
			require.NoError(t, err)
			pre, err := gpu.NewPreprocessor(ctx)
			require.NoError(t, err)
			type per struct {
				s   *cuda.Stream
				dst *cuda.DeviceBuffer
			}
			ps := make([]per, n)
			for i := range ps {
				ps[i].s, err = ctx.NewStream()
				require.NoError(t, err)
				ps[i].dst, err = ctx.Alloc(3 * 416 * 416 * 4)
				require.NoError(t, err)
			}
			fps := load(decode.HWCUDA, func(i int, f *pipeline.Frame) error {
				c, ok := f.Image.(*decode.Picture).CUDA()
				if !ok {
					return errors.New("not an NV12 CUDA frame")
				}
				p := ps[i]
				lb := infer.NewLetterbox(c.Width, c.Height, 416, 416)
				err := pre.YUV420(p.s, gpu.Planes{Y: cuda.DevicePtr(c.Y), U: cuda.DevicePtr(c.UV), NV12: true, YStride: c.YStride,
					UVStride: c.UVStride, Width: c.Width, Height: c.Height, FullRange: c.FullRange, Matrix: c.Matrix},
					lb, gpu.Target{Dst: p.dst.Ptr(), W: 416, H: 416, Format: infer.TensorFormat{NCHW: true, Scale: 1}})
				if err != nil {
					return err
				}
				return p.s.Synchronize()
			})
			t.Logf("%d NVDEC sources, decode + letterbox kernel: %.0f fps", n, fps)
			for _, p := range ps {
				require.NoError(t, p.dst.Free())
				require.NoError(t, p.s.Destroy())
			}
			pre.Close()
			require.NoError(t, ctx.Release())
		case "engine", "engine-sw":
			model := os.Getenv("VIGIL_YOLOX")
			if model == "" {
				t.Log("engine phases skipped: set VIGIL_YOLOX")
				continue
			}
			initORT(t)
			var engs []pipeline.BatchEngine
			for _, p := range []string{model, strings.TrimSuffix(model, ".onnx") + ".b8.onnx", strings.TrimSuffix(model, ".onnx") + ".b32.onnx"} {
				if _, err := os.Stat(p); err == nil {
					engs = append(engs, openGPU(t, p, false))
				}
			}
			b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: engs, MaxQueueDelay: 4 * time.Millisecond, Concurrency: 2})
			bctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { b.Run(bctx); close(done) }()
			hw := decode.HWCUDA
			if ph == "engine-sw" {
				hw = decode.HWNone
			}
			fps := load(hw, func(_ int, f *pipeline.Frame) error {
				var st pipeline.StageTimes
				_, err := b.Do(context.Background(), time.Time{}, f.Image, &st, nil)
				return err
			})
			stop()
			<-done
			t.Logf("%d %s sources through YOLOX (batches %d engines): %.0f fps", n, map[bool]string{true: "NVDEC", false: "software"}[hw == decode.HWCUDA], len(engs), fps)
		default:
			t.Fatalf("unknown phase %q", ph)
		}
	}
}
