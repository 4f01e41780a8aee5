package analytics

import (
	_ "embed"
	"time"

	"github.com/vigil-video/vigil/pipeline"
)

// SchemaVersion is the value of Event.Schema for this layout. Adding
// optional fields keeps it; renaming, removing or changing the meaning of
// a field bumps it.
const SchemaVersion = "vigil.analytics/v1"

// SchemaJSON is the JSON Schema (draft 2020-12) of Event.
//
//go:embed analytics.schema.json
var SchemaJSON []byte

// EventType says what happened.
type EventType string

// The event types.
const (
	// EventTrackStart: a track was confirmed (the object got its id).
	EventTrackStart EventType = "track_start"
	// EventTrackEnd: a track ended, lost for longer than lost_after (or the
	// stage closed); it carries first_seen, last_seen, zones and lines.
	EventTrackEnd EventType = "track_end"
	// EventZoneEnter: a track entered a zone (after the zone's inertia).
	EventZoneEnter EventType = "zone_enter"
	// EventZoneExit: a track left a zone (after the inertia), or ended
	// while in it.
	EventZoneExit EventType = "zone_exit"
	// EventLineCross: a track crossed a line; Direction says which way.
	EventLineCross EventType = "line_cross"
	// EventLoiter: a track has stayed in a zone for the zone's
	// loiter_after (once per stay); Duration is the time since it entered.
	EventLoiter EventType = "loiter"
	// EventStationary: a track's box has not moved (within
	// stationary_move) for stationary_after; Duration is that time. Once
	// per stop: the track must move again before another.
	EventStationary EventType = "stationary"
	// EventWarning is about the stream rather than one track: Reason says
	// what (ReasonResolutionChanged), Message in words.
	EventWarning EventType = "warning"
)

// Direction is the way a line was crossed.
type Direction string

// The directions (see Line).
const (
	// DirIn: from the negative to the positive side of the line.
	DirIn Direction = "in"
	// DirOut: from the positive to the negative side.
	DirOut Direction = "out"
)

// ReasonResolutionChanged is the Reason of the warning sent when frames
// of a new size arrive: the geometry is rescaled in proportion from the
// size it was drawn for.
const ReasonResolutionChanged = "resolution_changed"

// Event is the wire form of one analytics event. Times are RFC 3339 in
// UTC as the caller gave them (the frame's wall time); PTS is in seconds;
// coordinates are source pixels.
type Event struct {
	// Schema is SchemaVersion.
	Schema string `json:"schema"`
	// Type says what happened.
	Type EventType `json:"type"`
	// StreamID is the stream's id.
	StreamID string `json:"stream_id"`
	// Node is the node.id of the vigil that published the event (set by
	// the service when it publishes; empty in `vigil detect`'s output).
	Node string `json:"node,omitempty"`
	// Epoch names the stream's run (pipeline.NewEpoch).
	Epoch string `json:"epoch"`
	// Seq numbers the run's events from 0 without gaps, so that
	// (stream, epoch, seq) names an event for good: the wiring's
	// Nats-Msg-Id, e.g. "<stream>/<epoch>/e<seq>" (the "e" keeping it
	// apart from the frames' ids).
	Seq uint64 `json:"seq"`
	// Time is the wall time of the frame the event was seen in, as the
	// caller gave it to Observe (or Close).
	Time time.Time `json:"time"`
	// PTS is that frame's presentation time, in seconds.
	PTS float64 `json:"pts"`
	// TrackID is the track's id, "<epoch>-<n>"; set on every event but
	// warnings.
	TrackID string `json:"track_id,omitempty"`
	// Label is the track's class (its first detection's label); set
	// with TrackID.
	Label string `json:"label,omitempty"`
	// Box is the track's last observed box, in source pixels, as the
	// model gave it; set with TrackID.
	Box pipeline.Box `json:"box,omitzero"`
	// Snapshot names the event's picture, on track_start, zone_enter,
	// line_cross and loiter while event snapshots are on (set by the
	// service, which stores the JPEG under this name in the JetStream
	// object store bucket <prefix>_snapshots shortly after publishing the
	// event; see docs/schema.md). Empty otherwise, and in `vigil detect`.
	Snapshot string `json:"snapshot,omitempty"`
	// Zone names the zone of a zone_enter, zone_exit or loiter.
	Zone string `json:"zone,omitempty"`
	// Line names the line of a line_cross.
	Line string `json:"line,omitempty"`
	// Direction is the way a line_cross went.
	Direction Direction `json:"direction,omitempty"`
	// Duration, in seconds: on loiter the time in the zone, on stationary
	// the time still, on track_end the time from first to last seen.
	Duration float64 `json:"duration,omitempty"`
	// FirstSeen is, on track_end, the first frame the track was observed
	// in.
	FirstSeen *Seen `json:"first_seen,omitempty"`
	// LastSeen is, on track_end, the last frame the track was observed
	// in.
	LastSeen *Seen `json:"last_seen,omitempty"`
	// Zones are, on track_end, the zones the track entered, each once, in
	// the order it first did; [] for none.
	Zones []string `json:"zones,omitzero"`
	// Lines are, on track_end, the lines the track crossed, each once, in
	// the order it first did; [] for none.
	Lines []string `json:"lines,omitzero"`
	// Reason says what a warning is about (ReasonResolutionChanged).
	Reason string `json:"reason,omitempty"`
	// Message says it in words (warnings).
	Message string `json:"message,omitempty"`
	// FrameSize is a resolution_changed warning's new [width, height],
	// in pixels.
	FrameSize []int `json:"frame_size,omitempty"`
	// PrevFrameSize is the size before it (for the first frame: the
	// size the geometry was drawn for).
	PrevFrameSize []int `json:"prev_frame_size,omitempty"`
}

// Seen is a moment of a track: a frame's wall time and PTS (seconds).
type Seen struct {
	// Time is the frame's wall time.
	Time time.Time `json:"time"`
	// PTS is the frame's presentation time, in seconds.
	PTS float64 `json:"pts"`
}
