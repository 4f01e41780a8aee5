package sinks

import (
	_ "embed"
	"time"

	"github.com/vigil-video/vigil/pipeline"
)

// SchemaVersion is the value of Message.Schema for this layout. Adding
// optional fields keeps it; renaming, removing or changing the meaning of a
// field bumps it.
const SchemaVersion = "vigil.detections/v1"

// SchemaJSON is the JSON Schema (draft 2020-12) of Message.
//
//go:embed detections.schema.json
var SchemaJSON []byte

// Message is the wire form of one processed frame. Times are RFC 3339 with
// nanoseconds in UTC; coordinates are source-frame pixels.
type Message struct {
	Schema   string `json:"schema"`
	StreamID string `json:"stream_id"`
	// Node is the node.id of the vigil that published the message (the
	// NATS sink sets it; absent in `vigil detect`'s output).
	Node string `json:"node,omitempty"`
	// Epoch names the run of the stream (pipeline.NewEpoch): 12 base-36
	// digits, new at every start, restart and reconfiguration; Seq counts
	// from 0 in each run.
	Epoch    string  `json:"epoch"`
	Seq      uint64  `json:"seq"`
	PTS      float64 `json:"pts"` // seconds; never goes back (pipeline.Frame.PTS)
	Keyframe bool    `json:"keyframe"`
	// Corrupt: the decoder reported damage in this frame
	// (pipeline.Frame.Corrupt); its detections may be wrong.
	Corrupt bool `json:"corrupt"`
	// Discontinuity: this frame, or one dropped since the previous
	// message, started a new source timeline (pipeline.Frame.Discontinuity):
	// the step from the previous message's PTS is not the source's own.
	Discontinuity bool `json:"discontinuity"`
	// CaptureTime is when the frame's own packet arrived (Frame.Arrival).
	CaptureTime time.Time `json:"capture_time"`
	// PublishTime is when this message was built.
	PublishTime time.Time `json:"publish_time"`
	Width       int       `json:"width"`  // source pixels
	Height      int       `json:"height"` // source pixels
	Model       string    `json:"model"`
	// Labels are the stream's labels from its spec; absent when it has none.
	Labels     map[string]string    `json:"labels,omitempty"`
	Detections []pipeline.Detection `json:"detections"`
	LatencyMS  Latency              `json:"latency_ms"`
	// BudgetMS is the stream's latency budget in ms (0: none).
	BudgetMS float64 `json:"budget_ms"`
	// OverBudget: latency_ms.total − latency_ms.reorder exceeded budget_ms.
	OverBudget bool `json:"over_budget"`
	// DroppedSinceLast counts this stream's frames lost (a fault: overload,
	// errors, network bursts; pipeline.DropReason) since the previous
	// message.
	DroppedSinceLast int `json:"dropped_since_last"`
	// SkippedSinceLast counts this stream's frames skipped by policy
	// (fps_limit, degraded rate, connect catch-up; pipeline.SkipReason)
	// since the previous message. With DroppedSinceLast it accounts for
	// every seq gap.
	SkippedSinceLast int `json:"skipped_since_last"`
}

// Latency is per-stage wall time in milliseconds; see pipeline.StageTimes.
// Total is CaptureTime to PublishTime.
type Latency struct {
	Decode      float64 `json:"decode"`
	Queue       float64 `json:"queue"`
	Preprocess  float64 `json:"preprocess"`
	Infer       float64 `json:"infer"`
	Postprocess float64 `json:"postprocess"`
	// Analytics is the stream's analytics stage (tracking, zones, lines);
	// absent for a stream without analytics.
	Analytics float64 `json:"analytics,omitempty"`
	Publish   float64 `json:"publish"`
	Total     float64 `json:"total"`
	// Reorder is the part of Decode that was the stream's inherent reorder
	// delay (B-frames; pipeline.Result.ReorderWait): the frame's budget
	// started after it, so OverBudget is Total − Reorder > BudgetMS.
	Reorder float64 `json:"reorder"`
}

func msec(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// stamp sets r.Published to now and the message-side Publish and Total
// stage times, and returns the message for r.
func stamp(r *pipeline.Result) Message {
	now := time.Now()
	r.Published = now
	if !r.Ready.IsZero() {
		r.Stages.Publish = now.Sub(r.Ready)
	}
	r.Stages.Total = now.Sub(r.Capture)
	r.OverBudget = r.Budget > 0 && r.Stages.Total-r.ReorderWait > r.Budget
	dets := r.Detections
	if dets == nil {
		dets = []pipeline.Detection{}
	}
	st := r.Stages
	return Message{
		Schema: SchemaVersion, StreamID: r.StreamID, Epoch: r.Epoch, Labels: r.Labels, Seq: r.Seq, PTS: r.PTS, Keyframe: r.Keyframe, Corrupt: r.Corrupt, Discontinuity: r.Discontinuity,
		CaptureTime: r.Capture.UTC(), PublishTime: now.UTC(), Width: r.Width, Height: r.Height,
		Model: r.Model, Detections: dets, BudgetMS: msec(r.Budget), OverBudget: r.OverBudget,
		DroppedSinceLast: r.DroppedSinceLast, SkippedSinceLast: r.SkippedSinceLast,
		LatencyMS: Latency{
			Decode: msec(st.Decode), Queue: msec(st.Queue), Preprocess: msec(st.Preprocess), Infer: msec(st.Infer),
			Postprocess: msec(st.Postprocess), Analytics: msec(st.Analytics), Publish: msec(st.Publish), Total: msec(st.Total),
			Reorder: msec(r.ReorderWait),
		},
	}
}

// finish sets the metric-side Publish and Total stage times after the send.
func finish(r *pipeline.Result) {
	now := time.Now()
	if !r.Ready.IsZero() {
		r.Stages.Publish = now.Sub(r.Ready)
	}
	r.Stages.Total = now.Sub(r.Capture)
}
