package quantize

import "math"

// histBins is each activation histogram's bin count: over [-R, R], a bin
// is R/2048 wide, fine enough that the 99.999th percentile of a tensor
// of a few hundred thousand values per frame lands within a bin of where
// it would with exact sorting.
const histBins = 4096

// histogram counts a tensor's values over [-r, r]; when a value falls
// outside, r doubles and bins merge in pairs (the approach of ONNX
// Runtime's HistogramCollector, with a symmetric range so that merging is
// exact).
type histogram struct {
	r      float64
	counts [histBins]uint64
	n      uint64
	lo, hi float32 // the values' min and max
}

func newHistogram() *histogram {
	return &histogram{lo: float32(math.Inf(1)), hi: float32(math.Inf(-1))}
}

// add counts vals; NaN and infinite values are skipped (a model that
// makes them has no usable range there anyway).
func (h *histogram) add(vals []float32) {
	lo, hi := h.lo, h.hi
	finite := true
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	if math.IsInf(float64(lo), 0) || math.IsInf(float64(hi), 0) || lo != lo || hi != hi {
		finite = false
		lo, hi = h.lo, h.hi
		for _, v := range vals {
			if !math.IsInf(float64(v), 0) && v == v {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	h.lo, h.hi = lo, hi
	need := math.Max(math.Abs(float64(lo)), math.Abs(float64(hi)))
	if math.IsInf(need, 0) {
		return // every value was NaN or infinite
	}
	if h.r == 0 {
		h.r = math.Max(need, 1e-6)
	}
	for need > h.r {
		h.grow()
	}
	scale := float32(float64(histBins) / (2 * h.r))
	off := float32(h.r) * scale
	c := &h.counts
	for _, v := range vals {
		if !finite && (math.IsInf(float64(v), 0) || v != v) {
			continue
		}
		b := int(v*scale + off)
		b = min(max(b, 0), histBins-1)
		c[b]++
	}
	h.n += uint64(len(vals))
	if !finite {
		h.n = 0
		for _, n := range c {
			h.n += n
		}
	}
}

// grow doubles r: bins 2k and 2k+1 of the old range become bin
// histBins/4 + k of the new one.
func (h *histogram) grow() {
	var next [histBins]uint64
	for k := 0; k < histBins/2; k++ {
		next[histBins/4+k] = h.counts[2*k] + h.counts[2*k+1]
	}
	h.counts = next
	h.r *= 2
}

// percentileRange returns the values at the p-th and (100-p)-th
// percentiles (p in 50..100), bin edges rounded outwards, clamped to the
// values' min and max.
func (h *histogram) percentileRange(p float64) (lo, hi float32) {
	if h.n == 0 {
		return 0, 0
	}
	tail := uint64(math.Floor(float64(h.n) * (100 - p) / 100))
	w := 2 * h.r / histBins
	var acc uint64
	lo = h.lo
	for b := 0; b < histBins; b++ {
		acc += h.counts[b]
		if acc > tail {
			lo = float32(-h.r + float64(b)*w)
			break
		}
	}
	acc = 0
	hi = h.hi
	for b := histBins - 1; b >= 0; b-- {
		acc += h.counts[b]
		if acc > tail {
			hi = float32(-h.r + float64(b+1)*w)
			break
		}
	}
	return max(lo, h.lo), min(hi, h.hi)
}
