package quantize

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The histogram's percentile range lands within a bin of the exact
// percentile from sorting, also after its range grew several times.
func TestHistogramPercentile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := newHistogram()
	var all []float32
	for k := range 8 {
		vals := make([]float32, 50000)
		for i := range vals {
			vals[i] = float32(r.NormFloat64()*float64(k+1) + 2)
		}
		h.add(vals)
		all = append(all, vals...)
	}
	slices.Sort(all)
	tail := int(float64(len(all)) * (100 - Percentile) / 100)
	lo, hi := h.percentileRange(Percentile)
	bin := float32(2 * h.r / histBins)
	require.InDelta(t, all[tail], lo, float64(bin))
	require.InDelta(t, all[len(all)-1-tail], hi, float64(bin))
	require.Equal(t, uint64(len(all)), h.n)
}
