// Command vigil is the streaming video analytics engine: it decodes camera
// streams with FFmpeg, runs a detection model with ONNX Runtime and publishes
// one JSON message per frame to NATS. Run `vigil help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/doctor"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/internal/registry"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `vigil - streaming video analytics: FFmpeg decode -> ONNX detector -> NATS

Usage:
  vigil run --config FILE          serve the streams in FILE (Ctrl-C stops); the REST API, the web
                                   console at / and the live pictures on api.listen (docs/api.md)
  vigil detect [flags] SOURCE      detect on one file or URL, one JSON line per frame on stdout
                                   (--analytics FILE: tracks, zones and lines too)
  vigil tail [flags]               print the detections (--analytics: events and counts) a running vigil publishes
  vigil streams COMMAND            manage a running vigil's streams: ls, get, add, set, rm, apply
  vigil nodes COMMAND              the fleet's nodes: ls, drain ID
  vigil shapes [flags]             each stream's resolution against its model's fixed input shape
  vigil doctor [flags]             health report from a running vigil's metrics
  vigil bench [flags]              measure decode, inference and pipeline speed
  vigil model quantize [flags]     make a model's calibrated INT8 copy (infer.precision: int8)
  vigil check-config FILE          validate a config file and exit
  vigil version                    print version information

Run 'vigil COMMAND --help' for a command's flags.
Exit status: 0 success, 1 runtime failure, 2 bad input (flags, config, model or URL),
130 a bench stopped by Ctrl-C or SIGTERM before it finished.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "run":
		err = cmdRun(rest, stderr)
	case "detect":
		err = cmdDetect(rest, stdout, stderr)
	case "tail":
		err = cmdTail(rest, stdout, stderr)
	case "bench":
		err = cmdBench(rest, stdout, stderr)
	case "check-config":
		err = cmdCheckConfig(rest, stdout, stderr)
	case "streams":
		err = cmdStreams(rest, stdout, stderr)
	case "nodes":
		err = cmdNodes(rest, stdout, stderr)
	case "doctor":
		err = cmdDoctor(rest, stdout, stderr)
	case "shapes":
		err = cmdShapes(rest, stdout, stderr)
	case "model":
		err = cmdModel(rest, stdout, stderr)
	case "version", "--version":
		printVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "vigil: unknown command %q\n\n%s", redact.URL(cmd), usage)
		return 2
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	// Errors name URLs redacted where they are made; this is the last
	// line of defence for one that came from elsewhere (a library, an
	// argument echoed back).
	fmt.Fprintf(stderr, "vigil %s: %s\n", cmd, redact.Text(err.Error()))
	switch {
	case cli.IsBadInput(err):
		return 2
	case errors.As(err, new(*cli.InterruptedError)):
		return 130
	default:
		return 1
	}
}

// redactingWriter passes each write through redact.Text: the flag
// package echoes bad values ("invalid value ... for flag") on its own.
type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact.Text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newFlags returns a flag set whose parse errors are bad input.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(redactingWriter{stderr})
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vigil %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, also after positional arguments ("vigil detect
// FILE --max-frames 5"); fs.Args() then holds the positionals.
func parse(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return &cli.BadInputError{Err: err}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

func loadConfig(path string) (config.Config, error) {
	if path == "" {
		c := config.Default()
		return c, nil
	}
	c, err := config.Load(path)
	if err != nil {
		return c, &cli.BadInputError{Err: err}
	}
	return c, nil
}

// signalContext ends on SIGINT/SIGTERM; a second signal, or a shutdown
// that takes longer than grace, exits the process at once.
// exit is os.Exit; tests replace it to see signalContext's forced exits.
var exit = os.Exit

func signalContext(stderr io.Writer, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{}) // closed by stop: the command has returned
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		cancel()
		select {
		case <-ch:
			fmt.Fprintln(stderr, "vigil: second signal, exiting now")
		case <-time.After(grace):
			fmt.Fprintf(stderr, "vigil: shutdown took longer than %s, exiting now\n", grace)
		case <-done:
			return
		}
		exit(1)
	}()
	var once sync.Once
	return ctx, func() { once.Do(func() { signal.Stop(ch); cancel(); close(done) }) }
}

func cmdRun(args []string, stderr io.Writer) error {
	fs := newFlags("run", "run --config FILE", stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); see configs/demo.yaml")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		fs.Usage()
		return &cli.BadInputError{Err: errors.New("--config FILE is required and takes no arguments")}
	}
	c, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	c.Version = version // the node's entry says what vigil version says
	log, err := cli.NewLogger(c.Log, stderr)
	if err != nil {
		return &cli.BadInputError{Err: err}
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signalContext(stderr, 15*time.Second)
	defer stop()
	return app.Run(ctx, c, log, stderr, func(ep app.Endpoints) { printReady(stderr, c, ep) })
}

// printReady says where vigil serves, with commands that work as printed:
// each names the token file it needs (never the token itself).
func printReady(w io.Writer, c config.Config, ep app.Endpoints) {
	tokenFlag := func(file string) string {
		if file == "" {
			return ""
		}
		return " --token-file " + file
	}
	nats := redact.URLs(ep.NATS)
	fmt.Fprintf(w, "vigil: ready; NATS %s; watch with: vigil tail --nats %s%s\n", nats, nats, tokenFlag(c.NATS.TokenFile))
	if ep.API != "" {
		fmt.Fprintf(w, "vigil: console %s/ (web, live pictures); API %s/v1/streams; manage streams with: vigil streams ls --api %s%s\n",
			ep.API, ep.API, ep.API, tokenFlag(c.API.TokenFile))
	}
	if ep.MQTT != "" {
		p := c.NATS.SubjectPrefix
		fmt.Fprintf(w, "vigil: MQTT mqtt://%s; topics %s/<stream>/analytics, %[2]s/<stream>/counts, %[2]s/<stream>/detections\n", ep.MQTT, p)
	}
}

func cmdDetect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("detect", "detect [--model NAME|PATH] [--max-frames N] [--config FILE] [--analytics FILE] [--id ID] [--realtime] SOURCE", stderr)
	model := fs.String("model", "blazeface", "model name (blazeface, blazeface-back, yolox-nano, or one from --config) or an .onnx path")
	maxFrames := fs.Int("max-frames", 0, "stop after N frames (0: the whole source)")
	cfgPath := fs.String("config", "", "optional config file for models, infer and log settings")
	id := fs.String("id", "detect", "stream id written in the messages")
	realtime := fs.Bool("realtime", false, "pace a file at its native frame rate")
	analyticsFile := fs.String("analytics", "", "file holding one analytics: block (tracker, zones, lines): track objects and write events and counts as JSON lines too")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return &cli.BadInputError{Err: errors.New("exactly one SOURCE (file, rtsp:// or http(s):// URL) is required")}
	}
	c, log, ctx, stop, err := toolSetup(*cfgPath, stderr)
	if err != nil {
		return err
	}
	defer stop()
	return app.Detect(ctx, c, app.DetectOptions{Source: fs.Arg(0), Model: *model, MaxFrames: *maxFrames, StreamID: *id, Realtime: *realtime,
		Analytics: *analyticsFile}, log, stdout)
}

// toolSetup prepares a one-shot command (detect, bench): the optional
// config, a logger that only shows warnings, and a signal context with a
// 10 s shutdown grace.
func toolSetup(cfgPath string, stderr io.Writer) (config.Config, *zap.Logger, context.Context, context.CancelFunc, error) {
	c, err := loadConfig(cfgPath)
	if err != nil {
		return c, nil, nil, nil, err
	}
	c.Log.Level = "warn"
	log, err := cli.NewLogger(c.Log, stderr)
	if err != nil {
		return c, nil, nil, nil, &cli.BadInputError{Err: err}
	}
	ctx, stop := signalContext(stderr, 10*time.Second)
	return c, log, ctx, stop, nil
}

func cmdTail(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tail", "tail [--stream ID] [--analytics] [--nats URL] [--token-file FILE] [--bucket NAME] [--prefix P] [--count N] [--json] [--quiet D]", stderr)
	o := client.TailOptions{}
	fs.StringVar(&o.Stream, "stream", "", "only this stream id (default: all streams)")
	fs.StringVar(&o.URL, "nats", "nats://127.0.0.1:4222", "NATS server URL (the embedded server's default address)")
	fs.StringVar(&o.Prefix, "prefix", "vigil", "subject prefix (nats.subject_prefix)")
	fs.IntVar(&o.Count, "count", 0, "exit after N messages (0: until Ctrl-C)")
	fs.BoolVar(&o.JSON, "json", false, "print raw JSON messages")
	fs.BoolVar(&o.Analytics, "analytics", false, "print the analytics events and counts instead of the detections")
	fs.StringVar(&o.Bucket, "bucket", registry.DefaultBucket, "stream registry bucket where --stream is looked up (nats.bucket)")
	fs.DurationVar(&o.Quiet, "quiet", client.DefaultTailQuiet, "say so on stderr after this long without a message")
	tokenFile := fs.String("token-file", "", "file holding the NATS token (nats.token_file of the vigil you watch)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *tokenFile != "" {
		t, err := config.ReadToken(*tokenFile)
		if err != nil {
			return &cli.BadInputError{Err: fmt.Errorf("--token-file: %w", err)}
		}
		o.Token = t
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return &cli.BadInputError{Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if o.Quiet <= 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--quiet %s: must be positive", o.Quiet)}
	}
	if o.Count < 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--count %d: want 0 (until Ctrl-C) or more messages", o.Count)}
	}
	o.Notes = stderr
	ctx, stop := signalContext(stderr, 5*time.Second)
	defer stop()
	return client.Tail(ctx, o, stdout)
}

func cmdDoctor(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("doctor", "doctor [--metrics URL] [--window D]", stderr)
	o := doctor.Options{}
	fs.StringVar(&o.URL, "metrics", "http://127.0.0.1:9090/metrics", "a running vigil's /metrics (metrics.listen)")
	fs.DurationVar(&o.Window, "window", 10*time.Second, "time between the two scrapes the report compares")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return &cli.BadInputError{Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if o.Window <= 0 {
		return &cli.BadInputError{Err: fmt.Errorf("--window %s: must be positive", o.Window)}
	}
	if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &cli.BadInputError{Err: fmt.Errorf("--metrics %q: want an http(s) URL such as http://127.0.0.1:9090/metrics", redact.URL(o.URL))}
	}
	ctx, stop := signalContext(stderr, 5*time.Second)
	defer stop()
	_, err := doctor.Run(ctx, o, stdout)
	return err
}

func cmdCheckConfig(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check-config", "check-config FILE", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return &cli.BadInputError{Err: errors.New("exactly one FILE is required")}
	}
	c, err := loadConfig(fs.Arg(0))
	if err != nil {
		return err
	}
	// The models the streams run must load as vigil run loads them; the
	// classes of streams' analytics are the models' own, which only the
	// model files say; so are a degrade_to model's loading and batch.
	if err := engines.CheckModels(&c); err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if err := engines.CheckClasses(&c); err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if err := engines.CheckDegrade(&c); err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	for _, d := range c.Deprecations() { // valid, but say what to write instead
		fmt.Fprintf(stderr, "%s: %s\n", fs.Arg(0), d)
	}
	fmt.Fprintf(stdout, "%s: ok (%d stream(s), %d model(s) defined)\n", fs.Arg(0), len(c.Streams), len(c.Models))
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func printVersion(w io.Writer) {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = " (" + s.Value[:min(12, len(s.Value))] + ")"
			}
		}
	}
	fmt.Fprintf(w, "vigil %s%s %s %s/%s\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "onnxruntime library: %s\nmodels: %s (built-in: %v)\n", assets.ORTLibrary(), assets.ModelsDir(), infer.BuiltinNames())
}
