package analytics

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vigil-video/vigil/pipeline"
)

// benchFrames renders a loop of frames of n objects (a fifth of them
// cars) bouncing around a 1920×1080 frame, with 2 px jitter and 10 % of
// detections missing. Each object's path repeats every period frames,
// so the loop plays seamlessly again and again: the stage sees the same
// objects forever, which is the steady state.
func benchFrames(n, period int) [][]pipeline.Detection {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	type mover struct {
		label         string
		w, h          float64
		x0, y0        float64 // start
		ax, ay        float64 // amplitude of the bounce, pixels
		phase, phase2 float64
	}
	ms := make([]mover, n)
	for i := range ms {
		m := mover{label: "person", w: 20 + 30*rng.Float64(), h: 50 + 70*rng.Float64()}
		if i%5 == 0 {
			m.label, m.w, m.h = "car", 60+60*rng.Float64(), 40+30*rng.Float64()
		}
		m.x0, m.y0 = 100+1700*rng.Float64(), 150+800*rng.Float64()
		m.ax, m.ay = 50+150*rng.Float64(), 20+60*rng.Float64()
		m.phase, m.phase2 = rng.Float64(), rng.Float64()
		ms[i] = m
	}
	tri := func(u float64) float64 { // a triangle wave of period 1, in [-1, 1]
		u -= float64(int(u))
		if u < 0.5 {
			return 4*u - 1
		}
		return 3 - 4*u
	}
	frames := make([][]pipeline.Detection, period)
	for k := range frames {
		u := float64(k) / float64(period)
		for _, m := range ms {
			if rng.Float64() < 0.1 {
				continue
			}
			cx, cy := m.x0+m.ax*tri(u+m.phase), m.y0+m.ay*tri(2*u+m.phase2)
			j := func() float32 { return float32(rng.NormFloat64() * 2) }
			frames[k] = append(frames[k], pipeline.Detection{Label: m.label, Score: float32(0.55 + 0.4*rng.Float64()),
				Box: pipeline.Box{X1: float32(cx-m.w/2) + j(), Y1: float32(cy-m.h/2) + j(), X2: float32(cx+m.w/2) + j(), Y2: float32(cy+m.h/2) + j()}})
		}
	}
	return frames
}

func benchConfig(rules bool) Config {
	if !rules {
		return Config{}
	}
	return Config{
		Zones: []Zone{
			{Name: "left", Polygon: []XY{{0, 0}, {960, 0}, {960, 1080}, {0, 1080}}},
			{Name: "pen", Polygon: []XY{{600, 300}, {1300, 250}, {1400, 800}, {900, 900}, {500, 700}}, Classes: []string{"person"}, LoiterAfter: Duration(5 * time.Second)},
		},
		Lines: []Line{
			{Name: "v", A: XY{1200, 0}, B: XY{1200, 1080}},
			{Name: "h", A: XY{0, 540}, B: XY{1920, 540}, Classes: []string{"car"}},
		},
	}
}

// BenchmarkObserve is the stage's cost per frame (ns/op is per frame) in
// the steady state, with n objects: "track" is the tracker alone,
// "rules" adds two zones and two lines (whose events allocate: the
// events returned, the zone lists that change).
func BenchmarkObserve(b *testing.B) {
	for _, rules := range []bool{false, true} {
		for _, n := range []int{10, 100, 500} {
			name := fmt.Sprintf("track/objects=%d", n)
			if rules {
				name = fmt.Sprintf("rules/objects=%d", n)
			}
			b.Run(name, func(b *testing.B) {
				const period = 300 // 10 s at 30 fps
				frames := benchFrames(n, period)
				st, err := New("cam1", "0123456789ab", benchConfig(rules))
				if err != nil {
					b.Fatal(err)
				}
				wall := time.Now()
				k := 0
				step := func() {
					st.Observe(float64(k)/30, wall, 1920, 1080, frames[k%period])
					k++
				}
				for i := 0; i < 2*period; i++ { // warm up: all tracks confirmed, buffers grown
					step()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					step()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/frame")
			})
		}
	}
}

// The tracker allocates nothing per frame in the steady state.
func TestObserveNoAllocs(t *testing.T) {
	const period = 300
	frames := benchFrames(100, period)
	st, err := New("cam1", "0123456789ab", Config{})
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	step := func() {
		st.Observe(float64(k)/30, time.Time{}, 1920, 1080, frames[k%period])
		k++
	}
	for i := 0; i < 2*period; i++ {
		step()
	}
	if a := testing.AllocsPerRun(period, step); a != 0 {
		t.Fatalf("%v allocations per frame, want 0", a)
	}
}
