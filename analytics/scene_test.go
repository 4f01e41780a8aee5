package analytics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

// A synthetic scene: objects on known paths, seen by a simulated detector
// that misses some of them, jitters their boxes, sometimes reports
// clutter, and loses them where the scene says (gaps, occlusions).

type span struct{ from, to float64 } // seconds, [from, to)

func (s span) has(t float64) bool { return t >= s.from && t < s.to }

type obj struct {
	label      string
	w, h       float64            // pixels
	from, to   float64            // seconds on screen
	pos        func(t float64) pt // centre at time t
	hidden     []span             // no detection (occluded, or a gap)
	lowScore   []span             // detections score 0.2–0.45 (partly occluded)
	crossesDir Direction          // the crossing of the scene's line it makes, "" none
}

func (o obj) trueBox(t float64) box {
	c := o.pos(t)
	return box{c.x - o.w/2, c.y - o.h/2, c.x + o.w/2, c.y + o.h/2}
}

type scene struct {
	name      string
	fps, dur  float64
	w, h      int
	objs      []obj
	miss      float64 // chance a visible object is not detected in a frame
	jitter    float64 // std of each box edge, in pixels
	clutter   float64 // chance of a false positive (1–2 frames long) per frame
	maxIDSW   int     // the bound the issue sets for the scene
	occlusion bool
	cfg       Config
}

// sdet is one simulated detection with the object it comes from (-1:
// clutter) and that object's true box.
type sdet struct {
	d     pipeline.Detection
	gt    int
	truth box
}

type sframe struct {
	pts  float64
	dets []sdet
}

// frames renders the scene at its frame rate.
func (sc scene) frames(seed uint64) []sframe {
	rng := rand.New(rand.NewPCG(seed, 99))
	var out []sframe
	var clutter []sdet // false positives still showing, with frames left
	var clutterLeft []int
	n := int(math.Round(sc.dur * sc.fps))
	for k := 0; k < n; k++ {
		t := float64(k) / sc.fps
		f := sframe{pts: 10 + t} // a stream's PTS need not start at 0
		for i, o := range sc.objs {
			if t < o.from || t >= o.to || inAny(o.hidden, t) || rng.Float64() < sc.miss {
				continue
			}
			tb := o.trueBox(t)
			b := pipeline.Box{
				X1: float32(tb.x1 + rng.NormFloat64()*sc.jitter), Y1: float32(tb.y1 + rng.NormFloat64()*sc.jitter),
				X2: float32(tb.x2 + rng.NormFloat64()*sc.jitter), Y2: float32(tb.y2 + rng.NormFloat64()*sc.jitter),
			}
			score := 0.55 + 0.4*rng.Float64()
			if inAny(o.lowScore, t) {
				score = 0.2 + 0.25*rng.Float64()
			}
			f.dets = append(f.dets, sdet{pipeline.Detection{Label: o.label, Score: float32(score), Box: b}, i, tb})
		}
		if rng.Float64() < sc.clutter {
			x, y := rng.Float64()*float64(sc.w-60), rng.Float64()*float64(sc.h-100)
			c := sdet{pipeline.Detection{Label: "person", Score: float32(0.6 + 0.1*rng.Float64()),
				Box: pipeline.Box{X1: float32(x), Y1: float32(y), X2: float32(x + 40), Y2: float32(y + 90)}}, -1, box{}}
			clutter = append(clutter, c)
			clutterLeft = append(clutterLeft, 1+rng.IntN(2))
		}
		for i := range clutter {
			if clutterLeft[i] > 0 {
				f.dets = append(f.dets, clutter[i])
				clutterLeft[i]--
			}
		}
		rng.Shuffle(len(f.dets), func(i, j int) { f.dets[i], f.dets[j] = f.dets[j], f.dets[i] })
		out = append(out, f)
	}
	return out
}

func inAny(spans []span, t float64) bool {
	for _, s := range spans {
		if s.has(t) {
			return true
		}
	}
	return false
}

// dropFrames removes a fraction of the frames at random, as the deadline
// policy would (it drops frames, never parts of them).
func dropFrames(fs []sframe, frac float64, seed uint64) []sframe {
	if frac == 0 {
		return fs
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []sframe
	for _, f := range fs {
		if rng.Float64() >= frac {
			out = append(out, f)
		}
	}
	return out
}

// sceneResult is what a run of the stage over a scene gave.
type sceneResult struct {
	clear    clearResult
	id       identityResult
	idsPerGT map[int]map[string]int // object → track id → detections labelled
	events   []Event
	counts   Counts
}

// runScene feeds the frames to a new stage and evaluates it. The metrics
// are computed on the detections the stage was given: the ground truth of
// a frame is the objects detected in it, the tracker's output the track
// ids it wrote into those detections, and their similarity the IoU of the
// object's true box with the detection's box. So they measure association,
// not the simulated detector: a detection that is missing is neither a
// miss nor a hit, clutter given an id is a false positive, and a
// detection left without an id (a track not yet confirmed) is a miss.
func runScene(t *testing.T, sc scene, fs []sframe, schema *jsonschema.Schema) sceneResult {
	t.Helper()
	st, err := New("cam1", "0123456789ab", sc.cfg)
	require.NoError(t, err)
	res := sceneResult{idsPerGT: map[int]map[string]int{}}
	trIDs := map[string]int{}
	var mf []mframe
	wall := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, f := range fs {
		dets := make([]pipeline.Detection, len(f.dets))
		for i, d := range f.dets {
			dets[i] = d.d
		}
		evs := st.Observe(f.pts, wall.Add(time.Duration(f.pts*float64(time.Second))), sc.w, sc.h, dets)
		res.events = append(res.events, evs...)
		var m mframe
		var gtBoxes, trBoxes []box
		for i, d := range f.dets {
			if d.gt >= 0 {
				m.gt = append(m.gt, d.gt)
				gtBoxes = append(gtBoxes, d.truth)
			}
			if id := dets[i].TrackID; id != "" {
				m.tr = append(m.tr, index(trIDs, id))
				b := dets[i].Box
				trBoxes = append(trBoxes, box{float64(b.X1), float64(b.Y1), float64(b.X2), float64(b.Y2)})
				if d.gt >= 0 {
					if res.idsPerGT[d.gt] == nil {
						res.idsPerGT[d.gt] = map[string]int{}
					}
					res.idsPerGT[d.gt][id]++
				}
			}
		}
		m.sim = make([][]float64, len(m.gt))
		for i := range m.gt {
			m.sim[i] = make([]float64, len(m.tr))
			for j := range m.tr {
				m.sim[i][j] = iou(gtBoxes[i], trBoxes[j])
			}
		}
		mf = append(mf, m)
	}
	res.counts = st.Counts()
	last := fs[len(fs)-1].pts
	res.events = append(res.events, st.Close(last, wall.Add(time.Duration(last*float64(time.Second))))...)
	res.clear = clearMOT(mf, 0.5)
	res.id = identity(mf, 0.5)
	checkEvents(t, schema, res.events, 0)
	return res
}

// compileSchema compiles an embedded JSON Schema.
func compileSchema(t testing.TB, name string, doc []byte) *jsonschema.Schema {
	t.Helper()
	d, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource(name, d))
	s, err := c.Compile(name)
	require.NoError(t, err)
	return s
}

// checkEvents validates every event against SchemaJSON and checks that
// their sequence numbers count from first without gaps.
func checkEvents(t testing.TB, schema *jsonschema.Schema, evs []Event, first uint64) {
	t.Helper()
	for i, e := range evs {
		require.Equal(t, first+uint64(i), e.Seq, "event %d: seq", i)
		b, err := json.Marshal(e)
		require.NoError(t, err)
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		require.NoError(t, err)
		require.NoError(t, schema.Validate(v), "event %s", b)
	}
}

// crossings counts the line_cross events by direction, and by object
// through the track ids (each track id belongs to the object whose
// detections it labelled most).
func (r sceneResult) crossings() (in, out int, perGT map[int][]Direction) {
	owner := map[string]int{}
	best := map[string]int{}
	for gt, ids := range r.idsPerGT {
		for id, n := range ids {
			if n > best[id] {
				best[id], owner[id] = n, gt
			}
		}
	}
	perGT = map[int][]Direction{}
	for _, e := range r.events {
		if e.Type != EventLineCross {
			continue
		}
		if e.Direction == DirIn {
			in++
		} else {
			out++
		}
		gt, ok := owner[e.TrackID]
		if !ok {
			gt = -1
		}
		perGT[gt] = append(perGT[gt], e.Direction)
	}
	return in, out, perGT
}

// walker moves from a to b over [from, to).
func walker(label string, w, h float64, a, b pt, from, to float64) obj {
	return obj{label: label, w: w, h: h, from: from, to: to, pos: func(t float64) pt {
		u := (t - from) / (to - from)
		return pt{a.x + (b.x-a.x)*u, a.y + (b.y-a.y)*u}
	}}
}

// gateLine is the scenes' line: vertical at x = 640 of a 1280×720 frame,
// drawn downwards, so a bottom-centre anchor moving right to left
// crosses it "in".
var gateLine = Line{Name: "gate", A: XY{640, 0}, B: XY{640, 720}}

// withCrossing sets the crossing an object makes of gateLine.
func withCrossing(o obj) obj {
	a, b := anchor(o.trueBox(o.from), AnchorBottomCenter), anchor(o.trueBox(o.to-1e-9), AnchorBottomCenter)
	sa, sb := sign(cross(pt{640, 0}, pt{640, 720}, a)), sign(cross(pt{640, 0}, pt{640, 720}, b))
	switch {
	case sa < 0 && sb > 0:
		o.crossesDir = DirIn
	case sa > 0 && sb < 0:
		o.crossesDir = DirOut
	}
	return o
}

func scenes() []scene {
	cfg := Config{Lines: []Line{gateLine}}
	var out []scene

	// Six people walking across, 20 % of detections missing, 2 px
	// jitter, clutter in a third of the frames.
	s := scene{name: "missing20", fps: 30, dur: 12, w: 1280, h: 720, miss: 0.2, jitter: 2, clutter: 0.3, cfg: cfg}
	for i := 0; i < 6; i++ {
		y := 150 + 90*float64(i)
		a, b := pt{100, y}, pt{1180, y + 30}
		if i%2 == 1 {
			a, b = b, a
		}
		s.objs = append(s.objs, walker("person", 50, 120, a, b, 0.5*float64(i), 10+0.3*float64(i)))
	}
	out = append(out, s)

	// Three people each missed for 2 s (60 frames); the first crosses the
	// line during its gap.
	s = scene{name: "gap2s", fps: 30, dur: 12, w: 1280, h: 720, jitter: 2, cfg: cfg}
	for i := 0; i < 3; i++ {
		y := 200 + 180*float64(i)
		o := walker("person", 50, 120, pt{150, y}, pt{1130, y}, 0, 10)
		if i == 1 {
			o = walker("person", 50, 120, pt{1130, y}, pt{150, y}, 0, 10)
		}
		g := []float64{4, 2, 6}[i] // the first: at x = 542..738 from 4 s to 6 s
		o.hidden = []span{{g, g + 2}}
		s.objs = append(s.objs, o)
	}
	out = append(out, s)

	// Heavy jitter: every box edge off by 5 px (10 % of a 50 px width).
	s = scene{name: "jitter", fps: 30, dur: 10, w: 1280, h: 720, jitter: 5, miss: 0.05, cfg: cfg}
	for i := 0; i < 5; i++ {
		y := 150 + 110*float64(i)
		s.objs = append(s.objs, walker("person", 50, 120, pt{100 + 40*float64(i), y}, pt{1180, y - 40}, 0, 9))
	}
	out = append(out, s)

	// Two people walking into each other on one line, and two crossing
	// in an X; every box overlaps its partner's for about 0.5 s.
	s = scene{name: "crossing", fps: 30, dur: 8, w: 1280, h: 720, jitter: 2, miss: 0.05, maxIDSW: 1, occlusion: true, cfg: cfg}
	s.objs = []obj{
		walker("person", 50, 120, pt{200, 300}, pt{1080, 300}, 0, 7),
		walker("person", 50, 120, pt{1080, 310}, pt{200, 310}, 0, 7),
		walker("person", 50, 120, pt{300, 450}, pt{1000, 650}, 0, 7),
		walker("person", 50, 120, pt{300, 650}, pt{1000, 450}, 0, 7),
	}
	out = append(out, s)

	// One person passing behind another: hidden for 10 frames while the
	// two overlap most, with low scores (partly hidden) for the 5 frames
	// on each side.
	s = scene{name: "occlusion", fps: 30, dur: 8, w: 1280, h: 720, jitter: 2, maxIDSW: 1, occlusion: true, cfg: cfg}
	back := walker("person", 44, 110, pt{200, 380}, pt{1080, 380}, 0, 7)  // behind, walking right
	front := walker("person", 56, 140, pt{1080, 400}, pt{200, 400}, 0, 7) // in front, walking left
	// They meet at x = 640 at t = 3.5 s.
	back.hidden = []span{{3.5 - 5.0/30, 3.5 + 5.0/30}}
	back.lowScore = []span{{3.5 - 10.0/30, 3.5 - 5.0/30}, {3.5 + 5.0/30, 3.5 + 10.0/30}}
	s.objs = []obj{back, front}
	out = append(out, s)

	// Thirty objects at once (people and cars) on random straight paths.
	s = scene{name: "crowd30", fps: 30, dur: 10, w: 1280, h: 720, jitter: 2, miss: 0.1, clutter: 0.3, maxIDSW: 1, occlusion: true, cfg: cfg}
	rng := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 30; i++ {
		label, w, h := "person", 30+20*rng.Float64(), 70+50*rng.Float64()
		if i%5 == 0 {
			label, w, h = "car", 90+40*rng.Float64(), 50+20*rng.Float64()
		}
		a := pt{80 + rng.Float64()*1120, 80 + rng.Float64()*560}
		b := pt{80 + rng.Float64()*1120, 80 + rng.Float64()*560}
		s.objs = append(s.objs, walker(label, w, h, a, b, rng.Float64(), 9+rng.Float64()))
	}
	out = append(out, s)

	for i := range out {
		for j := range out[i].objs {
			out[i].objs[j] = withCrossing(out[i].objs[j])
		}
	}
	return out
}

// The tracker on the synthetic scenes, with every frame and with 30 % and
// 60 % of them removed: IDF1 ≥ 0.9 (the bound), at most one id
// switch in a scene with occlusions and none elsewhere, and every
// crossing of the line counted once, by the right object in the right
// direction.
func TestScenes(t *testing.T) {
	schema := compileSchema(t, "analytics.schema.json", SchemaJSON)
	for _, sc := range scenes() {
		for _, drop := range []float64{0, 0.3, 0.6} {
			t.Run(fmt.Sprintf("%s/drop%02.0f", sc.name, drop*100), func(t *testing.T) {
				fs := dropFrames(sc.frames(1), drop, 2)
				r := runScene(t, sc, fs, schema)
				in, out, perGT := r.crossings()
				wantIn, wantOut := 0, 0
				for _, o := range sc.objs {
					switch o.crossesDir {
					case DirIn:
						wantIn++
					case DirOut:
						wantOut++
					}
				}
				idsPerObj := make([]int, 0, len(sc.objs))
				for i := range sc.objs {
					idsPerObj = append(idsPerObj, len(r.idsPerGT[i]))
				}
				sort.Ints(idsPerObj)
				t.Logf("%-9s drop %2.0f%%: %3d frames, IDF1 %.3f (IDP %.3f IDR %.3f), MOTA %.3f, IDSW %d, TP %d FN %d FP %d; ids per object %v; crossings in %d/%d out %d/%d",
					sc.name, drop*100, len(fs), r.id.IDF1, r.id.IDP, r.id.IDR, r.clear.MOTA, r.clear.IDSW,
					r.clear.TP, r.clear.FN, r.clear.FP, idsPerObj, in, wantIn, out, wantOut)
				require.GreaterOrEqual(t, r.id.IDF1, 0.9, "IDF1")
				require.LessOrEqual(t, r.clear.IDSW, sc.maxIDSW, "id switches")
				require.Equal(t, wantIn, in, "crossings in")
				require.Equal(t, wantOut, out, "crossings out")
				for i, o := range sc.objs {
					if o.crossesDir != "" {
						require.Equal(t, []Direction{o.crossesDir}, perGT[i], "object %d's crossings", i)
					}
				}
				require.Empty(t, perGT[-1], "crossings by tracks of clutter")
				require.Equal(t, uint64(wantIn), sumCounts(r.counts.Lines[0].In))
				require.Equal(t, uint64(wantOut), sumCounts(r.counts.Lines[0].Out))
			})
		}
	}
}

func sumCounts(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}
