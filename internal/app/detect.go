package app

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// DetectOptions are `vigil detect`'s flags.
type DetectOptions struct {
	Source    string // URL or path
	Model     string // name or .onnx path
	MaxFrames int    // 0: all
	StreamID  string // id in the output (default "detect")
	Realtime  bool
}

// Detect is `vigil detect`: it runs one source through one model and writes
// one JSON line (sinks.Message) per frame to out, then returns. Files are
// processed losslessly (every frame); live sources drop the oldest frames
// when inference falls behind, like the service does.
func Detect(ctx context.Context, c config.Config, o DetectOptions, log *zap.Logger, out io.Writer) error {
	if o.StreamID == "" {
		o.StreamID = "detect"
	}
	if !registry.ValidID(o.StreamID) {
		return cli.BadInput(fmt.Errorf("--id %q: want 1-64 characters of A-Z a-z 0-9 _ -", o.StreamID))
	}
	if o.MaxFrames < 0 {
		return cli.BadInput(fmt.Errorf("--max-frames %d: must not be negative", o.MaxFrames))
	}
	decode.SetLogger(log)
	src, err := decode.New(decode.Options{URL: o.Source, StreamID: o.StreamID, Realtime: o.Realtime, Logger: log})
	if err != nil {
		return cli.BadInput(fmt.Errorf("source: %w", err))
	}
	m, err := c.ResolveModel(o.Model)
	if err != nil {
		return cli.BadInput(fmt.Errorf("--model: %w", err))
	}
	if err := engines.OpenRuntime(&c); err != nil {
		return err
	}
	engs := engines.New(&c)
	defer engs.CloseLogging(log)
	eng, err := engs.Get(o.Model)
	if err != nil {
		return fmt.Errorf("--model %s: %w", m.File, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sink := &limitSink{Sink: sinks.NewJSONLines(out), max: int64(o.MaxFrames), done: cancel}
	err = pipeline.RunStream(ctx, pipeline.StreamConfig{
		ID: o.StreamID, Source: src, Engine: eng, Sink: sink, Live: false, Lossless: !src.Live(), Logger: log,
	})
	if err != nil {
		return err
	}
	if n := sink.n.Load(); n == 0 {
		return fmt.Errorf("no frame was processed from %s", decode.RedactURL(o.Source))
	}
	return nil
}

// limitSink passes at most max results (0: all) and calls done at the max.
type limitSink struct {
	pipeline.Sink
	max  int64
	n    atomic.Int64
	done func()
}

func (l *limitSink) Publish(ctx context.Context, r *pipeline.Result) error {
	n := l.n.Add(1)
	if l.max > 0 && n > l.max {
		l.n.Add(-1)
		return nil
	}
	err := l.Sink.Publish(ctx, r)
	if l.max > 0 && n == l.max {
		l.done()
	}
	return err
}
