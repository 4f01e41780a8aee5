// Package live serves pictures of the streams: the latest frame as a JPEG
// (with the overlay drawn on request), live views at a bounded rate per
// viewer, and event snapshots in a NATS object store (Snapshots).
//
// Nothing is encoded unless someone watches, and nothing is encoded on a
// pipeline goroutine. Each stream has a pipeline.Tap: while nobody
// watches, it costs the stream's worker one atomic load per frame. While
// someone does, the stream's feed goroutine asks the tap for a frame when
// a viewer is due (at most the viewer's rate), the worker copies that
// frame's pixels and hands them over without blocking (the feed keeps the
// newest one only), and the feed draws and encodes each variant once for
// every viewer due. Each viewer holds one frame: a client slower than its
// rate gets the newest frame when it is ready for one, and the frames in
// between are skipped and counted; it can delay nothing but itself.
//
//	worker ──Tap (copy, 1 slot)──▶ feed (draw, encode) ──1 slot each──▶ viewers (HTTP/WebSocket writers)
package live

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/pipeline"
)

// Options configure a Hub. Zero values take the defaults.
type Options struct {
	// DefaultFPS is a viewer's rate when it asks for none (default 5).
	DefaultFPS float64
	// MaxFPS caps a viewer's rate (live.max_fps_per_viewer; default 15).
	MaxFPS float64
	// MaxViewers caps the viewers watching at once across streams
	// (live.max_viewers; default 16): with MaxFPS it bounds the pictures
	// encoded per second.
	MaxViewers int
	// Quality is the JPEG quality, 1-100 (live.jpeg_quality; default 80).
	Quality int
	// Encoders is the number of goroutines that draw and encode pictures,
	// live views and event snapshots together (live.encoders; default 1):
	// each holds a Go processor for milliseconds at a time, which the
	// pipeline's goroutines need, and runs on an OS thread of its own at a
	// lower priority (nice 10 on Linux), so that the streams' threads get
	// the cores first.
	Encoders int
	// Snapshots, when set, receives the frames marked for event snapshots.
	Snapshots *Snapshots
	// Registerer receives the metrics (nil: unregistered).
	Registerer prometheus.Registerer
	Logger     *zap.Logger
}

// Errors of Watch.
var (
	// ErrTooManyViewers: MaxViewers are watching (the API answers 503).
	ErrTooManyViewers = errors.New("too many viewers")
	// ErrClosed: the hub was closed (vigil is stopping).
	ErrClosed = errors.New("live pictures are shutting down")
)

// Hub serves the pictures of every stream; safe for concurrent use.
type Hub struct {
	o   Options
	m   *metrics
	log *zap.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	feeds   map[string]*feed
	viewers int

	// jobs go to the encoders (Encoders goroutines).
	jobs chan *job
}

// New returns a hub; Close stops its goroutines.
func New(o Options) *Hub {
	if o.DefaultFPS <= 0 {
		o.DefaultFPS = 5
	}
	if o.MaxFPS <= 0 {
		o.MaxFPS = 15
	}
	o.MaxFPS = max(o.MaxFPS, MinFPS)
	o.DefaultFPS = min(o.DefaultFPS, o.MaxFPS)
	if o.MaxViewers <= 0 {
		o.MaxViewers = 16
	}
	if o.Quality <= 0 || o.Quality > 100 {
		o.Quality = 80
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Encoders <= 0 {
		o.Encoders = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{o: o, m: newMetrics(o.Registerer), log: o.Logger, ctx: ctx, cancel: cancel, feeds: map[string]*feed{}, jobs: make(chan *job)}
	if o.Snapshots != nil {
		// Set before its Run starts (see Snapshots.Run).
		o.Snapshots.m, o.Snapshots.encode = h.m, h.encode
	}
	h.wg.Add(o.Encoders)
	for range o.Encoders {
		go h.encoder()
	}
	return h
}

// job is one picture to draw and encode: run, then done is closed.
type job struct {
	run  func()
	done chan struct{}
}

// encoder runs jobs until the hub closes, on an OS thread of its own at
// a lower priority (lowerPriority). It never unlocks the thread, so the
// thread ends with it.
func (h *Hub) encoder() {
	defer h.wg.Done()
	runtime.LockOSThread()
	if err := lowerPriority(); err != nil {
		h.log.Debug("encoder runs at the process's priority", zap.Error(err))
	}
	for {
		select {
		case <-h.ctx.Done():
			return
		case j := <-h.jobs:
			j.run()
			close(j.done)
		}
	}
}

// encode runs fn on an encoder and waits for it; false when the hub
// closed first (fn may then still run: the caller must leave what fn
// uses alone).
func (h *Hub) encode(fn func()) bool {
	j := &job{run: fn, done: make(chan struct{})}
	select {
	case h.jobs <- j:
	case <-h.ctx.Done():
		return false
	}
	select {
	case <-j.done:
		return true
	case <-h.ctx.Done():
		return false
	}
}

// Limits returns the default and the largest rate of a viewer, in frames
// per second.
func (h *Hub) Limits() (defaultFPS, maxFPS float64) { return h.o.DefaultFPS, h.o.MaxFPS }

// Close ends every view (their Next returns ErrClosed) and waits for the
// feeds' goroutines.
func (h *Hub) Close() {
	h.mu.Lock()
	h.cancel()
	h.mu.Unlock()
	h.wg.Wait()
}

// feed returns stream id's feed, made at the first call.
func (h *Hub) feed(id string) *feed {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[id]
	if f == nil {
		f = &feed{id: id, h: h, ready: make(chan struct{}, 1), wake: make(chan struct{}, 1), viewers: map[*Viewer]struct{}{}}
		f.tap = pipeline.NewTap(f.deliver)
		h.feeds[id] = f
	}
	return f
}

// Tap returns stream id's tap, for its pipeline.StreamConfig: the same
// one for every run of the stream.
func (h *Hub) Tap(id string) *pipeline.Tap { return h.feed(id).tap }

// SetGeometry sets the zones and lines drawn on stream id's annotated
// pictures (GeometryOf its analytics; nil: none).
func (h *Hub) SetGeometry(id string, g *Geometry) { h.feed(id).geom.Store(g) }

// MinFPS is the slowest rate a view is served at, in frames per second (a
// frame every 10 s): a lower ?fps= is raised to it, so that a tiny rate
// cannot overflow the viewer's interval (which served every frame).
const MinFPS = 0.1

// Watch starts a view of stream id at fps frames per second (0: the
// default; within MinFPS and MaxFPS), annotated or not; the caller takes
// frames with Next and must Close it. A rate outside the bounds is moved
// to the nearer one. Errors: ErrTooManyViewers, ErrClosed.
func (h *Hub) Watch(id string, fps float64, annotate bool) (*Viewer, error) {
	if fps <= 0 {
		fps = h.o.DefaultFPS
	}
	fps = max(min(fps, h.o.MaxFPS), MinFPS)
	f := h.feed(id)
	v := &Viewer{f: f, interval: time.Duration(float64(time.Second) / fps), annotate: annotate, ready: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.ctx.Err() != nil {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if h.viewers >= h.o.MaxViewers {
		h.mu.Unlock()
		h.m.refused.Inc()
		return nil, ErrTooManyViewers
	}
	h.viewers++
	h.m.viewers.Set(float64(h.viewers))
	f.add(v) // under h.mu: Close cannot be waiting yet
	h.mu.Unlock()
	return v, nil
}

// Frame is one picture for a viewer.
type Frame struct {
	// JPEG is the picture, at the stream's resolution; read-only (it is
	// shared by the viewers of the frame).
	JPEG []byte
	// Message is the frame's detections message exactly as published on
	// NATS (nil when the sink did not say); read-only.
	Message []byte
	// Result is the frame's result (seq, size, detections); read-only.
	Result *pipeline.Result
	// Served is when the feed took the frame for its viewers due then
	// (before drawing and encoding it): a viewer's frames are served at
	// least its interval apart, less dueSlack.
	Served time.Time
}

// Viewer is one view of a stream; see Hub.Watch.
type Viewer struct {
	f        *feed
	interval time.Duration
	annotate bool
	next     time.Time // when it is due again (the feed's, under f.mu)

	slot   atomic.Pointer[viewerFrame]
	ready  chan struct{}
	closed sync.Once
}

// viewerFrame is a frame or why there is none.
type viewerFrame struct {
	fr  *Frame
	err error
}

// Next returns the newest frame not returned yet, waiting for one until
// ctx ends. Errors: ctx's, ErrClosed, or the stream's reason for having no
// picture (wrapping pipeline.ErrNoPicture: a GPU-decoded stream).
func (v *Viewer) Next(ctx context.Context) (*Frame, error) {
	for {
		if vf := v.slot.Swap(nil); vf != nil {
			return vf.fr, vf.err
		}
		select {
		case <-v.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-v.f.h.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// Close ends the view; idempotent.
func (v *Viewer) Close() {
	v.closed.Do(func() {
		v.f.remove(v)
		h := v.f.h
		h.mu.Lock()
		h.viewers--
		h.m.viewers.Set(float64(h.viewers))
		h.mu.Unlock()
	})
}

// offer hands the viewer a frame, replacing one it has not taken.
func (v *Viewer) offer(vf *viewerFrame, m *metrics) {
	if old := v.slot.Swap(vf); old != nil && old.fr != nil {
		m.skipped.Inc()
	}
	select {
	case v.ready <- struct{}{}:
	default:
	}
}

// feed is one stream's: its tap, the newest frame the tap handed over,
// and the goroutine that serves its viewers while it has any.
type feed struct {
	id   string
	h    *Hub
	tap  *pipeline.Tap
	geom atomic.Pointer[Geometry]

	// active is true while the goroutine runs; slot holds the newest frame
	// handed over since it last took one, and ready says there is one.
	active atomic.Bool
	slot   atomic.Pointer[pipeline.TapFrame]
	ready  chan struct{}

	mu      sync.Mutex
	viewers map[*Viewer]struct{}
	running bool
	wake    chan struct{} // the viewers changed
}

// deliver is the tap's consumer, on the stream's worker goroutine: it
// never blocks.
func (f *feed) deliver(tf *pipeline.TapFrame) {
	active := f.active.Load()
	if len(tf.Marks) > 0 && f.h.o.Snapshots != nil {
		own := tf
		if active && tf.Picture != nil {
			// Both draw on the picture: the viewers get a copy (a frame
			// that is watched and has an event: rare).
			cp := *tf
			cp.Picture = pipeline.NewPicture(tf.Picture.Image.Rect.Dx(), tf.Picture.Image.Rect.Dy())
			copyPicture(cp.Picture, tf.Picture)
			own = &cp
		}
		f.h.o.Snapshots.offer(tf, f.h.m)
		tf = own
	}
	if !active {
		return
	}
	if old := f.slot.Swap(tf); old != nil && old.Picture != nil {
		old.Picture.Free() // not taken: nobody else holds it
	}
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

func (f *feed) add(v *Viewer) {
	f.mu.Lock()
	f.viewers[v] = struct{}{}
	start := !f.running
	if start {
		f.running = true
		f.active.Store(true)
		f.h.wg.Add(1)
	}
	f.mu.Unlock()
	if start {
		go f.run()
	}
	f.poke()
}

func (f *feed) remove(v *Viewer) {
	f.mu.Lock()
	delete(f.viewers, v)
	f.mu.Unlock()
	f.poke()
}

func (f *feed) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// retry is how long the feed waits for a requested frame before asking
// again (a stream restarted meanwhile lost the request with its worker).
const retry = time.Second

// run serves the viewers until the last one leaves or the hub closes.
func (f *feed) run() {
	defer f.h.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, ok := f.due()
		if !ok {
			return
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-f.h.ctx.Done():
				f.stop()
				return
			case <-f.wake:
			case <-timer.C:
			}
			continue
		}
		f.tap.Request()
		timer.Reset(retry)
		select {
		case <-f.h.ctx.Done():
			f.stop()
			return
		case <-timer.C:
			continue
		case <-f.ready:
		}
		if tf := f.slot.Swap(nil); tf != nil {
			f.serve(tf)
		}
	}
}

// due returns how long until the next viewer is due (≤ 0: one is), or
// false when none is left, in which case the feed has stopped.
func (f *feed) due() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.viewers) == 0 {
		f.running = false
		f.active.Store(false)
		f.slot.Store(nil)
		return 0, false
	}
	var next time.Time
	for v := range f.viewers {
		if next.IsZero() || v.next.Before(next) {
			next = v.next
		}
	}
	return time.Until(next), true
}

// stop marks the feed stopped when the hub closes.
func (f *feed) stop() {
	f.mu.Lock()
	f.running = false
	f.active.Store(false)
	f.slot.Store(nil)
	f.mu.Unlock()
}

// dueSlack lets a viewer due within it take this frame rather than wait
// for the next one (timers fire late by about this much).
const dueSlack = 10 * time.Millisecond

// serve draws and encodes tf once per variant that a due viewer wants,
// and hands it to each of them.
func (f *feed) serve(tf *pipeline.TapFrame) {
	now := time.Now()
	var due []*Viewer
	plain, annotated := false, false
	f.mu.Lock()
	for v := range f.viewers {
		if v.next.Sub(now) <= dueSlack {
			due = append(due, v)
			v.next = now.Add(v.interval)
			plain, annotated = plain || !v.annotate, annotated || v.annotate
		}
	}
	f.mu.Unlock()
	if len(due) == 0 {
		return
	}
	if tf.Err != nil || tf.Picture == nil {
		err := tf.Err
		if err == nil {
			err = pipeline.ErrNoPicture
		}
		for _, v := range due {
			v.offer(&viewerFrame{err: err}, f.h.m)
		}
		return
	}
	var frames [2]*Frame // plain, annotated
	geom := f.geom.Load()
	if !f.h.encode(func() {
		fullRange(tf.Picture)
		if plain {
			frames[0] = &Frame{JPEG: f.h.timed(VariantPlain, func() []byte { return encode(tf.Picture.Image, f.h.o.Quality) }), Message: tf.Message, Result: &tf.Result}
		}
		if annotated {
			frames[1] = &Frame{JPEG: f.h.timed(VariantAnnotated, func() []byte {
				img := tf.Picture.Image
				if plain {
					img = cloneYCbCr(img)
				}
				Annotate(img, tf.Result.Detections, geom, nil)
				return encode(img, f.h.o.Quality)
			}), Message: tf.Message, Result: &tf.Result}
		}
	}) {
		return // closing
	}
	tf.Picture.Free()
	for _, fr := range frames {
		if fr != nil {
			fr.Served = now
		}
	}
	for _, v := range due {
		fr := frames[0]
		if v.annotate {
			fr = frames[1]
		}
		v.offer(&viewerFrame{fr: fr}, f.h.m)
	}
}

// timed runs enc, counting and timing it as variant.
func (h *Hub) timed(variant string, enc func() []byte) []byte {
	t := time.Now()
	b := enc()
	h.m.encodeS.WithLabelValues(variant).Observe(time.Since(t).Seconds())
	h.m.encoded.WithLabelValues(variant).Inc()
	return b
}
