package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/quantize"
	"github.com/vigil-video/vigil/pipeline"
)

// INT8Result is one model's fp32 and INT8 engine benchmarks.
type INT8Result struct {
	Model      string
	FP32, INT8 EngineResult
	// Interleaved are inference-only fps with the two engines taking
	// turns in short slices, so that both see the same load from other
	// processes on the cores: fp32, then INT8.
	Interleaved [2]float64
}

// INT8 is `vigil bench --int8`: for each model, the engine benchmark
// (Engine: decode, inference only, the full pipeline, latency) on the
// fp32 model and then on its INT8 copy, in one run, and a summary of the
// ratios. The INT8 copy is benchmarked as it is, even where the
// service's start-up check would fall back to fp32 (the check's verdict
// is printed).
func INT8(ctx context.Context, c config.Config, o EngineOptions, models []string, calibrate string, log *zap.Logger, out io.Writer) ([]INT8Result, error) {
	if len(models) == 0 {
		models = []string{"blazeface", "yolox-nano"}
	}
	if o.Source == "" {
		o.Source = filepath.Join(assets.MediaDir(), "Megamind.avi")
	}
	flags, _ := os.ReadFile("/proc/cpuinfo")
	fmt.Fprintf(out, "vigil bench --int8: CPU INT8 instructions: %s\n", cpuINT8Flags(string(flags)))
	var res []INT8Result
	for _, ref := range models {
		m, err := c.ResolveModel(ref)
		if err != nil {
			return res, cli.BadInput(err)
		}
		path, rec, err := quantize.Lookup(m.File, assets.CacheDir())
		if err != nil && calibrate != "" {
			r, qerr := quantize.Quantize(ctx, quantize.Options{Model: m, Source: calibrate, CacheDir: assets.CacheDir(), Threads: c.Infer.IntraOpThreads})
			if qerr != nil {
				return res, fmt.Errorf("quantising %s: %w", m.Name, qerr)
			}
			path, rec, err = r.Path, r.Record, nil
		}
		if err != nil {
			return res, cli.BadInput(fmt.Errorf("model %s has no INT8 copy: make one with `vigil model quantize --model %s --calibrate CLIP`, or give --calibrate", m.Name, ref))
		}
		fmt.Fprintf(out, "\n%s: INT8 copy %s (calibrated on %s, %d frames, %s; keep-float %s: %d of %d blocks float)\n",
			m.Name, path, rec.Source, rec.Frames, rec.Method, rec.KeepFloat, len(rec.Float), rec.Blocks)
		r := INT8Result{Model: m.Name}
		oo := o
		oo.Model = ref
		if r.FP32, err = Engine(ctx, c, oo, log, out); err != nil {
			return res, err
		}
		// The copy under its own model entry, with the original's model block.
		ci := c
		ci.Models = append(append([]config.Model(nil), c.Models...), config.Model{Name: m.Name + "-int8", Path: path, Format: m.Spec.Format})
		oo.Model = m.Name + "-int8"
		if r.INT8, err = Engine(ctx, ci, oo, log, out); err != nil {
			return res, err
		}
		if r.Interleaved, err = interleaved(ctx, m, path, o, c.Infer.IntraOpThreads); err != nil {
			return res, err
		}
		fmt.Fprintf(out, "  inference only, interleaved (fp32 and INT8 take turns, 40 slices of %s each): fp32 %.1f fps, INT8 %.1f fps = %.2f ×\n",
			o.Duration/40, r.Interleaved[0], r.Interleaved[1], r.Interleaved[1]/r.Interleaved[0])
		res = append(res, r)
	}
	fmt.Fprintf(out, "\nsummary (INT8 / fp32, same run):\n")
	for _, r := range res {
		fmt.Fprintf(out, "  %-12s inference only %7.1f / %7.1f fps = %.2f × (interleaved %7.1f / %7.1f = %.2f ×)   pipeline %7.1f / %7.1f fps = %.2f ×\n", r.Model,
			r.INT8.InferFPS, r.FP32.InferFPS, r.INT8.InferFPS/r.FP32.InferFPS, r.Interleaved[1], r.Interleaved[0], r.Interleaved[1]/r.Interleaved[0],
			r.INT8.PipelineFPS, r.FP32.PipelineFPS, r.INT8.PipelineFPS/r.FP32.PipelineFPS)
	}
	return res, nil
}

// cpuINT8Flags lists the INT8 dot-product and matrix flags of
// /proc/cpuinfo's first processor (avx512_vnni, avx_vnni, amx_int8, ...),
// or says there are none.
func cpuINT8Flags(cpuinfo string) string {
	for _, l := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || strings.TrimSpace(k) != "flags" {
			continue
		}
		var have []string
		for _, f := range strings.Fields(v) {
			if strings.Contains(f, "vnni") || strings.HasPrefix(f, "amx") || f == "avx512f" || f == "avx2" {
				have = append(have, f)
			}
		}
		if len(have) == 0 {
			return "none of avx2, avx512f, *vnni, amx*"
		}
		return strings.Join(have, " ")
	}
	return "unknown (no flags line in /proc/cpuinfo)"
}

// interleaved measures inference-only fps of the fp32 model and of its
// INT8 copy at path taking turns: 40 slices of o.Duration/40 each, on a
// real preprocessed frame of o.Source.
func interleaved(ctx context.Context, m infer.Model, path string, o EngineOptions, threads int) ([2]float64, error) {
	var fps [2]float64
	sc := decode.NewScaler()
	defer sc.Close()
	var engs [2]*infer.Engine
	for i, p := range []string{m.File, path} {
		e, err := infer.Open(infer.Options{Name: m.Name, Path: p, Spec: m.Spec, Resizer: sc, IntraOpThreads: threads})
		if err != nil {
			return fps, err
		}
		defer e.Close()
		engs[i] = e
	}
	var in []float32
	_, err := runFor(ctx, o.Duration, func(ctx context.Context) error {
		src, err := decode.New(decode.Options{URL: o.Source})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var derr error
		err = src.Run(ctx, func(f *pipeline.Frame) {
			defer f.Image.Release()
			if in == nil {
				_, derr = engs[0].Detect(f.Image, &pipeline.StageTimes{}, nil)
				in = engs[0].InputTensor()
				cancel()
			}
		})
		if derr != nil {
			return derr
		}
		return err
	})
	if in == nil {
		return fps, fmt.Errorf("interleaved phase: no frame from %s (%v)", o.Source, err)
	}
	var runs [2]int64
	var el [2]time.Duration
	slice := o.Duration / 40
	for k := 0; k < 40 && ctx.Err() == nil; k++ {
		for i, e := range engs {
			t0 := time.Now()
			for time.Since(t0) < slice {
				if _, err := e.Raw(in); err != nil {
					return fps, err
				}
				runs[i]++
			}
			el[i] += time.Since(t0)
		}
	}
	for i := range fps {
		fps[i] = float64(runs[i]) / el[i].Seconds()
	}
	return fps, ctx.Err()
}
