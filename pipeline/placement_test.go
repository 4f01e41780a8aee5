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

// SetMoveRule: a move must narrow the relative-load gap (measured with
// half the stream on each side) by more than the margin, and one
// Rebalance makes at most maxMoves moves.
func TestPlacerMoveRule(t *testing.T) {
	// Equal capacities of 100: moving a stream of 10 from a device at 40
	// to one at 20 has the gap (40-5)/100 - (20+5)/100 = 0.10.
	setup := func(margin float64) *pipeline.Placer {
		p := pipeline.NewPlacerCapacity([]float64{100, 100})
		p.SetMoveRule(margin, 0)
		for i := range 8 {
			require.Equal(t, i%2, p.Place(fmt.Sprint("s", i), 10))
		}
		p.Remove("s1")
		p.Remove("s3")
		require.Equal(t, []float64{40, 20}, p.Loads())
		return p
	}
	require.Empty(t, setup(0.10).Rebalance(), "gap 0.10 is not more than the margin 0.10")
	require.Len(t, setup(0.09).Rebalance(), 1, "gap 0.10 > 0.09")

	// Sixteen streams of 5 on one device, nothing on the other: 8 moves
	// even them out; with a cap of 3, a call makes 3.
	many := func(maxMoves int) *pipeline.Placer {
		p := pipeline.NewPlacerCapacity([]float64{100, 100})
		p.SetMoveRule(0.01, maxMoves)
		for i := range 32 {
			p.Place(fmt.Sprint("s", i), 5)
		}
		for i := range 16 {
			p.Remove(fmt.Sprint("s", 2*i+1)) // all of device 1
		}
		require.Equal(t, []float64{80, 0}, p.Loads())
		return p
	}
	require.Len(t, many(0).Rebalance(), 8)
	capped := many(3)
	for _, want := range []int{3, 3, 2, 0} {
		require.Len(t, capped.Rebalance(), want)
	}
	require.Equal(t, []float64{40, 40}, capped.Loads())
}

// Rebalance settles whatever the weights, capacities, margin and cap:
// capped calls in a row reach a placement that moves nothing more (every
// move narrows the spread, so none is undone), and no load is lost.
func TestPlacerRebalanceSettles(t *testing.T) {
	for seed := range 200 {
		r := newLCG(uint64(seed))
		devs := 2 + r.intn(3)
		caps := make([]float64, devs)
		for i := range caps {
			caps[i] = float64(1 + r.intn(100))
		}
		p := pipeline.NewPlacerCapacity(caps)
		p.SetMoveRule(float64(r.intn(10))/100, r.intn(3))
		weights := map[string]float64{} // the streams still placed
		for i := range 5 + r.intn(30) {
			w := float64(1 + r.intn(50))
			weights[fmt.Sprint("s", i)] = w
			p.Place(fmt.Sprint("s", i), w)
		}
		for i := range 5 + r.intn(30) {
			if r.intn(2) == 0 {
				p.Remove(fmt.Sprint("s", i))
				delete(weights, fmt.Sprint("s", i))
			}
		}
		total := 0.0
		for _, w := range weights {
			total += w
		}
		for range 10 { // a capped rebalance may need several calls
			if len(p.Rebalance()) == 0 {
				break
			}
		}
		require.Empty(t, p.Rebalance(), "seed %d: a settled placer moves nothing more", seed)
		sum := 0.0
		for _, l := range p.Loads() {
			sum += l
		}
		// Whole weights: the sums are exact.
		require.Equal(t, total, sum, "seed %d: the loads are the placed streams' weights", seed)
		for id, w := range weights {
			got, ok := p.Weight(id)
			require.True(t, ok, "seed %d: %s still placed", seed, id)
			require.Equal(t, w, got, "seed %d: %s", seed, id)
		}
	}
}

// Reweigher: a measured weight replaces the placed one only after
// Confirm readings in a row outside the band, on the same side; readings
// that jitter within the band, or cross it and come back, never do.
func TestReweigherHysteresis(t *testing.T) {
	p := pipeline.NewPlacerCapacity([]float64{100, 100})
	p.Place("cam", 30)
	rw := &pipeline.Reweigher{Band: 0.25, Confirm: 2}
	for _, m := range []float64{31, 29, 36, 24.5, 30.5, 0, -1} { // within 25 %, or no reading
		require.False(t, rw.Observe(p, "cam", m), "%v", m)
	}
	require.False(t, rw.Observe(p, "cam", 40), "first reading outside the band")
	require.False(t, rw.Observe(p, "cam", 30), "back inside: starts over")
	require.False(t, rw.Observe(p, "cam", 40))
	require.False(t, rw.Observe(p, "cam", 20), "the other side: starts over")
	require.True(t, rw.Observe(p, "cam", 20), "two lighter readings in a row")
	w, _ := p.Weight("cam")
	require.Equal(t, 20.0, w)
	require.Equal(t, []float64{20, 0}, p.Loads())
	require.False(t, rw.Observe(p, "cam", 24), "within the band of the new weight")
	require.False(t, rw.Observe(p, "unplaced", 50))
	rw.Observe(p, "cam", 90)
	rw.Forget("cam")
	require.False(t, rw.Observe(p, "cam", 90), "forgotten: starts over")

	// A camera that alternates between two rates at every reading (720p
	// and 1080p, say) is never reweighed, so never moved.
	for i := range 20 {
		require.False(t, rw.Observe(p, "cam", []float64{10, 45}[i%2]), "reading %d", i)
	}
}

// TestReweigherNext checks the rule on weights held outside a Placer (the
// fleet's node entries): no weight yet takes the first reading at once;
// afterwards the same band and confirmation as Observe.
func TestReweigherNext(t *testing.T) {
	rw := &pipeline.Reweigher{Band: 0.25, Confirm: 2}
	w, changed := rw.Next("cam", 0, 0)
	require.False(t, changed, "no weight and no reading")
	require.Zero(t, w)
	w, changed = rw.Next("cam", 0, 30)
	require.True(t, changed, "the first reading is the weight")
	require.Equal(t, 30.0, w)
	for _, m := range []float64{36, 24.5, 0} { // within 25 %, or no reading
		w, changed = rw.Next("cam", 30, m)
		require.False(t, changed, "%v", m)
		require.Equal(t, 30.0, w)
	}
	_, changed = rw.Next("cam", 30, 40)
	require.False(t, changed, "first reading outside the band")
	w, changed = rw.Next("cam", 30, 41)
	require.True(t, changed, "two heavier readings in a row")
	require.Equal(t, 41.0, w)
}

// lcg is a tiny deterministic generator for the randomised cases.
type lcg struct{ s uint64 }

func newLCG(seed uint64) *lcg { return &lcg{seed*6364136223846793005 + 1442695040888963407} }

func (r *lcg) intn(n int) int {
	r.s = r.s*6364136223846793005 + 1442695040888963407
	return int((r.s >> 33) % uint64(n))
}
