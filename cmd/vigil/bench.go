package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/bench"
	"github.com/vigil-video/vigil/internal/cli"
)

// benchFlags are vigil bench's flags. The four benchmarks are chosen with
// --sweep, --gpu and --streams (none: the engine benchmark), as README.md,
// docs/performance.md and the recorded H200 runs invoke them, and share
// most of their flags.
type benchFlags struct {
	engine                  bench.EngineOptions // --source, --model, --duration
	config                  string
	sweep, streams, gpu     bool
	int8                    bool
	calibrate               string
	maxStreams, step, start int
	cpuThreads              int
	budgetMS                int
	each, warmup, ceiling   time.Duration
	plot, ffmpeg            string
	models, batches         string
	cpuProfile              string
	// --gpu's sweep and agreement flags.
	precisions, instances, nhwc string
	convSearch, agreeSources    string
	graphOnly, skipFull         bool
	agree                       int
}

// newBenchFlags declares the flags of every mode on one flag set.
func newBenchFlags(stderr io.Writer) (*flag.FlagSet, *benchFlags) {
	fs := newFlags("bench", "bench [--source FILE] [--model NAME|PATH] [--duration D] | bench --sweep [--max-streams N] [--step S] [--each D] [--warmup D] [--budget-ms B] [--plot FILE] | bench --gpu [--models A,B] [--batches 1,8,32] [--precisions fp32,fp16] [--instances 1,2] [--nhwc false,true] [--conv-search S] [--graph-only] [--model-only] [--agree N --agree-sources A,B] | bench --int8 [--models A,B] [--calibrate CLIP] | bench --streams [--start N] [--step S] [--max-streams M] [--each D] [--warmup D] [--budget-ms B] [--ffmpeg PATH] [--ceiling D] [--cpu-threads N]; any: [--cpuprofile FILE]", stderr)
	f := &benchFlags{}
	fs.StringVar(&f.engine.Source, "source", "", "video file (default: Megamind.avi from the asset cache)")
	fs.StringVar(&f.engine.Model, "model", "blazeface", "model name or .onnx path")
	fs.DurationVar(&f.engine.Duration, "duration", 3*time.Second, "length of each throughput phase")
	fs.StringVar(&f.config, "config", "", "optional config file for models and infer settings")
	fs.BoolVar(&f.sweep, "sweep", false, "load sweep instead: N looped real-time streams, N rising, with and without vigil's policy")
	fs.IntVar(&f.maxStreams, "max-streams", 24, "sweep, streams: the largest N (sweep: 256 at most; streams: 1024)")
	fs.IntVar(&f.step, "step", 4, "sweep, streams: N grows by this")
	fs.DurationVar(&f.each, "each", 6*time.Second, "sweep, streams: measuring time per point (at least 100ms)")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "sweep, streams: how long each point's streams run before measuring (they start spread over min(warmup/2, 2s), like cameras not in step); a point whose streams have not all decoded a frame by then waits until they have (up to 60 s more, said in its output), then 1 s")
	fs.IntVar(&f.budgetMS, "budget-ms", 200, "sweep, streams: the policy's latency budget")
	fs.StringVar(&f.plot, "plot", "bench-sweep.png", "sweep: PNG of P99 against load (empty: none)")
	fs.BoolVar(&f.streams, "streams", false, "streams per machine instead: vigil's decode-only ceilings (direct NVDEC ×14 per GPU, software one single-thread decode per core, then both at once; --ceiling each; no GPU: the NVDEC one says why and the rest runs), the capacities to paste as decode.nvdec_pixel_rate and decode.cpu_pixel_rate, the engine ceiling (the detector alone on held frames, device-resident with NVDEC), then N looped real-time streams through vigil for rising N until P99 passes --budget-ms, processed falls under 95 % of offered (decoded) or offered under 95 % of what the streams send in real time; one GPU (infer.device) or, with infer.devices in --config, those GPUs (the NVDEC ceiling then ×14 per GPU, spread over them); each point counts the streams decoding on NVDEC (a stream NVDEC cannot open decodes on the CPU, and the point says so); the best N as a ratio of the decode ceiling and of the engine ceiling, and issue 16's acceptance line (>= 0.9 × the smaller); uses --start, --step, --max-streams, --each, --warmup, --budget-ms, --ffmpeg, --ceiling, --cpu-threads")
	fs.IntVar(&f.start, "start", 8, "streams: the first N")
	fs.DurationVar(&f.ceiling, "ceiling", 10*time.Second, "streams: how long each decode-only and engine ceiling runs, more than 3s (the first 2s are start-up, not counted); 0 skips the ceilings")
	fs.IntVar(&f.cpuThreads, "cpu-threads", 1, "streams: FFmpeg decoder threads of each stream the points decode in software, 1 to 16: 1 decodes on the stream's own thread, as the CPU ceiling does; 2 or more use FFmpeg's frame threads, each frame out threads-1 frames later (33 ms a thread at 30 fps)")
	fs.StringVar(&f.ffmpeg, "ffmpeg", "", "streams: also measure this ffmpeg CLI's decode-only ceilings, for comparison with runs before vigil measured its own (bin/ffmpeg-static on GPU machines); empty: not measured")
	fs.BoolVar(&f.gpu, "gpu", false, "GPU engine instead (NVIDIA GPU needed): eager vs CUDA-graph runs, copies, preprocessing, H2D bandwidth, GPU vs CPU detections")
	fs.StringVar(&f.models, "models", "", "gpu, int8: comma-separated model names or .onnx paths (default: --model)")
	fs.StringVar(&f.batches, "batches", "1,8,32", "gpu: comma-separated batch sizes (batch N uses <model>.b<N>.onnx)")
	fs.StringVar(&f.precisions, "precisions", "fp32", "gpu: comma-separated precisions to sweep (fp32, tf32, fp16)")
	fs.StringVar(&f.instances, "instances", "1", "gpu: comma-separated engine instances per model to sweep (sessions on their own CUDA streams)")
	fs.StringVar(&f.nhwc, "nhwc", "false", "gpu: comma-separated prefer_nhwc settings to sweep (false, true)")
	fs.StringVar(&f.convSearch, "conv-search", "", "gpu: cudnn_conv_algo_search for every engine (exhaustive, heuristic, default; empty: infer.cudnn_conv_algo_search, default heuristic)")
	fs.BoolVar(&f.graphOnly, "graph-only", false, "gpu: CUDA-graph runs only (no eager runs)")
	fs.BoolVar(&f.skipFull, "model-only", false, "gpu: model-only figures only (no full engine path)")
	fs.IntVar(&f.agree, "agree", 0, "gpu: compare each precision but fp32 against fp32 on this many frames of each --agree-sources file")
	fs.StringVar(&f.agreeSources, "agree-sources", "", "gpu: comma-separated video files for --agree (default: --source)")
	fs.BoolVar(&f.int8, "int8", false, "INT8 against fp32 instead: the engine benchmark on each model of --models (default blazeface,yolox-nano) and on its INT8 copy (vigil model quantize), in one run, with the ratios and the CPU's INT8 flags")
	fs.StringVar(&f.calibrate, "calibrate", "", "int8: quantise a model that has no INT8 copy yet on this clip first")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file (read it with 'go tool pprof')")
	return fs, f
}

// cmdBench is vigil bench: the checks every mode shares, the CPU profile,
// then one mode.
func cmdBench(args []string, stdout, stderr io.Writer) error {
	fs, f := newBenchFlags(stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return &cli.BadInputError{Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, name := range []string{"start", "ffmpeg", "ceiling", "cpu-threads"} {
		if set[name] && !f.streams {
			return &cli.BadInputError{Err: fmt.Errorf("--%s applies to --streams only", name)}
		}
	}
	if set["warmup"] && !f.streams && !f.sweep {
		return &cli.BadInputError{Err: errors.New("--warmup applies to --sweep and --streams only")}
	}
	if f.ceiling < 0 || (f.ceiling > 0 && f.ceiling <= 3*time.Second) {
		return &cli.BadInputError{Err: fmt.Errorf("--ceiling %s: want 0 (skip) or more than 3s (each decode is counted after 2s of start-up)", f.ceiling)}
	}
	if f.cpuThreads < 1 || f.cpuThreads > 16 {
		return &cli.BadInputError{Err: fmt.Errorf("--cpu-threads %d: want 1 to 16", f.cpuThreads)}
	}
	if f.warmup <= 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--warmup %s: want more than 0", f.warmup)}
	}
	if f.int8 && (f.gpu || f.sweep || f.streams) {
		return &cli.BadInputError{Err: errors.New("--int8, --streams, --gpu and --sweep are separate benchmarks; give one")}
	}
	if set["calibrate"] && !f.int8 {
		return &cli.BadInputError{Err: errors.New("--calibrate applies to --int8 only")}
	}
	if f.streams && (f.gpu || f.sweep) {
		return &cli.BadInputError{Err: errors.New("--streams, --gpu and --sweep are separate benchmarks; give one")}
	}
	if p, ok := decode.LocalPath(f.engine.Source); ok {
		// A local file that is not there is bad input now, not an error
		// after the header and the engine's start (a URL is opened later).
		if _, err := os.Stat(p); err != nil {
			return &cli.BadInputError{Err: fmt.Errorf("--source: %w", err)}
		}
	}
	if f.cpuProfile != "" {
		stopProfile, err := startCPUProfile(f.cpuProfile, stderr)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	switch {
	case f.int8:
		return benchINT8(f, stdout, stderr)
	case f.streams:
		return benchStreams(f, stdout, stderr)
	case f.gpu && f.sweep:
		return &cli.BadInputError{Err: errors.New("--gpu and --sweep are separate benchmarks; give one (the sweep uses the GPU engine when infer.provider allows it)")}
	case f.gpu:
		return benchGPU(f, stdout, stderr)
	case f.sweep:
		return benchSweep(f, stdout, stderr)
	}
	return benchEngine(f, stdout, stderr)
}

// benchINT8 is vigil bench --int8.
func benchINT8(f *benchFlags, stdout, stderr io.Writer) error {
	if f.engine.Duration <= 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--duration %s: must be positive", f.engine.Duration)}
	}
	var models []string
	if f.models != "" {
		models = strings.Split(f.models, ",")
	}
	c, log, ctx, stop, err := toolSetup(f.config, stderr)
	if err != nil {
		return err
	}
	defer stop()
	_, err = bench.INT8(ctx, c, f.engine, models, f.calibrate, log, stdout)
	return cli.Interrupted(ctx, err, "before the INT8 bench finished; its figures are incomplete")
}

// benchStreams is vigil bench --streams.
func benchStreams(f *benchFlags, stdout, stderr io.Writer) error {
	c, log, ctx, stop, err := toolSetup(f.config, stderr)
	if err != nil {
		return err
	}
	defer stop()
	_, err = bench.Streams(ctx, c, bench.StreamsOptions{Source: f.engine.Source, Model: f.engine.Model, FFmpeg: f.ffmpeg,
		Start: f.start, Step: f.step, Max: f.maxStreams, Each: f.each, Warmup: f.warmup, Budget: time.Duration(f.budgetMS) * time.Millisecond,
		CeilingFor: f.ceiling, NoCeilings: f.ceiling == 0, CPUThreads: f.cpuThreads}, log, stdout)
	return err
}

// benchGPU is vigil bench --gpu.
func benchGPU(f *benchFlags, stdout, stderr io.Writer) error {
	g := bench.GPUOptions{Source: f.engine.Source, Duration: f.engine.Duration}
	g.Models = []string{f.engine.Model}
	if f.models != "" {
		g.Models = strings.Split(f.models, ",")
	}
	for _, b := range strings.Split(f.batches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil || n < 1 || n > 128 || slices.Contains(g.Batches, n) {
			return &cli.BadInputError{Err: fmt.Errorf("--batches %q: want distinct sizes 1 to 128, comma-separated", f.batches)}
		}
		g.Batches = append(g.Batches, n)
	}
	for _, v := range strings.Split(f.precisions, ",") {
		p, err := gpu.ParsePrecision(v)
		if err != nil || strings.TrimSpace(v) == "" {
			return &cli.BadInputError{Err: fmt.Errorf("--precisions %q: want fp32, tf32 or fp16, comma-separated", f.precisions)}
		}
		g.Precisions = append(g.Precisions, p)
	}
	for _, v := range strings.Split(f.instances, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 16 {
			return &cli.BadInputError{Err: fmt.Errorf("--instances %q: want counts 1 to 16, comma-separated", f.instances)}
		}
		g.Instances = append(g.Instances, n)
	}
	for _, v := range strings.Split(f.nhwc, ",") {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return &cli.BadInputError{Err: fmt.Errorf("--nhwc %q: want false and/or true, comma-separated", f.nhwc)}
		}
		g.NHWC = append(g.NHWC, b)
	}
	var err error
	if g.ConvAlgoSearch, err = ortdev.ParseConvAlgoSearch(f.convSearch); err != nil {
		return &cli.BadInputError{Err: fmt.Errorf("--conv-search: %w", err)}
	}
	g.GraphOnly, g.SkipFull, g.AgreeFrames = f.graphOnly, f.skipFull, f.agree
	if f.agree > 0 {
		g.AgreeSources = []string{f.engine.Source}
		if f.agreeSources != "" {
			g.AgreeSources = strings.Split(f.agreeSources, ",")
		}
		if g.AgreeSources[0] == "" {
			return &cli.BadInputError{Err: errors.New("--agree needs --agree-sources or --source")}
		}
	}
	if f.engine.Duration <= 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--duration %s: must be positive", f.engine.Duration)}
	}
	c, _, ctx, stop, err := toolSetup(f.config, stderr)
	if err != nil {
		return err
	}
	defer stop()
	if f.convSearch == "" { // the config's (default heuristic), as vigil run has it
		g.ConvAlgoSearch, _ = ortdev.ParseConvAlgoSearch(c.Infer.CuDNNConvAlgoSearch) // validated by the config
	}
	_, err = bench.GPU(ctx, c, g, stdout)
	return cli.Interrupted(ctx, err, "before the GPU bench finished; its figures are incomplete")
}

// benchSweep is vigil bench --sweep.
func benchSweep(f *benchFlags, stdout, stderr io.Writer) error {
	if f.maxStreams < 1 || f.maxStreams > 256 || f.step < 1 || f.each < 100*time.Millisecond || f.budgetMS <= 0 {
		return &cli.BadInputError{Err: errors.New("--max-streams 1..256, --step >= 1, --each >= 100ms and --budget-ms > 0 are needed")}
	}
	if f.plot != "" {
		if !strings.HasSuffix(strings.ToLower(f.plot), ".png") {
			return &cli.BadInputError{Err: fmt.Errorf("--plot %q: want a .png file", f.plot)}
		}
		if st, err := os.Stat(filepath.Dir(f.plot)); err != nil || !st.IsDir() {
			return &cli.BadInputError{Err: fmt.Errorf("--plot %q: its directory does not exist", f.plot)}
		}
	}
	c, log, ctx, stop, err := toolSetup(f.config, stderr)
	if err != nil {
		return err
	}
	defer stop()
	ns := []int{1}
	for n := f.step; n <= f.maxStreams; n += f.step {
		if n > 1 {
			ns = append(ns, n)
		}
	}
	if ns[len(ns)-1] != f.maxStreams {
		ns = append(ns, f.maxStreams) // always measure the largest load asked for
	}
	_, _, err = bench.Sweep(ctx, c, bench.SweepOptions{Source: f.engine.Source, Model: f.engine.Model, Streams: ns, Each: f.each, Warmup: f.warmup,
		Budget: time.Duration(f.budgetMS) * time.Millisecond, Plot: f.plot}, log, stdout)
	return cli.Interrupted(ctx, err, "before the sweep finished; the rows above are complete measurements")
}

// benchEngine is vigil bench with no mode flag.
func benchEngine(f *benchFlags, stdout, stderr io.Writer) error {
	if f.engine.Duration <= 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--duration %s: must be positive", f.engine.Duration)}
	}
	c, log, ctx, stop, err := toolSetup(f.config, stderr)
	if err != nil {
		return err
	}
	defer stop()
	_, err = bench.Engine(ctx, c, f.engine, log, stdout)
	return cli.Interrupted(ctx, err, "before the bench finished; its figures are incomplete")
}

// startCPUProfile writes a Go CPU profile to path until the returned stop
// is called (which reports a failure to finish the file on stderr).
// Errors: the file cannot be created (bad input), profiling is already on.
func startCPUProfile(path string, stderr io.Writer) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, &cli.BadInputError{Err: fmt.Errorf("--cpuprofile: %w", err)}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "vigil bench: --cpuprofile %s: %v\n", path, err)
		}
	}, nil
}
