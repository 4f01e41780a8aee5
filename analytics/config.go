package analytics

import (
	"fmt"
	"math"
	"regexp"
	"time"
)

// Defaults of the tracker settings, used where a field is zero.
const (
	// DefaultHighScore is ByteTrack's track threshold (track_thresh 0.5 in
	// its published MOT17 settings): detections scoring above it are
	// matched first and may start tracks.
	DefaultHighScore = 0.5
	// DefaultMatchIoU is ByteTrack's first-association gate, match_thresh
	// 0.8 as a cost 1 − IoU, i.e. IoU above 0.2 (see Stage.associate on why
	// the IoU is not multiplied by the score).
	DefaultMatchIoU = 0.2
	// DefaultConfirmHits is the number of consecutive matched frames that
	// confirm a track (the example; ByteTrack confirms on the
	// second): one or two frames of a flickering false positive never
	// become an object.
	DefaultConfirmHits = 3
	// DefaultLostAfter is how long a track is kept without detections:
	// between ByteTrack's 30 frames at 30 fps (1 s) and Frigate's 5 s.
	DefaultLostAfter = 2 * time.Second
	// DefaultStationaryAfter is how long a box must stay still to be
	// stationary: Frigate's default stationary threshold of 50 frames at
	// its default 5 fps detection rate.
	DefaultStationaryAfter = 10 * time.Second
	// DefaultStationaryMove is how far, as a fraction of the box's width
	// (horizontally) and height (vertically), a stationary box's edges may
	// move: well above the few per cent a detector's boxes jitter by, well
	// below a walking person's step.
	DefaultStationaryMove = 0.1
	// DefaultMinFrames is a zone's inertia: Frigate's default zone inertia
	// of 3 frames.
	DefaultMinFrames = 3
	// DefaultDebounce is how long a line ignores a second crossing by the
	// same track in the same direction: a track jittering on the line
	// counts once each way.
	DefaultDebounce = 5 * time.Second
)

// ByteTrack's fixed thresholds (BYTETracker.update in its
// yolox/tracker/byte_tracker.py), not configurable there either.
const (
	// lowScore: detections scoring above it and not above the high score
	// are matched, second, to tracks left over; below it they are ignored.
	lowScore = 0.1
	// newTrackMargin: a detection starts a track only when it scores at
	// least the high score plus this (det_thresh = track_thresh + 0.1).
	newTrackMargin = 0.1
	// secondMatchIoU: the gate of the second association (cost 0.5).
	secondMatchIoU = 0.5
	// tentativeMatchIoU: the gate matching tentative tracks (cost 0.7).
	tentativeMatchIoU = 0.3
)

// Config is the analytics of one stream: the tracker's settings, the
// zones and the lines. Its zero value tracks with the defaults and has no
// zones or lines. It decodes from JSON (the registry, the API) and YAML
// (`vigil detect --analytics`); call Validate before New or Reconfigure
// (they validate too, and fail on the first problem).
type Config struct {
	// Tracker holds the tracker's settings.
	Tracker Tracker `json:"tracker,omitzero" yaml:"tracker,omitempty"`
	// Zones are polygons that report objects entering, leaving and
	// staying, and count the objects inside.
	Zones []Zone `json:"zones,omitempty" yaml:"zones,omitempty"`
	// Lines are segments that count objects crossing them, by direction.
	Lines []Line `json:"lines,omitempty" yaml:"lines,omitempty"`
	// FrameSize is [width, height], in pixels, of the frame the geometry
	// was drawn on. Empty: the size of the first frame the stage sees.
	// When a frame of another size arrives, the geometry is scaled from
	// this size in proportion (and a warning event says so).
	FrameSize []int `json:"frame_size,omitempty" yaml:"frame_size,omitempty"`
}

// Tracker holds the tracker's settings; a zero field takes its default.
type Tracker struct {
	// HighScore: detections scoring above it are matched first and may
	// start tracks (at HighScore + 0.1); those between 0.1 and it only
	// continue tracks. In (0.1, 0.9]. Default 0.5 (DefaultHighScore).
	HighScore float64 `json:"high_score,omitempty" yaml:"high_score,omitempty" default:"0.5"`
	// MatchIoU: a detection continues a track in the first association
	// only if their IoU is above it; in (0, 1). Default 0.2 (DefaultMatchIoU).
	MatchIoU float64 `json:"match_iou,omitempty" yaml:"match_iou,omitempty" default:"0.2"`
	// ConfirmHits is the number of consecutive matched frames that
	// confirm a track, 1 to 100; only confirmed tracks get ids, events and
	// counts. Default 3 (DefaultConfirmHits).
	ConfirmHits int `json:"confirm_hits,omitempty" yaml:"confirm_hits,omitempty" default:"3"`
	// LostAfter is how long, in PTS time, a track is kept without
	// detections before it ends, counted from the first processed frame
	// that missed it (frames dropped before it say nothing); one re-found
	// within it keeps its id. Default 2s (DefaultLostAfter); at most 1h.
	LostAfter Duration `json:"lost_after,omitempty" yaml:"lost_after,omitempty" default:"2s"`
	// StationaryAfter is how long a confirmed track's box must stay within
	// StationaryMove to be stationary. Default 10s
	// (DefaultStationaryAfter).
	StationaryAfter Duration `json:"stationary_after,omitempty" yaml:"stationary_after,omitempty" default:"10s"`
	// StationaryMove is the movement allowed to a stationary box: a
	// fraction of its width for its left and right edges and of its
	// height for the top and bottom, in (0, 1]. Default 0.1
	// (DefaultStationaryMove).
	StationaryMove float64 `json:"stationary_move,omitempty" yaml:"stationary_move,omitempty" default:"0.1"`
}

// Anchor names the point of a box that zones test.
type Anchor string

// The anchors.
const (
	// AnchorBottomCenter is the middle of the box's bottom edge: where a
	// person stands or a car touches the ground (the default).
	AnchorBottomCenter Anchor = "bottom_center"
	// AnchorCenter is the centre of the box.
	AnchorCenter Anchor = "center"
)

// Zone is a polygon of interest.
type Zone struct {
	// Name is 1-64 of [A-Za-z0-9_-] (a NATS subject token and a metric
	// label value), unique among the stream's zones and lines.
	Name string `json:"name" yaml:"name" default:"required" example:"door"`
	// Polygon is at least 3 points [x, y] in source pixels, in order
	// around a simple polygon (no edge may cross or touch another).
	Polygon []XY `json:"polygon" yaml:"polygon,flow" default:"required" example:"[[100, 80], [400, 80], [400, 300], [100, 300]]"`
	// Classes are the labels that count here; empty: every class.
	Classes []string `json:"classes,omitempty" yaml:"classes,omitempty,flow" example:"[face]"`
	// Anchor is the point of the box tested: bottom_center (default) or
	// center.
	Anchor Anchor `json:"anchor,omitempty" yaml:"anchor,omitempty" default:"bottom_center" example:"bottom_center"`
	// MinFrames is the zone's inertia: the observations in a row inside
	// before an object enters, and outside before it exits; 1 to 1000.
	// Default 3 (DefaultMinFrames).
	MinFrames int `json:"min_frames,omitempty" yaml:"min_frames,omitempty" default:"3" example:"3"`
	// LoiterAfter: a loiter event once an object has stayed this long
	// (once per stay); 0: never.
	LoiterAfter Duration `json:"loiter_after,omitempty" yaml:"loiter_after,omitempty" default:"0s" example:"30s"`
}

// Line is a segment that counts crossings.
type Line struct {
	// Name is 1-64 of [A-Za-z0-9_-], unique among the stream's zones and
	// lines.
	Name string `json:"name" yaml:"name" default:"required" example:"gate"`
	// A and B are the line's ends [x, y] in source pixels. A crossing from
	// the negative to the positive side of cross(B − A, p − A), in image
	// coordinates (x right, y down), is "in"; the other way "out". Seen
	// on screen with A below B (a vertical line drawn upwards), "in" is
	// from left to right.
	A XY `json:"a" yaml:"a,flow" default:"required" example:"[640, 0]"`
	B XY `json:"b" yaml:"b,flow" default:"required" example:"[640, 720]"` // see A
	// Classes are the labels counted; empty: every class.
	Classes []string `json:"classes,omitempty" yaml:"classes,omitempty,flow" example:"[face]"`
	// Anchor is the point of the box whose path is tested: bottom_center
	// (default) or center.
	Anchor Anchor `json:"anchor,omitempty" yaml:"anchor,omitempty" default:"bottom_center" example:"bottom_center"`
	// Debounce: a track crossing again in the same direction within this
	// time is not counted again. Default 5s (DefaultDebounce).
	Debounce Duration `json:"debounce,omitempty" yaml:"debounce,omitempty" default:"5s" example:"5s"`
}

// XY is a point [x, y] in source pixels (origin top-left, x right, y
// down). It is a slice so that a point of the wrong length is reported by
// Validate with its field rather than failing the decoding.
type XY []float64

// Duration is a time span written as a Go duration string ("2s", "500ms",
// "1m30s") in JSON and YAML; "0" is zero.
type Duration time.Duration

// MarshalText writes the duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 2s, 500ms)", b)
	}
	*d = Duration(v)
	return nil
}

// Seconds returns the duration in seconds.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

// FieldError is one problem with one field of a Config; Field is its path
// from the Config, e.g. "zones[1].polygon" (the same shape as the
// registry's FieldError, so the API can answer 400 with the field, after
// prefixing "analytics.").
type FieldError struct {
	// Field is the path of the field, e.g. "lines[0].b".
	Field string
	// Msg says what is wrong with it.
	Msg string
}

// Error returns "<field>: <msg>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether s can name a zone or a line.
func ValidName(s string) bool { return validName.MatchString(s) }

// Limits on sizes, so that a stored spec cannot make the stage slow.
const (
	maxPolygonPoints = 1000
	maxZones         = 100
	maxLines         = 100
	maxClasses       = 100
	maxLostAfter     = time.Hour
)

// clockSlack absorbs the rounding of PTS sums: a track missed for exactly
// lost_after (a 2 s gap at 30 fps) is still alive at its last missed frame.
const clockSlack = 1e-3

// Validate returns the first problem of Problems, or nil.
func (c *Config) Validate() error {
	if p := c.Problems(); len(p) > 0 {
		return p[0]
	}
	return nil
}

// Problems checks every field and returns every problem in the order of
// the fields, or nil when the config is valid.
func (c *Config) Problems() []*FieldError {
	var p problems
	t := c.Tracker
	if t.HighScore != 0 && !(t.HighScore > lowScore && t.HighScore <= 1-newTrackMargin) {
		p.add("tracker.high_score", "%v: want a score in (0.1, 0.9] (above ByteTrack's low threshold 0.1, and +0.1 to start a track must stay ≤ 1)", t.HighScore)
	}
	if t.MatchIoU != 0 && !(t.MatchIoU > 0 && t.MatchIoU < 1) {
		p.add("tracker.match_iou", "%v: want an IoU in (0, 1)", t.MatchIoU)
	}
	if t.ConfirmHits < 0 || t.ConfirmHits > 100 {
		p.add("tracker.confirm_hits", "%d: want 1 to 100 (0: default %d)", t.ConfirmHits, DefaultConfirmHits)
	}
	if t.LostAfter < 0 || time.Duration(t.LostAfter) > maxLostAfter {
		p.add("tracker.lost_after", "%v: want 0 (default) to %v", time.Duration(t.LostAfter), maxLostAfter)
	}
	if t.StationaryAfter < 0 {
		p.add("tracker.stationary_after", "%v: want ≥ 0 (0: default)", time.Duration(t.StationaryAfter))
	}
	if t.StationaryMove != 0 && !(t.StationaryMove > 0 && t.StationaryMove <= 1) {
		p.add("tracker.stationary_move", "%v: want a fraction in (0, 1]", t.StationaryMove)
	}
	if c.FrameSize != nil && (len(c.FrameSize) != 2 || c.FrameSize[0] < 1 || c.FrameSize[1] < 1) {
		p.add("frame_size", "%v: want [width, height] in pixels, both ≥ 1", c.FrameSize)
	}
	if len(c.Zones) > maxZones {
		p.add("zones", "%d zones: at most %d", len(c.Zones), maxZones)
	}
	if len(c.Lines) > maxLines {
		p.add("lines", "%d lines: at most %d", len(c.Lines), maxLines)
	}
	names := map[string]string{}
	name := func(field, n string) {
		if !validName.MatchString(n) {
			p.add(field, "%q: want 1-64 characters of A-Z a-z 0-9 _ -", n)
			return
		}
		if prev, ok := names[n]; ok {
			p.add(field, "%q: already the name of %s", n, prev)
			return
		}
		names[n] = field
	}
	for i, z := range c.Zones {
		f := fmt.Sprintf("zones[%d]", i)
		name(f+".name", z.Name)
		p.polygon(f+".polygon", z.Polygon)
		p.classes(f+".classes", z.Classes)
		p.anchor(f+".anchor", z.Anchor)
		if z.MinFrames < 0 || z.MinFrames > 1000 {
			p.add(f+".min_frames", "%d: want 1 to 1000 (0: default %d)", z.MinFrames, DefaultMinFrames)
		}
		if z.LoiterAfter < 0 {
			p.add(f+".loiter_after", "%v: want ≥ 0 (0: never)", time.Duration(z.LoiterAfter))
		}
	}
	for i, l := range c.Lines {
		f := fmt.Sprintf("lines[%d]", i)
		name(f+".name", l.Name)
		okA, okB := p.point(f+".a", l.A), p.point(f+".b", l.B)
		if okA && okB && l.A[0] == l.B[0] && l.A[1] == l.B[1] {
			p.add(f+".b", "%v: the same point as a; a line needs two distinct points", []float64(l.B))
		}
		p.classes(f+".classes", l.Classes)
		p.anchor(f+".anchor", l.Anchor)
		if l.Debounce < 0 {
			p.add(f+".debounce", "%v: want ≥ 0 (0: default)", time.Duration(l.Debounce))
		}
	}
	return p
}

// CheckClasses returns a *FieldError for the first class of a zone or a
// line that is not in labels (the model's class names), or nil; the
// wiring calls it when it knows the stream's model.
func (c *Config) CheckClasses(labels []string) error {
	known := make(map[string]bool, len(labels))
	for _, l := range labels {
		known[l] = true
	}
	check := func(field string, classes []string) error {
		for i, cl := range classes {
			if !known[cl] {
				return &FieldError{Field: fmt.Sprintf("%s.classes[%d]", field, i),
					Msg: fmt.Sprintf("%q: not a class of the model (it has %d, e.g. %q)", cl, len(labels), first(labels))}
			}
		}
		return nil
	}
	for i, z := range c.Zones {
		if err := check(fmt.Sprintf("zones[%d]", i), z.Classes); err != nil {
			return err
		}
	}
	for i, l := range c.Lines {
		if err := check(fmt.Sprintf("lines[%d]", i), l.Classes); err != nil {
			return err
		}
	}
	return nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

type problems []*FieldError

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// point checks one [x, y].
func (p *problems) point(field string, xy XY) bool {
	if len(xy) != 2 {
		p.add(field, "%v: want a point [x, y] (2 numbers), got %d", []float64(xy), len(xy))
		return false
	}
	for _, v := range xy {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1e6 {
			p.add(field, "%v: want finite coordinates within ±1e6 pixels", []float64(xy))
			return false
		}
	}
	return true
}

func (p *problems) polygon(field string, poly []XY) {
	if len(poly) < 3 {
		p.add(field, "%d points: a polygon needs at least 3", len(poly))
		return
	}
	if len(poly) > maxPolygonPoints {
		p.add(field, "%d points: at most %d", len(poly), maxPolygonPoints)
		return
	}
	pts := make([]pt, len(poly))
	for i, xy := range poly {
		if !p.point(fmt.Sprintf("%s[%d]", field, i), xy) {
			return
		}
		pts[i] = pt{xy[0], xy[1]}
	}
	if i, j, bad := selfIntersection(pts); bad {
		n := len(pts)
		p.add(field, "edges %d (%v→%v) and %d (%v→%v) cross or touch: a zone must be a simple polygon",
			i, []float64(poly[i]), []float64(poly[(i+1)%n]), j, []float64(poly[j]), []float64(poly[(j+1)%n]))
		return
	}
	if polygonArea(pts) == 0 {
		p.add(field, "the polygon has no area")
	}
}

func (p *problems) anchor(field string, a Anchor) {
	if a != "" && a != AnchorBottomCenter && a != AnchorCenter {
		p.add(field, "%q: want bottom_center or center", a)
	}
}

func (p *problems) classes(field string, classes []string) {
	if len(classes) > maxClasses {
		p.add(field, "%d classes: at most %d", len(classes), maxClasses)
	}
	for i, c := range classes {
		if c == "" {
			p.add(fmt.Sprintf("%s[%d]", field, i), "an empty class name")
		}
	}
}

// settings are a validated Config's tracker settings with the defaults
// filled in, in the units the tracker uses (seconds).
type settings struct {
	highScore, newScore, matchIoU float64
	confirmHits                   int
	lostAfter                     float64
	stationaryAfter               float64
	stationaryMove                float64
}

func (t Tracker) settings() settings {
	s := settings{
		highScore:       or(t.HighScore, DefaultHighScore),
		matchIoU:        or(t.MatchIoU, DefaultMatchIoU),
		confirmHits:     or(t.ConfirmHits, DefaultConfirmHits),
		lostAfter:       or(t.LostAfter, Duration(DefaultLostAfter)).Seconds(),
		stationaryAfter: or(t.StationaryAfter, Duration(DefaultStationaryAfter)).Seconds(),
		stationaryMove:  or(t.StationaryMove, DefaultStationaryMove),
	}
	s.newScore = s.highScore + newTrackMargin
	return s
}

// or returns v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
