// Package app wires vigil's packages into the commands of cmd/vigil: the
// service (Run), one-shot detection (Detect), the downstream client (Tail)
// and the benchmark (Bench). It holds no state of its own between calls.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// BadInputError marks an error caused by the user's input (config, flags,
// model file, URL) rather than by the environment; cmd/vigil exits with
// status 2 for it.
type BadInputError struct{ Err error }

func (e *BadInputError) Error() string { return e.Err.Error() }
func (e *BadInputError) Unwrap() error { return e.Err }

func badInput(err error) error {
	if err == nil {
		return nil
	}
	return &BadInputError{Err: err}
}

// NewLogger builds the zap logger for a log config, writing to w.
func NewLogger(c config.Log, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	enc := zapcore.NewJSONEncoder(ec)
	if c.Format != "json" {
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

// engines opens one engine per distinct model (shared by the streams that
// use it: the engine serialises calls) and closes them all on close.
type engines struct {
	byName map[string]*infer.Engine
	cfg    *config.Config
	scs    []*decode.Scaler
}

func openRuntime(c *config.Config) error {
	if err := infer.InitRuntime(c.Infer.ORTLibrary); err != nil {
		return badInput(err)
	}
	return nil
}

// logLoaded logs the runtime and each engine once everything opened, so a
// start-up error is the only line a failed start prints.
func (e *engines) logLoaded(log *zap.Logger) {
	log.Info("ONNX Runtime loaded", zap.String("version", infer.RuntimeVersion()),
		zap.String("library", e.cfg.Infer.ORTLibrary), zap.String("provider", "cpu"))
	for _, eng := range e.byName {
		w, h := eng.InputSize()
		log.Info("model loaded", zap.String("model", eng.Model()), zap.String("adapter", eng.Adapter()),
			zap.Int("input_width", w), zap.Int("input_height", h))
	}
}

func (e *engines) get(ref string) (*infer.Engine, error) {
	m, err := e.cfg.ResolveModel(ref)
	if err != nil {
		return nil, badInput(err)
	}
	if eng, ok := e.byName[m.Name]; ok {
		return eng, nil
	}
	sc := decode.NewScaler()
	eng, err := infer.Open(infer.Options{
		Name: m.Name, Path: m.File, Adapter: m.Adapter, ScoreThreshold: m.ScoreThreshold,
		IoUThreshold: m.IoUThreshold, IntraOpThreads: e.cfg.Infer.IntraOpThreads, Resizer: sc,
	})
	if err != nil {
		sc.Close()
		return nil, badInput(err)
	}
	e.byName[m.Name] = eng
	e.scs = append(e.scs, sc)
	return eng, nil
}

func (e *engines) close() {
	for _, eng := range e.byName {
		_ = eng.Close()
	}
	for _, sc := range e.scs {
		sc.Close()
	}
}

// Run is `vigil run`: it serves every configured stream until ctx ends,
// then stops in order: ingest and inference (RunStream returns after its
// goroutines), the NATS sink (flush, so no published frame is lost), the
// embedded server, the metrics endpoint, and the engines last (nothing can
// call them any more). Progress
// lines go to progress every Pipeline.ProgressInterval. ready, when not nil,
// is called with the NATS client URL and the metrics address once NATS,
// the engines and the metrics endpoint are up, just before the streams
// start (so a subscriber set up in ready sees every frame).
func Run(ctx context.Context, c config.Config, log *zap.Logger, progress io.Writer, ready func(natsURL, metricsAddr string)) error {
	decode.SetLogger(log)
	if err := openRuntime(&c); err != nil {
		return err
	}
	engs := &engines{byName: map[string]*infer.Engine{}, cfg: &c}
	defer engs.close()
	// Open every engine before any stream starts: a bad model is a start-up
	// error (exit 2), not a failure at the first frame.
	for _, s := range c.Streams {
		if _, err := engs.get(s.Model); err != nil {
			return fmt.Errorf("streams[%s].model: %w", s.ID, err)
		}
	}
	engs.logLoaded(log)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := pipeline.NewMetrics(reg)
	metricsAddr := ""
	if c.Metrics.Listen != "off" {
		ln, err := net.Listen("tcp", c.Metrics.Listen)
		if err != nil {
			return fmt.Errorf("metrics.listen %s: %w", c.Metrics.Listen, err)
		}
		metricsAddr = ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		log.Info("metrics endpoint", zap.String("url", "http://"+metricsAddr+"/metrics"))
	}

	natsURL := c.NATS.URL
	var ns *server.Server
	if natsURL == "" {
		var err error
		if ns, err = natsserver.Start(c.NATS.Listen); err != nil {
			return err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		natsURL = ns.ClientURL()
		log.Info("embedded NATS server started", zap.String("url", natsURL))
	}
	sink, err := sinks.DialNATS(sinks.NATSOptions{URL: natsURL, Prefix: c.NATS.SubjectPrefix, Logger: log.Named("nats")})
	if err != nil {
		return err
	}
	defer func() {
		if err := sink.Close(); err != nil {
			log.Warn("closing NATS", zap.Error(err))
		}
	}()

	stats := pipeline.NewStats()
	srcs := make([]*decode.Source, len(c.Streams))
	for i, s := range c.Streams {
		src, err := decode.New(decode.Options{
			URL: s.URL, StreamID: s.ID, Transport: s.Transport, Realtime: s.Realtime, Loop: s.Loop,
			OpenTimeout: s.OpenTimeout.Duration, StallTimeout: s.StallTimeout.Duration,
			Threads: s.DecodeThreads, Logger: log.With(zap.String("stream", s.ID)),
		})
		if err != nil {
			return badInput(fmt.Errorf("streams[%s].url: %w", s.ID, err))
		}
		srcs[i] = src
	}
	if ready != nil {
		ready(natsURL, metricsAddr)
	}
	var wg sync.WaitGroup
	for i, s := range c.Streams {
		slog := log.With(zap.String("stream", s.ID))
		src := srcs[i]
		eng, _ := engs.get(s.Model) // opened above
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pipeline.RunStream(ctx, pipeline.StreamConfig{
				ID: s.ID, Source: src, Engine: eng, Sink: sink, QueueSize: s.QueueSize,
				Live: src.Live(), Logger: slog, Metrics: metrics, Stats: stats,
			})
			if err != nil {
				slog.Error("stream stopped", zap.Error(err))
			}
		}()
		slog.Info("stream started", zap.String("url", decode.RedactURL(s.URL)), zap.String("model", eng.Model()))
	}

	if iv := c.Pipeline.ProgressInterval; iv != nil && iv.Duration > 0 && progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(iv.Duration)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					pipeline.WriteProgress(progress, stats.Snapshot())
				}
			}
		}()
	}
	<-ctx.Done()
	log.Info("shutting down")
	wg.Wait()
	return nil
}

// IsBadInput reports whether err is (or wraps) a BadInputError.
func IsBadInput(err error) bool {
	var b *BadInputError
	return errors.As(err, &b)
}
