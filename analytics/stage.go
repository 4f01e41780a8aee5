package analytics

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/vigil-video/vigil/pipeline"
)

// Stage is the analytics of one stream run: a tracker with the stream's
// zones and lines. Create one per run with New, feed it every processed
// frame with Observe, and end it with Close. A Stage is used from one
// goroutine (the stream's worker); it is not safe for concurrent use.
type Stage struct {
	streamID, epoch string
	set             settings
	zones           []zone
	lines           []line
	refW, refH      int // the size the geometry is drawn for; 0: not known yet
	curW, curH      int // the size of the frames now; 0: none yet

	classes    map[string]int32 // label → class index
	classNames []string

	tracks []*track // live tracks, in order of creation
	free   []*track // ended tracks, for reuse
	lastN  uint64   // the number of the last id given
	seq    uint64   // the next event's Seq

	started bool
	clock   float64 // seconds since the first frame, from PTS differences
	prevPTS float64
	lastDT  float64
	pts     float64 // the last frame's
	wall    time.Time

	countsVersion uint64

	// Per-frame scratch, kept to allocate nothing in the steady state.
	dbox   []box
	dclass []int32
	dscore []float64
	high   []int32 // detection indices scoring above the high score
	low    []int32 // scoring in (0.1, high]
	rowT   []int32 // the tracks of the rows of a matching
	colD   []int32 // the detections of its columns
	used   []bool  // detection already matched
	m      matcher
	out    []Event
}

// Track states.
const (
	tentative uint8 = iota // not yet confirmed: no id, no events
	tracked                // confirmed and matched in its last frame
	lost                   // confirmed, unmatched since lastSeen
)

type track struct {
	kf       kalman
	pred     box // the prediction for this frame
	state    uint8
	id       string // "" until confirmed
	class    int32
	label    string
	hits     int     // frames matched in a row while tentative
	det      int32   // the detection matched this frame, -1 none
	fresh    bool    // created this frame
	lastSeen float64 // clock
	// lostSince is the clock of the first frame the track was missed in
	// (state lost): the time it has been lost is counted from there, so
	// frames dropped before it, which say nothing, do not shorten its life.
	lostSince float64
	seen0     float64 // clock when first seen
	first     Seen
	last      Seen
	obs       box          // the last observed box
	obsBox    pipeline.Box // the same as the model gave it
	still     stillness    // the stationary test
	zs        []zoneState
	ls        []lineState
	inZones   []string // names of the zones it is in; shared with detections, replaced on change
	entered   []string // zones entered, each once, for track_end
	crossed   []string // lines crossed, each once
}

type zoneState struct {
	inside    bool
	streak    int     // observations in a row that disagree with inside
	enteredAt float64 // clock
	loitered  bool
}

type lineState struct {
	side          int     // last non-zero side: -1, +1; 0 unknown
	at            pt      // the anchor when last seen on that side
	lastIn, lastO float64 // clock of the last counted crossing each way; NaN none
}

// New returns the stage of one stream run. streamID names the stream and
// epoch its run (pipeline.NewEpoch); track ids are "<epoch>-<n>" with n
// from 1. It returns the config's first problem as a *FieldError.
func New(streamID, epoch string, cfg Config) (*Stage, error) {
	s := &Stage{streamID: streamID, epoch: epoch, classes: map[string]int32{}}
	if err := s.Reconfigure(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Reconfigure applies a new config (hot reload) without losing tracks or
// ids: tracker settings apply from the next frame; zones and lines are
// matched by name, so a zone that stays keeps who is inside (an edited
// polygon takes effect through the zone's inertia, with the usual enter
// and exit events) and a line that stays keeps its counts (its tracks'
// sides are forgotten if it moved, so moving a line never counts a
// crossing). Removed zones and lines vanish without events. Without
// frame_size, new geometry is taken as drawn for the current frame size.
// It returns the config's first problem as a *FieldError, and then
// changes nothing.
func (s *Stage) Reconfigure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.set = cfg.Tracker.settings()
	if cfg.FrameSize != nil {
		s.refW, s.refH = cfg.FrameSize[0], cfg.FrameSize[1]
	} else {
		s.refW, s.refH = s.curW, s.curH
	}
	oldZones, oldLines := s.zones, s.lines
	s.zones = make([]zone, len(cfg.Zones))
	for i, z := range cfg.Zones {
		s.zones[i] = newZone(z)
	}
	s.lines = make([]line, len(cfg.Lines))
	for i, l := range cfg.Lines {
		s.lines[i] = newLine(l)
		for _, o := range oldLines {
			if o.name == l.Name {
				s.lines[i].in, s.lines[i].out = o.in, o.out
			}
		}
	}
	s.scaleGeometry()
	zoneFrom := indexByName(len(s.zones), func(i int) string { return s.zones[i].name }, len(oldZones), func(i int) string { return oldZones[i].name })
	lineFrom := indexByName(len(s.lines), func(i int) string { return s.lines[i].name }, len(oldLines), func(i int) string { return oldLines[i].name })
	for _, t := range s.tracks {
		zs := make([]zoneState, len(s.zones))
		for i, j := range zoneFrom {
			if j >= 0 {
				zs[i] = t.zs[j]
			}
		}
		ls := make([]lineState, len(s.lines))
		for i, j := range lineFrom {
			ls[i] = lineState{lastIn: math.NaN(), lastO: math.NaN()}
			if j >= 0 {
				o := oldLines[j]
				ls[i] = t.ls[j]
				if o.a != s.lines[i].a || o.b != s.lines[i].b || o.anchor != s.lines[i].anchor {
					ls[i].side = 0 // moved: no crossing from the old geometry
				}
			}
		}
		t.zs, t.ls = zs, ls
		t.inZones = s.zoneNames(t)
	}
	// Occupancy follows from the tracks' states.
	for _, t := range s.tracks {
		if t.id == "" {
			continue
		}
		for i := range s.zones {
			if t.zs[i].inside {
				s.zones[i].occupy(t.class, 1)
			}
		}
	}
	s.countsVersion++
	return nil
}

// indexByName maps each new index to the old index of the same name, -1
// for none.
func indexByName(n int, name func(int) string, on int, oname func(int) string) []int {
	from := make([]int, n)
	for i := range from {
		from[i] = -1
		for j := 0; j < on; j++ {
			if oname(j) == name(i) {
				from[i] = j
			}
		}
	}
	return from
}

// Observe runs the stage on one processed frame and returns the frame's
// events (nil when none; the caller owns the slice).
//
// pts is the frame's presentation time in seconds; it must increase
// (frames may be missing: time is taken from PTS differences, so frames
// dropped on purpose do not change ids). A PTS that does not increase (a
// discontinuity) advances the stage's clock by the previous frame
// interval. wall is the frame's wall time, copied into events. width and
// height are the frame's size in pixels (0: unknown, the size stays as it
// was); see Config.FrameSize.
//
// Observe sets TrackID and Zones on each detection matched to a confirmed
// track, and clears them on the others. The Zones slices are shared
// between frames and must not be modified.
func (s *Stage) Observe(pts float64, wall time.Time, width, height int, dets []pipeline.Detection) []Event {
	s.out = nil
	dt := s.tick(pts)
	s.pts, s.wall = pts, wall
	s.resize(width, height)
	s.prepare(dets)
	for _, t := range s.tracks {
		t.kf.predict(dt, t.state != lost)
		t.pred = t.kf.box()
		t.det = -1
	}
	s.associate()
	for i := range s.dbox {
		if !s.used[i] && s.dscore[i] > s.set.highScore && s.dscore[i] >= s.set.newScore {
			s.start(int32(i), dets)
		}
	}
	n := 0
	for _, t := range s.tracks {
		switch {
		case t.det >= 0:
			s.observe(t, dets)
		case t.state == tentative:
			s.recycle(t) // ByteTrack drops an unconfirmed track at its first miss
			continue
		default:
			if t.state != lost {
				t.state, t.lostSince = lost, s.clock
			}
			if s.clock-t.lostSince > s.set.lostAfter+clockSlack {
				s.end(t)
				s.recycle(t)
				continue
			}
		}
		s.tracks[n] = t
		n++
	}
	clear(s.tracks[n:])
	s.tracks = s.tracks[:n]
	return s.out
}

// tick advances the clock to pts and returns the step in seconds.
func (s *Stage) tick(pts float64) float64 {
	if !s.started {
		s.started = true
		s.prevPTS = pts
		return 0
	}
	d := pts - s.prevPTS
	if d > 0 && !math.IsInf(d, 0) {
		s.lastDT = d
		s.prevPTS = pts
	} else {
		d = s.lastDT
		if d == 0 {
			d = refFrame
		}
		if !math.IsNaN(pts) {
			s.prevPTS = pts
		}
	}
	s.clock += d
	return d
}

// prepare converts the frame's detections and sorts them into high and
// low scores; unusable boxes (empty, inverted, not finite or beyond
// ±1e6 pixels) are left out.
func (s *Stage) prepare(dets []pipeline.Detection) {
	s.dbox, s.dclass, s.dscore = s.dbox[:0], s.dclass[:0], s.dscore[:0]
	s.high, s.low = s.high[:0], s.low[:0]
	s.used = grow(s.used, len(dets))
	for i := range dets {
		d := &dets[i]
		d.TrackID, d.Zones = "", nil
		b := box{float64(d.Box.X1), float64(d.Box.Y1), float64(d.Box.X2), float64(d.Box.Y2)}
		score := float64(d.Score)
		s.dbox = append(s.dbox, b)
		s.dclass = append(s.dclass, s.class(d.Label))
		s.dscore = append(s.dscore, score)
		ok := finite(b.x1) && finite(b.y1) && finite(b.x2) && finite(b.y2) && b.x2 > b.x1 && b.y2 > b.y1
		s.used[i] = !ok
		switch {
		case !ok:
		case score > s.set.highScore:
			s.high = append(s.high, int32(i))
		case score > lowScore:
			s.low = append(s.low, int32(i))
		}
	}
}

// finite reports whether v is a coordinate the stage can work with: not
// infinite, not NaN, and within ±1e6 pixels (as zones and lines are).
func finite(v float64) bool { return math.Abs(v) <= 1e6 }

// class returns the index of a label, adding it when new.
func (s *Stage) class(label string) int32 {
	c, ok := s.classes[label]
	if !ok {
		c = int32(len(s.classNames))
		s.classes[label] = c
		s.classNames = append(s.classNames, label)
	}
	return c
}

// associate is ByteTrack's BYTETracker.update, steps 2 and 3: confirmed
// tracks (tracked and lost) against the high-score detections; the
// tracked ones left over against the low-score detections; then the
// tentative tracks against the high-score detections left over. It sets
// each matched track's det and marks the detections used.
//
// The cost is 1 − IoU in all three, as in ByteTrack's MOT20 setting.
// Its MOT17 setting multiplies the IoU by the detection's score first
// (fuse_score); that was tried here and dropped: a detector's score varies
// from frame to frame, and scaling each detection's column by it
// reorders the assignment of objects that pass close by each other. On
// the synthetic scenes (scene_test.go) fusing gave an id switch among six
// walkers with 20 % of detections missing, and two switches (IDF1 0.79)
// where two pairs cross with 30 % of frames dropped; IoU alone gave none.
// It also keeps match_iou what its name says.
func (s *Stage) associate() {
	s.rowsWhere(func(t *track) bool { return t.state != tentative })
	s.cols(s.high)
	s.apply(s.m.run(1 - s.set.matchIoU))

	s.rowsWhere(func(t *track) bool { return t.state == tracked && t.det < 0 })
	s.cols(s.low)
	s.apply(s.m.run(1 - secondMatchIoU))

	s.rowsWhere(func(t *track) bool { return t.state == tentative })
	s.cols(s.high)
	s.apply(s.m.run(1 - tentativeMatchIoU))
}

func (s *Stage) rowsWhere(keep func(*track) bool) {
	s.m.rows.reset()
	s.rowT = s.rowT[:0]
	for i, t := range s.tracks {
		if keep(t) {
			s.m.rows.add(t.pred, t.class)
			s.rowT = append(s.rowT, int32(i))
		}
	}
}

// cols sets the matching's columns to the unused detections of idx.
func (s *Stage) cols(idx []int32) {
	s.m.cols.reset()
	s.colD = s.colD[:0]
	for _, d := range idx {
		if !s.used[d] {
			s.m.cols.add(s.dbox[d], s.dclass[d])
			s.colD = append(s.colD, d)
		}
	}
}

func (s *Stage) apply(match []int32) {
	for r, c := range match {
		if c >= 0 {
			d := s.colD[c]
			s.tracks[s.rowT[r]].det = d
			s.used[d] = true
		}
	}
}

// start begins a tentative track on detection d.
func (s *Stage) start(d int32, dets []pipeline.Detection) {
	var t *track
	if n := len(s.free); n > 0 {
		t, s.free = s.free[n-1], s.free[:n-1]
	} else {
		t = new(track)
	}
	*t = track{
		zs: grow(t.zs, len(s.zones)), ls: grow(t.ls, len(s.lines)),
		state: tentative, class: s.dclass[d], label: dets[d].Label,
		det: d, fresh: true, seen0: s.clock,
		first: Seen{s.wall, s.pts},
	}
	clear(t.zs)
	for i := range t.ls {
		t.ls[i] = lineState{lastIn: math.NaN(), lastO: math.NaN()}
	}
	t.kf.init(s.dbox[d])
	t.still.start(s.dbox[d], s.clock)
	s.used[d] = true
	s.tracks = append(s.tracks, t)
}

// recycle keeps t's buffers for a later track. The slices that events or
// detections may still hold are dropped, not reused.
func (s *Stage) recycle(t *track) {
	t.inZones, t.entered, t.crossed = nil, nil, nil
	s.free = append(s.free, t)
}

// observe handles a track matched to detection t.det in this frame.
func (s *Stage) observe(t *track, dets []pipeline.Detection) {
	d := t.det
	b := s.dbox[d]
	if t.fresh {
		t.fresh = false
	} else {
		t.kf.update(b)
	}
	t.obs, t.obsBox = b, dets[d].Box
	t.lastSeen = s.clock
	t.last = Seen{s.wall, s.pts}
	if t.state == tentative {
		t.hits++
		if t.hits < s.set.confirmHits {
			s.rules(t)
			return
		}
		s.lastN++
		t.id = s.epoch + "-" + strconv.FormatUint(s.lastN, 10)
		s.emit(EventTrackStart, t)
	}
	t.state = tracked
	s.rules(t)
	dets[d].TrackID = t.id
	dets[d].Zones = t.inZones
}

// rules runs the stationary test, the zones and the lines for a track
// observed in this frame. A tentative track only accumulates state (the
// zones' inertia, the side of each line where it was first seen); events
// and counts start when it is confirmed.
func (s *Stage) rules(t *track) {
	confirmed := t.id != ""
	if became, dur := t.still.observe(t.obs, s.clock, s.set.stationaryAfter, s.set.stationaryMove, confirmed); became {
		e := s.emit(EventStationary, t)
		e.Duration = dur
	}
	changed := false
	for i := range s.zones {
		z, st := &s.zones[i], &t.zs[i]
		in := z.filter.ok(t.class, s.classNames) && z.contains(anchor(t.obs, z.anchor))
		switch {
		case in == st.inside || (t.still.still && confirmed):
			// A stationary object's membership is frozen: its box
			// jittering over an edge never re-triggers the zone.
			st.streak = 0
		default:
			st.streak++
			if st.streak >= z.minFrames && confirmed {
				st.streak = 0
				st.inside = in
				changed = true
				s.zoneChange(t, i, in)
			}
		}
		if st.inside && confirmed && z.loiterAfter > 0 && !st.loitered && s.clock-st.enteredAt >= z.loiterAfter {
			st.loitered = true
			e := s.emit(EventLoiter, t)
			e.Zone = z.name
			e.Duration = s.clock - st.enteredAt
		}
	}
	if changed {
		t.inZones = s.zoneNames(t)
	}
	for i := range s.lines {
		s.line(t, i, confirmed)
	}
}

func (s *Stage) zoneChange(t *track, i int, in bool) {
	z, st := &s.zones[i], &t.zs[i]
	typ := EventZoneExit
	if in {
		typ = EventZoneEnter
		st.enteredAt, st.loitered = s.clock, false
		t.entered = appendOnce(t.entered, z.name)
		z.occupy(t.class, 1)
	} else {
		z.occupy(t.class, -1)
	}
	s.countsVersion++
	e := s.emit(typ, t)
	e.Zone = z.name
}

// line judges a crossing of line i on the anchor's path from the last
// observation on one side to this one on the other. A side is taken only
// beyond the line's margin (see line.side), so an object crossing slowly
// with its box jittering counts once, not once per jitter.
func (s *Stage) line(t *track, i int, confirmed bool) {
	l, st := &s.lines[i], &t.ls[i]
	if !l.filter.ok(t.class, s.classNames) {
		return
	}
	p := anchor(t.obs, l.anchor)
	sd := l.side(p, t.obs)
	switch {
	case sd == 0: // within the margin: wait for a side
		return
	case st.side == 0:
	case !confirmed:
		return // keep the first side seen, judged when confirmed
	case sd != st.side && segmentsIntersect(st.at, p, l.a, l.b):
		dir, last := DirIn, &st.lastIn
		if sd < 0 {
			dir, last = DirOut, &st.lastO
		}
		if !(s.clock-*last < l.debounce) { // NaN: never counted
			*last = s.clock
			l.count(t.class, dir)
			t.crossed = appendOnce(t.crossed, l.name)
			s.countsVersion++
			e := s.emit(EventLineCross, t)
			e.Line, e.Direction = l.name, dir
		}
	}
	st.side, st.at = sd, p
}

// end emits a confirmed track's exits and its track_end.
func (s *Stage) end(t *track) {
	if t.id == "" {
		return
	}
	for i := range s.zones {
		if t.zs[i].inside {
			t.zs[i].inside = false
			s.zoneChange(t, i, false)
		}
	}
	e := s.emit(EventTrackEnd, t)
	e.FirstSeen, e.LastSeen = &Seen{t.first.Time, t.first.PTS}, &Seen{t.last.Time, t.last.PTS}
	e.Duration = t.lastSeen - t.seen0
	e.Zones, e.Lines = t.entered, t.crossed
	if e.Zones == nil {
		e.Zones = []string{}
	}
	if e.Lines == nil {
		e.Lines = []string{}
	}
}

// emit appends an event about t (nil: about the stream) and returns it
// for the caller to complete.
func (s *Stage) emit(typ EventType, t *track) *Event {
	e := Event{Schema: SchemaVersion, Type: typ, StreamID: s.streamID, Epoch: s.epoch,
		Seq: s.seq, Time: s.wall, PTS: s.pts}
	s.seq++
	if t != nil {
		e.TrackID, e.Label, e.Box = t.id, t.label, t.obsBox
	}
	s.out = append(s.out, e)
	return &s.out[len(s.out)-1]
}

// zoneNames returns a new slice of the names of the zones t is in, nil
// for none.
func (s *Stage) zoneNames(t *track) []string {
	var names []string
	for i := range s.zones {
		if t.zs[i].inside {
			names = append(names, s.zones[i].name)
		}
	}
	return names
}

func appendOnce(list []string, name string) []string {
	for _, n := range list {
		if n == name {
			return list
		}
	}
	return append(list, name)
}

// anchor returns the point of b that a zone or line tests.
func anchor(b box, a Anchor) pt {
	if a == AnchorCenter {
		return pt{(b.x1 + b.x2) / 2, (b.y1 + b.y2) / 2}
	}
	return pt{(b.x1 + b.x2) / 2, b.y2}
}

// resize follows the frames' size: the geometry is scaled from the size
// it was drawn for, and the tracks from the previous size, so that ids
// survive a change of resolution; a warning event says so.
func (s *Stage) resize(w, h int) {
	if w <= 0 || h <= 0 || (w == s.curW && h == s.curH) {
		return
	}
	prevW, prevH := s.curW, s.curH
	s.curW, s.curH = w, h
	if prevW == 0 { // the first frame
		if s.refW == 0 {
			s.refW, s.refH = w, h
		}
		prevW, prevH = s.refW, s.refH
	} else {
		sx, sy := float64(w)/float64(prevW), float64(h)/float64(prevH)
		for _, t := range s.tracks {
			t.kf.scale(sx, sy)
			t.obs = scaleBox(t.obs, sx, sy)
			t.still.scale(sx, sy)
			for i := range t.ls {
				t.ls[i].at = pt{t.ls[i].at.x * sx, t.ls[i].at.y * sy}
			}
		}
	}
	s.scaleGeometry()
	if prevW == w && prevH == h {
		return // the first frame, of the size drawn for
	}
	e := s.emit(EventWarning, nil)
	e.Reason = ReasonResolutionChanged
	e.FrameSize, e.PrevFrameSize = []int{w, h}, []int{prevW, prevH}
	e.Message = fmt.Sprintf("frames are %dx%d (were %dx%d): the zones and lines drawn for %dx%d are scaled by %.4g x %.4g",
		w, h, prevW, prevH, s.refW, s.refH, float64(w)/float64(s.refW), float64(h)/float64(s.refH))
}

func scaleBox(b box, sx, sy float64) box {
	return box{b.x1 * sx, b.y1 * sy, b.x2 * sx, b.y2 * sy}
}

// scaleGeometry recomputes the zones and lines in the current frame's
// pixels.
func (s *Stage) scaleGeometry() {
	sx, sy := 1.0, 1.0
	if s.refW > 0 && s.curW > 0 {
		sx, sy = float64(s.curW)/float64(s.refW), float64(s.curH)/float64(s.refH)
	}
	for i := range s.zones {
		s.zones[i].scale(sx, sy)
	}
	for i := range s.lines {
		s.lines[i].scale(sx, sy)
	}
}

// Close ends the run: every confirmed track gets its zone exits and its
// track_end, at pts and wall. The stage may be used again after it
// (tracks start afresh; ids and event numbers go on).
func (s *Stage) Close(pts float64, wall time.Time) []Event {
	s.out = nil
	s.pts, s.wall = pts, wall
	for _, t := range s.tracks {
		s.end(t)
		s.recycle(t)
	}
	clear(s.tracks)
	s.tracks = s.tracks[:0]
	return s.out
}

// CountsVersion changes whenever a count changes; it costs nothing, so
// the wiring can call it every frame and build Counts only on a change.
func (s *Stage) CountsVersion() uint64 { return s.countsVersion }

// Counts returns a snapshot of the occupancy of each zone and the
// crossings of each line (see Counts); it allocates, so call it on a
// change of CountsVersion.
func (s *Stage) Counts() Counts {
	c := Counts{Schema: CountsSchemaVersion, StreamID: s.streamID, Epoch: s.epoch,
		Version: s.countsVersion, Time: s.wall, PTS: s.pts,
		Zones: make([]ZoneCount, len(s.zones)), Lines: make([]LineCount, len(s.lines))}
	for i := range s.zones {
		z := &s.zones[i]
		zc := ZoneCount{Name: z.name, Occupancy: map[string]int{}}
		for cl, n := range z.occ {
			if z.seen[cl] {
				zc.Occupancy[s.classNames[cl]] = int(n)
				zc.Total += int(n)
			}
		}
		c.Zones[i] = zc
	}
	for i := range s.lines {
		l := &s.lines[i]
		lc := LineCount{Name: l.name, In: map[string]uint64{}, Out: map[string]uint64{}}
		for cl := range l.in {
			if l.in[cl]+l.out[cl] > 0 {
				lc.In[s.classNames[cl]], lc.Out[s.classNames[cl]] = l.in[cl], l.out[cl]
			}
		}
		c.Lines[i] = lc
	}
	return c
}
