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
	Schema string    `json:"schema"`
	Type   EventType `json:"type"`
	// StreamID and Epoch name the stream's run; Seq numbers the run's
	// events from 0 without gaps, so "<stream>/<epoch>/<seq>" (with a
	// marker that it is an event) is unique for good: the wiring's
	// Nats-Msg-Id.
	StreamID string `json:"stream_id"`
	Epoch    string `json:"epoch"`
	Seq      uint64 `json:"seq"`
	// Time is the wall time of the frame the event was seen in; PTS its
	// presentation time in seconds.
	Time time.Time `json:"time"`
	PTS  float64   `json:"pts"`
	// TrackID ("<epoch>-<n>"), Label and Box (the track's last observed
	// box) are set on every event about a track.
	TrackID string       `json:"track_id,omitempty"`
	Label   string       `json:"label,omitempty"`
	Box     pipeline.Box `json:"box,omitzero"`
	// Zone is set on zone_enter, zone_exit and loiter; Line and Direction
	// on line_cross.
	Zone      string    `json:"zone,omitempty"`
	Line      string    `json:"line,omitempty"`
	Direction Direction `json:"direction,omitempty"`
	// Duration in seconds: on loiter the time in the zone, on stationary
	// the time still, on track_end the time from first to last seen.
	Duration float64 `json:"duration,omitempty"`
	// FirstSeen and LastSeen (track_end): the first and last frames the
	// track was observed in, as wall time and PTS.
	FirstSeen *Seen `json:"first_seen,omitempty"`
	LastSeen  *Seen `json:"last_seen,omitempty"`
	// Zones and Lines (track_end): the zones the track entered and the
	// lines it crossed, each once, in the order it first did; [] for none.
	Zones []string `json:"zones,omitzero"`
	Lines []string `json:"lines,omitzero"`
	// Reason and Message (warning); FrameSize is the new [width, height]
	// and PrevFrameSize the one before, in pixels.
	Reason        string `json:"reason,omitempty"`
	Message       string `json:"message,omitempty"`
	FrameSize     []int  `json:"frame_size,omitempty"`
	PrevFrameSize []int  `json:"prev_frame_size,omitempty"`
}

// Seen is a moment of a track: a frame's wall time and PTS (seconds).
type Seen struct {
	Time time.Time `json:"time"`
	PTS  float64   `json:"pts"`
}
