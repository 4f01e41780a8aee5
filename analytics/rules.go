package analytics

import (
	"math"
	"slices"
)

// zone is a Zone compiled for the stage.
type zone struct {
	name        string
	drawn       []pt // as configured
	poly        []pt // in the current frame's pixels
	bb          box  // poly's bounding box, to skip most points at once
	filter      classFilter
	anchor      Anchor
	minFrames   int
	loiterAfter float64 // seconds; 0: never
	occ         []int32 // confirmed tracks inside, by class
	seen        []bool  // class has been inside during the run
}

func newZone(z Zone) zone {
	c := zone{name: z.Name, filter: newFilter(z.Classes), anchor: z.Anchor,
		minFrames: or(z.MinFrames, DefaultMinFrames), loiterAfter: z.LoiterAfter.Seconds()}
	for _, xy := range z.Polygon {
		c.drawn = append(c.drawn, pt{xy[0], xy[1]})
	}
	c.poly = make([]pt, len(c.drawn))
	c.scale(1, 1)
	return c
}

func (z *zone) scale(sx, sy float64) {
	z.bb = box{1e300, 1e300, -1e300, -1e300}
	for i, p := range z.drawn {
		q := pt{p.x * sx, p.y * sy}
		z.poly[i] = q
		z.bb = box{min(z.bb.x1, q.x), min(z.bb.y1, q.y), max(z.bb.x2, q.x), max(z.bb.y2, q.y)}
	}
}

func (z *zone) contains(p pt) bool {
	if p.x < z.bb.x1 || p.x > z.bb.x2 || p.y < z.bb.y1 || p.y > z.bb.y2 {
		return false
	}
	return insidePolygon(z.poly, p)
}

// occupy adds n to the occupancy of class c.
func (z *zone) occupy(c int32, n int32) {
	if int(c) >= len(z.occ) {
		z.occ = append(z.occ, make([]int32, int(c)+1-len(z.occ))...)
		z.seen = append(z.seen, make([]bool, int(c)+1-len(z.seen))...)
	}
	z.occ[c] += n
	z.seen[c] = true
}

// line is a Line compiled for the stage.
type line struct {
	name     string
	a0, b0   pt // as configured
	a, b     pt // in the current frame's pixels
	filter   classFilter
	anchor   Anchor
	debounce float64  // seconds
	in, out  []uint64 // crossings by class
}

func newLine(l Line) line {
	c := line{name: l.Name, a0: pt{l.A[0], l.A[1]}, b0: pt{l.B[0], l.B[1]},
		filter: newFilter(l.Classes), anchor: l.Anchor,
		debounce: or(l.Debounce, Duration(DefaultDebounce)).Seconds()}
	c.scale(1, 1)
	return c
}

func (l *line) scale(sx, sy float64) {
	l.a = pt{l.a0.x * sx, l.a0.y * sy}
	l.b = pt{l.b0.x * sx, l.b0.y * sy}
}

// lineMargin is the half-width of the band around a line, as a fraction
// of the box's extent across the line (its width for a vertical line, its
// height for a horizontal one), in which an anchor has no side: a side is
// taken, and a crossing judged, only beyond it. A tenth of the box is
// several times a detector's box jitter (the scenes' 2–5 px on a 50 px
// box) and less than one step of a walking person, so slow crossings
// count once and real ones are not missed.
const lineMargin = 0.1

// side returns +1 or -1 for an anchor p of box b beyond the margin on
// either side of the line (the sign of cross(b − a, p − a)), 0 within it.
func (l *line) side(p pt, b box) int {
	c := cross(l.a, l.b, p)
	dx, dy := l.b.x-l.a.x, l.b.y-l.a.y
	n := math.Hypot(dx, dy)
	// The box's extent along the line's normal (−dy, dx)/n, in pixels.
	extent := (math.Abs(dy)*(b.x2-b.x1) + math.Abs(dx)*(b.y2-b.y1)) / n
	if math.Abs(c)/n <= lineMargin*extent {
		return 0
	}
	return sign(c)
}

func (l *line) count(c int32, d Direction) {
	if int(c) >= len(l.in) {
		l.in = append(l.in, make([]uint64, int(c)+1-len(l.in))...)
		l.out = append(l.out, make([]uint64, int(c)+1-len(l.out))...)
	}
	if d == DirIn {
		l.in[c]++
	} else {
		l.out[c]++
	}
}

// classFilter is a zone's or a line's classes, with the answer for each
// class index cached (classes are interned by the stage as they appear).
type classFilter struct {
	names []string // nil: every class
	known []int8   // by class index: 0 not yet looked up, 1 yes, -1 no
}

func newFilter(names []string) classFilter {
	if len(names) == 0 {
		return classFilter{}
	}
	return classFilter{names: slices.Clone(names)} // the caller keeps its config
}

// ok reports whether class c (whose name is classNames[c]) passes.
func (f *classFilter) ok(c int32, classNames []string) bool {
	if f.names == nil {
		return true
	}
	if int(c) >= len(f.known) {
		f.known = append(f.known, make([]int8, int(c)+1-len(f.known))...)
	}
	if f.known[c] == 0 {
		f.known[c] = -1
		for _, n := range f.names {
			if n == classNames[c] {
				f.known[c] = 1
			}
		}
	}
	return f.known[c] > 0
}
