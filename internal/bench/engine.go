package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// EngineOptions are `vigil bench`'s flags.
type EngineOptions struct {
	Source   string        // file (default: the cached Megamind.avi)
	Model    string        // model name or path (default blazeface)
	Duration time.Duration // per throughput phase (default 3 s)
}

// EngineResult holds one run's numbers; ratios compare within the run.
type EngineResult struct {
	DecodeFPS, InferFPS, PipelineFPS float64
	// Overhead is PipelineFPS / min(DecodeFPS, InferFPS): 1 means the
	// pipeline costs nothing beyond its slowest stage.
	Overhead float64
	// SerialRatio is PipelineFPS / (1/(1/DecodeFPS + 1/InferFPS)): the
	// pipeline against decode and inference sharing the same cores one
	// after the other (above 1: the stages overlap).
	SerialRatio float64
	// P50 and P99 are end-to-end latencies (arrival to NATS publish) with
	// the file paced at its native rate, over LatencyFrames frames.
	P50, P99      time.Duration
	LatencyFrames int
	// BatchFPS is inference-only frames per second on the fixed-batch
	// copies of the model (by batch size), when they exist.
	BatchFPS map[int]float64
	// AllocsPerFrame and BytesPerFrame are Go heap allocations per
	// processed frame in the throughput phase (runtime.MemStats).
	AllocsPerFrame, BytesPerFrame float64
}

// Engine is `vigil bench`: on one file and model it measures, in one run,
// FFmpeg decode-only fps, ORT inference-only fps (replaying a real
// preprocessed frame), the full pipeline's fps (decode → letterbox →
// infer → NMS → NATS publish to an embedded server, lossless, unpaced) with
// allocations per frame, and end-to-end P50/P99 latency with the file
// paced at its native frame rate. It prints a table to out.
func Engine(ctx context.Context, c config.Config, o EngineOptions, log *zap.Logger, out io.Writer) (EngineResult, error) {
	var r EngineResult
	if o.Source == "" {
		o.Source = filepath.Join(assets.MediaDir(), "Megamind.avi")
	}
	if o.Model == "" {
		o.Model = "blazeface"
	}
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
	}
	if kind, _, err := decode.ParseURL(o.Source); err != nil || kind != decode.KindFile {
		return r, cli.BadInput(fmt.Errorf("--source %s: bench needs a local file", redact.URL(o.Source)))
	}
	decode.SetLogger(nil)
	if err := engines.OpenRuntime(&c); err != nil {
		return r, err
	}
	// This benchmark is of the CPU engine (Raw replays a host tensor); the
	// GPU engine has its own, `vigil bench --gpu`.
	c.Infer.Provider = "cpu"
	engs := engines.New(&c)
	defer engs.CloseLogging(log)
	det, err := engs.Get(o.Model)
	if err != nil {
		return r, err
	}
	eng := det.(*infer.Engine)
	fmt.Fprintf(out, "vigil bench: %s, model %s (%s), ONNX Runtime %s CPU, %d CPUs, %s per phase\n",
		filepath.Base(o.Source), eng.Model(), eng.Adapter(), infer.RuntimeVersion(), runtime.NumCPU(), o.Duration)

	// 1. Decode only.
	var frames int64
	var first *pipeline.Frame
	el, err := runFor(ctx, o.Duration, func(ctx context.Context) error {
		src, err := decode.New(decode.Options{URL: o.Source, Loop: true})
		if err != nil {
			return err
		}
		return src.Run(ctx, func(f *pipeline.Frame) {
			frames++
			if first == nil {
				first = f // keep one frame for the inference phase
				return
			}
			f.Image.Release()
		})
	})
	if err != nil {
		return r, fmt.Errorf("decode phase: %w", err)
	}
	r.DecodeFPS = float64(frames) / el.Seconds()
	fmt.Fprintf(out, "  decode only (FFmpeg, auto threads)       %8.1f fps\n", r.DecodeFPS)

	// 2. Inference only, on a real preprocessed frame.
	if first == nil {
		return r, fmt.Errorf("decode phase produced no frame")
	}
	var st pipeline.StageTimes
	if _, err := eng.Detect(first.Image, &st, nil); err != nil {
		return r, err
	}
	first.Image.Release()
	in := eng.InputTensor()
	r.InferFPS, err = rawFPS(ctx, eng, in, 1, o.Duration)
	if err != nil {
		return r, fmt.Errorf("inference phase: %w", err)
	}
	fmt.Fprintf(out, "  inference only (ORT Run)                 %8.1f fps\n", r.InferFPS)

	// 2b. Inference only on the fixed-batch copies, the same frame in every
	// slot: what batching buys the engine itself.
	if m, err := c.ResolveModel(o.Model); err == nil {
		for _, n := range []int{4, 8} {
			file := strings.TrimSuffix(m.File, ".onnx") + ".b" + strconv.Itoa(n) + ".onnx"
			if _, err := os.Stat(file); err != nil {
				continue
			}
			bd, err := engs.Instance(file, "bench", c.Infer.Device)
			if err != nil || bd.Batch() != n {
				continue
			}
			be := bd.(*infer.Engine)
			batchIn := make([]float32, 0, n*len(in))
			for i := 0; i < n; i++ {
				batchIn = append(batchIn, in...)
			}
			fps, err := rawFPS(ctx, be, batchIn, n, o.Duration)
			if err != nil {
				return r, fmt.Errorf("batch-%d inference: %w", n, err)
			}
			if r.BatchFPS == nil {
				r.BatchFPS = map[int]float64{}
			}
			r.BatchFPS[n] = fps
			fmt.Fprintf(out, "  inference only, batch %d                  %8.1f fps  = %.2f × batch 1\n", n, fps, fps/r.InferFPS)
		}
	}

	// 3. Full pipeline, lossless and unpaced: throughput and allocations.
	ns, err := natsserver.Start("127.0.0.1:0", "", "")
	if err != nil {
		return r, err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	sink, err := sinks.DialNATS(ctx, sinks.NATSOptions{URL: ns.ClientURL()})
	if err != nil {
		return r, err
	}
	defer func() {
		// Everything measured was published already; a failed flush
		// changes no figure.
		if err := sink.Close(); err != nil {
			log.Warn("closing the bench's NATS connection", zap.Error(err))
		}
	}()
	counted := &countSink{Sink: sink}
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	el, err = runFor(ctx, o.Duration, func(ctx context.Context) error {
		src, err := decode.New(decode.Options{URL: o.Source, Loop: true, StreamID: "bench"})
		if err != nil {
			return err
		}
		return pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "bench", Source: src, Engine: eng, Sink: counted, Lossless: true})
	})
	runtime.ReadMemStats(&ms1)
	if err != nil {
		return r, fmt.Errorf("pipeline phase: %w", err)
	}
	n := counted.n.Load()
	if n == 0 {
		return r, fmt.Errorf("pipeline phase processed no frame")
	}
	r.PipelineFPS = float64(n) / el.Seconds()
	r.Overhead = r.PipelineFPS / min(r.DecodeFPS, r.InferFPS)
	r.SerialRatio = r.PipelineFPS * (1/r.DecodeFPS + 1/r.InferFPS)
	r.AllocsPerFrame = float64(ms1.Mallocs-ms0.Mallocs) / float64(n)
	r.BytesPerFrame = float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(n)
	slower := "inference"
	if r.DecodeFPS < r.InferFPS {
		slower = "decode"
	}
	fmt.Fprintf(out, "  pipeline (decode→infer→NATS, lossless)   %8.1f fps  = %.2f × the slower stage (%s)\n", r.PipelineFPS, r.Overhead, slower)
	fmt.Fprintf(out, "  %44s= %.2f × decode and inference run one after the other (%.1f fps)\n", "",
		r.SerialRatio, 1/(1/r.DecodeFPS+1/r.InferFPS))
	fmt.Fprintf(out, "  allocations per frame (pipeline)         %8.1f (%.1f KiB)\n", r.AllocsPerFrame, r.BytesPerFrame/1024)

	// 4. Latency at the native frame rate (one pass through the file).
	stats := pipeline.NewStats()
	src, err := decode.New(decode.Options{URL: o.Source, Realtime: true, StreamID: "bench"})
	if err != nil {
		return r, fmt.Errorf("latency phase: %w", err)
	}
	if err := pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "bench", Source: src, Engine: eng, Sink: sink, Stats: stats}); err != nil {
		return r, fmt.Errorf("latency phase: %w", err)
	}
	if snaps := stats.Snapshot(); len(snaps) == 1 {
		r.P50, r.P99 = snaps[0].P50, snaps[0].P99
		r.LatencyFrames = snaps[0].Out
	}
	fps := 0.0
	if info := src.Info(); info != nil {
		fps = info.FPS
	}
	fmt.Fprintf(out, "  latency at native rate (%.2f fps)        P50 %.2f ms  P99 %.2f ms  over %d frames (arrival → NATS publish)\n",
		fps, float64(r.P50)/1e6, float64(r.P99)/1e6, r.LatencyFrames)
	return r, nil
}

// rawFPS runs the engine on the prepared input tensor for d and returns
// images per second (n images per execution).
func rawFPS(ctx context.Context, eng *infer.Engine, in []float32, n int, d time.Duration) (float64, error) {
	var runs int64
	el, err := runFor(ctx, d, func(ctx context.Context) error {
		for ctx.Err() == nil {
			if _, err := eng.Raw(in); err != nil {
				return err
			}
			runs++
		}
		return ctx.Err()
	})
	return float64(n) * float64(runs) / el.Seconds(), err
}

// runFor runs fn with a context that ends after d and returns the elapsed
// time; fn returning ctx's error at the deadline is success.
func runFor(ctx context.Context, d time.Duration, fn func(context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	el := time.Since(start)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.DeadlineExceeded)) {
		return el, nil
	}
	return el, err
}

type countSink struct {
	pipeline.Sink
	n atomic.Int64
}

func (c *countSink) Publish(ctx context.Context, r *pipeline.Result) error {
	if err := c.Sink.Publish(ctx, r); err != nil {
		return err
	}
	c.n.Add(1)
	return nil
}
