package pipeline

import (
	"context"
	"time"
)

// Image is a decoded picture in whatever pixel format the decoder produced.
// It is owned by exactly one Frame; Release returns its memory (for decode's
// images, an FFmpeg AVFrame reference) and must be called exactly once, by the
// stage that consumes or drops the frame. Width and Height are in pixels.
type Image interface {
	Width() int
	Height() int
	Release()
}

// Frame is one decoded video frame travelling through the pipeline.
//
// Ownership: the Source allocates it and hands it to emit; from then on the
// pipeline owns it and releases Image when the frame is processed or dropped.
type Frame struct {
	// StreamID is the stream's id, a NATS subject token.
	StreamID string
	// Seq numbers the decoded frames of one stream from 0, across reconnects
	// and loops, without gaps: a gap in published seq means dropped frames.
	Seq uint64
	// PTS is the presentation time in seconds, converted from the stream's
	// time base (AVStream.time_base) and relative to the stream's first
	// frame. It does not go back: across a timestamp discontinuity, a
	// looping file's restart and a reconnect (a later Source.Run) the
	// source continues its timeline (see Discontinuity).
	PTS float64
	// Discontinuity is true on the first frame of a new source timeline:
	// after the source's timestamps stepped back or jumped forward by more
	// than its stall limit (a camera's timestamp reset, concatenated
	// recordings), and on the first frame after a reconnect. Its PTS was
	// placed one frame interval after the previous frame's (for live
	// sources, later by the wall time that passed beyond one interval), so
	// the PTS step to it is not the source's own. A looping file's restart
	// is not one.
	Discontinuity bool
	// Keyframe is true for intra-coded (key) frames.
	Keyframe bool
	// Corrupt is true when the decoder reported damage in this frame: it
	// concealed errors (lost or corrupt data), decoded it with missing
	// references (a stream joined before its first keyframe), or its
	// packet was flagged corrupt by the demuxer. Its pixels, and so its
	// detections, may be wrong.
	Corrupt bool
	// Arrival is the wall-clock time at which the demuxer handed over this
	// frame's own packet (matched by PTS, else DTS, so the time the decoder
	// held it for reordering or frame threads counts): the start of the
	// latency budget. With B-frames, frames leave the decoder in display
	// order, so Arrival need not increase from frame to frame.
	Arrival time.Time
	// Decoded is the wall-clock time at which the decoder returned the frame.
	Decoded time.Time
	// wait is the part of Decoded − Arrival that is the stream's reorder
	// delay: its budget starts after it. Set by the stream at ingest.
	wait time.Duration
	// Image holds the pixels; see Image for ownership.
	Image Image
}

// Point is a position in source-frame pixels (origin top-left, x right, y down).
type Point struct {
	X float32 `json:"x"`
	Y float32 `json:"y"`
}

// Box is an axis-aligned box in source-frame pixels: (X1,Y1) top-left,
// (X2,Y2) bottom-right, X1 <= X2 and Y1 <= Y2, clamped to the frame.
type Box struct {
	X1 float32 `json:"x1"`
	Y1 float32 `json:"y1"`
	X2 float32 `json:"x2"`
	Y2 float32 `json:"y2"`
}

// Detection is one detected object.
type Detection struct {
	// Label is the class name, e.g. "face" or "person".
	Label string `json:"label"`
	// ClassID is the model's class index (0 for single-class models).
	ClassID int `json:"class_id"`
	// Score is the detection confidence in [0, 1].
	Score float32 `json:"score"`
	// Box is in source-frame pixels.
	Box Box `json:"box"`
	// Keypoints are model-specific landmarks in source-frame pixels, nil when
	// the model has none (BlazeFace: eye, eye, nose, mouth, ear, ear).
	Keypoints []Point `json:"keypoints,omitempty"`
	// TrackID names the tracked object this detection belongs to, set by
	// the analytics stage (package analytics) once the object's track is
	// confirmed: "<epoch>-<n>", unique within a stream and never reused in
	// a run. Empty without analytics, or while the track is tentative.
	TrackID string `json:"track_id,omitempty"`
	// Zones lists the names of the analytics zones the tracked object is
	// in (after the zone's inertia), in the order of the stream's zones;
	// nil outside every zone or without analytics. Read-only: the stage
	// may share one slice between frames.
	Zones []string `json:"zones,omitempty"`
}

// StageTimes is the wall time one frame spent in each stage.
type StageTimes struct {
	// Decode: from Frame.Arrival until the decoder returned the frame.
	Decode time.Duration
	// Queue: waiting in the queue between the source and the worker.
	Queue time.Duration
	// Preprocess: swscale resize/letterbox and tensor normalisation.
	Preprocess time.Duration
	// Infer: the ONNX Runtime Run call.
	Infer time.Duration
	// Postprocess: decoding outputs, NMS, mapping to source pixels.
	Postprocess time.Duration
	// Analytics: the stream's Analyzer (tracking, zones, lines), 0 for a
	// stream without one.
	Analytics time.Duration
	// Publish: from Result.Ready to the message being handed to the
	// transport. In the message itself it ends at Result.Published (before
	// encoding, which cannot be in the message it produces); in metrics it
	// includes encoding and the write.
	Publish time.Duration
	// Total: from Frame.Arrival to the publish time.
	Total time.Duration
}

// Result is what the pipeline hands to a Sink for one processed frame.
type Result struct {
	StreamID string
	// Epoch is the stream run's epoch (StreamConfig.Epoch): with Seq it
	// identifies the frame across restarts and reconfigurations.
	Epoch string
	// Labels are the stream's labels (StreamConfig.Labels); read-only.
	Labels   map[string]string
	Seq      uint64
	PTS      float64
	Keyframe bool
	// Corrupt is Frame.Corrupt.
	Corrupt bool
	// Capture is Frame.Arrival.
	Capture time.Time
	// Ready is when postprocessing (and the stream's Analyzer, if any)
	// finished and the result went to the sink.
	Ready time.Time
	// Published is set by the Sink to the wall time the message was built.
	Published time.Time
	// Width and Height of the source frame in pixels.
	Width, Height int
	// Model is the engine's model name.
	Model      string
	Detections []Detection
	Stages     StageTimes
	// Budget is the stream's latency budget (0: none).
	Budget time.Duration
	// ReorderWait is the part of Stages.Decode that was the stream's
	// inherent reorder delay (B-frames; see RunStream): the frame's budget
	// started after it, so it is over budget when Stages.Total −
	// ReorderWait exceeds Budget. Stages.Total still counts from Capture.
	ReorderWait time.Duration
	// OverBudget is set by the Sink: Stages.Total − ReorderWait exceeded
	// Budget.
	OverBudget bool
	// Buffered is set by the Sink when it accepted the result without
	// sending it: the NATS client held it in its reconnect buffer while
	// disconnected (sent on reconnect, lost if the connection closes
	// first). Such results count as published, and are shown apart.
	Buffered bool
	// DroppedSinceLast counts this stream's frames lost (DropReason)
	// since the previous published result.
	DroppedSinceLast int
	// Discontinuity: this frame, or a frame dropped since the previous
	// published result, started a new source timeline
	// (Frame.Discontinuity).
	Discontinuity bool
	// SkippedSinceLast counts this stream's frames skipped by policy
	// (SkipReason) since the previous published result.
	SkippedSinceLast int
	// KeepMessage asks the Sink to set Message: the worker sets it on a
	// frame a Tap takes, whose consumer wants the message as sent.
	KeepMessage bool
	// Message is set by a Sink that encodes results, when KeepMessage is
	// set, to a copy of the message it sent (the NATS sink: the detections
	// message's body); nil otherwise.
	Message []byte
}

// Source produces decoded frames from one camera, URL or file.
//
// Run opens the source and calls emit, from Run's goroutine, for each decoded
// frame until ctx is cancelled (it then returns ctx.Err()), the input ends
// (io.EOF for a file that does not loop) or fails (any other error). Run never
// retries on its own: the caller owns reconnection. emit must not block.
type Source interface {
	Run(ctx context.Context, emit func(*Frame)) error
}

// Engine runs a detection model on one image.
//
// Detect preprocesses img (resize/letterbox to the model's fixed input),
// runs the model and postprocesses its outputs, appending detections in
// source-frame pixels to dst[:0] and returning it. It records the time of
// each of the three steps in st (Preprocess, Infer, Postprocess). Detect does
// not release img. Implementations serialise concurrent calls.
type Engine interface {
	Model() string
	Detect(img Image, st *StageTimes, dst []Detection) ([]Detection, error)
}

// Sink delivers results downstream.
//
// Publish sets r.Published and, for the message, r.Stages.Publish and
// r.Stages.Total up to r.Published; encodes and sends r; then sets
// r.Stages.Publish and r.Stages.Total again up to the end of the send, for
// metrics. It must not keep r after returning.
type Sink interface {
	Publish(ctx context.Context, r *Result) error
}

// Analyzer is a stream's analytics (tracking, zones, lines: package
// analytics, through an adapter of the service's). RunStream calls it on
// the stream's worker goroutine, so calls never overlap.
type Analyzer interface {
	// Analyze observes one processed frame, after the engine and before
	// the sink: r.PTS (monotonic within the run), r.Capture, r.Width,
	// r.Height and r.Detections, whose TrackID and Zones it may set;
	// r.StreamID and r.Epoch name the run. Frames dropped or skipped are
	// never analyzed (a gap in PTS is a gap in time). It must not block
	// for long nor keep r. It reports whether it analyzed the frame
	// (false while the stream has no analytics configured): only then is
	// its time the result's StageTimes.Analytics.
	Analyze(r *Result) bool
	// Close ends the run: RunStream calls it once, after its worker has
	// returned, however the stream ended (input end, failure,
	// cancellation), and not at all when the worker never started.
	Close()
}

// PixelOrder is the channel order of packed 8-bit, 3-channel pixels.
type PixelOrder int

// Channel orders.
const (
	RGB PixelOrder = iota // R, G, B (MediaPipe/TFLite models)
	BGR                   // B, G, R (OpenCV-trained models such as YOLOX)
)
