package analytics

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

const testEpoch = "0123456789ab"

// runner feeds a stage frame by frame at a fixed rate and keeps every
// event, validated against the schema.
type runner struct {
	t      *testing.T
	st     *Stage
	schema *jsonschema.Schema
	fps    float64
	k      int // frames so far
	w, h   int
	events []Event
}

func newRunner(t *testing.T, cfg Config, fps float64) *runner {
	t.Helper()
	st, err := New("cam1", testEpoch, cfg)
	require.NoError(t, err)
	return &runner{t: t, st: st, schema: compileSchema(t, "analytics.schema.json", SchemaJSON), fps: fps, w: 1280, h: 720}
}

func (r *runner) now() float64 { return float64(r.k) / r.fps }

// step observes one frame with the given detections and returns them as
// the stage left them, and the frame's events.
func (r *runner) step(dets ...pipeline.Detection) ([]pipeline.Detection, []Event) {
	pts := r.now()
	r.k++
	evs := r.st.Observe(pts, time.Unix(1_800_000_000, 0).UTC().Add(time.Duration(pts*1e9)), r.w, r.h, dets)
	checkEvents(r.t, r.schema, evs, uint64(len(r.events)))
	r.events = append(r.events, evs...)
	return dets, evs
}

// skip lets n frame times pass unobserved (dropped frames).
func (r *runner) skip(n int) { r.k += n }

func (r *runner) close() {
	evs := r.st.Close(r.now(), time.Unix(1_800_000_000, 0).UTC())
	checkEvents(r.t, r.schema, evs, uint64(len(r.events)))
	r.events = append(r.events, evs...)
}

func (r *runner) ofType(typ EventType) []Event {
	var out []Event
	for _, e := range r.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// person is a detection whose box has its bottom centre at (x, y).
func person(x, y float64) pipeline.Detection {
	return det("person", x, y, 50, 120, 0.9)
}

func det(label string, x, y, w, h, score float64) pipeline.Detection {
	return pipeline.Detection{Label: label, Score: float32(score),
		Box: pipeline.Box{X1: float32(x - w/2), Y1: float32(y - h), X2: float32(x + w/2), Y2: float32(y)}}
}

// vline returns a config with one vertical line at x = 640, drawn
// downwards: a walker going right crosses it "out".
func vline() Config { return Config{Lines: []Line{{Name: "gate", A: XY{640, 0}, B: XY{640, 720}}}} }

// A track standing on a line for 50 frames, its box jittering across it,
// counts at most one crossing each way: with a small jitter (within the
// line's margin) none at all, and with a large one (a full margin each
// side, every frame) one each way, the debounce stopping the rest.
func TestLineJitterCountsAtMostOnceEachWay(t *testing.T) {
	for _, c := range []struct {
		name     string
		offset   func(rng *rand.Rand, k int) float64
		maxEach  int
		exactOne bool
	}{
		{"gaussian 2 px", func(rng *rand.Rand, k int) float64 { return rng.NormFloat64() * 2 }, 0, false},
		{"alternating ±12 px", func(rng *rand.Rand, k int) float64 { return float64(12 - 24*(k%2)) }, 1, true},
		{"gaussian 10 px", func(rng *rand.Rand, k int) float64 { return rng.NormFloat64() * 10 }, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRunner(t, vline(), 30)
			rng := rand.New(rand.NewPCG(1, 1))
			for x := 500.0; x < 640; x += 4 { // walk up to the line from the left
				r.step(person(x, 400))
			}
			for k := 0; k < 50; k++ {
				r.step(person(640+c.offset(rng, k), 400))
			}
			for x := 640.0; x > 500; x -= 4 { // and back
				r.step(person(x, 400))
			}
			in, out := countDirs(r.ofType(EventLineCross))
			t.Logf("%s: %d in, %d out", c.name, in, out)
			require.LessOrEqual(t, in, c.maxEach)
			require.LessOrEqual(t, out, c.maxEach)
			if c.exactOne {
				require.Equal(t, 1, in)
				require.Equal(t, 1, out)
			}
			require.Len(t, r.ofType(EventTrackStart), 1)
			counts := r.st.Counts()
			require.Equal(t, uint64(in), sumCounts(counts.Lines[0].In))
			require.Equal(t, uint64(out), sumCounts(counts.Lines[0].Out))
		})
	}
}

func countDirs(evs []Event) (in, out int) {
	for _, e := range evs {
		if e.Direction == DirIn {
			in++
		} else {
			out++
		}
	}
	return in, out
}

// A crossing made while the detector missed the walker counts when the
// walker reappears on the other side, as long as the track lives; after
// a gap longer than lost_after the walker is a new track, and a new
// track's first side is where it appeared, so nothing is counted.
func TestCrossingDuringGap(t *testing.T) {
	for _, c := range []struct {
		gap   float64 // seconds without detections
		count int
	}{{1.5, 1}, {2.5, 0}} {
		r := newRunner(t, vline(), 30)
		x := 400.0
		for ; x < 600; x += 4 {
			r.step(person(x, 400))
		}
		for i := 0; i < int(c.gap*30); i++ {
			r.step()
			x += 4
		}
		back := r.now()
		for ; x < 1000; x += 4 {
			r.step(person(x, 400))
		}
		crossings := r.ofType(EventLineCross)
		require.Len(t, crossings, c.count, "gap %.1f s", c.gap)
		if c.count == 1 {
			require.Equal(t, back, crossings[0].PTS, "counted when the walker reappeared")
			require.Len(t, r.ofType(EventTrackStart), 1)
		} else {
			require.Len(t, r.ofType(EventTrackStart), 2)
		}
		require.NoError(t, validateCounts(r.st.Counts()))
	}
}

// validateCounts checks a Counts snapshot against CountsSchemaJSON.
func validateCounts(c Counts) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return countsSchema.Validate(v)
}

var countsSchema = func() *jsonschema.Schema {
	d, err := jsonschema.UnmarshalJSON(bytes.NewReader(CountsSchemaJSON))
	if err != nil {
		panic(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("counts.schema.json", d); err != nil {
		panic(err)
	}
	return c.MustCompile("counts.schema.json")
}()

// A detection flickering over the line (two frames on, one off, the two
// on either side of it) never makes a confirmed track, so it never gets
// an id, an event or a count, however long it flickers; a person really
// walking back and forth across the line beside it, 7 times with 20 % of
// detections missing, counts exactly 7 (the issue's "7 real crossings
// counted as 97").
func TestTentativeTracksNeverCount(t *testing.T) {
	cfg := vline()
	cfg.Lines[0].Debounce = Duration(time.Second)
	r := newRunner(t, cfg, 30)
	rng := rand.New(rand.NewPCG(3, 3))
	x, dir := 400.0, 1.0
	turns := 0
	for k := 0; turns < 7 || x < 800 && x > 400; k++ {
		var dets []pipeline.Detection
		if rng.Float64() >= 0.2 {
			dets = append(dets, person(x+rng.NormFloat64()*2, 250+rng.NormFloat64()*2))
		}
		switch k % 3 { // the flicker, at y = 600, crossing at every appearance
		case 0:
			dets = append(dets, det("person", 630, 600, 50, 120, 0.8))
		case 1:
			dets = append(dets, det("person", 650, 600, 50, 120, 0.8))
		}
		out, _ := r.step(dets...)
		for _, d := range out {
			if d.Box.Y2 == 600 {
				require.Empty(t, d.TrackID, "frame %d: the flicker got an id", k)
			}
		}
		x += dir * 4 // 120 px/s, a walk
		if (x > 900 && dir > 0) || (x < 380 && dir < 0) {
			dir = -dir
			turns++
		}
	}
	crossings := r.ofType(EventLineCross)
	in, out := countDirs(crossings)
	t.Logf("%d frames: %d in, %d out, %d tracks", r.k, in, out, len(r.ofType(EventTrackStart)))
	require.Equal(t, 3, in)
	require.Equal(t, 4, out) // 7 crossings: out, in, out, in, out, in, out
	require.Len(t, r.ofType(EventTrackStart), 1, "only the walker is a track")
	for _, e := range crossings {
		require.Equal(t, testEpoch+"-1", e.TrackID)
	}
}

// A car that parks in a zone with its box's bottom edge just inside it,
// and whose box then settles 5 px lower (outside the zone, but within
// stationary_move of its size) for ten seconds before it drives off:
// one zone_enter, one stationary event, and one zone_exit, when it
// leaves, not when its box settled; 20 % of its detections are missing
// and its boxes jitter by 1 px throughout.
func TestStationaryObjectOneEventNoZoneRepeats(t *testing.T) {
	cfg := Config{Zones: []Zone{{Name: "bay", Polygon: []XY{{0, 100}, {800, 100}, {800, 300}, {0, 300}}}}}
	r := newRunner(t, cfg, 30)
	rng := rand.New(rand.NewPCG(4, 4))
	car := func(x, bottom float64) {
		var dets []pipeline.Detection
		if rng.Float64() >= 0.2 {
			dets = append(dets, det("car", x+rng.NormFloat64(), bottom+rng.NormFloat64(), 120, 60, 0.9))
		}
		r.step(dets...)
	}
	for x := 100.0; x < 400; x += 5 { // drives in (2 s)
		car(x, 297)
	}
	for i := 0; i < 20*30; i++ { // parked, 3 px inside the edge
		car(400, 297)
	}
	settled := r.now()
	for i := 0; i < 10*30; i++ { // the box settles 2 px outside the edge
		car(400, 302)
	}
	left := r.now()
	for x := 400.0; x < 1000; x += 5 { // drives off to the right
		car(x, 302)
	}
	r.close()
	require.Len(t, r.ofType(EventStationary), 1)
	st := r.ofType(EventStationary)[0]
	require.GreaterOrEqual(t, st.Duration, DefaultStationaryAfter.Seconds())
	require.Len(t, r.ofType(EventZoneEnter), 1)
	exits := r.ofType(EventZoneExit)
	require.Len(t, exits, 1)
	require.Greater(t, exits[0].PTS, settled, "the exit came when the box settled")
	require.GreaterOrEqual(t, exits[0].PTS, left)
	t.Logf("stationary at %.2f s (after %.1f s still); zone exit at %.2f s (drove off at %.2f s)", st.PTS, st.Duration, exits[0].PTS, left)
}

// A person standing still for 40 s while the detector's box jitters by
// 3 px (6 % of its 50 px width, near the 10 % threshold) is stationary
// once, about stationary_after after stopping; walking off ends it.
func TestStationaryDespiteJitter(t *testing.T) {
	r := newRunner(t, Config{}, 30)
	rng := rand.New(rand.NewPCG(5, 5))
	j := func() float64 { return rng.NormFloat64() * 3 }
	for x := 100.0; x < 300; x += 4 {
		r.step(det("person", x+j(), 400+j(), 50+j(), 120+j(), 0.9))
	}
	stopped := r.now()
	for i := 0; i < 40*30; i++ {
		r.step(det("person", 300+j(), 400+j(), 50+j(), 120+j(), 0.9))
	}
	for x := 300.0; x < 600; x += 4 {
		r.step(det("person", x+j(), 400+j(), 50+j(), 120+j(), 0.9))
	}
	evs := r.ofType(EventStationary)
	require.Len(t, evs, 1)
	after := evs[0].PTS - stopped
	t.Logf("stationary %.2f s after stopping", after)
	// Stationary_after, plus the time the average takes to come within
	// 10 % of the box (5 px) of where the person stopped (a lag of
	// 4 px × 30 fps × stillTau = 60 px decaying by e every 0.5 s:
	// 0.5 × ln(60/5) = 1.2 s), plus a sample interval (0.5 s): 11.7 s.
	// 13 s leaves room for the noise; 16 seeds gave 11.33 to 11.73 s.
	require.GreaterOrEqual(t, after, DefaultStationaryAfter.Seconds())
	require.Less(t, after, 13.0)
}

// The zones' inertia, loitering and occupancy, and the detections' Zones.
func TestZoneEnterLoiterExit(t *testing.T) {
	cfg := Config{Zones: []Zone{
		{Name: "door", Polygon: []XY{{100, 80}, {400, 80}, {400, 300}, {100, 300}}, Classes: []string{"person"},
			LoiterAfter: Duration(2 * time.Second)},
		{Name: "all", Polygon: []XY{{0, 0}, {1280, 0}, {1280, 720}, {0, 720}}, Anchor: AnchorCenter, MinFrames: 1},
	}}
	r := newRunner(t, cfg, 10)
	// Three frames to confirm, outside the door (x < 100); the steps
	// between outside (x = 90) and inside (x = 110) are small enough to
	// stay one track.
	for i := 0; i < 3; i++ {
		r.step(person(90, 200), det("car", 700, 500, 120, 60, 0.9))
	}
	require.Len(t, r.ofType(EventTrackStart), 2)
	// In the door: entered on the 3rd frame inside (min_frames 3).
	var d []pipeline.Detection
	for i := 0; i < 3; i++ {
		d, _ = r.step(person(110, 200), det("car", 700, 500, 120, 60, 0.9))
		if i < 2 {
			require.Equal(t, []string{"all"}, d[0].Zones, "frame %d", i)
		}
	}
	require.Equal(t, []string{"door", "all"}, d[0].Zones)
	require.Equal(t, []string{"all"}, d[1].Zones, "a car is not a person")
	c := r.st.Counts()
	require.Equal(t, map[string]int{"person": 1}, c.Zones[0].Occupancy)
	require.Equal(t, map[string]int{"person": 1, "car": 1}, c.Zones[1].Occupancy)
	require.Equal(t, 2, c.Zones[1].Total)
	// One frame outside is not an exit; a loiter event after 2 s inside,
	// once.
	r.step(person(90, 200), det("car", 700, 500, 120, 60, 0.9))
	for i := 0; i < 40; i++ {
		r.step(person(110, 200), det("car", 700, 500, 120, 60, 0.9))
	}
	require.Len(t, r.ofType(EventLoiter), 1)
	require.InDelta(t, 2.0, r.ofType(EventLoiter)[0].Duration, 0.11)
	require.Empty(t, r.ofType(EventZoneExit))
	// Out: the exit on the 3rd frame outside.
	v := r.st.CountsVersion()
	for i := 0; i < 3; i++ {
		r.step(person(90, 200), det("car", 700, 500, 120, 60, 0.9))
	}
	require.Len(t, r.ofType(EventZoneExit), 1)
	require.Equal(t, "door", r.ofType(EventZoneExit)[0].Zone)
	require.Greater(t, r.st.CountsVersion(), v)
	require.Equal(t, map[string]int{"person": 0}, r.st.Counts().Zones[0].Occupancy, "back to 0, still listed")
	require.NoError(t, validateCounts(r.st.Counts()))
	// Back in: a new stay, a new loiter.
	for i := 0; i < 30; i++ {
		r.step(person(110, 200), det("car", 700, 500, 120, 60, 0.9))
	}
	require.Len(t, r.ofType(EventZoneEnter), 4) // door twice, all for both
	require.Len(t, r.ofType(EventLoiter), 2)
	// The person vanishes: after lost_after, its exits, then its end.
	for i := 0; i < 25; i++ {
		r.step(det("car", 700, 500, 120, 60, 0.9))
	}
	ends := r.ofType(EventTrackEnd)
	require.Len(t, ends, 1)
	end := ends[0]
	require.Equal(t, testEpoch+"-1", end.TrackID)
	require.Equal(t, []string{"all", "door"}, end.Zones)
	require.Equal(t, []string{}, end.Lines)
	require.InDelta(t, 0.0, end.FirstSeen.PTS, 1e-9)
	require.Less(t, end.LastSeen.PTS, end.PTS)
	n := len(r.events)
	require.Equal(t, EventTrackEnd, r.events[n-1].Type)
	require.Equal(t, EventZoneExit, r.events[n-2].Type)
	require.Equal(t, EventZoneExit, r.events[n-3].Type)
	require.Equal(t, 0, r.st.Counts().Zones[0].Total)
	// Close ends the car.
	r.close()
	require.Len(t, r.ofType(EventTrackEnd), 2)
	require.Equal(t, 0, r.st.Counts().Zones[1].Total)
}

// Ids: "<epoch>-<n>" from 1, given at confirmation, never reused; a
// detection of another class never takes a track's id; a track survives
// a gap shorter than lost_after whatever the frame rate, and frames
// dropped on purpose do not end it.
func TestIDsAndTime(t *testing.T) {
	r := newRunner(t, Config{}, 30)
	var d []pipeline.Detection
	for i := 0; i < 3; i++ {
		d, _ = r.step(person(300, 400))
		if i < 2 {
			require.Empty(t, d[0].TrackID, "tentative")
		}
	}
	require.Equal(t, testEpoch+"-1", d[0].TrackID)
	// A car exactly where the person was: not the person's id.
	for i := 0; i < 3; i++ {
		d, _ = r.step(det("car", 300, 400, 50, 120, 0.9))
	}
	require.Equal(t, testEpoch+"-2", d[0].TrackID)
	// The person back after 1.9 s of frames without it, at 30 fps, and
	// again after 1.9 s of which the stage saw no frame at all.
	r.skip(0)
	for i := 0; i < 57; i++ {
		r.step(det("car", 300, 400, 50, 120, 0.9))
	}
	d, _ = r.step(person(300, 400))
	require.Equal(t, testEpoch+"-1", d[0].TrackID)
	r.skip(57)
	d, _ = r.step(person(300, 400))
	require.Equal(t, testEpoch+"-1", d[0].TrackID)
	// Gone for good: after 2 s of frames without it, it ends; a person
	// there later is a new track with a new number.
	for i := 0; i < 62; i++ {
		r.step()
	}
	require.Len(t, r.ofType(EventTrackEnd), 2)
	for i := 0; i < 3; i++ {
		d, _ = r.step(person(300, 400))
	}
	require.Equal(t, testEpoch+"-3", d[0].TrackID)
}

// Detections whose boxes are empty, inverted, infinite or NaN are left
// alone: no track, no id, no panic.
func TestBadBoxes(t *testing.T) {
	r := newRunner(t, vline(), 30)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for i := 0; i < 5; i++ {
		dets, _ := r.step(
			pipeline.Detection{Label: "person", Score: 0.9, Box: pipeline.Box{X1: -inf, Y1: 0, X2: inf, Y2: 10}},
			pipeline.Detection{Label: "person", Score: 0.9, Box: pipeline.Box{X1: nan, Y1: 0, X2: 10, Y2: 10}},
			pipeline.Detection{Label: "person", Score: 0.9, Box: pipeline.Box{X1: 10, Y1: 10, X2: 10, Y2: 30}},
			pipeline.Detection{Label: "person", Score: 0.9, Box: pipeline.Box{X1: 20, Y1: 10, X2: 10, Y2: 30}},
			pipeline.Detection{Label: "person", Score: 0.9, Box: pipeline.Box{X1: 1e30, Y1: 10, X2: 2e30, Y2: 30}},
		)
		for _, d := range dets {
			require.Empty(t, d.TrackID)
		}
	}
	require.Empty(t, r.st.tracks)
}

// A PTS that jumps back (a discontinuity) neither panics nor ends
// tracks: the clock moves on by the last frame interval.
func TestPTSBackwards(t *testing.T) {
	st, err := New("cam1", testEpoch, Config{})
	require.NoError(t, err)
	var d []pipeline.Detection
	for i, pts := range []float64{100, 100.1, 100.2, 5, 5.1, 5.1, 5.2} {
		d = []pipeline.Detection{person(300, 400)}
		st.Observe(pts, time.Now(), 1280, 720, d)
		if i >= 2 {
			require.Equal(t, testEpoch+"-1", d[0].TrackID, "frame %d", i)
		}
	}
	require.InDelta(t, 0.6, st.clock, 1e-9)
}

// When the frames' size changes mid-stream, the geometry is scaled from
// the size it was drawn for and the tracks with it: the walker keeps its
// id, its crossing counts once, and a warning says what happened.
func TestResolutionChange(t *testing.T) {
	r := newRunner(t, vline(), 30)
	var d []pipeline.Detection
	for x := 400.0; x < 560; x += 8 {
		d, _ = r.step(person(x, 400))
	}
	id := d[0].TrackID
	require.NotEmpty(t, id)
	r.w, r.h = 640, 360 // half size: the walker's coordinates halve too
	for x := 560.0; x < 800; x += 8 {
		d, _ = r.step(det("person", x/2, 200, 25, 60, 0.9))
		require.Equal(t, id, d[0].TrackID)
	}
	warns := r.ofType(EventWarning)
	require.Len(t, warns, 1)
	require.Equal(t, ReasonResolutionChanged, warns[0].Reason)
	require.Equal(t, []int{640, 360}, warns[0].FrameSize)
	require.Equal(t, []int{1280, 720}, warns[0].PrevFrameSize)
	require.Len(t, r.ofType(EventLineCross), 1)
	require.Equal(t, DirOut, r.ofType(EventLineCross)[0].Direction)

	// Geometry drawn for a given frame_size is scaled from the first frame.
	cfg := vline()
	cfg.FrameSize = []int{2560, 1440}
	r = newRunner(t, cfg, 30)
	for x := 400.0; x < 800; x += 8 { // the line is at x = 320 of 1280, y 0 to 360
		r.step(person(x-200, 300))
	}
	require.Len(t, r.ofType(EventLineCross), 1)
	require.Equal(t, []int{2560, 1440}, r.ofType(EventWarning)[0].PrevFrameSize)
}

// Reconfigure keeps tracks, ids and the counts of lines that stay; a
// zone added finds the objects already in it; a moved line counts no
// crossing from its old place.
func TestReconfigure(t *testing.T) {
	r := newRunner(t, vline(), 30)
	var d []pipeline.Detection
	for x := 500.0; x < 700; x += 8 {
		d, _ = r.step(person(x, 400))
	}
	id := d[0].TrackID
	require.Len(t, r.ofType(EventLineCross), 1)

	bad := vline()
	bad.Lines = []Line{{Name: "gate", A: XY{1, 1}, B: XY{1, 1}}}
	require.Error(t, r.st.Reconfigure(bad))

	cfg := Config{
		Tracker: Tracker{ConfirmHits: 5},
		Zones:   []Zone{{Name: "right", Polygon: []XY{{660, 0}, {1280, 0}, {1280, 720}, {660, 720}}}},
		Lines:   []Line{{Name: "gate", A: XY{640, 0}, B: XY{640, 720}}, {Name: "late", A: XY{100, 0}, B: XY{100, 720}}},
	}
	require.NoError(t, r.st.Reconfigure(cfg))
	for i := 0; i < 3; i++ {
		d, _ = r.step(person(700, 400))
	}
	require.Equal(t, id, d[0].TrackID)
	require.Equal(t, []string{"right"}, d[0].Zones)
	c := r.st.Counts()
	require.Equal(t, uint64(1), sumCounts(c.Lines[0].Out), "gate keeps its count")
	require.Empty(t, c.Lines[1].In)

	// Move the gate to the right of the walker: its side there is
	// forgotten, so moving the line over it is no crossing.
	cfg.Lines[0].A, cfg.Lines[0].B = XY{900, 0}, XY{900, 720}
	require.NoError(t, r.st.Reconfigure(cfg))
	for i := 0; i < 5; i++ {
		r.step(person(700, 400))
	}
	require.Len(t, r.ofType(EventLineCross), 1)
}

// Config errors name the field.
func TestConfigErrors(t *testing.T) {
	square := []XY{{0, 0}, {10, 0}, {10, 10}, {0, 10}}
	for _, c := range []struct {
		name  string
		cfg   Config
		field string
		msg   string
	}{
		{"self-intersecting polygon", Config{Zones: []Zone{{Name: "z", Polygon: []XY{{0, 0}, {10, 10}, {10, 0}, {0, 10}}}}}, "zones[0].polygon", "cross"},
		{"polygon folding back", Config{Zones: []Zone{{Name: "z", Polygon: []XY{{0, 0}, {10, 0}, {5, 0}}}}}, "zones[0].polygon", "simple"},
		{"two points", Config{Zones: []Zone{{Name: "z", Polygon: []XY{{0, 0}, {10, 0}}}}}, "zones[0].polygon", "at least 3"},
		{"a point of 3 numbers", Config{Zones: []Zone{{Name: "z", Polygon: []XY{{0, 0}, {10, 0}, {5, 5, 5}}}}}, "zones[0].polygon[2]", "2 numbers"},
		{"a == b", Config{Lines: []Line{{Name: "l", A: XY{5, 5}, B: XY{5, 5}}}}, "lines[0].b", "distinct"},
		{"empty class", Config{Zones: []Zone{{Name: "z", Polygon: square, Classes: []string{"person", ""}}}}, "zones[0].classes[1]", "empty"},
		{"name with a space", Config{Zones: []Zone{{Name: "front door", Polygon: square}}}, "zones[0].name", "A-Z a-z 0-9 _ -"},
		{"name with a dot", Config{Lines: []Line{{Name: "a.b", A: XY{0, 0}, B: XY{1, 1}}}}, "lines[0].name", "A-Z a-z 0-9 _ -"},
		{"name with a wildcard", Config{Zones: []Zone{{Name: "door*", Polygon: square}}}, "zones[0].name", "A-Z a-z 0-9 _ -"},
		{"empty name", Config{Zones: []Zone{{Polygon: square}}}, "zones[0].name", "A-Z"},
		{"duplicate name", Config{Zones: []Zone{{Name: "x", Polygon: square}}, Lines: []Line{{Name: "x", A: XY{0, 0}, B: XY{1, 1}}}}, "lines[0].name", "zones[0].name"},
		{"bad anchor", Config{Zones: []Zone{{Name: "z", Polygon: square, Anchor: "top"}}}, "zones[0].anchor", "bottom_center"},
		{"high score", Config{Tracker: Tracker{HighScore: 1.5}}, "tracker.high_score", "0.9"},
		{"match iou", Config{Tracker: Tracker{MatchIoU: -1}}, "tracker.match_iou", "(0, 1)"},
		{"confirm hits", Config{Tracker: Tracker{ConfirmHits: -2}}, "tracker.confirm_hits", "1 to 100"},
		{"lost after", Config{Tracker: Tracker{LostAfter: Duration(-time.Second)}}, "tracker.lost_after", "1h"},
		{"frame size", Config{FrameSize: []int{640}}, "frame_size", "[width, height]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			require.Equal(t, c.field, fe.Field)
			require.Contains(t, fe.Msg, c.msg)
			_, err = New("cam1", testEpoch, c.cfg)
			require.True(t, errors.As(err, &fe))
		})
	}
	// Problems lists all of them.
	cfg := Config{Zones: []Zone{{Name: "a b", Polygon: square, Classes: []string{""}}}, Lines: []Line{{Name: "l", A: XY{1, 1}, B: XY{1, 1}}}}
	var fields []string
	for _, p := range cfg.Problems() {
		fields = append(fields, p.Field)
	}
	require.Equal(t, []string{"zones[0].name", "zones[0].classes[0]", "lines[0].b"}, fields)
	// Classes against the model's labels.
	cfg = Config{Zones: []Zone{{Name: "z", Polygon: square, Classes: []string{"person"}}}, Lines: []Line{{Name: "l", A: XY{0, 0}, B: XY{1, 1}, Classes: []string{"person", "unicorn"}}}}
	require.NoError(t, cfg.CheckClasses([]string{"person", "car", "unicorn"}))
	err := cfg.CheckClasses([]string{"person", "car"})
	var fe *FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, "lines[0].classes[1]", fe.Field)
	require.True(t, strings.Contains(fe.Msg, "unicorn"))
}

// Random frames of random detections (including degenerate ones, and
// PTS that stall or go back): the stage never panics, never gives one id
// to two detections of a frame, only gives ids of confirmed tracks, keeps
// its occupancy non-negative, and every event is valid.
func FuzzStage(f *testing.F) {
	f.Add([]byte{0, 10, 20, 30, 40, 200, 1, 12, 22, 30, 40, 200, 2, 14, 24, 30, 40, 200})
	f.Add([]byte("a person walking over the line, or several; who knows what bytes will do"))
	schema := compileSchema(f, "analytics.schema.json", SchemaJSON)
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := Config{
			Tracker: Tracker{ConfirmHits: 2, LostAfter: Duration(300 * time.Millisecond)},
			Zones:   []Zone{{Name: "z", Polygon: []XY{{0, 0}, {128, 0}, {128, 128}}, MinFrames: 1}},
			Lines:   []Line{{Name: "l", A: XY{64, 0}, B: XY{64, 255}, Debounce: Duration(100 * time.Millisecond)}},
		}
		st, err := New("cam1", testEpoch, cfg)
		require.NoError(t, err)
		var all []Event
		pts := 0.0
		labels := []string{"person", "car"}
		for len(b) >= 6 {
			// One frame: a header byte, then detections of 5 bytes each
			// while the next header's low bits say so.
			h := b[0]
			b = b[1:]
			pts += float64(int(h%8)-1) / 30 // stalls and steps back too
			var dets []pipeline.Detection
			for len(b) >= 5 && len(dets) < 12 {
				x, y := float32(b[0]), float32(b[1])
				dets = append(dets, pipeline.Detection{Label: labels[b[4]%2], Score: float32(b[4]) / 255,
					Box: pipeline.Box{X1: x, Y1: y, X2: x + float32(b[2]%64) - 4, Y2: y + float32(b[3]%64) - 4}})
				b = b[5:]
				if len(b) == 0 || b[0]%4 == 0 {
					break
				}
			}
			evs := st.Observe(pts, time.Unix(1_800_000_000, 0), 256, 256, dets)
			checkEvents(t, schema, evs, uint64(len(all)))
			all = append(all, evs...)
			ids := map[string]bool{}
			for _, d := range dets {
				if d.TrackID == "" {
					continue
				}
				require.False(t, ids[d.TrackID], "two detections with %s", d.TrackID)
				ids[d.TrackID] = true
			}
			for _, z := range st.Counts().Zones {
				for _, n := range z.Occupancy {
					require.GreaterOrEqual(t, n, 0)
				}
			}
		}
		evs := st.Close(pts, time.Unix(1_800_000_000, 0))
		checkEvents(t, schema, evs, uint64(len(all)))
		require.Zero(t, st.Counts().Zones[0].Total)
	})
}
