package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"
)

// StreamConfig wires one stream. Source, Engine and Sink are required.
type StreamConfig struct {
	// ID is the stream id, used in subjects, metric labels and logs.
	ID     string
	Source Source
	Engine Engine
	Sink   Sink
	// QueueSize bounds the frames waiting for the engine (default 4).
	QueueSize int
	// Live sources (cameras, network URLs) are reopened after they end or
	// fail, with capped exponential backoff plus jitter; files are not.
	Live bool
	// Lossless makes the source wait for room in the queue instead of
	// dropping the oldest frame: for offline processing of files, where
	// every frame must be processed and latency does not matter.
	Lossless bool
	// BackoffInitial and BackoffMax bound the reconnect delay
	// (defaults 1 s and 30 s). The delay doubles per failed attempt and is
	// reset once a connection delivered frames.
	BackoffInitial, BackoffMax time.Duration
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Metrics defaults to unregistered collectors.
	Metrics *Metrics
	// Stats, when set, receives the numbers for the progress line.
	Stats *Stats
}

// RunStream runs one stream until its source ends (a non-looping file:
// returns nil), fails for good (a non-live source's error is returned) or
// ctx is cancelled (returns nil). Frames already queued when the source ends
// are still processed; on cancellation they are released unprocessed.
// Every goroutine it starts has returned when it returns.
func RunStream(ctx context.Context, c StreamConfig) error {
	if c.Source == nil || c.Engine == nil || c.Sink == nil {
		return fmt.Errorf("pipeline: stream %q: source, engine and sink are required", c.ID)
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 4
	}
	if c.BackoffInitial <= 0 {
		c.BackoffInitial = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	s := &stream{c: c, q: NewQueue(c.QueueSize), m: c.Metrics.forStream(c.ID), log: c.Logger}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.work(ctx)
	}()
	s.ctx = ctx
	err := s.ingest(ctx)
	s.q.Close()
	wg.Wait()
	for _, f := range s.q.Drain() { // left over after cancellation
		f.Image.Release()
	}
	return err
}

type stream struct {
	c   StreamConfig
	q   *Queue
	m   *streamMetrics
	log *zap.Logger
	got bool // the current connection delivered a frame (ingest goroutine only)
	ctx context.Context
}

// ingest runs the source, reconnecting live sources, until it is done.
func (s *stream) ingest(ctx context.Context) error {
	delay := s.c.BackoffInitial
	for attempt := 1; ; attempt++ {
		s.got = false
		err := s.c.Source.Run(ctx, s.emit)
		if ctx.Err() != nil {
			return nil
		}
		if !s.c.Live {
			if errors.Is(err, io.EOF) || err == nil {
				s.log.Info("source ended")
				return nil
			}
			return err
		}
		if s.got {
			delay, attempt = s.c.BackoffInitial, 1
		}
		// Full jitter on the upper half: [delay/2, delay).
		wait := delay/2 + rand.N(delay/2+1)
		s.log.Warn("source stopped; reconnecting", zap.Error(err), zap.Int("attempt", attempt), zap.Duration("in", wait))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		delay = min(2*delay, s.c.BackoffMax)
	}
}

// emit is the Source's callback: count, then enqueue without blocking.
func (s *stream) emit(f *Frame) {
	s.got = true
	s.m.decoded.Inc()
	if s.c.Stats != nil {
		s.c.Stats.addIn(s.c.ID)
	}
	if s.c.Lossless {
		if !s.q.PushWait(s.ctx, f) {
			f.Image.Release() // shutting down
		}
	} else if old := s.q.Push(f); old != nil {
		old.Image.Release()
		s.dropped(StageQueue, DropQueueFull)
	}
	s.m.queueDepth.Set(float64(s.q.Len()))
}

func (s *stream) dropped(stage string, r DropReason) {
	s.m.drop(stage, r)
	if s.c.Stats != nil {
		s.c.Stats.addDrop(s.c.ID)
	}
}

// work is the consumer: engine, then sink, one frame at a time.
func (s *stream) work(ctx context.Context) {
	var res Result
	var dets []Detection
	var errLog rateLimited
	for {
		f, ok := s.q.Pop(ctx)
		if !ok {
			return
		}
		s.m.queueDepth.Set(float64(s.q.Len()))
		st := StageTimes{Decode: f.Decoded.Sub(f.Arrival), Queue: time.Since(f.Decoded)}
		var err error
		dets, err = s.c.Engine.Detect(f.Image, &st, dets[:0])
		w, h := f.Image.Width(), f.Image.Height()
		f.Image.Release()
		if err != nil {
			s.dropped(StageInfer, DropInferError)
			errLog.log(s.log, "inference failed", err)
			continue
		}
		res = Result{
			StreamID: s.c.ID, Seq: f.Seq, PTS: f.PTS, Keyframe: f.Keyframe,
			Capture: f.Arrival, Width: w, Height: h, Model: s.c.Engine.Model(),
			Detections: dets, Stages: st, Ready: time.Now(),
		}
		if err := s.c.Sink.Publish(ctx, &res); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.dropped(StagePublish, DropPublishError)
			errLog.log(s.log, "publish failed", err)
			continue
		}
		s.m.processed.Inc()
		s.m.detections.Add(float64(len(dets)))
		s.m.observe(&res.Stages)
		if s.c.Stats != nil {
			s.c.Stats.addOut(s.c.ID, res.Stages.Total, len(dets))
		}
	}
}

// rateLimited logs at most one line per second and counts the rest, so a
// failing engine cannot flood the log with one line per frame.
type rateLimited struct {
	last       time.Time
	suppressed int
}

func (r *rateLimited) log(l *zap.Logger, msg string, err error) {
	if time.Since(r.last) < time.Second {
		r.suppressed++
		return
	}
	l.Error(msg, zap.Error(err), zap.Int("suppressed", r.suppressed))
	r.last, r.suppressed = time.Now(), 0
}
