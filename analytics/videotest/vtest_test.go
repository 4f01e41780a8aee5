package videotest

import (
	"os"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
)

// vtestLine crosses the walkway of vtest.avi (768×576) left of the "fire
// assembly point" sign, from the hazard tape at its top (a) to 25 px
// onto the grass below it (b): people crossing the grass corner onto the
// walkway are counted (the man in the blue jacket, frame 705, crosses at
// y 282), people walking on the grass further down are not (the man in the
// red and navy jacket comes to x 249–253 at y 302–331, frames 750–762,
// without crossing the walkway). With a above b, the left of the line is
// its positive side: "in" is walking right to left, "out" left to right.
// configs/demo-people.yaml has the same line.
var vtestLine = analytics.Line{Name: "walkway", A: analytics.XY{250, 185}, B: analytics.XY{250, 292}, Classes: []string{"person"}}

// vtestZone is the area around the sign where people stand and talk
// (frames 0–200), for the demo; the test only logs its events.
var vtestZone = analytics.Zone{Name: "assembly_point", Polygon: []analytics.XY{{330, 225}, {480, 222}, {495, 305}, {330, 312}},
	Classes: []string{"person"}, LoiterAfter: analytics.Duration(10e9)}

// vtestCrossings are the crossings of vtestLine counted by watching the
// clip: every 10th frame with the line, boxes and ids drawn
// (VIGIL_VTEST_FRAMES, draw_test.go), and every frame near the line where
// someone comes close. from and to are the frames before and after the
// crossing, where the person is on one side and then on the other; an
// event must fall in [from, to].
var vtestCrossings = []struct {
	dir      analytics.Direction
	from, to int
	who      string
}{
	{analytics.DirIn, 170, 180, "woman in a white jacket"},
	{analytics.DirIn, 190, 200, "man in a striped navy jacket"},
	{analytics.DirIn, 230, 250, "man in a dark jacket"},
	{analytics.DirIn, 290, 310, "man in black"},
	{analytics.DirOut, 300, 310, "man in a dark jacket, turning back (crossed in at 240)"},
	{analytics.DirOut, 320, 330, "man in black, turning back (crossed in at 300)"},
	{analytics.DirIn, 510, 520, "woman in a red jacket"},
	{analytics.DirIn, 580, 590, "bald man in a dark jacket"},
	{analytics.DirOut, 650, 670, "woman in a red jacket, back from the left edge (hidden at 660 behind the next man)"},
	{analytics.DirIn, 660, 670, "man in a dark jacket and jeans"},
	{analytics.DirOut, 660, 680, "bald man, turning back"},
	{analytics.DirIn, 700, 710, "man in a blue jacket, from the grass corner"},
	{analytics.DirOut, 710, 720, "man in a dark jacket and jeans, turning back"},
	{analytics.DirOut, 760, 771, "woman with curly hair, from the grass"},
	{analytics.DirIn, 770, 790, "man in a dark jacket"},
}

// Not crossings, also checked by eye (every frame): the man in the
// striped jacket is right of the line at frame 0 and walks away from it;
// people turn back 17–26 px before it (frames 77–83, 280–300, 312–327,
// 384–398); the man in the red and navy jacket stays below the line's end
// (above); the man in black reaches the line (anchor x 251) in the last
// frame, 794; the figure on the upper path (frame 92) and the people on the
// grass (frames 540–586, 669–672) pass far above or below it.

// vtestPeople are people whose identity was checked by eye on the frames
// listed (crops of their boxes): each point is on the person in that
// frame. ids is how many track ids the person had over those frames with
// the figures below (the tracker may do better, not worse), and why.
var vtestPeople = []struct {
	who string
	ids int
	at  [][3]int // frame, x, y
	why string
}{
	{"woman in a red jacket, first visit (leaves at the left edge, 579)", 1, [][3]int{{440, 632, 305}, {510, 276, 221}, {561, 89, 204}}, ""},
	{"woman in a red jacket, second visit", 1, [][3]int{{626, 112, 206}, {716, 551, 158}, {774, 689, 164}}, ""},
	{"man in a blue jacket", 1, [][3]int{{666, 627, 334}, {715, 177, 232}}, ""},
	{"bald man in a dark jacket", 1, [][3]int{{500, 575, 272}, {615, 144, 175}, {724, 502, 252}, {794, 662, 285}}, ""},
	{"woman with curly hair, on the grass", 1, [][3]int{{598, 296, 504}, {691, 139, 366}, {794, 405, 201}}, ""},
	{"man with a white paper", 1, [][3]int{{249, 628, 308}, {344, 372, 259}, {403, 736, 358}}, ""},
	{"man in a dark jacket (25)", 1, [][3]int{{596, 607, 250}, {698, 191, 203}, {794, 636, 320}}, ""},
	{"man in a dark jacket (29)", 1, [][3]int{{713, 615, 250}, {763, 312, 213}, {794, 227, 195}}, ""},
	{"woman in a long black coat", 1, [][3]int{{56, 540, 250}, {212, 700, 135}, {325, 648, 234}}, ""},
	{"woman in a white jacket", 2, [][3]int{{128, 634, 248}, {148, 475, 219}, {165, 332, 206}, {200, 93, 185}},
		"new id 150–158 in the group at the sign"},
	{"man in a red and navy jacket, second visit", 2, [][3]int{{544, 230, 448}, {605, 519, 353}, {646, 661, 243}, {742, 275, 240}, {794, 459, 330}},
		"new id 623–629, after passing in front of the man in black"},
	{"man in a red and navy jacket, first visit", 2, [][3]int{{54, 507, 254}, {136, 615, 150}, {191, 693, 125}, {300, 597, 197}, {374, 758, 324}},
		"ids swapped with the next man 162–164, walking through each other"},
	{"man in a dark jacket, walking towards the camera", 2, [][3]int{{78, 586, 238}, {151, 718, 143}, {177, 613, 162}, {306, 236, 199}, {394, 754, 281}},
		"the same swap"},
	{"man in a long dark coat", 2, [][3]int{{8, 589, 283}, {20, 459, 273}, {71, 304, 204}, {125, 565, 258}},
		"new id at 63 leaving the group at the sign, the old one left on the sign"},
	{"man in a striped navy jacket", 2, [][3]int{{140, 695, 282}, {159, 531, 263}, {199, 238, 228}, {257, 51, 208}},
		"took the id of the man in jeans 160–180, at the sign"},
	{"man in a dark jacket and jeans", 3, [][3]int{{31, 396, 223}, {121, 386, 222}, {204, 663, 330}, {333, 500, 186}, {466, 399, 261}, {518, 740, 382}},
		"lost his id to the striped jacket at 160; swapped with the man in black 505–510"},
	{"man in black", 3, [][3]int{{251, 556, 225}, {391, 585, 178}, {543, 658, 344}, {669, 482, 225}, {735, 585, 227}, {747, 538, 217}, {794, 251, 223}},
		"swapped with the man in jeans 505–510; new id 735–742 after passing behind the bald man"},
}

// YOLOX-Nano (CPU, vigil's thresholds) on vtest.avi through decode, infer
// and analytics.Stage, as a stream would run it: the crossings of a line
// across the walkway are those counted by watching the clip, and the
// people checked by eye keep at most the ids they had when the test was
// written. It logs the tracks and the stage's share of the frame time.
func TestVtestYOLOXTracking(t *testing.T) {
	model, video := yoloxModel(t), vtestClip(t)
	cfg := analytics.Config{Zones: []analytics.Zone{vtestZone}, Lines: []analytics.Line{vtestLine}}
	r := runClip(t, model, "yolox", video, cfg)
	require.Len(t, r.frames, 795, "vtest.avi has 795 frames")
	if dir := os.Getenv("VIGIL_VTEST_FRAMES"); dir != "" {
		annotate(t, video, dir, 10, r, cfg)
	}

	// Tracks.
	tracks := r.tracks()
	var people []*span
	var lengths []float64
	for _, s := range tracks {
		t.Logf("track %-5s %-6s frames %3d–%3d (%3d observed, %4.1f s)", s.id, s.label, s.first, s.last, s.observed,
			r.frames[s.last].PTS-r.frames[s.first].PTS)
		if s.label == "person" {
			people = append(people, s)
			lengths = append(lengths, r.frames[s.last].PTS-r.frames[s.first].PTS)
		}
	}
	sort.Float64s(lengths)
	t.Logf("%d tracks, %d of them persons; person track lengths: median %.1f s, shortest %.1f s, longest %.1f s",
		len(tracks), len(people), lengths[len(lengths)/2], lengths[0], lengths[len(lengths)-1])

	// Ids per person.
	spans, ids := 0, 0
	for _, p := range vtestPeople {
		got := map[string]bool{}
		for _, at := range p.at {
			id := r.idAt(at[0], "person", float32(at[1]), float32(at[2]))
			require.NotEmpty(t, id, "%s: no tracked person at (%d, %d) in frame %d", p.who, at[1], at[2], at[0])
			got[id] = true
		}
		spans++
		ids += len(got)
		t.Logf("%-60s %d id(s) %v %s", p.who, len(got), keys(got), p.why)
		require.LessOrEqual(t, len(got), p.ids, "%s: more ids than when checked by eye (%s)", p.who, p.why)
	}
	t.Logf("people checked by eye: %d, ids %d (%.2f per person)", spans, ids, float64(ids)/float64(spans))

	// Crossings.
	used := make([]bool, len(vtestCrossings))
	unexpected := map[analytics.Direction]int{}
	counted := map[analytics.Direction]int{}
	var zoneEvents, loiters int
	for _, e := range r.events {
		switch e.Type {
		case analytics.EventZoneEnter, analytics.EventZoneExit:
			zoneEvents++
		case analytics.EventLoiter:
			loiters++
		}
		if e.Type != analytics.EventLineCross {
			continue
		}
		counted[e.Direction]++
		f := r.frameAt(e.PTS)
		match := -1
		for i, c := range vtestCrossings {
			if !used[i] && c.dir == e.Direction && f >= c.from && f <= c.to {
				match = i
				break
			}
		}
		if match < 0 {
			unexpected[e.Direction]++
			t.Logf("crossing %s by %s at frame %d: not one counted by eye", e.Direction, e.TrackID, f)
			continue
		}
		used[match] = true
		t.Logf("crossing %-3s by %-5s at frame %3d: %s", e.Direction, e.TrackID, f, vtestCrossings[match].who)
	}
	missed := map[analytics.Direction]int{}
	want := map[analytics.Direction]int{}
	for i, c := range vtestCrossings {
		want[c.dir]++
		if !used[i] {
			missed[c.dir]++
			t.Logf("crossing %s at frames %d–%d (%s) not counted", c.dir, c.from, c.to, c.who)
		}
	}
	t.Logf("line %s: in %d (by eye %d), out %d (by eye %d); zone %s: %d enter/exit events, %d loiter",
		vtestLine.Name, counted[analytics.DirIn], want[analytics.DirIn], counted[analytics.DirOut], want[analytics.DirOut],
		vtestZone.Name, zoneEvents, loiters)
	// Tolerance: one crossing each way, missed or extra. Three people pass
	// within 10 px of the line's end or of the line itself at the clip's
	// end (the blue jacket at frame 705, the red and navy jacket at
	// 750–762, the man in black at 794), where a box a few pixels off
	// (another ONNX Runtime build, the release's yolox_nano.onnx rather
	// than the ../shared export) changes a count; every other crossing and
	// turn is 17 px or more from the line.
	for _, d := range []analytics.Direction{analytics.DirIn, analytics.DirOut} {
		require.LessOrEqual(t, missed[d], 1, "crossings %s counted by eye but not by the stage", d)
		require.LessOrEqual(t, unexpected[d], 1, "crossings %s counted by the stage but not by eye", d)
	}

	logShare(t, "vtest.avi, YOLOX-Nano", r)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// logShare logs the stage's CPU time per frame against the engine's time
// per frame, measured on the same frames in the same run.
func logShare(t *testing.T, what string, r run) {
	t.Helper()
	var stage, inferWall, inferCPU []float64
	objects := 0
	for _, f := range r.frames {
		stage = append(stage, float64(f.Stage.Microseconds()))
		inferWall = append(inferWall, float64(f.Infer.Microseconds()))
		inferCPU = append(inferCPU, float64(f.InferCPU.Microseconds()))
		objects += len(f.Dets)
	}
	m := func(v []float64) (mean, median float64) {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		for _, x := range s {
			mean += x
		}
		return mean / float64(len(s)), s[len(s)/2]
	}
	sm, smed := m(stage)
	im, imed := m(inferWall)
	cm, _ := m(inferCPU)
	t.Logf("%s, %d frames, %.1f detections per frame: analytics stage %.1f µs CPU per frame (median %.1f); engine %.0f µs "+
		"per frame (median %.0f; %.0f µs of CPU, all threads): the stage is %.2f %% of the engine's time (%.2f %% of its CPU)",
		what, len(r.frames), float64(objects)/float64(len(r.frames)), sm, smed, im, imed, cm, 100*sm/im, 100*sm/cm)
}
