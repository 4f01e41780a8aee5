package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/analytics"
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
	// Analytics, when set, is a file holding one analytics: block
	// (config.LoadAnalytics): the stream's analytics run as in vigil run,
	// and their events and counts are written between the results.
	Analytics string
}

// Detect is `vigil detect`: it runs one source through one model and writes
// one JSON line (sinks.Message) per frame to out, then returns. Files are
// processed losslessly (every frame); live sources drop the oldest frames
// when inference falls behind, like the service does. With o.Analytics,
// the analytics stage runs on every frame as in vigil run, and each event
// (schema vigil.analytics/v1) is a line of its own just before the
// results line of the frame it was seen in; counts (vigil.counts/v1) come
// on a change at most once per second of video, and once more at the end
// after the track_end events. A bad file, or a class the model does not
// have, is bad input naming the field.
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
	var acfg *analytics.Config
	if o.Analytics != "" {
		a, err := config.LoadAnalytics(o.Analytics)
		if err != nil {
			return cli.BadInput(fmt.Errorf("--analytics %w", err))
		}
		acfg = a
	}
	decode.SetLogger(log)
	src, err := decode.New(decode.Options{URL: o.Source, StreamID: o.StreamID, Realtime: o.Realtime, Logger: log})
	if err != nil {
		return cli.BadInput(fmt.Errorf("source: %w", err))
	}
	// A file that is not there is bad input, as a missing --model is (it
	// failed as the decoder's open, status 1); one that does not decode
	// stays a runtime failure.
	if p, ok := decode.LocalPath(o.Source); ok {
		if _, err := os.Stat(p); err != nil {
			return cli.BadInput(fmt.Errorf("source: %w", err))
		}
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
	engs.LogLoaded(log) // the provider and, under format auto, the format taken
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := sinks.NewJSONLines(out)
	sink := &limitSink{Sink: lines, max: int64(o.MaxFrames), done: cancel}
	sc := pipeline.StreamConfig{
		ID: o.StreamID, Source: src, Engine: eng, Sink: sink, Live: false, Lossless: !src.Live(), Logger: log,
	}
	if acfg != nil {
		sp := registry.Spec{Model: o.Model, Analytics: acfg}
		if fe := sp.CheckClasses(func(m string) ([]string, error) { return engines.Labels(&c, m) }); fe != nil {
			return cli.BadInput(fmt.Errorf("--analytics %s: %w", o.Analytics, fe))
		}
		an := newStreamAnalytics(o.StreamID, acfg, jsonAnalytics{lines: lines, full: sink.full}, nil, log)
		an.ptsClock = true // files go faster than real time: a second of video
		sc.Analyzer = an
	}
	err = pipeline.RunStream(ctx, sc)
	if err != nil {
		return err
	}
	if n := sink.n.Load(); n == 0 {
		return fmt.Errorf("no frame was processed from %s", decode.RedactURL(o.Source))
	}
	return nil
}

// jsonAnalytics writes a stream's events and counts as JSON lines between
// the results; once full reports that the results reached --max-frames,
// only what the stream's end sends (track_end, the last counts) is
// written.
type jsonAnalytics struct {
	lines *sinks.JSONLines
	full  func() bool
}

func (j jsonAnalytics) event(e *analytics.Event, final bool) error {
	if !final && j.full() {
		return nil
	}
	return j.lines.WriteJSON(e)
}

func (j jsonAnalytics) counts(c *analytics.Counts, final bool) error {
	if !final && j.full() {
		return nil
	}
	return j.lines.WriteJSON(c)
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

// full reports whether max results were passed (never without a max).
func (l *limitSink) full() bool { return l.max > 0 && l.n.Load() >= l.max }
