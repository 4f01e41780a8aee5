package pipeline

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DropReason says why a frame was lost: a fault (overload, an error, a
// network burst), counted in vigil_frames_dropped_total and raised in
// frame_drop alerts. Frames that vigil leaves out on purpose are skips
// (SkipReason), not drops. Values are bounded and used as the "reason"
// metric label.
type DropReason string

// Drop reasons.
const (
	// DropQueueFull: the queue before the engine was full and the frame was
	// the oldest one in it (drop-oldest policy).
	DropQueueFull DropReason = "queue_full"
	// DropInferError: the engine failed on this frame.
	DropInferError DropReason = "infer_error"
	// DropPublishError: the sink could not deliver the result.
	DropPublishError DropReason = "publish_error"
	// DropStale: a live frame arrived more than StaleAfter behind the
	// stream's own timeline (a burst after a network cut): processing it
	// late would only add latency.
	DropStale DropReason = "stale"
	// DropDeadline: the frame could no longer be published within its
	// stream's latency budget, judged from measured stage costs.
	DropDeadline DropReason = "deadline"
)

// SkipReason says why a frame was left out by policy: the configuration
// or the load-shedding policy asked for it, so it is not lost and not a
// fault. Skips are counted in vigil_frames_skipped_total{stream,reason} and
// in the message's skipped_since_last, never in drops, alerts or the drop
// ratio. Values are bounded and used as the "reason" metric label.
type SkipReason string

// Skip reasons.
const (
	// SkipRateLimit: the frame came sooner than the stream's fps_limit
	// allows (the admission token bucket had no token).
	SkipRateLimit SkipReason = "rate_limit"
	// SkipDegraded: the stream runs at its degraded frame rate (low
	// priority under sustained load) and this frame is over it.
	SkipDegraded SkipReason = "degraded"
	// SkipCatchUp: the frame belongs to the burst a live source delivers
	// faster than real time right after a (re)connect (what the demuxer
	// buffered while probing the stream), and a newer frame of the same
	// burst replaced it in the queue before the engine took it: vigil
	// goes to the live edge instead of working through the backlog.
	SkipCatchUp SkipReason = "catch_up"
	// SkipBeforeKeyframe: a live connection's frame decoded before the
	// connection's first clean frame, flagged Frame.Corrupt because it
	// references pictures sent before vigil joined the stream (a camera
	// joined mid-GOP). Its pixels are partly made up, and detections on
	// them would be false; what comes after the first keyframe is
	// published, corrupt or not.
	SkipBeforeKeyframe SkipReason = "before_keyframe"
)

// skipReasons lists every SkipReason, in the order of streamMetrics.skips.
var skipReasons = [...]SkipReason{SkipRateLimit, SkipDegraded, SkipCatchUp, SkipBeforeKeyframe}

// Stage names, used as the "stage" metric label.
const (
	StageIngest      = "ingest"
	StageDecode      = "decode"
	StageQueue       = "queue"
	StagePreprocess  = "preprocess"
	StageInfer       = "infer"
	StagePostprocess = "postprocess"
	StagePublish     = "publish"
	StageTotal       = "total"
	// StageAnalytics names StageTimes.Analytics in
	// StatusSnapshot.StagesMS; it is not a label of the stage metrics.
	StageAnalytics = "analytics"
)

// Metrics holds the pipeline's Prometheus collectors. Create one per
// registry with NewMetrics and share it between streams; label values are
// stream ids, stage names and DropReason values, all bounded.
type Metrics struct {
	Decoded   *prometheus.CounterVec // vigil_frames_decoded_total{stream}
	Processed *prometheus.CounterVec // vigil_frames_processed_total{stream}
	Dropped   *prometheus.CounterVec // vigil_frames_dropped_total{stream,stage,reason}: faults only
	// Skipped counts frames left out by policy (SkipReason):
	// vigil_frames_skipped_total{stream,reason}. Each stream's series of
	// every reason exist from its start (at 0), so that rate() sees the
	// first skip and rules can subtract skips from decoded frames.
	Skipped    *prometheus.CounterVec
	Detections *prometheus.CounterVec   // vigil_detections_total{stream}
	Latency    *prometheus.HistogramVec // vigil_stage_latency_seconds{stream,stage}
	QueueDepth *prometheus.GaugeVec     // vigil_queue_depth_frames{stream}
	// BudgetMisses counts frames published after their budget ran out:
	// vigil_budget_misses_total{stream}.
	BudgetMisses *prometheus.CounterVec
	// Up is 1 while a stream is running and 0 in any other state:
	// vigil_stream_up{stream}.
	Up *prometheus.GaugeVec
	// StreamState is the stream's lifecycle state as a 0/1 enum gauge:
	// vigil_stream_state{stream,state} is 1 for the state the stream is in
	// (starting, running, reconnecting, failed, stopped; see State) and 0
	// for the four others. Set it with SetState.
	StreamState *prometheus.GaugeVec
	// Degraded is 1 while a low-priority stream runs at its degraded rate:
	// vigil_stream_degraded{stream}.
	Degraded *prometheus.GaugeVec
	// ModelSwitches counts a stream's switches between its model and the
	// model's lighter degrade_to model under sustained load, both ways:
	// vigil_model_switches_total{stream,from,to} (model names: bounded by
	// the configured models).
	ModelSwitches *prometheus.CounterVec
	// ActiveModel is 1 for the model a stream's detections come from now
	// and 0 for its other one (its degrade_to model, or its own while
	// switched): vigil_stream_model{stream,model}.
	ActiveModel *prometheus.GaugeVec
	// PTSDiscontinuities counts the frames that started a new source
	// timeline (Frame.Discontinuity: a timestamp reset or jump, a
	// reconnect): vigil_pts_discontinuities_total{stream}.
	PTSDiscontinuities *prometheus.CounterVec
	// TotalQueue is the frames waiting for engines, all streams together,
	// that the degradation governor watches: vigil_queue_depth_total_frames.
	TotalQueue prometheus.Gauge
	// Cross-stream batching: vigil_batch_size (requests per execution),
	// vigil_batch_queue_wait_seconds (enqueue to dispatch) and
	// vigil_engine_batch_seconds{batch} (one execution of the engine of
	// that batch size, padding included).
	BatchSize   prometheus.Histogram
	BatchWait   prometheus.Histogram
	EngineBatch *prometheus.HistogramVec
	// BatchLate counts the requests the batcher refused because they
	// could not finish by their deadline: vigil_batch_late_total. They are
	// also in vigil_frames_dropped_total{stage="queue",reason="deadline"},
	// with the frames a stream drops itself when they leave its queue too
	// late; this counter tells the two apart.
	BatchLate prometheus.Counter
	// GPU engine, per batch, timed with CUDA events:
	// vigil_gpu_batch_stage_seconds{model,batch,stage} with stage host
	// (staging into pinned memory, host clock), h2d (frame upload from
	// pinned memory), preprocess (the NVRTC kernels), infer (the ONNX
	// Runtime run) and d2h (output download); and the host time of ONNX
	// Runtime's Run call, which returns when the run is done on the GPU,
	// vigil_gpu_launch_seconds{model,batch}.
	GPUStage  *prometheus.HistogramVec
	GPULaunch *prometheus.HistogramVec
}

// NewMetrics creates the collectors and registers them with reg; a nil reg
// creates unregistered collectors (for tools such as vigil detect).
// It panics if the names are already registered with reg, as
// prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decoded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_frames_decoded_total", Help: "Frames returned by the decoder.",
		}, []string{"stream"}),
		Processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_frames_processed_total", Help: "Frames run through the model and published.",
		}, []string{"stream"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_frames_dropped_total", Help: "Frames lost before publishing (overload, errors, network bursts), by stage and reason; frames skipped by policy are in vigil_frames_skipped_total.",
		}, []string{"stream", "stage", "reason"}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_frames_skipped_total", Help: "Frames left out on purpose, by reason: rate_limit (fps_limit), degraded (degraded frame rate), catch_up (the burst after a connect).",
		}, []string{"stream", "reason"}),
		Detections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_detections_total", Help: "Detections published.",
		}, []string{"stream"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vigil_stage_latency_seconds",
			Help: "Wall time per frame in each stage; stage=total is arrival to publish.",
			// 0.25 ms .. ~4 s, factor 2: covers a 1 ms preprocess and a
			// multi-second stall. Native buckets too, for finer quantiles.
			Buckets:                         prometheus.ExponentialBuckets(0.00025, 2, 15),
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"stream", "stage"}),
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_queue_depth_frames", Help: "Frames waiting before the engine.",
		}, []string{"stream"}),
	}
	m.BudgetMisses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vigil_budget_misses_total", Help: "Frames published later than their latency budget.",
	}, []string{"stream"})
	m.Up = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vigil_stream_up", Help: "1 while the stream is running (frames flowing), 0 when starting, reconnecting, failed or stopped.",
	}, []string{"stream"})
	m.StreamState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vigil_stream_state", Help: "1 for the lifecycle state the stream is in (starting, running, reconnecting, failed, stopped), 0 for the others.",
	}, []string{"stream", "state"})
	m.Degraded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vigil_stream_degraded", Help: "1 while a low-priority stream is switched to its degraded frame rate under sustained load.",
	}, []string{"stream"})
	m.ModelSwitches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vigil_model_switches_total", Help: "Switches of a stream between its model and the model's lighter degrade_to model under sustained load, both ways.",
	}, []string{"stream", "from", "to"})
	m.ActiveModel = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vigil_stream_model", Help: "1 for the model a stream's detections come from now, 0 for its other one (its degrade_to model, or its own while switched to that).",
	}, []string{"stream", "model"})
	m.PTSDiscontinuities = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vigil_pts_discontinuities_total", Help: "Frames that started a new source timeline: a timestamp reset or jump, or a reconnect.",
	}, []string{"stream"})
	m.TotalQueue = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vigil_queue_depth_total_frames", Help: "Frames waiting for engines, all streams together (the degradation governor's input).",
	})
	m.BatchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "vigil_batch_size", Help: "Requests per batched engine execution.",
		Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 32},
	})
	m.BatchWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "vigil_batch_queue_wait_seconds", Help: "Time a request waited in the batcher before its batch ran.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
	})
	m.EngineBatch = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vigil_engine_batch_seconds", Help: "Compute time of one engine execution, by the engine's batch size.",
		Buckets: prometheus.ExponentialBuckets(0.00025, 2, 15),
	}, []string{"batch"})
	m.BatchLate = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vigil_batch_late_total", Help: "Requests the batcher refused because they could not finish by their deadline.",
	})
	m.GPUStage = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vigil_gpu_batch_stage_seconds", Help: "GPU engine time per batch by stage: host (staging, host clock), h2d, preprocess, infer, d2h (CUDA events).",
		Buckets: prometheus.ExponentialBuckets(0.00001, 2, 18),
	}, []string{"model", "batch", "stage"})
	m.GPULaunch = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vigil_gpu_launch_seconds", Help: "Host time of one ONNX Runtime Run call on the GPU engine (it returns when the run is done on the GPU).",
		Buckets: prometheus.ExponentialBuckets(0.000001, 2, 18),
	}, []string{"model", "batch"})
	if reg != nil {
		reg.MustRegister(m.PTSDiscontinuities, m.ModelSwitches, m.ActiveModel)
		reg.MustRegister(m.Decoded, m.Processed, m.Dropped, m.Skipped, m.Detections, m.Latency, m.QueueDepth, m.BudgetMisses, m.Up, m.StreamState, m.Degraded,
			m.TotalQueue, m.BatchSize, m.BatchWait, m.EngineBatch, m.BatchLate, m.GPUStage, m.GPULaunch)
	}
	return m
}

// Forget deletes every series of a removed stream, so that churn of
// stream ids does not grow /metrics without bound.
func (m *Metrics) Forget(stream string) {
	l := prometheus.Labels{"stream": stream}
	m.Decoded.DeletePartialMatch(l)
	m.Processed.DeletePartialMatch(l)
	m.Dropped.DeletePartialMatch(l)
	m.Skipped.DeletePartialMatch(l)
	m.Detections.DeletePartialMatch(l)
	m.Latency.DeletePartialMatch(l)
	m.QueueDepth.DeletePartialMatch(l)
	m.BudgetMisses.DeletePartialMatch(l)
	m.Up.DeletePartialMatch(l)
	m.StreamState.DeletePartialMatch(l)
	m.Degraded.DeletePartialMatch(l)
	m.PTSDiscontinuities.DeletePartialMatch(l)
	m.ModelSwitches.DeletePartialMatch(l)
	m.ActiveModel.DeletePartialMatch(l)
}

// lifecycle lists the states of vigil_stream_state, in the order of
// State's diagram.
var lifecycle = [5]State{StateStarting, StateRunning, StateReconnecting, StateFailed, StateStopped}

// SetState sets vigil_stream_up (1 only while running) and
// vigil_stream_state of stream to st. RunStream calls it on every
// transition; the service calls it for a stream that failed before it
// could run (its model did not load, say), which RunStream never sees.
func (m *Metrics) SetState(stream string, st State) {
	m.forState(stream).set(st)
}

// stateGauges are one stream's vigil_stream_up and vigil_stream_state
// series.
type stateGauges struct {
	up    prometheus.Gauge
	state [len(lifecycle)]prometheus.Gauge
}

func (m *Metrics) forState(stream string) stateGauges {
	g := stateGauges{up: m.Up.WithLabelValues(stream)}
	for i, st := range lifecycle {
		g.state[i] = m.StreamState.WithLabelValues(stream, string(st))
	}
	return g
}

func (g stateGauges) set(st State) {
	up := 0.0
	if st == StateRunning {
		up = 1
	}
	g.up.Set(up)
	for i, l := range lifecycle {
		v := 0.0
		if l == st {
			v = 1
		}
		g.state[i].Set(v)
	}
}

// streamMetrics are one stream's collectors, resolved once so that the
// per-frame path does no label hashing.
type streamMetrics struct {
	decoded, processed, detections prometheus.Counter
	budgetMisses                   prometheus.Counter
	state                          stateGauges
	queueDepth                     prometheus.Gauge
	stages                         [7]prometheus.Observer // in stageOrder
	skips                          [len(skipReasons)]prometheus.Counter
	m                              *Metrics
	stream                         string
	status                         *Status
	// discontinuities is vigil_pts_discontinuities_total{stream}.
	discontinuities prometheus.Counter
}

var stageOrder = [7]string{StageDecode, StageQueue, StagePreprocess, StageInfer, StagePostprocess, StagePublish, StageTotal}

func (m *Metrics) forStream(stream string) *streamMetrics {
	sm := &streamMetrics{
		decoded:      m.Decoded.WithLabelValues(stream),
		processed:    m.Processed.WithLabelValues(stream),
		detections:   m.Detections.WithLabelValues(stream),
		budgetMisses: m.BudgetMisses.WithLabelValues(stream),
		state:        m.forState(stream),
		queueDepth:   m.QueueDepth.WithLabelValues(stream),
		m:            m,
		stream:       stream,
	}
	sm.discontinuities = m.PTSDiscontinuities.WithLabelValues(stream)
	for i, s := range stageOrder {
		sm.stages[i] = m.Latency.WithLabelValues(stream, s)
	}
	for i, r := range skipReasons {
		sm.skips[i] = m.Skipped.WithLabelValues(stream, string(r))
	}
	return sm
}

func (sm *streamMetrics) drop(stage string, r DropReason) {
	sm.m.Dropped.WithLabelValues(sm.stream, stage, string(r)).Inc()
	sm.status.dropped(r)
}

func (sm *streamMetrics) skip(r SkipReason) {
	sm.status.skipped()
	for i, x := range skipReasons {
		if x == r {
			sm.skips[i].Inc()
			return
		}
	}
	sm.m.Skipped.WithLabelValues(sm.stream, string(r)).Inc()
}

// observe records one published frame's stage times.
func (sm *streamMetrics) observe(st *StageTimes) {
	for i, d := range [7]time.Duration{st.Decode, st.Queue, st.Preprocess, st.Infer, st.Postprocess, st.Publish, st.Total} {
		sm.stages[i].Observe(d.Seconds())
	}
}
