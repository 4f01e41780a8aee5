package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/allowlist"
	"github.com/vigil-video/vigil/internal/cluster"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/live"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// service turns registry changes into running streams.
type service struct {
	// synced is true while the registry watch has delivered every stream
	// present when it began (ready.go).
	synced  atomic.Bool
	c       *config.Config
	log     *zap.Logger
	engs    *engines.Pool
	sink    *sinks.NATS
	metrics *pipeline.Metrics
	stats   *pipeline.Stats
	sup     *pipeline.Supervisor
	// sources is api.allowed_sources (nil: any URL), checked again when a
	// stored stream starts: the bucket may hold streams registered before
	// the list was tightened.
	sources *allowlist.List

	// faults: the decode-side fault counters (lost RTP packets, decode
	// errors, corrupt frames).
	faults *decode.Metrics

	// placer puts streams on devices[i] (CUDA ordinals), least loaded
	// first; specs keeps each started stream's spec, to restart the ones
	// a rebalance moves.
	placer  *pipeline.Placer
	devices []int
	specs   map[string]registry.Spec
	// decoders (decode.hwaccel hybrid only) puts each stream on its GPU's
	// NVDEC (device i for devices[i]) or the CPU (device len(devices)),
	// weighing it by its pixel rate, which reweigher updates from the
	// running streams (reweighLoop).
	decoders  *pipeline.Placer
	reweigher *pipeline.Reweigher
	// fleetWeights is the weight this node reports for each stream it
	// holds, kept by fleetReweigher's hysteresis (fleetWeight); both under
	// fleetMu (Running is called by the fleet node's heartbeat).
	fleetMu        sync.Mutex
	fleetWeights   map[string]fleetWeightState
	fleetReweigher *pipeline.Reweigher
	// placeMu serialises what changes placement: registry changes and
	// the fleet node's start and stop calls (on the service's loop) and
	// reweighing (reweighLoop). It guards placer, decoders, reweigher,
	// specs and analyzers, and keeps sup.Apply to one caller at a time
	// (Apply reads and writes its stream under two separate locks).
	placeMu sync.Mutex

	// analytics are the analytics' metrics; analyzers the analyzer of
	// each running stream, to which a change of its analytics alone is
	// handed (hot reload). Under placeMu: build runs on the watch
	// goroutine and, for a stream reweighLoop moves, on that one.
	analytics *analyticsMetrics
	analyzers map[string]*streamAnalytics
	// pictures serves the streams' pictures: each stream's tap and the
	// geometry drawn on it. eventSnapshots: events carry snapshots.
	pictures       *live.Hub
	eventSnapshots bool

	// node is this vigil's membership in the fleet: a stream runs here
	// only while node holds its lease. events serialises registry
	// changes and the node's start and stop calls on one goroutine
	// (loop), which owns specs, analyzers and the supervisor's writes.
	node   *cluster.Node
	events chan func()
	done   chan struct{}

	mu         sync.Mutex
	known      map[string]registry.Entry // the registry as last read, for the API while NATS is down
	priorities map[string]string         // stream id -> priority, for degradation
	degraded   map[string]bool           // streams switched to their degraded rate
	// models is each stream's model name, and lights the lighter model of
	// those that switch to one under load (engines.Light); onLight the
	// lighter model of the streams switched to it now.
	models  map[string]string
	lights  map[string]string
	onLight map[string]string
	gov     *pipeline.Governor
}

// loop runs the functions sent to events, in order, until ctx ends.
func (s *service) loop(ctx context.Context) {
	defer close(s.done)
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-s.events:
			f()
		}
	}
}

// do runs f on the service's loop and waits for it; false (f not run)
// once the loop has ended.
func (s *service) do(f func()) bool {
	ran := make(chan struct{})
	select {
	case s.events <- func() { f(); close(ran) }:
	case <-s.done:
		return false
	}
	<-ran
	return true
}

// reconcile applies one registry change on the loop, so changes apply
// in bucket order. An enabled stream runs only while this node holds its
// lease.
func (s *service) reconcile(ch registry.Change) {
	s.placeMu.Lock()
	defer s.placeMu.Unlock()
	if ch.Spec == nil {
		s.mu.Lock()
		delete(s.known, ch.ID)
		delete(s.priorities, ch.ID)
		delete(s.degraded, ch.ID)
		delete(s.models, ch.ID)
		delete(s.lights, ch.ID)
		delete(s.onLight, ch.ID)
		s.mu.Unlock()
		if s.sup.Remove(ch.ID) {
			s.forget(ch.ID)
			s.log.Info("stream removed", zap.String("stream", ch.ID))
		}
		s.unplace(ch.ID)
		return
	}
	sp := *ch.Spec
	s.mu.Lock()
	s.known[sp.ID] = registry.Entry{Spec: sp, Revision: ch.Revision}
	s.priorities[sp.ID] = sp.Priority
	s.models[sp.ID] = s.c.ModelName(sp.Model)
	if l := engines.Light(s.c, sp); l != "" {
		s.lights[sp.ID] = l
	} else {
		delete(s.lights, sp.ID)
	}
	s.mu.Unlock()
	version := s.version(sp)
	if !sp.IsEnabled() {
		if s.sup.Apply(sp.ID, version, nil) {
			s.forget(sp.ID)
			s.log.Info("stream disabled", zap.String("stream", sp.ID))
		}
		s.unplace(sp.ID)
		return
	}
	if !s.node.Holds(sp.ID) {
		s.stopHere(sp.ID, "held by another node")
		return
	}
	s.start(sp, version)
}

// stopHere stops a stream that runs elsewhere now (or nowhere) and
// forgets it here.
func (s *service) stopHere(id, why string) {
	if s.sup.RemoveFor(id, pipeline.ErrHandedOver) {
		s.forget(id)
		s.log.Info("stream stopped on this node", zap.String("stream", id), zap.String("reason", why))
	}
	s.unplace(id)
}

// Start implements cluster.Runner: this node took stream id's lease.
func (s *service) Start(id string) {
	s.do(func() {
		s.mu.Lock()
		e, ok := s.known[id]
		s.mu.Unlock()
		if ok && e.Spec.IsEnabled() && s.node.Holds(id) {
			s.placeMu.Lock()
			defer s.placeMu.Unlock()
			s.start(e.Spec, s.version(e.Spec))
		}
	})
}

// Stop implements cluster.Runner: it returns once the stream publishes
// no more.
func (s *service) Stop(id string) {
	if !s.do(func() {
		s.placeMu.Lock()
		defer s.placeMu.Unlock()
		s.stopHere(id, "lease handed over or lost")
	}) {
		s.sup.RemoveFor(id, pipeline.ErrHandedOver) // the loop has ended: stop it here
	}
}

// Wanted implements cluster.Runner: the enabled streams of the registry.
func (s *service) Wanted() []cluster.Want {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]cluster.Want, 0, len(s.known))
	for id, e := range s.known {
		if e.Spec.IsEnabled() {
			out = append(out, cluster.Want{ID: id, Priority: e.Spec.Priority})
		}
	}
	return out
}

// Running implements cluster.Runner: each stream this node holds the
// lease of, with its weight (fleetWeight), state, rates
// and fencing token. The supervisor also keeps the streams disabled here,
// which run on no node: they are not listed (they showed as this node's in
// vigil nodes ls and the API).
func (s *service) Running() map[string]cluster.StreamInfo {
	s.fleetMu.Lock()
	defer s.fleetMu.Unlock()
	now := time.Now()
	out := map[string]cluster.StreamInfo{}
	for _, id := range s.sup.IDs() {
		st, ok := s.sup.Status(id)
		if !ok || !s.node.Holds(id) {
			continue
		}
		info := cluster.StreamInfo{State: string(st.State), FPSIn: st.FPSIn, FPSOut: st.FPSOut, Lease: s.node.Token(id)}
		info.Weight = s.fleetWeight(id, st, now)
		out[id] = info
	}
	for id := range s.fleetWeights {
		if _, ok := out[id]; !ok {
			delete(s.fleetWeights, id) // no longer held here
			s.fleetReweigher.Forget(id)
		}
	}
	return out
}

// fleetWeight is the weight this node reports for stream id (pixels per
// second; 0: not known yet, the placer then weighs it by the mean): its
// frame size × reweighFPS, read once the stream has run reweighWindow and
// then once per reweighWindow (so that two readings never share a
// window), held with the same hysteresis as hybrid decoding's weights
// (engines.NewReweigher: a reading replaces the weight only when it and
// the one before are more than 25 % off on the same side). The placer
// moves streams on these weights: raw 5-s decoded rates, on a loaded
// host, differed by enough between equal streams for it to move one where
// the move left the spread as it was. Caller holds fleetMu.
func (s *service) fleetWeight(id string, st pipeline.StatusSnapshot, now time.Time) float64 {
	fw := s.fleetWeights[id]
	if st.State != pipeline.StateRunning || now.Sub(st.Since) < reweighWindow || now.Sub(fw.read) < reweighWindow {
		return fw.weight
	}
	fw.read = now
	fw.weight, _ = s.fleetReweigher.Next(id, fw.weight, engines.StreamPixelRate(st.Width, st.Height, reweighFPS(st)))
	s.fleetWeights[id] = fw
	return fw.weight
}

// fleetWeightState is what fleetWeight holds of one stream.
type fleetWeightState struct {
	weight float64   // pixels per second, 0 before the first reading
	read   time.Time // the last reading
}

// forget drops what the service keeps of a stream that stopped for good
// (removed or disabled): its metrics, progress numbers and analyzer.
func (s *service) forget(id string) {
	s.mu.Lock()
	delete(s.onLight, id) // its status is gone: a new start is on its own model
	s.mu.Unlock()
	s.stats.Remove(id)
	s.metrics.Forget(id)
	s.faults.Forget(id)
	s.analytics.forget(id)
	delete(s.analyzers, id)
}

// version is what the supervisor restarts a stream on: the spec's JSON
// without its analytics, which are applied to the running stream instead
// (reloadAnalytics). Analytics that are not valid for the stream's model
// (a bucket written by other means than the API, a model file replaced)
// are part of it: the stream restarts and fails in build, naming the
// field. A Spec decoded from the bucket's JSON always encodes again (it
// holds no NaN or Inf).
func (s *service) version(sp registry.Spec) string {
	if sp.Analytics != nil && s.analyticsProblem(sp) == nil {
		sp.Analytics = nil
	}
	b, _ := json.Marshal(sp)
	return string(b)
}

// analyticsProblem returns the first problem of sp's analytics (geometry,
// or a class its model, or the lighter model it switches to under load,
// does not have), or nil.
func (s *service) analyticsProblem(sp registry.Spec) *registry.FieldError {
	if sp.Analytics == nil {
		return nil
	}
	for _, fe := range sp.Problems(nil) {
		if strings.HasPrefix(fe.Field, "analytics") {
			return fe
		}
	}
	return engines.StreamClasses(s.c, sp)
}

// reloadAnalytics hands a running stream's analyzer the analytics of sp
// when they changed: the stream applies them before its next frame,
// keeping its decoder, its run (epoch) and its tracks.
func (s *service) reloadAnalytics(sp registry.Spec) {
	a := s.analyzers[sp.ID]
	if a == nil || !a.set(sp.Analytics) {
		return
	}
	s.pictures.SetGeometry(sp.ID, live.GeometryOf(sp.Analytics))
	s.log.Info("stream analytics reconfigured without a restart", zap.String("stream", sp.ID),
		zap.Bool("analytics", sp.Analytics != nil))
}

// where returns the node running stream id and its status: this node's
// supervisor when it runs here, else what the running node last reported
// in its entry (state and rates only).
func (s *service) where(id string) (string, *pipeline.StatusSnapshot) {
	if st, ok := s.sup.Status(id); ok && s.node.Holds(id) {
		return s.node.ID(), &st
	}
	if w, ok := s.node.Where(id); ok {
		return w.Node, &pipeline.StatusSnapshot{State: pipeline.State(w.State), FPSIn: w.FPSIn, FPSOut: w.FPSOut}
	}
	if st, ok := s.sup.Status(id); ok { // disabled here, or failed
		return "", &st
	}
	return "", nil
}

// knownEntries returns the registry as the service last read it (every
// stream it runs or holds disabled), for the API while NATS is down.
func (s *service) knownEntries() []registry.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]registry.Entry, 0, len(s.known))
	for _, e := range s.known {
		out = append(out, e)
	}
	return out
}

// unplace frees a stream's device and rebalances.
func (s *service) unplace(id string) {
	if s.placer == nil {
		return
	}
	s.placer.Remove(id)
	if s.decoders != nil {
		s.decoders.Remove(id)
		s.reweigher.Forget(id)
	}
	delete(s.specs, id)
	s.rebalance()
}

// rebalance restarts the streams that Placer.Rebalance moves to lighter
// devices, then (hybrid decoding) those moved between NVDEC and the CPU.
func (s *service) rebalance() {
	if s.placer == nil {
		return
	}
	s.restartMoved(s.placer.Rebalance(), "devices", func(m pipeline.Move) []zap.Field {
		if s.decoders != nil {
			// Decoded on the new GPU's NVDEC or the CPU, with the
			// weight it had.
			if w, ok := s.decoders.Weight(m.Stream); ok {
				s.decoders.Remove(m.Stream)
				s.decoders.PlaceAmong(m.Stream, w, []int{m.To, len(s.devices)})
			}
		}
		return []zap.Field{zap.Int("from", s.devices[m.From]), zap.Int("to", s.devices[m.To])}
	})
	s.rebalanceDecoders()
}

// rebalanceDecoders (hybrid decoding) evens out NVDEC and CPU load
// relative to capacity, each stream staying between its own GPU's NVDEC
// and the CPU, within the placer's move rule (engines.NewDecodePlacer),
// and restarts the streams it moves.
func (s *service) rebalanceDecoders() {
	if s.decoders == nil {
		return
	}
	s.restartMoved(s.decoders.Rebalance(), "decoders", func(m pipeline.Move) []zap.Field {
		w, _ := s.decoders.Weight(m.Stream)
		return []zap.Field{zap.String("to", decodeSide(m.To != len(s.devices))), zap.Float64("pixel_rate", w)}
	})
}

// reweighWindow is how long a stream must have run before its pixel rate
// is read: the window of StatusSnapshot.FPSIn.
const reweighWindow = 5 * time.Second

// reweighLoop reads, every decode.reweigh_interval until ctx ends, each
// running stream's pixel rate (hybrid decoding only; see reweigh).
func (s *service) reweighLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.reweigh(time.Now())
		}
	}
}

// reweigh hands each stream's pixel rate (frame size × frames per
// second, once it has run 5 s: reweighFPS) to the reweigher, then rebalances NVDEC and the CPU: a camera that switched
// resolution or frame rate moves, or others move, if that evens the load
// (engines.NewReweigher and NewDecodePlacer say by how much). Rebalancing
// at every reading, not only after a change, lets an imbalance larger
// than one rebalance's capped moves even out over the next readings, so
// streams move at most that many per reading.
func (s *service) reweigh(now time.Time) {
	s.placeMu.Lock()
	defer s.placeMu.Unlock()
	if s.decoders == nil {
		return
	}
	for id := range s.specs {
		st, ok := s.sup.Status(id)
		if !ok || st.State != pipeline.StateRunning || now.Sub(st.Since) < reweighWindow {
			continue
		}
		was, _ := s.decoders.Weight(id)
		fps := reweighFPS(st)
		rate := engines.StreamPixelRate(st.Width, st.Height, fps)
		if s.reweigher.Observe(s.decoders, id, rate) {
			s.log.Info("stream reweighed for hybrid decoding", zap.String("stream", id), zap.Float64("pixel_rate", rate),
				zap.Float64("was", was), zap.Int("width", st.Width), zap.Int("height", st.Height), zap.Float64("fps", fps))
		}
	}
	s.rebalanceDecoders()
}

// maxNominalFPS bounds the declared frame rates reweighFPS believes:
// FFmpeg reports a guess such as 90,000 for some RTSP streams.
const maxNominalFPS = 240

// reweighFPS is the frame rate a stream is weighed by: the larger of its
// declared rate (Status.FPSNominal, when plausible) and the rate it
// decoded over the last 5 s. The decoded rate alone falls when decoding
// falls behind, which would make an overloaded side's streams look
// lighter and send it more; the declared rate alone misses a camera that
// sends more than it declares.
func reweighFPS(st pipeline.StatusSnapshot) float64 {
	if st.FPSNominal > 0 && st.FPSNominal <= maxNominalFPS {
		return max(st.FPSNominal, st.FPSIn)
	}
	return st.FPSIn
}

// restartMoved logs ("stream moved to rebalance <what>") and restarts each
// moved stream; fields gives a move's log fields after doing any
// bookkeeping the restart needs.
func (s *service) restartMoved(moves []pipeline.Move, what string, fields func(pipeline.Move) []zap.Field) {
	for _, m := range moves {
		sp, ok := s.specs[m.Stream]
		if !ok {
			continue
		}
		s.log.Info("stream moved to rebalance "+what, append([]zap.Field{zap.String("stream", m.Stream)}, fields(m)...)...)
		s.start(sp, s.version(sp))
	}
}

// start (re)starts an enabled stream on its device; the device is part of
// the version, so a move restarts the stream. A stream that keeps running
// gets its analytics, which are not part of the version.
func (s *service) start(sp registry.Spec, version string) {
	dev, nvdec := s.c.Infer.Device, true
	if s.placer != nil {
		// Across GPUs every stream weighs 1 (its inference cost depends
		// little on its size); between NVDEC and the CPU it weighs its
		// pixel rate, a default until measured (PlaceDecoder, reweigh).
		gi := s.placer.Place(sp.ID, 1)
		dev = s.devices[gi]
		s.specs[sp.ID] = sp
		version += "@gpu" + strconv.Itoa(dev)
		if s.decoders != nil {
			nvdec = engines.PlaceDecoder(s.decoders, sp.ID, gi, len(s.devices))
			version += "/" + decodeSide(nvdec)
		}
	}
	build := func(*pipeline.Status) (pipeline.StreamConfig, error) {
		cfg, err := s.build(sp, dev, nvdec)
		if err != nil {
			s.log.Error("stream cannot start", zap.String("stream", sp.ID), zap.Error(err))
			// RunStream never runs, so the metrics must say it here.
			s.metrics.SetState(sp.ID, pipeline.StateFailed)
		}
		return cfg, err
	}
	if s.sup.Apply(sp.ID, version, build) {
		s.log.Info("stream (re)started", zap.String("stream", sp.ID), zap.String("url", decode.RedactURL(sp.URL)), zap.Int("device", dev),
			zap.String("decoder", decoderName(s.c, nvdec)))
		s.mu.Lock()
		level := s.gov.Level()
		s.mu.Unlock()
		// A restarted stream has a fresh status, on its own model at its
		// full rate: switched again as the governor's level says.
		s.restartedModel(sp.ID)
		light, slow := degradation(sp.Priority, engines.Light(s.c, sp) != "", level)
		if light {
			s.setLight(sp.ID, true, "started while degradation is engaged")
		}
		if slow {
			s.setDegraded(sp.ID, true, "started while degradation is engaged")
		} else {
			s.mu.Lock()
			was := s.degraded[sp.ID]
			delete(s.degraded, sp.ID)
			s.mu.Unlock()
			if was {
				s.metrics.Degraded.WithLabelValues(sp.ID).Set(0)
				s.publishEvent(pipeline.Event{StreamID: sp.ID, Type: pipeline.EventRestored, Time: time.Now(), Reason: "reconfigured"})
			}
		}
		return
	}
	s.reloadAnalytics(sp)
}

// build makes a stream's pipeline configuration from its spec. Errors (a
// model that does not load, an invalid stored spec) fail that stream only.
func (s *service) build(sp registry.Spec, dev int, nvdec bool) (pipeline.StreamConfig, error) {
	delete(s.analyzers, sp.ID) // the previous run's, stopped
	if err := sp.Validate(nil); err != nil {
		return pipeline.StreamConfig{}, fmt.Errorf("invalid stored spec: %w", err)
	}
	if err := s.sources.Check(sp.URL); err != nil {
		return pipeline.StreamConfig{}, fmt.Errorf("url: %w (registered before the list changed? fix the url with `vigil streams set %s --url ...` or remove the stream)", err, sp.ID)
	}
	if fe := s.analyticsProblem(sp); fe != nil {
		return pipeline.StreamConfig{}, fmt.Errorf("invalid stored spec: %w", fe)
	}
	pool := "" // isolation: high-priority streams get their own engine instance and gate
	if sp.Priority == "high" {
		pool = "high"
	}
	eng, err := s.engs.Instance(sp.Model, pool, dev)
	if err != nil {
		return pipeline.StreamConfig{}, fmt.Errorf("model: %w", err)
	}
	batcher, err := s.engs.Batcher(sp.Model, pool, dev, eng)
	if err != nil {
		return pipeline.StreamConfig{}, fmt.Errorf("batching: %w", err)
	}
	// The lighter model opens now, not at the switch: under overload an
	// ONNX Runtime session would take long to make, and streams of the
	// model share it.
	var light *pipeline.Route
	if lm := engines.Light(s.c, sp); lm != "" {
		leng, err := s.engs.Instance(lm, pool, dev)
		if err != nil {
			return pipeline.StreamConfig{}, fmt.Errorf("degrade_to model %s: %w", lm, err)
		}
		lb, err := s.engs.Batcher(lm, pool, dev, leng)
		if err != nil {
			return pipeline.StreamConfig{}, fmt.Errorf("degrade_to model %s: batching: %w", lm, err)
		}
		light = &pipeline.Route{Engine: leng, Gate: s.engs.Gate(leng), Batcher: lb}
	}
	open, stall := sp.Durations()
	log := s.log.With(zap.String("stream", sp.ID))
	queue := sp.QueueSize
	if queue == 0 {
		queue = s.c.Pipeline.QueueSize
	}
	so := engines.WithHW(decode.Options{
		URL: sp.URL, StreamID: sp.ID, Transport: sp.Transport, Realtime: sp.Realtime, Loop: sp.Loop,
		OpenTimeout: open, StallTimeout: stall, Threads: sp.DecodeThreads, Logger: log, Metrics: s.faults,
	}, s.c, dev, nvdec)
	// An NVDEC stream holds up to its queue, one frame in its worker and
	// one being queued; fewer pool frames would stall the decoder before
	// the queue's drop-oldest could act.
	so.HWSurfaces = max(so.HWSurfaces, queue+2)
	src, err := decode.New(so)
	if err != nil {
		return pipeline.StreamConfig{}, err
	}
	s.stats.Register(sp.ID)
	an := newStreamAnalytics(sp.ID, sp.Analytics, natsAnalytics{s.sink}, s.analytics, log)
	s.analyzers[sp.ID] = an
	tap := s.pictures.Tap(sp.ID)
	if s.eventSnapshots {
		an.snaps = tap
	}
	s.pictures.SetGeometry(sp.ID, live.GeometryOf(sp.Analytics))
	return pipeline.StreamConfig{
		ID: sp.ID, Labels: sp.Labels, Source: src, Engine: eng, Sink: s.sink, Analyzer: an, QueueSize: queue,
		Live: src.Live(), FPSLimit: sp.FPSLimit, FPSBurst: sp.FPSBurst, Budget: s.c.Budget(sp.BudgetMS), Gate: s.engs.Gate(eng), Batcher: batcher, Light: light, DegradedFPS: s.c.Pipeline.DegradedFPS, Logger: log, Metrics: s.metrics, Stats: s.stats,
		OnEvent: s.publishEvent, Tap: tap,
	}, nil
}

// alertLoop turns each stream's drops and budget misses into rate-limited
// alerts on <prefix>.<stream_id>.alerts until ctx ends.
func (s *service) alertLoop(ctx context.Context) {
	a := pipeline.NewAlerter(s.c.Pipeline.AlertInterval.Duration)
	// 250 ms ticks: an alert is due at most a quarter second late.
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	known := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ids := s.sup.IDs()
			current := map[string]bool{}
			for _, id := range ids {
				current[id] = true
				drops, misses := s.sup.TakeAlert(id)
				a.Add(now, id, drops, misses)
			}
			for id := range known {
				if !current[id] {
					a.Forget(id)
				}
			}
			known = current
			for _, al := range a.Due(now) {
				al.Node = s.sink.Node()
				b, err := json.Marshal(al)
				if err == nil {
					err = s.sink.PublishStream(al.StreamID, sinks.KindAlerts, b)
				}
				if err != nil {
					s.log.Warn("publishing alert", zap.Error(err))
				}
				fields := []zap.Field{zap.String("stream", al.StreamID), zap.String("type", al.Type), zap.Int("count", al.Count)}
				if len(al.Reasons) > 0 { // budget_miss has none: no "reasons": null
					fields = append(fields, zap.Any("reasons", al.Reasons))
				}
				s.log.Warn("alert", fields...)
			}
		}
	}
}

// governorLoop watches the total queue depth (streams' queues plus frames
// waiting at engine gates) every 500 ms and steps degradation up and down
// as the Governor decides: level 1 switches streams to their model's
// lighter degrade_to model (normal and low priority) and low-priority
// streams without one to their degraded frame rate; level 2 also cuts the
// rate of low-priority streams on a lighter model. With no stream that
// has a lighter model there is one level, the frame-rate cut.
func (s *service) governorLoop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			depth := s.sup.QueueDepth() + s.engs.GateWaiting()
			s.metrics.TotalQueue.Set(float64(depth))
			s.mu.Lock()
			s.gov.Steps = 1
			if len(s.lights) > 0 {
				s.gov.Steps = 2
			}
			was := s.gov.Level()
			changed := s.gov.Observe(now, depth)
			level := s.gov.Level()
			ids := make([]string, 0, len(s.priorities))
			for id := range s.priorities {
				ids = append(ids, id)
			}
			s.mu.Unlock()
			if !changed {
				continue
			}
			reason := fmt.Sprintf("queue depth %d above %d for %s", depth, s.gov.Threshold, s.gov.EngageAfter)
			if level < was {
				reason = fmt.Sprintf("queue depth %d at or below %d for %s", depth, s.gov.Threshold/2, s.gov.ReleaseAfter)
			}
			reason += fmt.Sprintf(": degradation level %d of %d", level, s.gov.Steps)
			msg := "degradation released"
			switch {
			case level > was:
				msg = "degradation engaged"
			case level > 0:
				msg = "degradation eased"
			}
			s.log.Warn(msg, zap.Int("level", level), zap.Int("levels", s.gov.Steps), zap.Int("queue_depth", depth))
			for _, id := range ids {
				s.applyLevel(id, level, reason)
			}
		}
	}
}

// degradation says what a stream of priority p runs at degradation level
// lvl: its lighter model (it has one: light) and its degraded frame rate
// (slow). High priority is never degraded; normal priority only switches
// model; low priority switches model first and slows down at the next
// level, or slows down at once without a lighter model.
func degradation(p string, hasLight bool, lvl int) (light, slow bool) {
	if lvl == 0 || p == "high" {
		return false, false
	}
	return hasLight, p == "low" && (!hasLight || lvl >= 2)
}

// applyLevel switches stream id as degradation level lvl says, each
// change with its event, log line and metrics.
func (s *service) applyLevel(id string, lvl int, reason string) {
	s.mu.Lock()
	p, hasLight := s.priorities[id], s.lights[id] != ""
	s.mu.Unlock()
	light, slow := degradation(p, hasLight, lvl)
	// Into degradation the model first, out of it the rate first: the
	// lighter model is the milder step.
	if slow {
		s.setLight(id, light, reason)
		s.setDegraded(id, slow, reason)
		return
	}
	s.setDegraded(id, slow, reason)
	s.setLight(id, light, reason)
}

// setLight switches stream id to (or back from) its lighter model: a
// model_switched event, the log line, vigil_model_switches_total and
// vigil_stream_model. Nothing happens when it is already so, or when
// the stream has no lighter model.
func (s *service) setLight(id string, on bool, reason string) {
	s.mu.Lock()
	from, to := s.models[id], s.lights[id]
	s.mu.Unlock()
	if to == "" || !s.sup.SetLight(id, on) {
		return
	}
	s.mu.Lock()
	if on {
		s.onLight[id] = to
	} else {
		delete(s.onLight, id)
		from, to = to, from
	}
	s.mu.Unlock()
	s.switched(id, from, to, reason)
}

// switched records a stream's switch from one model to another.
func (s *service) switched(id, from, to, reason string) {
	s.metrics.ModelSwitches.WithLabelValues(id, from, to).Inc()
	s.metrics.ActiveModel.WithLabelValues(id, from).Set(0)
	s.metrics.ActiveModel.WithLabelValues(id, to).Set(1)
	s.publishEvent(pipeline.Event{StreamID: id, Type: pipeline.EventModelSwitched, Time: time.Now(), Reason: reason, From: from, To: to})
}

// restartedModel resets what the service keeps of a (re)started stream's
// model: it runs its own model (vigil_stream_model 1, its lighter one 0).
// A stream that was switched to a lighter model before the restart is
// back on its own: that is a switch too.
func (s *service) restartedModel(id string) {
	s.mu.Lock()
	model, light, was := s.models[id], s.lights[id], s.onLight[id]
	delete(s.onLight, id)
	s.mu.Unlock()
	s.metrics.ActiveModel.DeletePartialMatch(prometheus.Labels{"stream": id})
	s.metrics.ActiveModel.WithLabelValues(id, model).Set(1)
	if light != "" {
		s.metrics.ActiveModel.WithLabelValues(id, light).Set(0)
	}
	if was != "" {
		s.switched(id, was, model, "restarted")
	}
}

func (s *service) setDegraded(id string, on bool, reason string) {
	if !s.sup.SetDegraded(id, on) {
		return
	}
	s.mu.Lock()
	if on {
		s.degraded[id] = true
	} else {
		delete(s.degraded, id)
	}
	s.mu.Unlock()
	typ, v := pipeline.EventRestored, 0.0
	if on {
		typ, v = pipeline.EventDegraded, 1
	}
	s.metrics.Degraded.WithLabelValues(id).Set(v)
	s.publishEvent(pipeline.Event{StreamID: id, Type: typ, Time: time.Now(), Reason: reason})
}

// publishEvent sends a lifecycle event to <prefix>.<stream_id>.events.
func (s *service) publishEvent(e pipeline.Event) {
	e.Node = s.sink.Node()
	b, err := json.Marshal(e)
	if err == nil {
		err = s.sink.PublishStream(e.StreamID, sinks.KindEvents, b)
	}
	if err != nil {
		s.log.Warn("publishing event", zap.String("stream", e.StreamID), zap.Error(err))
	}
	fields := []zap.Field{zap.String("stream", e.StreamID), zap.String("reason", e.Reason), zap.Int("attempt", e.Attempt)}
	if e.Type == pipeline.EventModelSwitched {
		fields = append(fields, zap.String("from", e.From), zap.String("to", e.To))
	}
	s.log.Info("stream "+string(e.Type), fields...)
}

// decoderName is where a stream is decoded, for the log: decode.hwaccel, or
// under hybrid decoding the side it was placed on.
func decoderName(c *config.Config, nvdec bool) string {
	if c.Decode.HWAccel != "hybrid" {
		return c.Decode.HWAccel
	}
	return "hybrid: " + decodeSide(nvdec)
}

// decodeSide names a hybrid decoding placement: "nvdec" or "cpu".
func decodeSide(nvdec bool) string {
	if nvdec {
		return "nvdec"
	}
	return "cpu"
}
