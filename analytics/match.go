package analytics

import "math"

// box is an axis-aligned box in source pixels, x1 ≤ x2, y1 ≤ y2.
type box struct{ x1, y1, x2, y2 float64 }

// iou returns the intersection over union of a and b, 0 when either is
// empty.
func iou(a, b box) float64 {
	w := min(a.x2, b.x2) - max(a.x1, b.x1)
	h := min(a.y2, b.y2) - max(a.y1, b.y1)
	if w <= 0 || h <= 0 {
		return 0
	}
	inter := w * h
	union := (a.x2-a.x1)*(a.y2-a.y1) + (b.x2-b.x1)*(b.y2-b.y1) - inter
	if union <= 0 {
		return 0
	}
	return inter / union
}

// side is one side of a matching problem: boxes with their classes.
type side struct {
	box   []box
	class []int32
}

func (s *side) reset() {
	s.box, s.class = s.box[:0], s.class[:0]
}

func (s *side) add(b box, class int32) {
	s.box = append(s.box, b)
	s.class = append(s.class, class)
}

// edge is a candidate pair whose cost is below the limit.
type edge struct {
	r, c int32
	cost float64
}

// matcher associates tracks (rows) with detections (columns) as ByteTrack
// does, but without building the whole rows×cols matrix: pairs of
// different classes, and pairs whose boxes do not overlap, are gated out
// anyway (their cost 1 is never below a limit < 1), so only overlapping
// pairs are found (through a grid, see candidates),
// the pairs are split into connected components, and each component is
// solved on its own by the assigner. The optimum is the same as the
// whole matrix's, since gated pairs never join two components; the work
// is near-linear when objects are spread out, as they are in video.
type matcher struct {
	rows, cols side
	order      []int32 // columns by grid cell
	cellStart  []int32 // columns of cell k: order[cellStart[k]:cellStart[k+1]]
	cellOf     []int32
	fill       []int32
	edges      []edge
	parent     []int32 // union-find over rows (0..R-1) and columns (R..)
	comp       []int32 // component of each root, -1 none
	start      []int32 // edges of component k: byComp[start[k]:start[k+1]]
	byComp     []edge
	local      []int32 // row or column → index within its component
	crow, ccol []int32 // a component's rows and columns
	cost       []float64
	rowTo      []int
	solver     assigner
	match      []int32 // row → column or -1: the result
}

// run matches m.rows to m.cols on the cost 1 − IoU. Only pairs of the
// same class whose cost is below limit can match. It returns m.match.
func (m *matcher) run(limit float64) []int32 {
	nr, nc := len(m.rows.box), len(m.cols.box)
	m.match = grow(m.match, nr)
	for i := range m.match {
		m.match[i] = -1
	}
	if nr == 0 || nc == 0 {
		return m.match
	}
	m.candidates(limit)
	if len(m.edges) == 0 {
		return m.match
	}
	m.components(nr, nc)
	for k := 0; k+1 < len(m.start); k++ {
		m.solve(m.byComp[m.start[k]:m.start[k+1]], nr, limit)
	}
	return m.match
}

// candidates fills m.edges with the pairs below the limit. The columns
// are binned on a uniform grid whose cells are as large as the largest
// column box, by the cell of their top-left corner, so a row's box can
// only overlap columns in the cells from one cell above and to the left
// of its own top-left corner to the cell of its bottom-right corner:
// about nine cells of a few boxes each, where a sweep along x alone
// looked at every box in a vertical strip.
func (m *matcher) candidates(limit float64) {
	m.edges = m.edges[:0]
	cb := m.cols.box
	nc := len(cb)
	minX, minY := math.Inf(1), math.Inf(1)
	maxX, maxY := math.Inf(-1), math.Inf(-1)
	cw, ch := 1.0, 1.0
	for _, b := range cb {
		minX, minY = min(minX, b.x1), min(minY, b.y1)
		maxX, maxY = max(maxX, b.x1), max(maxY, b.y1)
		cw, ch = max(cw, b.x2-b.x1), max(ch, b.y2-b.y1)
	}
	for ((maxX-minX)/cw+1)*((maxY-minY)/ch+1) > float64(4*nc+64) {
		cw, ch = 2*cw, 2*ch // a few tiny boxes far apart: fewer, larger cells
	}
	nx, ny := int((maxX-minX)/cw)+1, int((maxY-minY)/ch)+1
	// Counting sort of the columns by cell.
	m.cellStart = grow(m.cellStart, nx*ny+1)
	clear(m.cellStart)
	m.cellOf = grow(m.cellOf, nc)
	for c, b := range cb {
		k := int32(int((b.x1-minX)/cw) + nx*int((b.y1-minY)/ch))
		m.cellOf[c] = k
		m.cellStart[k+1]++
	}
	for i := 1; i < len(m.cellStart); i++ {
		m.cellStart[i] += m.cellStart[i-1]
	}
	m.order = grow(m.order, nc)
	m.fill = append(m.fill[:0], m.cellStart[:nx*ny]...)
	for c := range cb {
		k := m.cellOf[c]
		m.order[m.fill[k]] = int32(c)
		m.fill[k]++
	}
	for r, rb := range m.rows.box {
		ix0, ix1 := cellRange(rb.x1-cw, rb.x2, minX, cw, nx)
		iy0, iy1 := cellRange(rb.y1-ch, rb.y2, minY, ch, ny)
		for iy := iy0; iy <= iy1; iy++ {
			for ix := ix0; ix <= ix1; ix++ {
				k := ix + nx*iy
				for _, c := range m.order[m.cellStart[k]:m.cellStart[k+1]] {
					if m.cols.class[c] != m.rows.class[r] {
						continue
					}
					if cost := 1 - iou(rb, cb[c]); cost < limit {
						m.edges = append(m.edges, edge{int32(r), c, cost})
					}
				}
			}
		}
	}
}

// cellRange returns the cells of a grid (n cells of size from lo) that
// [a, b] touches, clamped to the grid; empty (i0 > i1) when outside it.
func cellRange(a, b, lo, size float64, n int) (i0, i1 int) {
	f0, f1 := math.Floor((a-lo)/size), math.Floor((b-lo)/size)
	if f1 < 0 || f0 > float64(n-1) || math.IsNaN(f0+f1) {
		return 1, 0
	}
	return int(max(f0, 0)), int(min(f1, float64(n-1)))
}

func (m *matcher) find(x int32) int32 {
	for m.parent[x] != x {
		m.parent[x] = m.parent[m.parent[x]]
		x = m.parent[x]
	}
	return x
}

// components groups m.edges by connected component into m.byComp, with
// component k's edges at m.byComp[m.start[k]:m.start[k+1]].
func (m *matcher) components(nr, nc int) {
	n := nr + nc
	m.parent = grow(m.parent, n)
	m.comp = grow(m.comp, n)
	for i := range m.parent {
		m.parent[i] = int32(i)
		m.comp[i] = -1
	}
	for _, e := range m.edges {
		a, b := m.find(e.r), m.find(int32(nr)+e.c)
		if a != b {
			m.parent[a] = b
		}
	}
	k := int32(0)
	for _, e := range m.edges {
		if root := m.find(e.r); m.comp[root] < 0 {
			m.comp[root] = k
			k++
		}
	}
	// Counting sort of the edges by component.
	m.start = grow(m.start, int(k)+1)
	clear(m.start)
	for _, e := range m.edges {
		m.start[m.comp[m.find(e.r)]+1]++
	}
	for i := 1; i < len(m.start); i++ {
		m.start[i] += m.start[i-1]
	}
	m.byComp = grow(m.byComp, len(m.edges))
	m.local = grow(m.local, n) // used as the fill cursor, then reset
	for i := int32(0); i < k; i++ {
		m.local[i] = m.start[i]
	}
	for _, e := range m.edges {
		c := m.comp[m.find(e.r)]
		m.byComp[m.local[c]] = e
		m.local[c]++
	}
	for i := range m.local {
		m.local[i] = -1
	}
}

// solve matches one component, given its edges.
func (m *matcher) solve(es []edge, nr int, limit float64) {
	if len(es) == 1 { // one track, one detection: nothing to choose
		m.match[es[0].r] = es[0].c
		return
	}
	m.crow, m.ccol = m.crow[:0], m.ccol[:0]
	for _, e := range es {
		if m.local[e.r] < 0 {
			m.local[e.r] = int32(len(m.crow))
			m.crow = append(m.crow, e.r)
		}
		if c := nr + int(e.c); m.local[c] < 0 {
			m.local[c] = int32(len(m.ccol))
			m.ccol = append(m.ccol, e.c)
		}
	}
	R, C := len(m.crow), len(m.ccol)
	m.cost = grow(m.cost, R*C)
	for i := range m.cost {
		m.cost[i] = 1 // gated: not below any limit < 1
	}
	for _, e := range es {
		m.cost[int(m.local[e.r])*C+int(m.local[nr+int(e.c)])] = e.cost
	}
	m.rowTo = grow(m.rowTo, R)
	m.solver.solve(m.cost, R, C, limit, m.rowTo)
	for i, r := range m.crow {
		if c := m.rowTo[i]; c >= 0 {
			m.match[r] = m.ccol[c]
		}
		m.local[r] = -1
	}
	for _, c := range m.ccol {
		m.local[nr+int(c)] = -1
	}
}
