package analytics

import (
	_ "embed"
	"time"
)

// CountsSchemaVersion is the value of Counts.Schema for this layout.
const CountsSchemaVersion = "vigil.counts/v1"

// CountsSchemaJSON is the JSON Schema (draft 2020-12) of Counts.
//
//go:embed counts.schema.json
var CountsSchemaJSON []byte

// Counts is a snapshot of a stream's counts, ready to publish (the
// wiring sends it on <prefix>.<id>.counts when Version changes, at most
// once a second). Only confirmed tracks count.
type Counts struct {
	// Schema is CountsSchemaVersion.
	Schema string `json:"schema"`
	// StreamID is the stream's id.
	StreamID string `json:"stream_id"`
	// Node is the node.id of the vigil that published the counts (set by
	// the service when it publishes; empty in `vigil detect`'s output).
	Node string `json:"node,omitempty"`
	// Epoch names the stream's run.
	Epoch string `json:"epoch"`
	// Version grows by one or more with every change of any count in the
	// run (Stage.CountsVersion), so equal versions mean equal counts.
	Version uint64 `json:"version"`
	// Time is the wall time of the last frame observed.
	Time time.Time `json:"time"`
	// PTS is the presentation time of that frame, in seconds.
	PTS float64 `json:"pts"`
	// Zones are the zones' occupancy, in the order of the config.
	Zones []ZoneCount `json:"zones"`
	// Lines are the lines' crossings, in the order of the config.
	Lines []LineCount `json:"lines"`
}

// ZoneCount is the occupancy of one zone now.
type ZoneCount struct {
	// Name is the zone's name.
	Name string `json:"name"`
	// Occupancy is the number of tracks inside by label, for every label
	// that has been inside during the run (0 once they have all left),
	// so that a gauge per label can go back to 0.
	Occupancy map[string]int `json:"occupancy"`
	// Total is the number of tracks inside, all labels.
	Total int `json:"total"`
}

// LineCount is the crossings of one line since the run began (or since
// the line was added by Reconfigure), by label and direction.
type LineCount struct {
	// Name is the line's name.
	Name string `json:"name"`
	// In counts the crossings "in" by label, Out those "out", for every
	// label that has crossed either way (0 for a way it has not).
	In  map[string]uint64 `json:"in"`
	Out map[string]uint64 `json:"out"` // see In
}
