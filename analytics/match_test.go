package analytics

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The matcher (overlap sweep, components, one solve per component) finds
// an assignment as good as the assigner on the whole matrix, on random
// scenes dense enough to make large components, with two classes.
func TestMatcherEqualsWholeMatrix(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var m matcher
	var a assigner
	for trial := 0; trial < 500; trial++ {
		nr, nc := rng.IntN(25), rng.IntN(25)
		randBox := func() box {
			x, y := rng.Float64()*300, rng.Float64()*300
			return box{x, y, x + 10 + rng.Float64()*80, y + 10 + rng.Float64()*80}
		}
		if trial%50 == 1 { // absurdly far apart: the grid must not overflow
			randBox = func() box {
				x := float64(rng.IntN(2)) * 1e300
				return box{x, 0, x + 1, 1}
			}
		}
		if trial%10 == 0 { // tiny boxes far apart: the grid's cells must grow
			randBox = func() box {
				x, y := rng.Float64()*1e5, rng.Float64()*10
				if rng.IntN(2) == 0 {
					x = float64(rng.IntN(3)) // some near each other
				}
				return box{x, y, x + 1 + rng.Float64(), y + 1 + rng.Float64()}
			}
		}
		m.rows.reset()
		m.cols.reset()
		for i := 0; i < nr; i++ {
			m.rows.add(randBox(), int32(rng.IntN(2)))
		}
		for i := 0; i < nc; i++ {
			m.cols.add(randBox(), int32(rng.IntN(2)))
		}
		limit := []float64{0.8, 0.5, 0.7}[trial%3]
		cost := make([]float64, nr*nc)
		for r := 0; r < nr; r++ {
			for c := 0; c < nc; c++ {
				cost[r*nc+c] = 1 - iou(m.rows.box[r], m.cols.box[c])
				if m.rows.class[r] != m.cols.class[c] {
					cost[r*nc+c] = 1
				}
			}
		}
		rowTo := make([]int, nr)
		a.solve(cost, nr, nc, limit, rowTo)
		want := 0.0
		for r, c := range rowTo {
			if c >= 0 {
				want += cost[r*nc+c] - limit
			}
		}
		got, seen := 0.0, map[int32]bool{}
		for r, c := range m.run(limit) {
			if c < 0 {
				continue
			}
			require.False(t, seen[c], "column used twice")
			seen[c] = true
			require.Equal(t, m.rows.class[r], m.cols.class[c], "classes differ")
			require.Less(t, cost[r*nc+int(c)], limit)
			got += cost[r*nc+int(c)] - limit
		}
		require.InDelta(t, want, got, 1e-9, "trial %d", trial)
	}
}

func TestIoU(t *testing.T) {
	require.InDelta(t, 1.0, iou(box{0, 0, 10, 10}, box{0, 0, 10, 10}), 1e-12)
	require.InDelta(t, 25.0/175, iou(box{0, 0, 10, 10}, box{5, 5, 15, 15}), 1e-12)
	require.Zero(t, iou(box{0, 0, 10, 10}, box{10, 0, 20, 10})) // touching
	require.Zero(t, iou(box{0, 0, 0, 0}, box{0, 0, 0, 0}))
}
