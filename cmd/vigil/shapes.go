package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/internal/shapes"
)

const shapesUsage = `Usage: vigil shapes [--api URL | --probe] [--config FILE] [--all-models] [--max-waste P] [--json]

Lists every registered stream's resolution against the fixed input shape of
the model it runs (with --all-models, also of every configured and built-in
model whose file is there): source WxH, model input WxH, infer.batch_sizes,
the letterbox scale, the content size, the padding at the right and bottom
in pixels, and the padding's share of the input pixels (WASTE).

A row is flagged when WASTE exceeds --max-waste, when the source is smaller
than the input in both dimensions (upscale), when the resolution is unknown,
or when the model cannot be read. A flagged row with a known resolution and
a readable model gets a suggestion: an input with the source's aspect ratio,
the larger side equal to the model's, the other rounded up to a multiple of
32 (rounding up keeps today's scale). Such a shape needs another model
export, i.e. another engine.

Resolutions come from a running vigil's API (each stream's last decoded
frame). With --probe, vigil shapes opens each registered stream itself and
reads its first frame (--timeout each, 4 at a time); the streams, with their
credentials, come from the registry: on --nats or nats.url when set, else on
the vigil answering at nats.listen, else from data_dir's store, opened here
with the embedded server on nats.listen. Config streams that the next start
would add are included.

Model files, infer.batch_sizes and pipeline.default_model come from --config
(give the running vigil's config; without it, the defaults and built-in
models). Model shapes are read from the model files; no pipeline is built.
Exit status: 0 (flags are a report, not a failure), 1 when the API or the
registry cannot be reached, 2 on bad input (flags, config, an HTTP 4xx
answer such as a wrong token).

Flags:
`

func cmdShapes(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("shapes", "", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, shapesUsage)
		fs.PrintDefaults()
	}
	apiURL := fs.String("api", envOr("VIGIL_API", "http://127.0.0.1:8080"), "the running vigil's API base URL (or $VIGIL_API)")
	tokenFile := fs.String("token-file", "", "file holding the API's bearer token")
	ca := fs.String("ca", "", "PEM CA file to trust for an https --api")
	cfgPath := fs.String("config", "", "the vigil's config file: models, infer.models_dir, infer.batch_sizes, pipeline.default_model, and for --probe data_dir and nats")
	o := shapes.Options{Parallel: 4}
	fs.BoolVar(&o.Probe, "probe", false, "open each registered stream and read its first frame, instead of asking the API")
	fs.DurationVar(&o.Timeout, "timeout", 15*time.Second, "--probe: limit per stream, up to its first frame")
	fs.StringVar(&o.NATS, "nats", "", "--probe: NATS server holding the registry (default: nats.url, else the embedded server at nats.listen)")
	fs.BoolVar(&o.AllModels, "all-models", false, "also a row per configured and built-in model, for every stream")
	fs.Float64Var(&o.MaxWaste, "max-waste", 25, "flag a stream whose padding exceeds this share of the input, in percent")
	fs.BoolVar(&o.JSON, "json", false, "print JSON instead of the table")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &cli.BadInputError{Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if !(o.MaxWaste >= 0 && o.MaxWaste <= 100) { // also refuses NaN
		return &cli.BadInputError{Err: fmt.Errorf("--max-waste %g: want a percentage from 0 to 100", o.MaxWaste)}
	}
	if o.Timeout <= 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--timeout %s: must be positive", o.Timeout)}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"timeout", "nats"} {
		if set[name] && !o.Probe {
			return &cli.BadInputError{Err: fmt.Errorf("--%s applies to --probe only", name)}
		}
	}
	c, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if !o.Probe {
		if u, err := url.Parse(*apiURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &cli.BadInputError{Err: fmt.Errorf("--api %q: want an http(s) URL such as http://127.0.0.1:8080", redact.URL(*apiURL))}
		}
		if o.Client, err = client.New(*apiURL, *tokenFile, *ca); err != nil {
			return err
		}
	}
	ctx, stop := signalContext(stderr, 5*time.Second)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	_, err = shapes.Run(ctx, c, o, stdout)
	return err
}
