package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"go.uber.org/zap"
)

// StreamConfig wires one stream. Source, Engine and Sink are required.
type StreamConfig struct {
	// ID is the stream id, used in subjects, metric labels and logs.
	ID string
	// Epoch names this run of the stream (see NewEpoch); RunStream makes
	// one when it is empty. It goes into every result and event.
	Epoch string
	// Labels are the stream's free-form key/value pairs (the registry
	// spec's labels), copied into every result; nil for none. Not modified.
	Labels map[string]string
	Source Source
	Engine Engine
	Sink   Sink
	// Analyzer, when set, runs on every processed frame between the engine
	// and the sink (see Analyzer); Close is called when the stream ends.
	Analyzer Analyzer
	// Tap, when set, hands copies of frames to a consumer when asked
	// (see Tap); nil or unasked, it costs one atomic load per frame.
	Tap *Tap
	// QueueSize bounds the frames waiting for the engine (default 4).
	QueueSize int
	// Live sources (cameras, network URLs) are reopened after they end or
	// fail, with capped exponential backoff plus jitter; files are not.
	Live bool
	// FPSLimit, when positive, is the admission token bucket's rate in
	// frames per second (by arrival time) and FPSBurst its size (default
	// 1); frames without a token are skipped at ingest (SkipRateLimit).
	FPSLimit float64
	FPSBurst int
	// Budget is the per-frame latency budget, arrival to publish; 0
	// disables deadline drops. A frame that can no longer make it is
	// dropped (reason deadline) at the earliest stage where that is known:
	// at ingest, from the queue ahead of it and the measured service and
	// publish times; when it leaves the queue, from the service and publish
	// times. A frame already processed is published, marked over budget.
	Budget time.Duration
	// Batcher, when set, is shared by the streams of one model and takes
	// precedence over Gate: frames from all of them are batched into
	// fixed-shape executions (see Batcher).
	Batcher *Batcher
	// Gate, when set, is shared by every stream of the same engine: it
	// serves frames earliest deadline first and refuses, at the moment a
	// frame would start, one that can no longer make its deadline.
	Gate *Gate
	// Light, when set, is the lighter model (a model's degrade_to) that
	// the stream runs instead of Engine while Status.SetLight is on: the
	// governor's first step under sustained load. The switch applies from
	// the next frame the worker takes; the source, queue, analytics and
	// epoch go on, so track ids do not reset, and each Result names the
	// model that produced it.
	Light *Route
	// StaleAfter (live sources; default 2 s, negative disables) drops
	// frames that arrive more than this far behind the stream's timeline,
	// judged by arrival − PTS against its minimum on this connection. A
	// frame that starts a new timeline (Frame.Discontinuity) re-anchors the
	// judgement at once; without that flag a frame stays stale for at most
	// StaleAfter of wall time before the timeline is re-anchored.
	StaleAfter time.Duration
	// DegradedFPS is the frame rate (by PTS) kept while the stream is
	// degraded (Status.Degraded, set by the supervisor's governor); the
	// rest is skipped (SkipDegraded). Default 2.
	DegradedFPS float64
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
	// Status, when set, tracks the stream's state and live numbers.
	Status *Status
	// OnEvent, when set, is called on every state change, from the
	// stream's ingest goroutine; it must not block for long.
	OnEvent func(Event)
}

// Route is an engine and the way frames reach it: through Batcher when
// set, else through Gate when set, else by calling Engine directly (as
// StreamConfig's fields of those names).
type Route struct {
	Engine  Engine
	Gate    *Gate
	Batcher *Batcher
}

// codecNamer is implemented by sources that know their codec (decode).
type codecNamer interface{ Codec() string }

// nominalRater is implemented by sources that know their stream's
// nominal frame rate in frames per second, 0 when unknown (decode).
type nominalRater interface{ NominalFPS() float64 }

// RunStream runs one stream until its source ends (a non-looping file:
// returns nil), fails for good (a non-live source's error, or a panic in
// the source, engine or sink, is returned as the stream's failure) or ctx
// is cancelled (returns nil). Frames already queued when the source ends are
// still processed; on cancellation they are released unprocessed. Every
// goroutine it starts has returned when it returns. State changes go to
// c.Status and c.OnEvent.
func RunStream(ctx context.Context, c StreamConfig) error {
	if c.Source == nil || c.Engine == nil || c.Sink == nil {
		return fmt.Errorf("pipeline: stream %q: source, engine and sink are required", c.ID)
	}
	if c.Light != nil && c.Light.Engine == nil {
		return fmt.Errorf("pipeline: stream %q: the light route has no engine", c.ID)
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
	if c.Status == nil {
		c.Status = NewStatus(StateStarting)
	}
	if c.Lossless {
		c.Budget = 0 // offline: every frame counts, latency does not
	}
	if c.DegradedFPS <= 0 {
		c.DegradedFPS = 2
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 2 * time.Second
	}
	if c.Epoch == "" {
		c.Epoch = NewEpoch()
	}
	c.Status.setEpoch(c.Epoch)
	if c.Light != nil {
		c.Status.setModels(c.Engine.Model(), c.Light.Engine.Model())
	} else {
		c.Status.setModels(c.Engine.Model(), "")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &stream{c: c, q: NewQueue(c.QueueSize), m: c.Metrics.forStream(c.ID), log: c.Logger, ctx: ctx,
		base: Route{Engine: c.Engine, Gate: c.Gate, Batcher: c.Batcher}}
	s.m.status = c.Status
	if c.FPSLimit > 0 {
		s.admit = rate.NewLimiter(rate.Limit(c.FPSLimit), max(c.FPSBurst, 1))
	}
	if cn, ok := c.Source.(codecNamer); ok {
		s.codec = cn.Codec
	}
	if nr, ok := c.Source.(nominalRater); ok {
		s.nominalFPS = nr.NominalFPS
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			if r := recover(); r != nil {
				cancel(recovered(r)) // the worker failed: stop this stream
			}
		}()
		s.work(ctx)
	}()
	err := s.ingest(ctx)
	s.q.Close()
	wg.Wait()
	for _, f := range s.q.Drain() { // left over after cancellation
		f.Image.Release()
	}
	s.closeAnalyzer()
	var pe *PanicError
	if cause := context.Cause(ctx); errors.As(cause, &pe) {
		err = pe
	}
	switch {
	case err != nil:
		if errors.As(err, &pe) {
			s.log.Error("stream panicked", zap.Any("panic", pe.Value), zap.String("stack", pe.Stack))
		}
		s.transition(StateFailed, err.Error(), 0)
	case s.ended:
		s.transition(StateStopped, "end of input", 0)
	default:
		reason := "shut down"
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
			reason = c.Error() // removed, disabled, reconfigured
		}
		s.transition(StateStopped, reason, 0)
	}
	return err
}

type stream struct {
	c     StreamConfig
	q     *Queue
	m     *streamMetrics
	log   *zap.Logger
	ctx   context.Context
	codec func() string
	// nominalFPS is the source's NominalFPS when it has one.
	nominalFPS func() float64
	// base is the route of StreamConfig's Engine, Gate and Batcher; the
	// worker takes it or StreamConfig.Light per frame (route).
	base Route
	got  bool // the current connection delivered a frame (ingest goroutine only)
	// clean: the current connection delivered a frame that is not
	// Frame.Corrupt (ingest goroutine only); see SkipBeforeKeyframe.
	clean bool
	ended bool // a non-live source reached its end
	stale staleness
	catch catchUp       // the burst after a connect (live sources)
	admit *rate.Limiter // nil: no admission limit
	// degPTS is the PTS of the last frame kept while degraded.
	degPTS    float64
	hasDegPTS bool
	// Measured costs for deadline prediction: service is one
	// Engine.Detect including any wait for a shared engine (used when the
	// engine is no LoadReporter), publish is Sink.Publish.
	service, publish EWMA
	lastServe        atomic.Int64 // unix ns of the last Detect without a gate
	// sinceLast counts drops, and skippedSince skips, since the last
	// published message.
	sinceLast, skippedSince atomic.Int64
	// breaks carries timeline breaks to the next published message.
	breaks breaks
	// reorder measures the connection's reorder delay; reorderWarned: the
	// stream warned that it is more than half the budget (once a stream).
	// Ingest goroutine only.
	reorder       reorderDelay
	reorderWarned bool
}

func (s *stream) transition(st State, reason string, attempt int) {
	s.m.state.set(st)
	// Starting is announced even though a new Status already says so;
	// every reconnect attempt is announced.
	if !s.c.Status.set(st, reason) && st != StateReconnecting && st != StateStarting {
		return
	}
	if s.c.OnEvent != nil {
		s.c.OnEvent(Event{StreamID: s.c.ID, Epoch: s.c.Epoch, Type: st, Time: time.Now(), Reason: reason, Attempt: attempt})
	}
}

// runSource runs the source once, turning a panic into a PanicError.
func (s *stream) runSource(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = recovered(r)
		}
	}()
	return s.c.Source.Run(ctx, s.emit)
}

// ingest runs the source, reconnecting live sources, until it is done.
func (s *stream) ingest(ctx context.Context) error {
	delay := s.c.BackoffInitial
	s.transition(StateStarting, "", 1)
	for attempt := 1; ; attempt++ {
		s.got = false
		s.clean = false
		s.stale = staleness{} // a new connection has a new timeline
		s.catch = catchUp{}   // and starts with a burst
		s.reorder = reorderDelay{}
		err := s.runSource(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var pe *PanicError
		if errors.As(err, &pe) {
			return pe
		}
		if !s.c.Live {
			if errors.Is(err, io.EOF) || err == nil {
				s.log.Info("source ended")
				s.ended = true
				return nil
			}
			return err
		}
		if s.got {
			delay, attempt = s.c.BackoffInitial, 1
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New("stream ended")
		}
		// Full jitter on the upper half: [delay/2, delay).
		wait := delay/2 + rand.N(delay/2+1)
		s.log.Warn("source stopped; reconnecting", zap.Error(err), zap.Int("attempt", attempt), zap.Duration("in", wait))
		s.transition(StateReconnecting, err.Error(), attempt)
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
	codec, fps := "", 0.0
	first := !s.got
	if first {
		s.got = true
		if s.codec != nil {
			codec = s.codec()
		}
		if s.nominalFPS != nil {
			fps = s.nominalFPS()
		}
	}
	// The frame is in the status (size, codec, nominal rate) before the
	// status says running, so a reader never sees a running stream
	// without them.
	s.c.Status.frameIn(f, codec, fps)
	if first {
		s.transition(StateRunning, "", 0)
	}
	s.m.decoded.Inc()
	if f.Discontinuity {
		s.m.discontinuities.Inc()
		s.breaks.add(f.Seq)
	}
	if s.c.Stats != nil {
		s.c.Stats.addIn(s.c.ID)
	}
	// Before any policy, so that both see every frame of the connection.
	burst := s.c.Live && !s.c.Lossless && s.catch.inBurst(f)
	s.observeReorder(f)

	if s.c.Live && !s.clean {
		if f.Corrupt {
			f.Image.Release()
			s.skipped(SkipBeforeKeyframe)
			return
		}
		s.clean = true
	}
	if s.c.Live && s.c.StaleAfter > 0 && s.stale.isStale(f, s.c.StaleAfter) {
		f.Image.Release()
		s.dropped(StageIngest, DropStale)
		return
	}
	if s.c.Status.degraded.Load() {
		if s.hasDegPTS && f.PTS >= s.degPTS && f.PTS-s.degPTS < 0.99/s.c.DegradedFPS {
			f.Image.Release()
			s.skipped(SkipDegraded)
			return
		}
		s.degPTS, s.hasDegPTS = f.PTS, true
	}
	// Decoded, not Arrival: frames leave the decoder in display order, so
	// arrivals of B-frame streams are not monotonic, which the token
	// bucket needs.
	if s.admit != nil && !s.admit.AllowN(f.Decoded, 1) {
		f.Image.Release()
		s.skipped(SkipRateLimit)
		return
	}
	if s.c.Budget > 0 {
		// Frames ahead of this one once it is queued (drop-oldest keeps at
		// most QueueSize-1 of the current ones; a burst frame replaces
		// them).
		ahead := min(s.q.Len(), s.c.QueueSize-1)
		if burst {
			ahead = 0
		}
		if s.late(f, s.predict(ahead+1)) {
			f.Image.Release()
			s.dropped(StageIngest, DropDeadline)
			return
		}
	}
	if burst {
		// The live edge first: frames of the burst still waiting are
		// older history than this one.
		for _, old := range s.q.Drain() {
			old.Image.Release()
			s.skipped(SkipCatchUp)
		}
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
	s.c.Status.queueDepth.Store(int64(s.q.Len()))
}

// predict returns the time until a frame with n-1 of this stream's frames
// ahead of it is published: the engine time of those n frames (plus, with
// a shared Gate, of every frame waiting at the gate) and a publish. With a
// Gate the per-frame time is the engine's own, refreshed by every stream,
// so a stream that drops everything is not stuck with a stale estimate.
// Zero before any cost is measured.
func (s *stream) predict(n int) time.Duration {
	r := s.route()
	if r.Batcher != nil {
		waiting, per := r.Batcher.Load()
		return time.Duration(waiting+n)*per + s.publish.Get()
	}
	if r.Gate != nil {
		waiting, per := r.Gate.Load()
		return time.Duration(waiting+n)*per + s.publish.Get()
	}
	if stale(&s.lastServe, time.Now()) {
		return 0
	}
	return time.Duration(n)*s.service.Get() + s.publish.Get()
}

// route is the route frames take now: StreamConfig.Light while the
// status says so (Status.SetLight), else the stream's own.
func (s *stream) route() *Route {
	if s.c.Light != nil && s.c.Status.light.Load() {
		return s.c.Light
	}
	return &s.base
}

// late reports whether f, needing rest more time, would miss its deadline
// (arrival + budget). Before any cost is measured nothing is predicted.
func (s *stream) late(f *Frame, rest time.Duration) bool {
	return rest > 0 && time.Now().Add(rest).After(s.deadline(f))
}

// deadline is when f must be published: its budget counts from when it
// could first leave the decoder, its arrival plus the part of its decoder
// hold that is the stream's reorder delay (Frame.wait; see reorder.go).
func (s *stream) deadline(f *Frame) time.Time { return f.Arrival.Add(f.wait + s.c.Budget) }

// dropped counts a lost frame (a fault); see DropReason.
func (s *stream) dropped(stage string, r DropReason) {
	s.sinceLast.Add(1)
	s.m.drop(stage, r)
	if s.c.Stats != nil {
		s.c.Stats.addDrop(s.c.ID)
	}
}

// skipped counts a frame left out by policy; see SkipReason. Skips raise
// no alert.
func (s *stream) skipped(r SkipReason) {
	s.skippedSince.Add(1)
	s.m.skip(r)
	if s.c.Stats != nil {
		s.c.Stats.addSkip(s.c.ID)
	}
}

// work is the consumer: engine, analyzer, then sink, one frame at a time.
func (s *stream) work(ctx context.Context) {
	var res Result
	var dets []Detection
	var errLog rateLimited
	last, remeasure := &s.base, false
	for {
		f, ok := s.q.Pop(ctx)
		if !ok {
			return
		}
		r := s.route()
		if r != last {
			// The other model costs another time per frame: the direct
			// path's estimate starts again from its first frame (a gate
			// or batcher keeps its own, per engine).
			last, remeasure = r, true
		}
		s.m.queueDepth.Set(float64(s.q.Len()))
		s.c.Status.queueDepth.Store(int64(s.q.Len()))
		if s.c.Budget > 0 && s.late(f, s.predict(1)) {
			f.Image.Release()
			s.dropped(StageQueue, DropDeadline)
			continue
		}
		st := StageTimes{Decode: f.Decoded.Sub(f.Arrival), Queue: time.Since(f.Decoded)}
		var deadline time.Time // zero: no budget
		if s.c.Budget > 0 {
			deadline = s.deadline(f)
		}
		var err error
		if r.Batcher != nil {
			dets, err = r.Batcher.Do(ctx, deadline, f.Image, &st, dets[:0])
			if errors.Is(err, ErrLate) {
				f.Image.Release()
				s.dropped(StageQueue, DropDeadline)
				continue
			}
			if ctx.Err() != nil {
				f.Image.Release()
				return
			}
		} else if r.Gate != nil {
			tq := time.Now()
			gerr := r.Gate.Do(ctx, deadline, s.publish.Get(), func() {
				st.Queue += time.Since(tq) // waiting for the shared engine
				dets, err = r.Engine.Detect(f.Image, &st, dets[:0])
			})
			if gerr != nil {
				f.Image.Release()
				if errors.Is(gerr, ErrLate) {
					s.dropped(StageQueue, DropDeadline)
					continue
				}
				return // ctx ended
			}
		} else {
			t0 := time.Now()
			wasStale := stale(&s.lastServe, t0) || remeasure
			remeasure = false
			dets, err = r.Engine.Detect(f.Image, &st, dets[:0])
			if wasStale {
				s.service.Reset(time.Since(t0))
			} else {
				s.service.Add(time.Since(t0))
			}
			s.lastServe.Store(time.Now().UnixNano())
		}
		w, h := f.Image.Width(), f.Image.Height()
		if err != nil {
			f.Image.Release()
			s.dropped(StageInfer, DropInferError)
			errLog.log(s.log, "inference failed", err)
			continue
		}
		res = Result{
			StreamID: s.c.ID, Epoch: s.c.Epoch, Labels: s.c.Labels, Seq: f.Seq, PTS: f.PTS, Keyframe: f.Keyframe, Corrupt: f.Corrupt,
			Capture: f.Arrival, Width: w, Height: h, Model: r.Engine.Model(),
			Detections: dets, Stages: st, Budget: s.c.Budget, ReorderWait: f.wait,
			DroppedSinceLast: int(s.sinceLast.Swap(0)), SkippedSinceLast: int(s.skippedSince.Swap(0)),
			Discontinuity: s.breaks.upTo(f.Seq),
		}
		if s.c.Analyzer != nil {
			ta := time.Now()
			if s.c.Analyzer.Analyze(&res) {
				res.Stages.Analytics = time.Since(ta)
			}
		}
		// After the analyzer, which may mark this frame (Tap.Mark); the
		// image is released once copied, before the publish.
		var pic *Picture
		var picErr error
		tapped := s.c.Tap.take()
		if tapped {
			pic, picErr = copyOf(f.Image)
			res.KeepMessage = true
		}
		f.Image.Release()
		res.Ready = time.Now()
		t1 := time.Now()
		err = s.c.Sink.Publish(ctx, &res)
		s.publish.Add(time.Since(t1))
		if err != nil {
			if tapped {
				s.c.Tap.rearm()
			}
			if ctx.Err() != nil {
				return
			}
			s.dropped(StagePublish, DropPublishError)
			errLog.log(s.log, "publish failed", err)
			continue
		}
		if tapped {
			s.c.Tap.hand(pic, picErr, &res)
		}
		s.breaks.reported(f.Seq)
		s.m.processed.Inc()
		if s.c.Budget > 0 && res.Stages.Total-res.ReorderWait > s.c.Budget {
			s.m.budgetMisses.Inc()
			s.c.Status.budgetMiss()
		}
		s.c.Status.frameOut(&res)
		s.m.detections.Add(float64(len(dets)))
		s.m.observe(&res.Stages)
		if s.c.Stats != nil {
			s.c.Stats.addOut(s.c.ID, res.Stages.Total, len(dets), res.Buffered)
		}
	}
}

// closeAnalyzer ends the stream's Analyzer once its worker has returned
// (its last events, e.g. track ends, go out before the stream's stopped
// event). A panic in it is logged: the stream has ended anyway.
func (s *stream) closeAnalyzer() {
	if s.c.Analyzer == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			pe := recovered(r)
			s.log.Error("analytics panicked while closing", zap.Any("panic", pe.Value), zap.String("stack", pe.Stack))
		}
	}()
	s.c.Analyzer.Close()
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

// staleness judges live frames against the stream's own timeline: offset =
// arrival − PTS is constant for a camera delivering in real time and grows
// for frames that were held up (e.g. 20 s of frames flushed at once after
// a network cut on RTSP/TCP).
type staleness struct {
	minOffset  time.Duration
	anchored   bool
	staleSince time.Time // first of the current run of stale frames
}

func (st *staleness) isStale(f *Frame, after time.Duration) bool {
	off := time.Duration(f.Arrival.UnixNano() - int64(f.PTS*1e9))
	// A new source timeline (a timestamp reset) is a new anchor: the old
	// offset says nothing about it.
	if !st.anchored || off < st.minOffset || f.Discontinuity {
		st.minOffset, st.anchored, st.staleSince = off, true, time.Time{}
		return false
	}
	if off-st.minOffset <= after {
		st.staleSince = time.Time{}
		return false
	}
	if st.staleSince.IsZero() {
		st.staleSince = f.Arrival
	}
	if f.Arrival.Sub(st.staleSince) > after { // PTS jumped back: re-anchor
		st.minOffset, st.staleSince = off, time.Time{}
		return false
	}
	return true
}

// The connect burst (catchUp) lasts while the stream keeps gaining on the
// wall clock: at least catchUpGain in every catchUpQuiet of stream time,
// i.e. while frames come more than ~7 % faster than real time. A live
// frame's decoder output time varies with its decode time (a few ms; an HD
// I-frame about 10 ms) and scheduling, but it cannot come earlier than the
// stream's own timeline allows, so once the buffer is drained the stream
// stops gaining. catchUpMax bounds the burst in stream time: FFmpeg buffers
// at most its analyzeduration while probing (decode sets 1 s for live
// sources; 5 s is FFmpeg's default); a source still ahead of real time
// after that is not catching up but faster than real time (such as a file
// over HTTP), and the queue's ordinary policy applies.
const (
	catchUpGain  = 20 * time.Millisecond
	catchUpQuiet = 300 * time.Millisecond
	catchUpMax   = 5 * time.Second
)

// catchUp recognises the burst that starts every connection to a live
// source: the packets the demuxer buffered while probing the stream
// (avformat_find_stream_info reads about analyzeduration of it) come out
// of av_read_frame at once, so their frames leave the decoder faster than
// real time. It follows offset = Decoded − PTS (Decoded, unlike Arrival,
// never goes back with B-frames), which falls while frames come faster
// than real time and stays flat once they come as the camera sends them.
// A decoder barely faster than real time ends the burst early; the rest of
// it then meets the queue's ordinary drop-oldest policy.
type catchUp struct {
	started, done bool
	firstPTS      float64       // s
	gainPTS       float64       // s, PTS of the frame that last gained catchUpGain
	anchor        time.Duration // offset at that frame
}

// inBurst reports whether f, the next frame of the connection, belongs to
// its connect burst. The first frame does: the queue it would clear holds
// at most frames of the previous connection, older still.
func (c *catchUp) inBurst(f *Frame) bool {
	if c.done {
		return false
	}
	off := time.Duration(f.Decoded.UnixNano() - int64(f.PTS*1e9))
	if !c.started {
		c.started, c.firstPTS, c.gainPTS, c.anchor = true, f.PTS, f.PTS, off
		return true
	}
	if off < c.anchor-catchUpGain {
		c.gainPTS, c.anchor = f.PTS, off
	}
	if f.PTS < c.firstPTS || f.PTS-c.gainPTS > catchUpQuiet.Seconds() || f.PTS-c.firstPTS > catchUpMax.Seconds() {
		c.done = true // drained, a timestamp step, or not a connect burst
		return false
	}
	return true
}

// EWMA is an exponentially weighted moving average of durations (weight
// 1/8 for each new sample, as TCP's SRTT in RFC 6298), safe for concurrent
// use (a lost update under a race only loses one sample). Zero until the
// first sample.
type EWMA struct{ v atomic.Int64 }

// Add records one sample.
func (e *EWMA) Add(d time.Duration) {
	old := e.v.Load()
	if old == 0 {
		e.v.Store(int64(d))
		return
	}
	e.v.Store(old + (int64(d)-old)/8)
}

// Reset replaces the average by one sample (after a stale period, the old
// average says nothing about the present).
func (e *EWMA) Reset(d time.Duration) { e.v.Store(int64(d)) }

// Get returns the average (0 before the first sample).
func (e *EWMA) Get() time.Duration { return time.Duration(e.v.Load()) }

// breaks carries the seqs of frames that started a new source timeline
// (Frame.Discontinuity) from ingest to the next published result, so that a
// message shows a break even when the frame that carried it was dropped.
// Frames reach the worker in seq order.
type breaks struct {
	mu   sync.Mutex
	seqs []uint64 // ascending, not yet reported
}

// maxBreaks bounds the breaks held while nothing is published (an engine
// that fails every frame of a source whose timestamps jump all the time):
// beyond it the second oldest is forgotten, so the next message is still
// flagged.
const maxBreaks = 256

// add records a frame that started a new timeline.
func (b *breaks) add(seq uint64) {
	b.mu.Lock()
	if len(b.seqs) >= maxBreaks {
		b.seqs = append(b.seqs[:1], b.seqs[2:]...)
	}
	b.seqs = append(b.seqs, seq)
	b.mu.Unlock()
}

// upTo reports whether a break at or before seq is not yet reported.
func (b *breaks) upTo(seq uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.seqs) > 0 && b.seqs[0] <= seq
}

// reported forgets the breaks at or before seq, published with it.
func (b *breaks) reported(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for n < len(b.seqs) && b.seqs[n] <= seq {
		n++
	}
	b.seqs = b.seqs[n:]
}
