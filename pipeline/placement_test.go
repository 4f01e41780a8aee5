package pipeline_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

func TestPlacerLeastLoadedAndSticky(t *testing.T) {
	p := pipeline.NewPlacer(3)
	require.Equal(t, 3, p.Devices())
	// Round robin by load, ties to the lowest index.
	for i, want := range []int{0, 1, 2, 0, 1, 2} {
		require.Equal(t, want, p.Place(fmt.Sprintf("s%d", i), 30), "stream %d", i)
	}
	// Sticky: placing again does not move it, even if others are lighter.
	p.Remove("s1")
	p.Remove("s4") // device 1 now empty
	require.Equal(t, 0, p.Place("s0", 30))
	require.Equal(t, 1, p.Place("new", 30), "new streams go to the least loaded")
	require.Equal(t, []float64{60, 30, 60}, p.Loads())
	// A heavier weight for a placed stream updates its device's load.
	require.Equal(t, 1, p.Place("new", 90))
	require.Equal(t, []float64{60, 90, 60}, p.Loads())
	d, ok := p.Device("s2")
	require.True(t, ok)
	require.Equal(t, 2, d)
	_, ok = p.Device("gone")
	require.False(t, ok)
	require.Equal(t, 0, pipeline.NewPlacer(0).Place("x", 1), "at least one device")
}

func TestPlacerRebalance(t *testing.T) {
	p := pipeline.NewPlacer(2)
	for i := range 8 {
		p.Place(fmt.Sprintf("s%d", i), 30) // 4 and 4
	}
	require.Empty(t, p.Rebalance(), "balanced: nothing moves")
	for _, id := range []string{"s1", "s3", "s5", "s7"} { // all of device 1
		p.Remove(id)
	}
	require.Equal(t, []float64{120, 0}, p.Loads())
	moves := p.Rebalance()
	require.Len(t, moves, 2)
	for _, m := range moves {
		require.Equal(t, 0, m.From)
		require.Equal(t, 1, m.To)
	}
	require.Equal(t, []float64{60, 60}, p.Loads())
	require.Empty(t, p.Rebalance())

	// Moves never overshoot: a stream heavier than the gap stays put (the
	// move would only flip the imbalance).
	q := pipeline.NewPlacer(2)
	require.Equal(t, 0, q.Place("big", 50))
	require.Equal(t, 1, q.Place("a", 10))
	require.Equal(t, 1, q.Place("small", 10))
	require.Empty(t, q.Rebalance(), "gap 30 < 50")
	q.Remove("a")
	q.Remove("small")
	require.Empty(t, q.Rebalance(), "gap 50 is not more than 50")
	require.Equal(t, []float64{50, 0}, q.Loads())
	// The move that narrows the spread most goes first: one move, not two.
	r := pipeline.NewPlacer(2)
	require.Equal(t, 0, r.Place("h1", 40))
	require.Equal(t, 1, r.Place("h2", 40))
	require.Equal(t, 0, r.Place("l1", 5), "tie goes to device 0")
	require.Equal(t, 1, r.Place("l2", 15))
	r.Remove("h1") // [5, 55]
	require.Equal(t, []pipeline.Move{{Stream: "l2", From: 1, To: 0}}, r.Rebalance())
	require.Equal(t, []float64{20, 40}, r.Loads())

	// With three devices a stream may come from any device heavier than
	// the lightest, not only from the heaviest: [50, 30 (3 × 10), 0].
	g := pipeline.NewPlacer(3)
	require.Equal(t, 0, g.Place("big", 50))
	require.Equal(t, 1, g.Place("a", 10))
	require.Equal(t, 2, g.Place("x", 10))
	require.Equal(t, 1, g.Place("b", 10))
	require.Equal(t, 2, g.Place("c", 10))
	require.Equal(t, 1, g.Place("d", 10))
	g.Remove("x")
	g.Remove("c")
	require.Equal(t, []float64{50, 30, 0}, g.Loads())
	require.Equal(t, []pipeline.Move{{Stream: "a", From: 1, To: 2}}, g.Rebalance())
	require.Equal(t, []float64{50, 20, 10}, g.Loads())
}

// Hybrid decoding: NVDEC engines and the CPU as devices of unequal
// capacity get streams in proportion to it, a stream may be restricted to
// some devices (its GPU's NVDEC or the CPU), and Rebalance evens relative
// loads.
func TestPlacerCapacity(t *testing.T) {
	p := pipeline.NewPlacerCapacity([]float64{1300, 650}) // NVDEC, CPU
	got := map[int]int{}
	for i := range 9 {
		got[p.Place(fmt.Sprint("s", i), 1)]++
	}
	require.Equal(t, map[int]int{0: 6, 1: 3}, got, "2:1 capacity, 2:1 streams")

	// Two GPUs' NVDEC (0, 1) and the CPU (2): a stream on GPU 1 chooses
	// between 1 and 2 only.
	q := pipeline.NewPlacerCapacity([]float64{100, 100, 100})
	require.Equal(t, 1, q.PlaceAmong("a", 1, []int{1, 2}))
	require.Equal(t, 2, q.PlaceAmong("b", 1, []int{1, 2}))
	require.Equal(t, 1, q.PlaceAmong("c", 1, []int{1, 2}), "tie: first listed")
	require.Equal(t, 0, q.PlaceAmong("d", 1, []int{7, 0}), "out-of-range indices are ignored")
	require.Equal(t, 1, q.PlaceAmong("a", 1, []int{0}), "placed streams stay")

	// Removing NVDEC streams leaves the CPU relatively heavier: one
	// stream moves back to NVDEC, not more.
	r := pipeline.NewPlacerCapacity([]float64{3, 1})
	for i := range 8 {
		r.Place(fmt.Sprint("s", i), 1)
	}
	require.Equal(t, []float64{6, 2}, r.Loads())
	for _, id := range []string{"s0", "s1", "s3", "s4"} {
		if d, _ := r.Device(id); d == 0 {
			r.Remove(id)
		}
	}
	before := r.Loads()
	moves := r.Rebalance()
	after := r.Loads()
	require.Equal(t, before[0]+before[1], after[0]+after[1])
	require.LessOrEqual(t, math.Abs(after[0]/3-after[1]), math.Abs(before[0]/3-before[1]))
	require.LessOrEqual(t, len(moves), 1)
	require.Empty(t, r.Rebalance(), "balanced: nothing more moves")
}

// Rebalance keeps a stream among the devices PlaceAmong allowed it: a
// GPU-1 stream may go to GPU 1's NVDEC or the CPU, never to GPU 0's NVDEC.
func TestPlacerRebalanceRespectsAllowedDevices(t *testing.T) {
	p := pipeline.NewPlacerCapacity([]float64{100, 100, 100}) // NVDEC 0, NVDEC 1, CPU
	for i := range 6 {
		p.PlaceAmong(fmt.Sprint("g1-", i), 1, []int{1, 2})
	}
	require.Equal(t, []float64{0, 3, 3}, p.Loads())
	require.Empty(t, p.Rebalance(), "device 0 is not allowed for any stream")
	p.PlaceAmong("g0", 1, []int{0, 2})
	for _, id := range []string{"g1-0", "g1-2", "g1-4"} { // whichever side they are on
		p.Remove(id)
	}
	for _, m := range p.Rebalance() {
		require.NotEqual(t, 0, m.To, "%s moved to device 0", m.Stream)
	}
}
