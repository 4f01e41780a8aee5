package infer

import (
	"slices"

	"github.com/vigil-video/vigil/pipeline"
)

// IoU returns the intersection over union of two boxes, in [0, 1] (0 when
// disjoint or degenerate).
func IoU(a, b pipeline.Box) float32 {
	ix := min(a.X2, b.X2) - max(a.X1, b.X1)
	iy := min(a.Y2, b.Y2) - max(a.Y1, b.Y1)
	if ix <= 0 || iy <= 0 {
		return 0
	}
	inter := ix * iy
	union := (a.X2-a.X1)*(a.Y2-a.Y1) + (b.X2-b.X1)*(b.Y2-b.Y1) - inter
	if union <= 0 {
		return 0
	}
	return inter / union
}

func byScoreDesc(a, b pipeline.Detection) int {
	switch {
	case a.Score > b.Score:
		return -1
	case a.Score < b.Score:
		return 1
	}
	return 0
}

// nmsClassAware keeps, per class, the best box and drops boxes of the same
// class whose IoU with a kept box exceeds thr (greedy NMS, as in YOLOX's
// multiclass_nms_class_aware). cands is sorted in place; the kept
// detections are appended to dst in descending score order.
func nmsClassAware(cands []pipeline.Detection, thr float32, dst []pipeline.Detection) []pipeline.Detection {
	slices.SortStableFunc(cands, byScoreDesc)
	start := len(dst)
	for _, c := range cands {
		keep := true
		for _, k := range dst[start:] {
			if k.ClassID == c.ClassID && IoU(k.Box, c.Box) > thr {
				keep = false
				break
			}
		}
		if keep {
			dst = append(dst, c)
		}
	}
	return dst
}

// weightedMerge is MediaPipe's "weighted" non-max suppression
// (mediapipe/calculators/util/non_max_suppression_calculator.cc,
// WeightedNonMaxSuppression): take the best remaining candidate, gather
// every remaining candidate whose IoU with it is at least thr, and emit one
// detection whose box centre, size and keypoints are the score-weighted
// means of the group and whose score is the group's best; repeat. cands is
// sorted in place.
func weightedMerge(cands []pipeline.Detection, thr float32, dst []pipeline.Detection) []pipeline.Detection {
	slices.SortStableFunc(cands, byScoreDesc)
	used := make([]bool, len(cands))
	for i, best := range cands {
		if used[i] {
			continue
		}
		var wsum, cx, cy, w, h float32
		kps := make([]pipeline.Point, len(best.Keypoints))
		for j := i; j < len(cands); j++ {
			c := cands[j]
			if used[j] || IoU(best.Box, c.Box) < thr {
				continue
			}
			used[j] = true
			s := c.Score
			wsum += s
			cx += s * (c.Box.X1 + c.Box.X2) / 2
			cy += s * (c.Box.Y1 + c.Box.Y2) / 2
			w += s * (c.Box.X2 - c.Box.X1)
			h += s * (c.Box.Y2 - c.Box.Y1)
			for k := range kps {
				kps[k].X += s * c.Keypoints[k].X
				kps[k].Y += s * c.Keypoints[k].Y
			}
		}
		cx, cy, w, h = cx/wsum, cy/wsum, w/wsum, h/wsum
		for k := range kps {
			kps[k].X /= wsum
			kps[k].Y /= wsum
		}
		d := best
		d.Box = pipeline.Box{X1: cx - w/2, Y1: cy - h/2, X2: cx + w/2, Y2: cy + h/2}
		d.Keypoints = kps
		dst = append(dst, d)
	}
	return dst
}
