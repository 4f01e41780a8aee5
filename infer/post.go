package infer

import (
	"fmt"
	"math"

	"github.com/vigil-video/vigil/pipeline"
)

func (a *adapter) Fill(dst []float32, pix []byte, lb Letterbox, full bool) {
	a.fl.fill(dst, pix, lb, full)
}

// Decode is safe for concurrent use: each call takes its own scratch.
func (a *adapter) Decode(outs [][]float32, lb Letterbox, dst []pipeline.Detection) []pipeline.Detection {
	sc, _ := a.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	defer a.scratch.Put(sc)
	cands := a.dec.decode(outs, a.minThr, sc, sc.cands[:0])
	defer func() { sc.cands = cands[:0] }()
	// Filter: finite values, known and kept classes, per-class thresholds.
	n := 0
	for _, c := range cands {
		if !a.wanted(c) {
			continue
		}
		c.Label = a.label(c.ClassID)
		cands[n] = c
		n++
	}
	cands = cands[:n]
	if a.d.nms == nmsWeighted {
		start := len(dst)
		dst = weightedMerge(cands, a.iouThr, dst)
		for i := start; i < len(dst); i++ {
			toSource(&dst[i], lb)
		}
		return dst
	}
	n = 0
	for _, c := range cands {
		toSource(&c, lb)
		if c.Box.X2 > c.Box.X1 && c.Box.Y2 > c.Box.Y1 { // inside the frame
			cands[n] = c
			n++
		}
	}
	cands = cands[:n]
	if a.d.nms == nmsGreedy {
		return nmsClassAware(cands, a.iouThr, dst)
	}
	return append(dst, cands...)
}

// wanted reports whether candidate c passes the filters.
func (a *adapter) wanted(c pipeline.Detection) bool {
	b := c.Box
	if !finite(c.Score, b.X1, b.Y1, b.X2, b.Y2) || c.ClassID < 0 {
		return false
	}
	if a.keep != nil && !a.keep[c.ClassID] {
		return false
	}
	thr, ok := a.thrOf[c.ClassID]
	if !ok {
		thr = a.defThr
	}
	return c.Score >= thr
}

func (a *adapter) label(c int) string {
	if c < len(a.labels) {
		return a.labels[c]
	}
	return fmt.Sprintf("class%d", c)
}

// toSource maps a detection's box (clamped) and keypoints from model-input
// pixels to source pixels.
func toSource(d *pipeline.Detection, lb Letterbox) {
	d.Box.X1, d.Box.Y1, d.Box.X2, d.Box.Y2 = lb.clampBox(float64(d.Box.X1), float64(d.Box.Y1), float64(d.Box.X2), float64(d.Box.Y2))
	for k := range d.Keypoints {
		x, y := lb.ToSource(float64(d.Keypoints[k].X), float64(d.Keypoints[k].Y))
		d.Keypoints[k] = pipeline.Point{X: float32(x), Y: float32(y)}
	}
}

// classOf returns the class id a float output holds, or -1 when it is not
// a whole number ≥ 0.
func classOf(v float32) int {
	if !(v >= 0) || v > 1<<20 || float32(math.Round(float64(v))) != v {
		return -1
	}
	return int(v)
}
