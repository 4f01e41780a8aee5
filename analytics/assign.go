package analytics

import "math"

// assigner solves the rectangular linear assignment problem with gating:
// given a rows×cols cost matrix and a limit, it finds the set of
// (row, col) pairs, each row and each column used at most once, every
// pair's cost below the limit, that minimises the sum of (cost − limit)
// over the chosen pairs. That is the problem ByteTrack solves with
// lap.lapjv(cost, extend_cost=True, cost_limit=limit) (its
// matching.linear_assignment): leaving a row or a column unmatched costs
// limit/2, so a pair is worth taking only when its cost is below the
// limit, and among such sets the cheapest wins.
//
// Why it is written here: the issue asks for a well-kept Go library, and
// none could be had. The Go module proxy these machines reach answered
// 403 (refused) for github.com/heetch/lapjv,
// github.com/arthurkushman/go-hungarian, github.com/oddg/hungarian-algorithm,
// github.com/LdDl/mot-go and github.com/clyphub/munkres (checked again with
// `go list -m -versions` on 2026-12-01), and gonum has no assignment
// solver. So this is the Hungarian algorithm (Kuhn–Munkres) in its
// O(n²·m) shortest-augmenting-path form with row and column potentials
// (the form in Jonker and Volgenant, "A shortest augmenting path
// algorithm for dense and sparse linear assignment problems", Computing
// 38, 1987, without their initialisation heuristics), about 40 lines,
// tested against brute force on random matrices (assign_test.go).
//
// Gating reduces to the plain problem: with c' = min(cost − limit, 0),
// every c' ≤ 0, so a complete assignment of the smaller side under c'
// costs the same as the best partial one (extra pairs at c' = 0 are free,
// and pairs at 0 are then read as "unmatched"). Costs that are NaN or
// not below the limit are never matched.
//
// An assigner keeps its buffers between calls, so a tracker that calls it
// every frame allocates nothing in the steady state. It is not safe for
// concurrent use.
type assigner struct {
	u, v, minv []float64
	p, way     []int
	used       []bool
	a          []float64 // the transformed (and perhaps transposed) matrix
}

// solve writes into rowTo[r] the column matched to row r, or -1, for the
// rows×cols matrix cost in row-major order; len(rowTo) must be at least
// rows. It returns the number of pairs matched.
func (s *assigner) solve(cost []float64, rows, cols int, limit float64, rowTo []int) int {
	for r := 0; r < rows; r++ {
		rowTo[r] = -1
	}
	if rows == 0 || cols == 0 {
		return 0
	}
	// The algorithm wants n ≤ m: transpose when there are more rows.
	transposed := rows > cols
	n, m := rows, cols
	if transposed {
		n, m = cols, rows
	}
	s.a = grow(s.a, n*m)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			x := cost[r*cols+c] - limit
			if !(x < 0) { // also NaN
				x = 0
			}
			if transposed {
				s.a[c*m+r] = x
			} else {
				s.a[r*m+c] = x
			}
		}
	}
	s.hungarian(n, m)
	matched := 0
	for j := 1; j <= m; j++ {
		i := s.p[j]
		if i == 0 || !(s.a[(i-1)*m+(j-1)] < 0) {
			continue
		}
		r, c := i-1, j-1
		if transposed {
			r, c = c, r
		}
		rowTo[r] = c
		matched++
	}
	return matched
}

// hungarian assigns each of the n rows of s.a (n×m, n ≤ m) a distinct
// column at minimum total cost and leaves the row of column j in s.p[j]
// (1-based; 0: none). Indices are 1-based with column 0 a sentinel, as in
// the classic presentation of the algorithm.
func (s *assigner) hungarian(n, m int) {
	s.u = grow(s.u, n+1)
	s.v = grow(s.v, m+1)
	s.minv = grow(s.minv, m+1)
	s.p = grow(s.p, m+1)
	s.way = grow(s.way, m+1)
	s.used = grow(s.used, m+1)
	clear(s.u)
	clear(s.v)
	clear(s.p)
	clear(s.way)
	for i := 1; i <= n; i++ {
		s.p[0] = i
		j0 := 0
		for j := range s.minv {
			s.minv[j] = math.Inf(1)
			s.used[j] = false
		}
		for {
			s.used[j0] = true
			i0 := s.p[j0]
			delta, j1 := math.Inf(1), 0
			row := s.a[(i0-1)*m:]
			for j := 1; j <= m; j++ {
				if s.used[j] {
					continue
				}
				if cur := row[j-1] - s.u[i0] - s.v[j]; cur < s.minv[j] {
					s.minv[j], s.way[j] = cur, j0
				}
				if s.minv[j] < delta {
					delta, j1 = s.minv[j], j
				}
			}
			for j := 0; j <= m; j++ {
				if s.used[j] {
					s.u[s.p[j]] += delta
					s.v[j] -= delta
				} else {
					s.minv[j] -= delta
				}
			}
			j0 = j1
			if s.p[j0] == 0 {
				break
			}
		}
		for j0 != 0 {
			j1 := s.way[j0]
			s.p[j0] = s.p[j1]
			j0 = j1
		}
	}
}

// grow returns b with length n, reusing its array when it is big enough.
func grow[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]T, n, max(n, 2*cap(b)))
}
