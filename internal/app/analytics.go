package app

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/live"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// countsEvery is the least time between two counts messages of a stream
// (issue 15: "on a change, at most once a second per stream").
const countsEvery = time.Second

// streamAnalytics is the pipeline.Analyzer of one stream run: it runs an
// analytics.Stage on the stream's worker goroutine and sends what it finds
// to out (NATS, or JSON lines for vigil detect). The service hands it a
// new analytics config with set (hot reload) from its own goroutine; the
// worker applies it before the next frame it analyzes, so the Stage is
// only ever used from the worker.
type streamAnalytics struct {
	id      string
	out     analyticsOutput
	metrics *analyticsMetrics // nil: none (vigil detect)
	log     *zap.Logger
	// ptsClock makes the counts' rate limit count PTS time instead of
	// wall time: vigil detect processes files faster than real time, and
	// its output is then the same on every run.
	ptsClock bool
	// snaps, when set, is the stream's tap: events that carry a snapshot
	// (snapshotTypes) get its id and mark their frame for it.
	snaps *pipeline.Tap

	// pending is the config the worker has not applied yet; nil: none.
	pending atomic.Pointer[analyticsUpdate]
	// applied is the JSON of the config last handed to set or to
	// newStreamAnalytics (the service's goroutine only).
	applied string

	// The worker's, after the first Analyze.
	st      *analytics.Stage // nil until analytics are first configured
	active  bool             // st runs (false once analytics were removed)
	pts     float64          // the last frame's
	sent    bool             // counts were sent in this run
	sentV   uint64           // CountsVersion of the last counts sent
	sentAt  float64          // when (seconds: wall or PTS clock)
	lastLog time.Time        // the last output error logged
	quiet   int              // output errors not logged since
}

// analyticsUpdate is a config handed to the worker (nil Config: remove).
type analyticsUpdate struct{ cfg *analytics.Config }

// analyticsOutput is where a stream's events and counts go. final is true
// for what Close sends at the stream's end.
type analyticsOutput interface {
	event(e *analytics.Event, final bool) error
	counts(c *analytics.Counts, final bool) error
}

// newStreamAnalytics returns the analyzer of a stream run with cfg (nil:
// no analytics until set gives some). cfg must be valid (Validate and the
// classes' check): the stage is made at the first frame, with the run's
// epoch.
func newStreamAnalytics(id string, cfg *analytics.Config, out analyticsOutput, m *analyticsMetrics, log *zap.Logger) *streamAnalytics {
	a := &streamAnalytics{id: id, out: out, metrics: m, log: log}
	a.set(cfg)
	return a
}

// set hands a new config (nil: none) to the worker, which applies it
// before the next frame it analyzes: tracks and ids are kept
// (analytics.Stage.Reconfigure). It reports whether cfg differs from the
// config last handed over. Call it from one goroutine (the service's).
func (a *streamAnalytics) set(cfg *analytics.Config) bool {
	b, _ := json.Marshal(cfg) // a decoded Config always encodes
	if string(b) == a.applied {
		return false
	}
	a.applied = string(b)
	a.pending.Store(&analyticsUpdate{cfg: cfg})
	return true
}

// Analyze implements pipeline.Analyzer.
func (a *streamAnalytics) Analyze(r *pipeline.Result) bool {
	if u := a.pending.Swap(nil); u != nil {
		a.apply(u.cfg, r.Epoch)
	}
	if !a.active {
		return false
	}
	a.pts = r.PTS
	for _, e := range a.st.Observe(r.PTS, r.Capture, r.Width, r.Height, r.Detections) {
		a.snapshot(&e)
		a.event(&e, false)
	}
	a.sendCounts(false)
	return true
}

// Close implements pipeline.Analyzer: every live track ends (zone exits,
// track_end) and the final counts are sent.
func (a *streamAnalytics) Close() {
	a.stop(true)
}

// stop closes the stage's tracks and sends the final counts.
func (a *streamAnalytics) stop(final bool) {
	if !a.active {
		return
	}
	for _, e := range a.st.Close(a.pts, time.Now()) {
		a.event(&e, final)
	}
	a.sendCounts(true)
	a.active = false
}

// apply makes cfg the stage's config (nil: ends its tracks and stops it).
// A stage stopped and configured again keeps numbering ids and events,
// so that neither repeats within the run.
func (a *streamAnalytics) apply(cfg *analytics.Config, epoch string) {
	if cfg == nil {
		had := a.st != nil // a stream that never had analytics has nothing to remove
		a.stop(false)
		a.metrics.retain(a.id, nil)
		if had {
			a.log.Info("analytics removed") // the logger names the stream
		}
		return
	}
	var err error
	if a.st == nil {
		a.st, err = analytics.New(a.id, epoch, *cfg)
	} else {
		err = a.st.Reconfigure(*cfg)
	}
	if err != nil { // validated before it was stored: not expected
		a.log.Error("analytics not applied", zap.String("stream", a.id), zap.Error(err))
		return
	}
	a.active = true
	a.metrics.retain(a.id, cfg)
}

// snapshotTypes are the events that carry a snapshot (issue 19).
var snapshotTypes = map[analytics.EventType]bool{analytics.EventTrackStart: true, analytics.EventZoneEnter: true,
	analytics.EventLineCross: true, analytics.EventLoiter: true}

// snapshot names e's snapshot and marks the frame being analyzed for it
// (only from Analyze: the mark goes with that frame).
func (a *streamAnalytics) snapshot(e *analytics.Event) {
	if a.snaps == nil || !snapshotTypes[e.Type] {
		return
	}
	e.Snapshot = live.SnapshotID(e.StreamID, e.Epoch, e.Seq)
	caption := string(e.Type)
	if name := e.Zone + e.Line; name != "" {
		caption += " " + name
	}
	if e.Direction != "" {
		caption += " " + string(e.Direction)
	}
	a.snaps.Mark(live.EventMark{ID: e.Snapshot, Highlight: live.Highlight{TrackID: e.TrackID, Box: e.Box, Caption: caption}})
}

// event sends one event and counts line crossings.
func (a *streamAnalytics) event(e *analytics.Event, final bool) {
	if e.Type == analytics.EventLineCross {
		a.metrics.crossed(a.id, e.Line, e.Label, string(e.Direction))
	}
	if err := a.out.event(e, final); err != nil {
		a.outputError(err)
	}
}

// sendCounts sends the counts when they changed since the last sent, at
// most once per countsEvery unless force (a change still waiting is sent
// with a later frame, or at the end).
func (a *streamAnalytics) sendCounts(force bool) {
	v := a.st.CountsVersion()
	if a.sent && v == a.sentV {
		return
	}
	now := float64(time.Now().UnixNano()) / 1e9
	if a.ptsClock {
		now = a.pts
	}
	if !force && a.sent && now-a.sentAt < countsEvery.Seconds() {
		return
	}
	c := a.st.Counts()
	a.sent, a.sentV, a.sentAt = true, v, now
	a.metrics.set(&c)
	if err := a.out.counts(&c, force); err != nil {
		a.outputError(err)
	}
}

// outputError logs at most one line a second about failed sends (NATS
// counts them too: vigil_nats_undelivered_messages_total).
func (a *streamAnalytics) outputError(err error) {
	if time.Since(a.lastLog) < time.Second {
		a.quiet++
		return
	}
	a.log.Warn("publishing analytics", zap.String("stream", a.id), zap.Error(err), zap.Int("suppressed", a.quiet))
	a.lastLog, a.quiet = time.Now(), 0
}

// natsAnalytics publishes events on <prefix>.<id>.analytics and counts on
// <prefix>.<id>.counts, with ids that name them for good.
type natsAnalytics struct{ sink *sinks.NATS }

func (n natsAnalytics) event(e *analytics.Event, _ bool) error {
	ev := *e
	ev.Node = n.sink.Node()
	b, err := json.Marshal(&ev)
	if err != nil {
		return fmt.Errorf("encoding an analytics event: %w", err)
	}
	return n.sink.PublishStreamID(e.StreamID, sinks.KindAnalytics, sinks.AnalyticsMsgID(e.StreamID, e.Epoch, e.Seq), b)
}

func (n natsAnalytics) counts(c *analytics.Counts, _ bool) error {
	cs := *c
	cs.Node = n.sink.Node()
	b, err := json.Marshal(&cs)
	if err != nil {
		return fmt.Errorf("encoding analytics counts: %w", err)
	}
	return n.sink.PublishStreamID(c.StreamID, sinks.KindCounts, sinks.CountsMsgID(c.StreamID, c.Epoch, c.Version), b)
}

// analyticsMetrics are the analytics' Prometheus collectors, shared by the
// streams:
//
//   - vigil_analytics_zone_occupancy_tracks{stream,zone,class}: confirmed tracks
//     in a zone now, by class (updated with the counts messages);
//   - vigil_analytics_line_crossings_total{stream,line,class,direction}:
//     crossings of a line, by class and direction (in, out).
//
// Their labels are bounded by the streams' zones and lines and their
// models' classes; a zone or line removed from a stream loses its series,
// and a stream removed or disabled loses all of its (forget).
type analyticsMetrics struct {
	occupancy *prometheus.GaugeVec
	crossings *prometheus.CounterVec

	mu    sync.Mutex
	names map[string]analyticsNames // stream -> its zones and lines with series
}

type analyticsNames struct{ zones, lines map[string]bool }

// newAnalyticsMetrics creates the collectors and registers them with reg.
func newAnalyticsMetrics(reg prometheus.Registerer) *analyticsMetrics {
	m := &analyticsMetrics{
		occupancy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_analytics_zone_occupancy_tracks",
			Help: "Confirmed tracks in an analytics zone now, by class (updated with the counts messages, at most once a second).",
		}, []string{"stream", "zone", "class"}),
		crossings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_analytics_line_crossings_total",
			Help: "Crossings of an analytics line by confirmed tracks, by class and direction (in: from the negative to the positive side of cross(b - a, p - a)).",
		}, []string{"stream", "line", "class", "direction"}),
		names: map[string]analyticsNames{},
	}
	reg.MustRegister(m.occupancy, m.crossings)
	return m
}

// retain deletes the series of stream's zones and lines that cfg (nil:
// none) does not have, and records cfg's.
func (m *analyticsMetrics) retain(stream string, cfg *analytics.Config) {
	if m == nil {
		return
	}
	keep := analyticsNames{zones: map[string]bool{}, lines: map[string]bool{}}
	if cfg != nil {
		for _, z := range cfg.Zones {
			keep.zones[z.Name] = true
		}
		for _, l := range cfg.Lines {
			keep.lines[l.Name] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.names[stream]
	for z := range old.zones {
		if !keep.zones[z] {
			m.occupancy.DeletePartialMatch(prometheus.Labels{"stream": stream, "zone": z})
		}
	}
	for l := range old.lines {
		if !keep.lines[l] {
			m.crossings.DeletePartialMatch(prometheus.Labels{"stream": stream, "line": l})
		}
	}
	m.names[stream] = keep
}

// set updates the occupancy gauges from counts.
func (m *analyticsMetrics) set(c *analytics.Counts) {
	if m == nil {
		return
	}
	for _, z := range c.Zones {
		for class, n := range z.Occupancy {
			m.occupancy.WithLabelValues(c.StreamID, z.Name, class).Set(float64(n))
		}
	}
}

// crossed counts one line crossing.
func (m *analyticsMetrics) crossed(stream, line, class, dir string) {
	if m == nil {
		return
	}
	m.crossings.WithLabelValues(stream, line, class, dir).Inc()
}

// forget deletes every series of a removed or disabled stream.
func (m *analyticsMetrics) forget(stream string) {
	l := prometheus.Labels{"stream": stream}
	m.occupancy.DeletePartialMatch(l)
	m.crossings.DeletePartialMatch(l)
	m.mu.Lock()
	delete(m.names, stream)
	m.mu.Unlock()
}
