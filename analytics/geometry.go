package analytics

import "math"

// pt is a point in source pixels, in image coordinates: x to the right,
// y down.
type pt struct{ x, y float64 }

// cross returns the z component of (b − a) × (c − a): positive when c is
// on the side of the directed line a→b that the issue calls positive. In
// image coordinates (y down) that is the right-hand side when looking
// from a to b on the screen.
func cross(a, b, c pt) float64 {
	return (b.x-a.x)*(c.y-a.y) - (b.y-a.y)*(c.x-a.x)
}

// sign returns -1, 0 or +1.
func sign(v float64) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// onSegment reports whether c, known to be collinear with a and b, lies
// within the closed segment [a, b].
func onSegment(a, b, c pt) bool {
	return math.Min(a.x, b.x) <= c.x && c.x <= math.Max(a.x, b.x) &&
		math.Min(a.y, b.y) <= c.y && c.y <= math.Max(a.y, b.y)
}

// segmentsIntersect reports whether the closed segments [p1, p2] and
// [q1, q2] share at least one point (touching and collinear overlap
// count). It is the orientation test of Cormen et al., Introduction to
// Algorithms, § 33.1 (SEGMENTS-INTERSECT).
func segmentsIntersect(p1, p2, q1, q2 pt) bool {
	d1 := sign(cross(q1, q2, p1))
	d2 := sign(cross(q1, q2, p2))
	d3 := sign(cross(p1, p2, q1))
	d4 := sign(cross(p1, p2, q2))
	if d1*d2 < 0 && d3*d4 < 0 {
		return true
	}
	return (d1 == 0 && onSegment(q1, q2, p1)) ||
		(d2 == 0 && onSegment(q1, q2, p2)) ||
		(d3 == 0 && onSegment(p1, p2, q1)) ||
		(d4 == 0 && onSegment(p1, p2, q2))
}

// insidePolygon reports whether p is inside the simple polygon poly, by
// the crossing-number test with half-open edges (W. R. Franklin, PNPOLY):
// every point of the plane is in exactly one of two polygons that share
// an edge. Points exactly on the boundary may be reported either way.
func insidePolygon(poly []pt, p pt) bool {
	in := false
	j := len(poly) - 1
	for i := range poly {
		a, b := poly[i], poly[j]
		if (a.y > p.y) != (b.y > p.y) &&
			p.x < (b.x-a.x)*(p.y-a.y)/(b.y-a.y)+a.x {
			in = !in
		}
		j = i
	}
	return in
}

// polygonArea returns the signed area of poly (shoelace formula), in
// square pixels; its sign gives the orientation.
func polygonArea(poly []pt) float64 {
	var s float64
	j := len(poly) - 1
	for i := range poly {
		s += poly[j].x*poly[i].y - poly[i].x*poly[j].y
		j = i
	}
	return s / 2
}

// selfIntersection returns the indices i < j of two edges of the closed
// polygon poly that make it other than simple (edge k joins point k to
// point k+1, the last edge joins the last point to the first), and ok
// true; ok is false for a simple polygon. Two edges that are not
// neighbours must not touch; two neighbours must share only their common
// point (they must not fold back over each other). A polygon whose
// points are all on one line, or with a repeated consecutive point, is
// found here too. The check is the O(n²) all-pairs test, which is
// instant for the tens of points that a zone has.
func selfIntersection(poly []pt) (i, j int, ok bool) {
	n := len(poly)
	edge := func(k int) (pt, pt) { return poly[k], poly[(k+1)%n] }
	for i = 0; i < n; i++ {
		a1, a2 := edge(i)
		for j = i + 1; j < n; j++ {
			b1, b2 := edge(j)
			switch {
			case j == i+1 || (i == 0 && j == n-1):
				// Neighbours: the shared point is a2 == b1 (or b2 == a1
				// for the pair (0, n-1)). They overlap beyond it only if
				// they are collinear and point back over each other.
				s, o1, o2 := a2, a1, b2
				if i == 0 && j == n-1 && j != i+1 {
					s, o1, o2 = a1, a2, b1
				}
				if foldsBack(s, o1, o2) {
					return i, j, true
				}
			default:
				if segmentsIntersect(a1, a2, b1, b2) {
					return i, j, true
				}
			}
		}
	}
	return 0, 0, false
}

// foldsBack reports whether the segments s→o1 and s→o2 overlap beyond
// their common end s: they are collinear and leave s in the same
// direction, or one of them has zero length.
func foldsBack(s, o1, o2 pt) bool {
	if o1 == s || o2 == s {
		return true
	}
	if cross(s, o1, o2) != 0 {
		return false
	}
	return (o1.x-s.x)*(o2.x-s.x)+(o1.y-s.y)*(o2.y-s.y) > 0
}
