package analytics

import (
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

// The references below work on small integer points with exact rational
// arithmetic (math/big) and by other methods than the code under test:
// segments by solving p1 + t·r = q1 + u·s for t and u, points in polygons
// by casting a ray in a direction that meets no lattice point. The fuzz
// targets keep coordinates in [0, 16) so that collinear, touching and
// repeated points, the cases that break geometry code, are frequent.

type ipt struct{ x, y int64 }

func (p ipt) f() pt { return pt{float64(p.x), float64(p.y)} }

func icross(a, b ipt) int64 { return a.x*b.y - a.y*b.x }
func sub(a, b ipt) ipt      { return ipt{a.x - b.x, a.y - b.y} }
func dot(a, b ipt) int64    { return a.x*b.x + a.y*b.y }

// refIntersection classifies the intersection of the closed segments
// [p1, p2] and [q1, q2]: 0 none, 1 exactly one point, 2 a segment of
// positive length.
func refIntersection(p1, p2, q1, q2 ipt) int {
	r, s, qp := sub(p2, p1), sub(q2, q1), sub(q1, p1)
	in01 := func(num, den int64) bool { // 0 ≤ num/den ≤ 1
		t := big.NewRat(num, den)
		return t.Sign() >= 0 && t.Cmp(big.NewRat(1, 1)) <= 0
	}
	switch {
	case r == ipt{} && s == ipt{}:
		if p1 == q1 {
			return 1
		}
		return 0
	case r == ipt{}: // p is a point: on q's segment?
		if icross(s, sub(p1, q1)) != 0 {
			return 0
		}
		if in01(dot(sub(p1, q1), s), dot(s, s)) {
			return 1
		}
		return 0
	case s == ipt{}:
		return refIntersection(q1, q2, p1, p2)
	}
	den := icross(r, s)
	if den != 0 {
		if in01(icross(qp, s), den) && in01(icross(qp, r), den) {
			return 1
		}
		return 0
	}
	if icross(qp, r) != 0 { // parallel, apart
		return 0
	}
	// Collinear: q's ends as parameters along p (p1 + t·r), t0 and t1.
	rr := dot(r, r)
	t0 := big.NewRat(dot(qp, r), rr)
	t1 := big.NewRat(dot(sub(q2, p1), r), rr)
	if t0.Cmp(t1) > 0 {
		t0, t1 = t1, t0
	}
	lo, hi := t0, t1
	if lo.Sign() < 0 {
		lo = new(big.Rat)
	}
	if one := big.NewRat(1, 1); hi.Cmp(one) > 0 {
		hi = one
	}
	switch lo.Cmp(hi) {
	case 1:
		return 0
	case 0:
		return 1
	}
	return 2
}

// refSimple reports whether the closed polygon is simple: no edge of
// zero length, neighbouring edges meet only at their common point, other
// edges do not meet at all.
func refSimple(poly []ipt) bool {
	n := len(poly)
	for i := 0; i < n; i++ {
		if poly[i] == poly[(i+1)%n] {
			return false
		}
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			k := refIntersection(poly[i], poly[(i+1)%n], poly[j], poly[(j+1)%n])
			adjacent := j == i+1 || (i == 0 && j == n-1)
			if (adjacent && k == 2) || (!adjacent && k > 0) {
				return false
			}
		}
	}
	return true
}

// refInside reports whether p is inside the simple polygon, and whether it
// is on its boundary (then inside is meaningless). The ray from p towards
// (+1000, +1) meets no lattice point but p itself within the fuzzed range,
// so it never passes through a vertex: each edge it meets, it crosses.
func refInside(poly []ipt, p ipt) (inside, boundary bool) {
	n := len(poly)
	far := ipt{p.x + 1000, p.y + 1}
	for i := 0; i < n; i++ {
		a, b := poly[i], poly[(i+1)%n]
		if refIntersection(a, b, p, p) > 0 {
			return false, true
		}
		if refIntersection(a, b, p, far) > 0 {
			inside = !inside
		}
	}
	return inside, false
}

// points decodes fuzz bytes as coordinates in [0, 16).
func points(b []byte) []ipt {
	var ps []ipt
	for i := 0; i+1 < len(b); i += 2 {
		ps = append(ps, ipt{int64(b[i] % 16), int64(b[i+1] % 16)})
	}
	return ps
}

func floats(ps []ipt) []pt {
	out := make([]pt, len(ps))
	for i, p := range ps {
		out[i] = p.f()
	}
	return out
}

func FuzzSegmentsIntersect(f *testing.F) {
	f.Add([]byte{0, 0, 4, 4, 0, 4, 4, 0})   // proper crossing
	f.Add([]byte{0, 0, 4, 0, 2, 0, 6, 0})   // collinear overlap
	f.Add([]byte{0, 0, 4, 0, 4, 0, 6, 0})   // collinear, touching at an end
	f.Add([]byte{0, 0, 4, 0, 5, 0, 6, 0})   // collinear, apart
	f.Add([]byte{0, 0, 4, 4, 2, 2, 2, 2})   // a point on the segment
	f.Add([]byte{0, 0, 4, 0, 2, 0, 2, 5})   // T junction
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})   // two equal points
	f.Add([]byte{0, 0, 15, 1, 1, 0, 15, 2}) // nearly parallel
	f.Fuzz(func(t *testing.T, b []byte) {
		ps := points(b)
		if len(ps) < 4 {
			return
		}
		want := refIntersection(ps[0], ps[1], ps[2], ps[3]) > 0
		got := segmentsIntersect(ps[0].f(), ps[1].f(), ps[2].f(), ps[3].f())
		require.Equal(t, want, got, "%v", ps[:4])
	})
}

func FuzzInsidePolygon(f *testing.F) {
	f.Add([]byte{0, 0, 8, 0, 8, 8, 0, 8, 4, 4})           // square, centre
	f.Add([]byte{0, 0, 8, 0, 8, 8, 0, 8, 9, 4})           // square, outside
	f.Add([]byte{0, 0, 8, 0, 4, 4, 8, 8, 0, 8, 6, 4})     // concave notch, point in the notch
	f.Add([]byte{0, 0, 8, 0, 4, 4, 8, 8, 0, 8, 2, 4})     // concave, inside
	f.Add([]byte{0, 4, 4, 0, 8, 4, 4, 8, 2, 4})           // diamond: ray through a vertex's height
	f.Add([]byte{0, 0, 10, 0, 10, 10, 5, 5, 0, 10, 5, 7}) // point above the reflex vertex
	f.Fuzz(func(t *testing.T, b []byte) {
		ps := points(b)
		if len(ps) < 4 {
			return
		}
		poly, p := ps[:len(ps)-1], ps[len(ps)-1]
		if !refSimple(poly) || polygonArea(floats(poly)) == 0 {
			return
		}
		want, boundary := refInside(poly, p)
		if boundary {
			return // either answer is allowed there
		}
		require.Equal(t, want, insidePolygon(floats(poly), p.f()), "poly %v point %v", poly, p)
	})
}

func FuzzSelfIntersection(f *testing.F) {
	f.Add([]byte{0, 0, 8, 0, 8, 8, 0, 8})       // simple square
	f.Add([]byte{0, 0, 8, 8, 8, 0, 0, 8})       // bow tie
	f.Add([]byte{0, 0, 8, 0, 4, 0})             // flat triangle, folds back
	f.Add([]byte{0, 0, 4, 0, 8, 0})             // flat triangle, in order
	f.Add([]byte{0, 0, 8, 0, 8, 8, 8, 8})       // repeated point
	f.Add([]byte{0, 0, 8, 0, 8, 8, 4, 0, 0, 8}) // vertex on another edge
	f.Add([]byte{0, 0, 8, 0, 8, 4, 8, 2, 0, 8}) // spike back along an edge
	f.Fuzz(func(t *testing.T, b []byte) {
		ps := points(b)
		if len(ps) < 3 || len(ps) > 8 {
			return
		}
		_, _, bad := selfIntersection(floats(ps))
		require.Equal(t, !refSimple(ps), bad, "%v", ps)
	})
}

// The references agree with hand-made cases, so that the fuzz targets
// compare against something known to be right.
func TestGeometryReferences(t *testing.T) {
	sq := []ipt{{0, 0}, {8, 0}, {8, 8}, {0, 8}}
	require.True(t, refSimple(sq))
	require.False(t, refSimple([]ipt{{0, 0}, {8, 8}, {8, 0}, {0, 8}}))
	require.False(t, refSimple([]ipt{{0, 0}, {8, 0}, {4, 0}}))
	in, on := refInside(sq, ipt{4, 4})
	require.True(t, in)
	require.False(t, on)
	in, _ = refInside(sq, ipt{9, 4})
	require.False(t, in)
	_, on = refInside(sq, ipt{8, 4})
	require.True(t, on)
	require.Equal(t, 2, refIntersection(ipt{0, 0}, ipt{4, 0}, ipt{2, 0}, ipt{6, 0}))
	require.Equal(t, 1, refIntersection(ipt{0, 0}, ipt{4, 0}, ipt{4, 0}, ipt{6, 0}))
	require.Equal(t, 0, refIntersection(ipt{0, 0}, ipt{4, 0}, ipt{5, 0}, ipt{6, 0}))
}

// The side convention of the issue: with a = (0, 0) and b = (10, 0) (a
// line pointing right), a point below it on screen (y > 0) is on the
// positive side.
func TestCrossSideConvention(t *testing.T) {
	a, b := pt{0, 0}, pt{10, 0}
	require.Equal(t, 1, sign(cross(a, b, pt{5, 3})))
	require.Equal(t, -1, sign(cross(a, b, pt{5, -3})))
	require.Equal(t, 0, sign(cross(a, b, pt{20, 0})))
}
