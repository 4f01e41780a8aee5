package analytics

import "math"

// The stationary test. A track is stationary when its box has stayed
// within Tracker.StationaryMove of its size for Tracker.StationaryAfter.
//
// It looks at the box averaged over about stillTau, not at each
// detection: compared frame by frame, a 3 px jitter on a 50 px box
// crosses a 10 % threshold every few frames, so an object would never be
// still, or would be still again and again. And it compares that average
// with its own past over the whole window (stillSamples samples spread
// over StationaryAfter), not with one reference taken when the window
// started: an average that lags an object coming to a stop would leave
// such a reference a few pixels short of where the object stopped, and
// noise would later count as moving. Once stationary, the object stays so
// until its average leaves StationaryMove of where it was then.

// stillTau is the time constant, in seconds, of the average: an
// exponential moving average weighted by PTS time, so that dropped frames
// do not change it. Half a second averages about 15 detections at 30 fps,
// which shrinks a detector's jitter about fivefold (a 3 px jitter on a
// 50 px box stays some 6 standard deviations from a 10 % threshold), and
// lets a walking person's average move past that threshold within a
// quarter of a second of setting off. The average lags a moving box by
// its speed times stillTau and settles within about 1.5 s of a stop, so
// an object is stationary some StationaryAfter + 1.5 s after it stops.
const stillTau = 0.5

// stillSamples is the number of past averages kept over StationaryAfter
// (one every twentieth of it).
const stillSamples = 21

type sample struct {
	b  box
	at float64
}

// stillness is one track's stationary test.
type stillness struct {
	avg    box
	avgAt  float64
	hist   [stillSamples]sample // a ring: hist[head] is the oldest when full
	n      int
	head   int
	still  bool
	ref    box // the average when the track became stationary
	lastAt float64
}

func (s *stillness) start(b box, now float64) {
	*s = stillness{avg: b, avgAt: now}
}

// observe folds in the box b observed at now (seconds) and reports
// whether the track has just become stationary, and for how long it has
// been still. A track that is not confirmed keeps its history but does
// not become stationary.
func (s *stillness) observe(b box, now, after, frac float64, confirmed bool) (became bool, dur float64) {
	if dt := now - s.avgAt; dt > 0 {
		a := 1 - math.Exp(-dt/stillTau)
		s.avg = box{s.avg.x1 + a*(b.x1-s.avg.x1), s.avg.y1 + a*(b.y1-s.avg.y1),
			s.avg.x2 + a*(b.x2-s.avg.x2), s.avg.y2 + a*(b.y2-s.avg.y2)}
		s.avgAt = now
	}
	if s.still {
		if !moved(s.avg, s.ref, frac) {
			return false, 0
		}
		s.still, s.n, s.head = false, 0, 0
	}
	if s.n == 0 || now-s.lastAt >= after/(stillSamples-1) {
		s.hist[(s.head+s.n)%stillSamples] = sample{s.avg, now}
		if s.n < stillSamples {
			s.n++
		} else {
			s.head = (s.head + 1) % stillSamples
		}
		s.lastAt = now
	}
	if !confirmed || s.n < stillSamples {
		return false, 0
	}
	for i := 0; i < s.n; i++ {
		if moved(s.avg, s.hist[i].b, frac) {
			return false, 0
		}
	}
	s.still, s.ref = true, s.avg
	return true, now - s.hist[s.head].at
}

func (s *stillness) scale(sx, sy float64) {
	s.avg, s.ref = scaleBox(s.avg, sx, sy), scaleBox(s.ref, sx, sy)
	for i := range s.hist {
		s.hist[i].b = scaleBox(s.hist[i].b, sx, sy)
	}
}

// moved reports whether b's edges are further from ref's than frac of
// ref's width (left, right) or height (top, bottom).
func moved(b, ref box, frac float64) bool {
	w, h := frac*(ref.x2-ref.x1), frac*(ref.y2-ref.y1)
	return math.Abs(b.x1-ref.x1) > w || math.Abs(b.x2-ref.x2) > w ||
		math.Abs(b.y1-ref.y1) > h || math.Abs(b.y2-ref.y2) > h
}
