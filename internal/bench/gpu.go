package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/pipeline"
)

// GPUOptions are `vigil bench --gpu`'s flags.
type GPUOptions struct {
	// Source gives the real frames (default: the cached Megamind.avi).
	Source string
	// Models are model names or .onnx paths (default blazeface). Batch N
	// uses the fixed-batch copy <model>.b<N>.onnx beside the file.
	Models []string
	// Batches are the batch sizes to measure (default 1, 8, 32).
	Batches []int
	// Duration of each timed phase (default 2 s; the CLI's --duration
	// default is 3 s).
	Duration time.Duration
	// Precisions, Instances and NHWC are swept too, every combination
	// with each batch size (defaults: fp32, 1, false).
	Precisions []gpu.Precision
	Instances  []int
	NHWC       []bool
	// ConvAlgoSearch is the CUDA provider's cudnn_conv_algo_search for
	// every engine as ortdev.ParseConvAlgoSearch gives it ("": ONNX
	// Runtime's default, exhaustive; vigil bench passes the config's
	// infer.cudnn_conv_algo_search when --conv-search is not given).
	ConvAlgoSearch string
	// GraphOnly leaves out the eager runs (each point then runs with CUDA
	// graphs only).
	GraphOnly bool
	// SkipFull leaves out the full engine path (model-only figures only).
	SkipFull bool
	// AgreeFrames, when positive, compares each precision other than fp32
	// against fp32 on that many frames of each of AgreeSources (looped
	// when shorter), with the largest batch, one instance and CUDA graphs:
	// same count, IoU ≥ 0.9, score within 0.02 (infer.Compare and
	// infer.CompareAt).
	AgreeFrames  int
	AgreeSources []string
}

// GPURow is one model, batch size and mode (eager or CUDA graph).
type GPURow struct {
	Model     string
	Batch     int
	Graph     bool
	Precision gpu.Precision
	NHWC      bool
	Instances int
	// Model only (input already on the GPU): images per second, and per
	// execution its P50/P99 time and its host overhead: the host time of
	// ORT's Run not covered by GPU work (gpu.Engine.RunModel).
	ModelFPS             float64
	ModelP50, ModelP99   time.Duration
	LaunchP50, LaunchP99 time.Duration
	// Full engine path (pinned staging, H2D, kernels, run, D2H, decode):
	// images per second, P50/P99 per batch, and the copies' share of the
	// batch's GPU time, (H2D+D2H)/(H2D+compute+D2H), from CUDA events.
	FullFPS          float64
	FullP50, FullP99 time.Duration
	CopyShare        float64
	// PreprocessGPU is the kernels' time per frame (CUDA events).
	PreprocessGPU time.Duration
}

// GPU is `vigil bench --gpu`: for each model and batch size it
// measures, in one run, eager against CUDA-graph execution through ONNX
// Runtime's CUDA provider (throughput, P50/P99, host launch time), the full
// GPU engine path with its copy share, GPU preprocessing against swscale on
// the CPU, pinned against pageable H2D bandwidth, and whether the GPU's
// detections match the CPU engine's on the same frames (same count, IoU ≥
// 0.9, score within 0.02). It needs an NVIDIA GPU; elsewhere it fails with
// the reason (no driver, no CUDA provider).
func GPU(ctx context.Context, c config.Config, o GPUOptions, out io.Writer) ([]GPURow, error) {
	if o.Source == "" {
		o.Source = filepath.Join(assets.MediaDir(), "Megamind.avi")
	}
	if len(o.Models) == 0 {
		o.Models = []string{"blazeface"}
	}
	if len(o.Batches) == 0 {
		o.Batches = []int{1, 8, 32}
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if len(o.Precisions) == 0 {
		o.Precisions = []gpu.Precision{gpu.PrecisionFP32}
	}
	if len(o.Instances) == 0 {
		o.Instances = []int{1}
	}
	if len(o.NHWC) == 0 {
		o.NHWC = []bool{false}
	}
	decode.SetLogger(nil)
	if err := engines.OpenRuntime(&c); err != nil {
		return nil, err
	}
	chain := engines.GPUChain(c.Infer.Provider)
	if chain == nil {
		return nil, cli.BadInput(errors.New("bench --gpu: infer.provider is cpu"))
	}
	for _, name := range o.Models {
		if _, err := c.ResolveModel(name); err != nil {
			return nil, cli.BadInput(err)
		}
	}
	if err := cuda.Init(); err != nil {
		if errors.Is(err, cuda.ErrNoDriver) {
			return nil, errors.New("bench --gpu needs an NVIDIA GPU and its driver: libcuda.so.1 could not be loaded on this machine")
		}
		return nil, fmt.Errorf("bench --gpu: %w", err)
	}
	maxB := slices.Max(o.Batches)
	frames, err := grabFrames(ctx, o.Source, maxB)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range frames {
			f.Release()
		}
	}()
	fmt.Fprintf(out, "vigil bench --gpu: %s (%dx%d), ONNX Runtime %s, %s per phase\n", filepath.Base(o.Source),
		frames[0].Width(), frames[0].Height(), infer.RuntimeVersion(), o.Duration)
	pinned, pageable, err := gpu.MeasureH2D(c.Infer.Device, 64<<20, 20)
	if err != nil {
		return nil, fmt.Errorf("H2D bandwidth: %w", err)
	}
	fmt.Fprintf(out, "H2D bandwidth, 64 MiB copies: pinned %.1f GB/s, pageable %.1f GB/s (pinned = %.2f × pageable)\n",
		pinned, pageable, pinned/pageable)
	var rows []GPURow
	for _, name := range o.Models {
		m, err := c.ResolveModel(name)
		if err != nil {
			return rows, cli.BadInput(err)
		}
		cpuPre, cpuDets, err := cpuReference(m, frames)
		if err != nil {
			return rows, err
		}
		fmt.Fprintf(out, "\nmodel %s (%s)\n", m.Name, m.File)
		fmt.Fprintf(out, "%5s %4s %4s %4s %5s | %9s %8s %8s %9s %9s | %9s %8s %8s %6s %9s\n", "batch", "prec", "nhwc", "inst", "mode",
			"model fps", "P50 ms", "P99 ms", "launch µs", "P99 µs", "full fps", "P50 ms", "P99 ms", "copy", "pre µs/f")
		fmt.Fprintf(out, "      (launch µs: host time of a run not covered by GPU work; copy: (H2D+D2H)/(H2D+compute+D2H) by CUDA events)\n")
		for _, b := range o.Batches {
			file := batchFile(m.File, b)
			if _, err := os.Stat(file); err != nil {
				fmt.Fprintf(out, "%5d  skipped: %s is missing (scripts/batch_models.py makes it)\n", b, file)
				continue
			}
			for _, prec := range o.Precisions {
				for _, nhwc := range o.NHWC {
					for _, inst := range o.Instances {
						modes := []bool{false, true}
						if o.GraphOnly {
							modes = []bool{true}
						}
						var eager GPURow
						for _, graph := range modes {
							pt := gpuPoint{file: file, graph: graph, prec: prec, nhwc: nhwc, inst: inst, search: o.ConvAlgoSearch, full: !o.SkipFull}
							row, dets, choice, err := benchGPUOne(ctx, c, m, chain, pt, frames[:b], o.Duration)
							if err != nil {
								fmt.Fprintf(out, "%5d %4s %4v %4d  failed: %v\n", b, prec, nhwc, inst, err)
								continue
							}
							mode := "eager"
							if graph {
								mode = "graph"
							}
							fmt.Fprintf(out, "%5d %4s %4v %4d %5s | %9.1f %8.2f %8.2f %9.1f %9.1f | %9.1f %8.2f %8.2f %5.1f%% %9.1f\n", b, prec, nhwc, inst, mode,
								row.ModelFPS, ms(row.ModelP50), ms(row.ModelP99), us(row.LaunchP50), us(row.LaunchP99),
								row.FullFPS, ms(row.FullP50), ms(row.FullP99), 100*row.CopyShare, us(row.PreprocessGPU))
							if graph && !o.GraphOnly && eager.ModelFPS > 0 {
								fmt.Fprintf(out, "      graph / eager: model fps %.2f×, launch %.2f×, P99 %.2f×\n",
									row.ModelFPS/eager.ModelFPS, float64(row.LaunchP50)/float64(eager.LaunchP50),
									float64(row.ModelP99)/float64(eager.ModelP99))
							}
							if graph {
								fmt.Fprintf(out, "      %s\n      %s\n", choice, compareDetections(cpuDets[:b], dets))
							} else {
								eager = row
							}
							rows = append(rows, row)
						}
					}
				}
			}
		}
		if o.AgreeFrames > 0 {
			if err := agreement(ctx, c, m, chain, o, out); err != nil {
				return rows, err
			}
		}
		if len(rows) > 0 {
			last := rows[len(rows)-1]
			fmt.Fprintf(out, "preprocessing per frame: GPU kernel %.1f µs (batch %d) vs swscale+normalise on the CPU %.1f µs = %.1f× faster\n",
				us(last.PreprocessGPU), last.Batch, us(cpuPre), float64(cpuPre)/float64(last.PreprocessGPU))
		}
	}
	return rows, nil
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// grabFrames decodes the first n frames of a file, looping if it is short.
func grabFrames(ctx context.Context, src string, n int) ([]pipeline.Image, error) {
	s, err := decode.New(decode.Options{URL: src, Loop: true})
	if err != nil {
		return nil, cli.BadInput(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var imgs []pipeline.Image
	err = s.Run(ctx, func(f *pipeline.Frame) {
		if len(imgs) < n && f.Seq%3 == 0 { // spread over the clip
			imgs = append(imgs, f.Image)
			if len(imgs) == n {
				cancel()
			}
			return
		}
		f.Image.Release()
	})
	if len(imgs) < n {
		for _, im := range imgs {
			im.Release()
		}
		return nil, fmt.Errorf("decoding %s: got %d of %d frames: %v", src, len(imgs), n, err)
	}
	return imgs, nil
}

// cpuReference runs the CPU engine on every frame: its detections, and the
// mean time per frame of swscale resize plus normalisation (the CPU
// preprocessing the GPU kernel replaces).
func cpuReference(m infer.Model, frames []pipeline.Image) (time.Duration, [][]pipeline.Detection, error) {
	sc := decode.NewScaler()
	defer sc.Close()
	eng, err := infer.Open(infer.Options{Name: m.Name, Path: m.File, Spec: m.Spec, Resizer: sc})
	if err != nil {
		return 0, nil, cli.BadInput(err)
	}
	defer eng.Close()
	var pre time.Duration
	dets := make([][]pipeline.Detection, len(frames))
	for i, f := range frames {
		var st pipeline.StageTimes
		d, err := eng.Detect(f, &st, nil)
		if err != nil {
			return 0, nil, err
		}
		dets[i] = d
		pre += st.Preprocess
	}
	return pre / time.Duration(len(frames)), dets, nil
}

// batchFile is the fixed-batch copy of model for batch b (the model for 1).
func batchFile(model string, b int) string {
	if b == 1 {
		return model
	}
	return strings.TrimSuffix(model, ".onnx") + ".b" + strconv.Itoa(b) + ".onnx"
}

// gpuPoint is one engine configuration of the sweep.
type gpuPoint struct {
	file        string
	graph, nhwc bool
	prec        gpu.Precision
	inst        int
	search      string
	full        bool
	onBatch     func(gpu.BatchTimes)
}

func openPoint(c config.Config, m infer.Model, chain []ortdev.Provider, pt gpuPoint, sc *decode.Scaler) (*gpu.Engine, error) {
	return gpu.Open(gpu.Options{Name: m.Name, Path: pt.file, Spec: m.Spec, Device: c.Infer.Device, Providers: chain, CUDAGraph: pt.graph, Precision: pt.prec,
		CacheDir: assets.CacheDir(), NHWC: pt.nhwc, ConvAlgoSearch: pt.search, Instances: pt.inst,
		Slots: c.Infer.Slots, Resizer: sc, OnBatch: pt.onBatch})
}

func benchGPUOne(ctx context.Context, c config.Config, m infer.Model, chain []ortdev.Provider, pt gpuPoint,
	frames []pipeline.Image, d time.Duration) (GPURow, [][]pipeline.Detection, string, error) {
	row := GPURow{Model: m.Name, Batch: len(frames), Graph: pt.graph, NHWC: pt.nhwc, Instances: pt.inst}
	var mu sync.Mutex
	var bts []gpu.BatchTimes
	sc := decode.NewScaler()
	defer sc.Close()
	pt.onBatch = func(bt gpu.BatchTimes) { mu.Lock(); bts = append(bts, bt); mu.Unlock() }
	eng, err := openPoint(c, m, chain, pt, sc)
	if err != nil {
		return row, nil, "", err
	}
	defer eng.Close()
	row.Precision = eng.Precision()
	if eng.Batch() != len(frames) {
		return row, nil, "", fmt.Errorf("%s has batch %d, not %d", pt.file, eng.Batch(), len(frames))
	}
	sts := make([]*pipeline.StageTimes, len(frames))
	for i := range sts {
		sts[i] = &pipeline.StageTimes{}
	}
	dets, err := eng.DetectBatch(frames, sts, make([][]pipeline.Detection, len(frames)))
	if err != nil {
		return row, nil, "", err
	}
	// Model only, one goroutine per instance.
	var lat, launch []time.Duration
	var lmu sync.Mutex
	el, err := runFor(ctx, d, func(ctx context.Context) error {
		return onEach(ctx, pt.inst, func(ctx context.Context) error {
			for ctx.Err() == nil {
				o, _, t, err := eng.RunModel()
				if err != nil {
					return err
				}
				lmu.Lock()
				launch, lat = append(launch, o), append(lat, t)
				lmu.Unlock()
			}
			return ctx.Err()
		})
	})
	if err != nil {
		return row, nil, "", err
	}
	row.ModelFPS = float64(len(frames)*len(lat)) / el.Seconds()
	row.ModelP50, row.ModelP99 = pipeline.Percentile(lat, 50), pipeline.Percentile(lat, 99)
	row.LaunchP50, row.LaunchP99 = pipeline.Percentile(launch, 50), pipeline.Percentile(launch, 99)
	if !pt.full {
		return row, dets, eng.Choice(), nil
	}
	// Full path, from two goroutines per instance so that one batch's
	// copies overlap the other's compute, as two streams' batches would.
	mu.Lock()
	bts = bts[:0]
	mu.Unlock()
	var wall []time.Duration
	var wmu sync.Mutex
	el, err = runFor(ctx, d, func(ctx context.Context) error {
		return onEach(ctx, 2*pt.inst, func(ctx context.Context) error {
			st := make([]*pipeline.StageTimes, len(frames))
			for i := range st {
				st[i] = &pipeline.StageTimes{}
			}
			out := make([][]pipeline.Detection, len(frames))
			for ctx.Err() == nil {
				t0 := time.Now()
				if _, err := eng.DetectBatch(frames, st, out); err != nil {
					return err
				}
				wmu.Lock()
				wall = append(wall, time.Since(t0))
				wmu.Unlock()
			}
			return ctx.Err()
		})
	})
	if err != nil {
		return row, nil, "", err
	}
	row.FullFPS = float64(len(frames)*len(wall)) / el.Seconds()
	row.FullP50, row.FullP99 = pipeline.Percentile(wall, 50), pipeline.Percentile(wall, 99)
	var copies, total, pre time.Duration
	mu.Lock()
	for _, bt := range bts {
		copies += bt.H2D + bt.D2H
		total += bt.H2D + bt.Compute + bt.D2H
		pre += bt.Preprocess
	}
	n := len(bts)
	mu.Unlock()
	if total > 0 && n > 0 {
		row.CopyShare = float64(copies) / float64(total)
		row.PreprocessGPU = pre / time.Duration(n*len(frames))
	}
	return row, dets, eng.Choice(), nil
}

// compareDetections checks GPU detections against the CPU engine's on the
// same frames with infer.Compare (IoU ≥ 0.9, score within 0.02, nothing
// unpaired).
func compareDetections(cpu, gpuDets [][]pipeline.Detection) string {
	var c infer.Comparison
	for i := range cpu {
		c.Add(infer.Compare(cpu[i], gpuDets[i]))
	}
	verdict := "all match"
	if len(c.Bad) > 0 {
		verdict = fmt.Sprintf("%d of %d match; first miss: %s", c.Matched(), c.Total, c.Bad[0])
	}
	return fmt.Sprintf("GPU vs CPU detections on %d frames, %d detections: %s (worst IoU %.3f, worst score difference %.4f)",
		len(cpu), c.Total, verdict, c.WorstIoU, c.WorstScore)
}

// onEach runs fn on n goroutines and returns their errors joined (a
// context's end is no error).
func onEach(ctx context.Context, n int, fn func(context.Context) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				errs[g] = err
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// agreement compares each precision of o other than fp32 against fp32 on
// o.AgreeFrames frames of each of o.AgreeSources, with the largest batch
// size, one instance and CUDA graphs, and prints one line per precision
// and source.
func agreement(ctx context.Context, c config.Config, m infer.Model, chain []ortdev.Provider, o GPUOptions, out io.Writer) error {
	b := slices.Max(o.Batches)
	file := batchFile(m.File, b)
	sc := decode.NewScaler()
	defer sc.Close()
	open := func(p gpu.Precision) (*gpu.Engine, error) {
		return openPoint(c, m, chain, gpuPoint{file: file, graph: true, prec: p, inst: 1, nhwc: o.NHWC[0], search: o.ConvAlgoSearch}, sc)
	}
	ref, err := open(gpu.PrecisionFP32)
	if err != nil {
		return fmt.Errorf("agreement: fp32 engine: %w", err)
	}
	defer ref.Close()
	thr := m.Spec.ScoreThreshold
	for _, p := range o.Precisions {
		if p == gpu.PrecisionFP32 {
			continue
		}
		eng, err := open(p)
		if err != nil {
			return fmt.Errorf("agreement: %s engine: %w", p, err)
		}
		fmt.Fprintf(out, "agreement %s vs fp32 (%s)\n", p, eng.Choice())
		for _, src := range o.AgreeSources {
			a, err := agreeOn(ctx, ref, eng, src, o.AgreeFrames, thr)
			if err != nil {
				eng.Close()
				return fmt.Errorf("agreement on %s: %w", src, err)
			}
			fmt.Fprintf(out, "  %s: %s\n", filepath.Base(src), a)
		}
		eng.Close()
	}
	return nil
}

// agreeOn runs n frames of src (looped) through ref and cand in batches
// and summarises their agreement.
func agreeOn(ctx context.Context, ref, cand *gpu.Engine, src string, n int, thr float32) (string, error) {
	s, err := decode.New(decode.Options{URL: src, Loop: true})
	if err != nil {
		return "", err
	}
	if thr <= 0 {
		thr = ref.ScoreThreshold()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var strict, lenient infer.Comparison
	frames, sameCount := 0, 0
	var batch []pipeline.Image
	var runErr error
	flush := func() {
		defer func() {
			for _, im := range batch {
				im.Release()
			}
			batch = batch[:0]
		}()
		sts := make([]*pipeline.StageTimes, len(batch))
		for i := range sts {
			sts[i] = &pipeline.StageTimes{}
		}
		a, err := ref.DetectBatch(batch, sts, make([][]pipeline.Detection, len(batch)))
		if err != nil {
			runErr = err
			return
		}
		b, err := cand.DetectBatch(batch, sts, make([][]pipeline.Detection, len(batch)))
		if err != nil {
			runErr = err
			return
		}
		for i := range batch {
			strict.Add(infer.Compare(a[i], b[i]))
			lenient.Add(infer.CompareAt(a[i], b[i], thr))
			if len(a[i]) == len(b[i]) {
				sameCount++
			}
		}
		frames += len(batch)
	}
	err = s.Run(ctx, func(f *pipeline.Frame) {
		if runErr != nil || frames+len(batch) >= n {
			f.Image.Release()
			cancel()
			return
		}
		batch = append(batch, f.Image)
		if len(batch) == ref.Batch() || frames+len(batch) == n {
			flush()
		}
	})
	if runErr != nil {
		return "", runErr
	}
	if frames < n {
		return "", fmt.Errorf("got %d of %d frames: %v", frames, n, err)
	}
	return fmt.Sprintf("%d frames, same count on %d (%.2f %%); strict: %d of %d detections match (IoU ≥ 0.9, score within 0.02); "+
		"with a detection on one side only forgiven within 0.02 of the threshold %.2f: %d of %d match, %d forgiven; worst IoU %.3f, worst score difference %.4f",
		frames, sameCount, 100*float64(sameCount)/float64(frames), strict.Matched(), strict.Total, thr,
		lenient.Matched()-lenient.Marginal, lenient.Total-lenient.Marginal, lenient.Marginal, strict.WorstIoU, strict.WorstScore), nil
}
