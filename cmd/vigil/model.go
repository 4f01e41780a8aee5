package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/quantize"
)

// cmdModel is vigil model: tools on model files (quantize).
func cmdModel(args []string, stdout, stderr io.Writer) error {
	const usage = "Usage: vigil model quantize --model NAME|PATH --calibrate SOURCE [--frames N] [--skip N] [--keep-float auto|none|N] [--config FILE]\n" +
		"Run 'vigil model quantize --help' for its flags.\n"
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, usage)
		return &cli.BadInputError{Err: errors.New("want a subcommand: quantize")}
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		// Asked for, as every other command's --help: status 0.
		fmt.Fprint(stdout, usage)
		return nil
	case args[0] != "quantize":
		return &cli.BadInputError{Err: fmt.Errorf("unknown subcommand %q: want quantize (vigil model quantize --help)", args[0])}
	}
	return cmdQuantize(args[1:], stdout, stderr)
}

// cmdQuantize is vigil model quantize: the model's calibrated QDQ INT8
// copy in the cache, for infer.precision: int8.
func cmdQuantize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("model quantize", "model quantize --model NAME|PATH --calibrate SOURCE [--frames N] [--skip N] [--keep-float auto|none|N] [--config FILE]", stderr)
	model := fs.String("model", "", "model name (blazeface, blazeface-back, yolox-nano, or one from --config) or an .onnx path (fp32)")
	src := fs.String("calibrate", "", "calibration clip: a file or URL whose frames look like what the model will see")
	frames := fs.Int("frames", quantize.DefaultFrames, "frames of the clip to calibrate on")
	skip := fs.Int("skip", 0, "frames of the clip to pass over first (calibrate on another segment than you test on)")
	keep := fs.String("keep-float", quantize.KeepFloatAuto, "blocks (a convolution with its activation) left in float, worst first by a sensitivity search: "+
		"auto (quantise all; if the copy fails the check against fp32, as few as make it pass), none, or a number")
	cfgPath := fs.String("config", "", "optional config file for models and infer settings")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *model == "" || *src == "" || fs.NArg() > 0 {
		fs.Usage()
		return &cli.BadInputError{Err: errors.New("--model and --calibrate are required, and no other arguments")}
	}
	if *frames < 1 || *frames > 10000 || *skip < 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--frames %d, --skip %d: want 1 to 10000 frames and a skip of 0 or more", *frames, *skip)}
	}
	if _, err := quantize.ParseKeepFloat(*keep); err != nil {
		return &cli.BadInputError{Err: fmt.Errorf("--%w", err)}
	}
	c, _, ctx, stop, err := toolSetup(*cfgPath, stderr)
	if err != nil {
		return err
	}
	defer stop()
	m, err := c.ResolveModel(*model)
	if err != nil {
		return &cli.BadInputError{Err: fmt.Errorf("--model: %w", err)}
	}
	if _, err := os.Stat(m.File); err != nil {
		return &cli.BadInputError{Err: fmt.Errorf("--model %s: %w", m.File, err)}
	}
	if err := engines.OpenRuntime(&c); err != nil {
		return err
	}
	decode.SetLogger(nil)
	r, err := quantize.Quantize(ctx, quantize.Options{Model: m, Source: *src, Skip: *skip, Frames: *frames, CacheDir: assets.CacheDir(),
		Threads: c.Infer.IntraOpThreads, KeepFloat: *keep, Progress: func(l string) { fmt.Fprintf(stderr, "%s: %s\n", m.Name, l) }})
	switch {
	case errors.Is(err, quantize.ErrUndecodable):
		return &cli.BadInputError{Err: fmt.Errorf("--calibrate %s", cli.OneLine(err.Error()))}
	case errors.Is(err, quantize.ErrNoPython), errors.Is(err, infer.ErrModelMismatch), errors.Is(err, os.ErrNotExist):
		return &cli.BadInputError{Err: err}
	case err != nil:
		return cli.Interrupted(ctx, err, "before the INT8 copy was written")
	}
	how := "made"
	if r.Cached {
		how = "found in the cache"
	}
	rec := r.Record
	fmt.Fprintf(stdout, "%s: INT8 copy %s: %s (calibrated on %s, %d frames, %s; %d nodes quantised, %d kept float; %.1f s)\n",
		m.Name, how, r.Path, rec.Source, rec.Frames, rec.Method, rec.Nodes, rec.FloatNodes, rec.Seconds)
	fmt.Fprintf(stdout, "%s: keep-float %s: %d of %d blocks float; against fp32 on %s\n", m.Name, rec.KeepFloat, len(rec.Float), rec.Blocks, rec.Check)
	if rec.Blocks > 0 && len(rec.Float) == rec.Blocks {
		fmt.Fprintf(stdout, "every block is float: this copy is fp32 in effect, and infer.precision: int8 gains nothing from it\n")
		return nil
	}
	if rec.Check.Startup != "" {
		fmt.Fprintf(stdout, "infer.precision: int8 will run this model in fp32: the copy fails the start-up check (try --keep-float auto or a larger number)\n")
		return nil
	}
	fmt.Fprintf(stdout, "run it with infer.precision: int8 (the CPU engine checks it against fp32 at start)\n")
	return nil
}
