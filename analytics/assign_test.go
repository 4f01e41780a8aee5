package analytics

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// bruteAssign returns the least sum of (cost − limit) over every set of
// pairs (each row and column at most once, every cost below limit), by
// trying them all: the reference for assigner.solve.
func bruteAssign(cost []float64, rows, cols int, limit float64) float64 {
	used := make([]bool, cols)
	var best func(r int) float64
	best = func(r int) float64 {
		if r == rows {
			return 0
		}
		b := best(r + 1) // row r unmatched
		for c := 0; c < cols; c++ {
			x := cost[r*cols+c]
			if used[c] || !(x < limit) {
				continue
			}
			used[c] = true
			b = math.Min(b, x-limit+best(r+1))
			used[c] = false
		}
		return b
	}
	return best(0)
}

// The solver against brute force on random small matrices: every shape
// up to 6×6 (transposed ones included), costs with ties, gated entries,
// NaN and +Inf.
func TestAssignerMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s assigner
	rowTo := make([]int, 8)
	for trial := 0; trial < 3000; trial++ {
		rows, cols := rng.IntN(7), rng.IntN(7)
		limit := 0.8
		cost := make([]float64, rows*cols)
		for i := range cost {
			switch rng.IntN(10) {
			case 0:
				cost[i] = math.NaN()
			case 1:
				cost[i] = math.Inf(1)
			case 2:
				cost[i] = float64(rng.IntN(4)) / 4 // ties
			default:
				cost[i] = rng.Float64()
			}
		}
		n := s.solve(cost, rows, cols, limit, rowTo)
		got, seen, count := 0.0, map[int]bool{}, 0
		for r := 0; r < rows; r++ {
			c := rowTo[r]
			if c < 0 {
				continue
			}
			require.Less(t, c, cols)
			require.False(t, seen[c], "trial %d: column %d used twice", trial, c)
			seen[c] = true
			require.Less(t, cost[r*cols+c], limit, "trial %d: gated pair (%d,%d) matched", trial, r, c)
			got += cost[r*cols+c] - limit
			count++
		}
		require.Equal(t, count, n)
		require.InDelta(t, bruteAssign(cost, rows, cols, limit), got, 1e-9, "trial %d: %dx%d %v", trial, rows, cols, cost)
	}
}

// A case worked by hand: the greedy choice (row 0 takes its cheapest
// column 0) is not the optimum.
func TestAssignerHandCase(t *testing.T) {
	var s assigner
	cost := []float64{
		0.1, 0.2,
		0.15, 0.9,
	}
	rowTo := make([]int, 2)
	require.Equal(t, 2, s.solve(cost, 2, 2, 0.8, rowTo))
	require.Equal(t, []int{1, 0}, rowTo) // 0.2 + 0.15 < 0.1 + gated
}

func TestAssignerNoAllocs(t *testing.T) {
	var s assigner
	cost := make([]float64, 30*40)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range cost {
		cost[i] = rng.Float64()
	}
	rowTo := make([]int, 30)
	s.solve(cost, 30, 40, 0.8, rowTo) // sizes the buffers
	require.Zero(t, testing.AllocsPerRun(10, func() { s.solve(cost, 30, 40, 0.8, rowTo) }))
}
