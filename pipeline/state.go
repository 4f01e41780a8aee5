package pipeline

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// State is a stream's lifecycle state:
//
//	starting ──first frame──▶ running ──source error──▶ reconnecting ──frame──▶ running
//	    │                                                    │
//	    └──────────── failed (non-live error, panic) ◀───────┘      stopped (removed, shut down, file ended)
type State string

// Stream states.
const (
	StateStarting     State = "starting"
	StateRunning      State = "running"
	StateReconnecting State = "reconnecting"
	StateFailed       State = "failed"
	StateStopped      State = "stopped"
)

// Event types that are not states: a low-priority stream switched to its
// degraded frame rate under sustained load, and back; a stream switched
// from its model to the model's lighter degrade_to model under sustained
// load, or back (Event.From and To name them); and a stream whose reorder
// delay (B-frames, StatusSnapshot.ReorderDelayMS) is more than half its
// latency budget, announced once per run of the stream.
const (
	EventDegraded      State = "degraded"
	EventRestored      State = "restored"
	EventModelSwitched State = "model_switched"
	EventReorderDelay  State = "reorder_delay"
)

// Event is a lifecycle event, published as JSON to vigil.<stream_id>.events.
type Event struct {
	StreamID string `json:"stream_id"`
	// Node is the node.id of the vigil that published the event (set by
	// the service; empty outside it).
	Node string `json:"node,omitempty"`
	// Epoch is the run of the stream the event belongs to (see NewEpoch);
	// empty for events about the stream as a whole (degraded, restored).
	Epoch string `json:"epoch,omitempty"`
	// Type is the state entered (starting, running, reconnecting, failed,
	// stopped), or degraded / restored / model_switched / reorder_delay.
	Type State     `json:"type"`
	Time time.Time `json:"time"`
	// Reason says why (an error, with credentials redacted by the source).
	Reason string `json:"reason,omitempty"`
	// Attempt counts connection attempts since the stream last ran.
	Attempt int `json:"attempt,omitempty"`
	// From and To name the models of a model_switched event: the model
	// the stream's detections came from, and the one they come from next.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// PanicError is a panic recovered inside one stream (its source, engine or
// sink, including C code that panics through cgo). It fails that stream
// only.
type PanicError struct {
	Value any
	Stack string
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

func recovered(v any) *PanicError { return &PanicError{Value: v, Stack: string(debug.Stack())} }

// Status is a stream's live status, safe for concurrent use: RunStream
// writes it and the API reads Snapshot.
type Status struct {
	mu         sync.Mutex
	state      State
	since      time.Time
	lastFrame  time.Time
	lastErr    string
	lastErrAt  time.Time
	reconnects int
	width      int
	height     int
	codec      string
	nominalFPS float64
	epoch      string
	in, out    rateMeter
	buffered   rateMeter // of out: results the sink held (NATS down)
	drops      rateMeter // frames dropped (faults)
	dropsBy    map[DropReason]*rateMeter
	recent     [recentFrames]published // ring of the last published frames
	nRecent    int                     // frames ever put in recent
	skips      rateMeter               // frames skipped by policy
	degraded   atomic.Bool             // serve DegradedFPS only (the governor's switch)
	light      atomic.Bool             // run StreamConfig.Light (the governor's first step)
	// model and lightModel name the stream's engines (StreamConfig.Engine
	// and Light; "" without one), set when it starts.
	model, lightModel string
	queueDepth        atomic.Int64 // frames in the stream's queue
	reorder           atomic.Int64 // reorder delay, ns
	// Not yet reported in an alert (see TakeAlert).
	pendingDrops  map[DropReason]int
	pendingMisses int
}

// StatusSnapshot is a copy of a Status at one instant.
type StatusSnapshot struct {
	State State `json:"state"`
	// Since is when State began; zero (left out of JSON) when not known,
	// as for a stream another node runs, known from its heartbeat.
	Since time.Time `json:"since,omitzero"`
	// Epoch names the stream's current run (see NewEpoch); the epoch in
	// its messages. Empty before the stream first started.
	Epoch string `json:"epoch,omitempty"`
	// FPSIn and FPSOut are decoded and published frames per second over
	// the last 5 s.
	FPSIn  float64 `json:"fps_in"`
	FPSOut float64 `json:"fps_out"`
	// FPSBuffered is the part of FPSOut that the sink accepted without
	// sending (NATS disconnected: held in the client's reconnect buffer,
	// see Result.Buffered), per second over the last 5 s.
	FPSBuffered float64 `json:"fps_buffered,omitempty"`
	// FPSDropped is frames per second dropped over the last 5 s (the
	// reasons of vigil_frames_dropped_total).
	FPSDropped float64 `json:"fps_dropped"`
	// FPSSkipped is frames per second skipped by policy over the last 5 s
	// (fps_limit, degraded rate, connect catch-up; the reasons of
	// vigil_frames_skipped_total): not lost.
	FPSSkipped float64 `json:"fps_skipped,omitempty"`
	// LastFrame is the arrival time of the newest decoded frame (zero if
	// none yet).
	LastFrame time.Time `json:"last_frame,omitzero"`
	// LastError is the error of the latest reconnect or failure, and
	// LastErrorTime when it happened. It is current while State is
	// reconnecting or failed (see CurrentError); in any other state it is
	// past: the stream recovered (or stopped) since.
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	Reconnects    int       `json:"reconnects"`
	Width         int       `json:"width,omitempty"`
	Height        int       `json:"height,omitempty"`
	Codec         string    `json:"codec,omitempty"`
	// FPSNominal is the stream's own frame rate in frames per second as
	// its container or bitstream declares it (FFmpeg's average frame
	// rate), read at each connection's first frame; 0 when unknown. Unlike
	// FPSIn it does not fall when decoding falls behind.
	FPSNominal float64 `json:"fps_nominal,omitempty"`
	// Degraded: switched to a lower frame rate under sustained load.
	Degraded bool `json:"degraded,omitempty"`
	// Model is the model the stream's detections come from now: its own,
	// or its model's degrade_to while switched to it under sustained load
	// (LightModel). Empty before the stream first started.
	Model string `json:"model,omitempty"`
	// LightModel: switched to its model's lighter degrade_to model under
	// sustained load.
	LightModel bool `json:"light_model,omitempty"`
	// ReorderDelayMS is the stream's reorder delay in ms, measured on its
	// current connection: how long its decoder inherently holds frames
	// (B-frames); latency budgets start after it. Absent (0) for streams
	// without B-frames and before it is measured.
	ReorderDelayMS float64 `json:"reorder_delay_ms,omitempty"`
	// FPSDroppedByReason splits FPSDropped by DropReason (the reasons
	// with drops in the window only).
	FPSDroppedByReason map[DropReason]float64 `json:"fps_dropped_by_reason,omitempty"`
	// P99MS is the 99th percentile (nearest rank) of the end-to-end
	// latency, arrival to publish, of the frames published in the last
	// 5 s (at most the last recentFrames of them), in ms; absent without
	// any.
	P99MS float64 `json:"p99_ms,omitempty"`
	// StagesMS are the mean stage times of the same frames, in ms, by
	// stage: decode, queue, preprocess, infer, postprocess, analytics,
	// publish (the parts of the latency budget: StageTimes; analytics
	// only for a stream with analytics). Absent without any frame.
	StagesMS map[string]float64 `json:"stages_ms,omitempty"`
	// BudgetMS is the stream's latency budget, arrival to publish, in
	// ms, as its last published frame carried it (Result.Budget; absent
	// for none).
	BudgetMS float64 `json:"budget_ms,omitempty"`
}

// recentFrames bounds the published frames whose stage times a Status
// keeps for StatusSnapshot's P99MS and StagesMS: 5 s at 50 fps.
const recentFrames = 256

// published is what a Status keeps of one published frame.
type published struct {
	at     time.Time
	budget time.Duration
	st     StageTimes
}

// NewStatus returns a status in state s.
func NewStatus(s State) *Status { return &Status{state: s, since: time.Now()} }

// Snapshot returns the current values.
func (s *Status) Snapshot() StatusSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	snap := StatusSnapshot{
		State: s.state, Since: s.since, Epoch: s.epoch, FPSIn: s.in.rate(now), FPSOut: s.out.rate(now),
		FPSBuffered: s.buffered.rate(now), FPSDropped: s.drops.rate(now), FPSSkipped: s.skips.rate(now),
		LastFrame: s.lastFrame, LastError: s.lastErr, LastErrorTime: s.lastErrAt, Reconnects: s.reconnects,
		Width: s.width, Height: s.height, Codec: s.codec, FPSNominal: s.nominalFPS, Degraded: s.degraded.Load(),
		ReorderDelayMS: float64(s.reorder.Load()) / 1e6, Model: s.model,
	}
	if s.lightModel != "" && s.light.Load() {
		snap.Model, snap.LightModel = s.lightModel, true
	}
	for r, m := range s.dropsBy {
		if v := m.rate(now); v > 0 {
			if snap.FPSDroppedByReason == nil {
				snap.FPSDroppedByReason = map[DropReason]float64{}
			}
			snap.FPSDroppedByReason[r] = v
		}
	}
	s.latency(&snap, now)
	return snap
}

// latency fills snap's P99MS, StagesMS and BudgetMS from the frames
// published within the rate window before now.
func (s *Status) latency(snap *StatusSnapshot, now time.Time) {
	n := min(s.nRecent, recentFrames)
	if n == 0 {
		return
	}
	last := s.recent[(s.nRecent-1)%recentFrames]
	snap.BudgetMS = ms(last.budget)
	var totals []time.Duration
	var sum StageTimes
	for i := range n {
		p := &s.recent[i]
		if now.Sub(p.at) > rateWindow*time.Second {
			continue
		}
		totals = append(totals, p.st.Total)
		sum.Decode += p.st.Decode
		sum.Queue += p.st.Queue
		sum.Preprocess += p.st.Preprocess
		sum.Infer += p.st.Infer
		sum.Postprocess += p.st.Postprocess
		sum.Analytics += p.st.Analytics
		sum.Publish += p.st.Publish
	}
	if len(totals) == 0 {
		return
	}
	snap.P99MS = ms(Percentile(totals, 99))
	k := time.Duration(len(totals))
	snap.StagesMS = map[string]float64{
		StageDecode: ms(sum.Decode / k), StageQueue: ms(sum.Queue / k), StagePreprocess: ms(sum.Preprocess / k),
		StageInfer: ms(sum.Infer / k), StagePostprocess: ms(sum.Postprocess / k), StagePublish: ms(sum.Publish / k),
	}
	if sum.Analytics > 0 {
		snap.StagesMS[StageAnalytics] = ms(sum.Analytics / k)
	}
}

// CurrentError is LastError while the stream is reconnecting or failed
// (the error is why it is in that state), and "" in the other states,
// where LastError is past.
func (s StatusSnapshot) CurrentError() string {
	if s.State == StateReconnecting || s.State == StateFailed {
		return s.LastError
	}
	return ""
}

// set changes the state; it reports whether it changed.
func (s *Status) set(st State, reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason != "" && (st == StateReconnecting || st == StateFailed) {
		s.lastErr, s.lastErrAt = reason, time.Now()
	}
	if st == StateReconnecting {
		s.reconnects++
	}
	if s.state == st && st != StateReconnecting {
		return false
	}
	s.state, s.since = st, time.Now()
	return true
}

func (s *Status) setModels(model, light string) {
	s.mu.Lock()
	s.model, s.lightModel = model, light
	s.mu.Unlock()
}

func (s *Status) setEpoch(e string) {
	s.mu.Lock()
	s.epoch = e
	s.mu.Unlock()
}

func (s *Status) frameIn(f *Frame, codec string, nominalFPS float64) {
	s.mu.Lock()
	s.lastFrame = f.Arrival
	s.width, s.height = f.Image.Width(), f.Image.Height()
	if codec != "" {
		s.codec = codec
	}
	if nominalFPS > 0 {
		s.nominalFPS = nominalFPS
	}
	s.in.mark(f.Arrival)
	s.mu.Unlock()
}

func (s *Status) frameOut(r *Result) {
	s.mu.Lock()
	s.out.mark(r.Published)
	if r.Buffered {
		s.buffered.mark(r.Published)
	}
	s.recent[s.nRecent%recentFrames] = published{at: r.Published, budget: r.Budget, st: r.Stages}
	s.nRecent++
	s.mu.Unlock()
}

func (s *Status) dropped(r DropReason) {
	s.mu.Lock()
	now := time.Now()
	s.drops.mark(now)
	if s.dropsBy == nil {
		s.dropsBy = map[DropReason]*rateMeter{}
	}
	m := s.dropsBy[r]
	if m == nil {
		m = &rateMeter{}
		s.dropsBy[r] = m
	}
	m.mark(now)
	if s.pendingDrops == nil {
		s.pendingDrops = map[DropReason]int{}
	}
	s.pendingDrops[r]++
	s.mu.Unlock()
}

func (s *Status) skipped() {
	s.mu.Lock()
	s.skips.mark(time.Now())
	s.mu.Unlock()
}

func (s *Status) budgetMiss() {
	s.mu.Lock()
	s.pendingMisses++
	s.mu.Unlock()
}

// TakeAlert returns the drops (by reason) and budget misses counted since
// the previous call, and resets them; the alerter calls it.
func (s *Status) TakeAlert() (drops map[DropReason]int, misses int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	drops, misses = s.pendingDrops, s.pendingMisses
	s.pendingDrops, s.pendingMisses = nil, 0
	return drops, misses
}

// Degraded reports whether the stream is switched to its degraded rate.
func (s *Status) Degraded() bool { return s.degraded.Load() }

// Light reports whether the stream is switched to its lighter model
// (StreamConfig.Light; without one the switch has no effect).
func (s *Status) Light() bool { return s.light.Load() }

// SetLight switches the stream to (or back from) its lighter model, from
// the next frame its worker takes; it reports whether that changed the
// switch. Supervisor.SetLight is the same for a supervised stream.
func (s *Status) SetLight(on bool) bool { return s.light.Swap(on) != on }

// Fail puts a stream that could not even start (e.g. its model failed to
// load) into the failed state with reason.
func (s *Status) Fail(reason string) { s.set(StateFailed, reason) }

// rateMeter counts events in one-second buckets over the last 5 s.
type rateMeter struct {
	sec    [6]int64 // unix second of each bucket
	counts [6]int
}

const rateWindow = 5

func (r *rateMeter) mark(t time.Time) {
	s := t.Unix()
	i := s % int64(len(r.sec))
	if r.sec[i] != s {
		r.sec[i], r.counts[i] = s, 0
	}
	r.counts[i]++
}

// rate is events per second over the last rateWindow complete seconds.
func (r *rateMeter) rate(now time.Time) float64 {
	cur := now.Unix()
	n := 0
	for i := range r.sec {
		if r.sec[i] < cur && r.sec[i] >= cur-rateWindow {
			n += r.counts[i]
		}
	}
	return float64(n) / rateWindow
}
