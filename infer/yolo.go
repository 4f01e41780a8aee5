package infer

import (
	"fmt"
	"slices"

	"github.com/vigil-video/vigil/pipeline"
)

// yolov8 decodes Ultralytics YOLOv8, YOLOv9 and YOLO11 exports (and any
// model with their head), NMS done by vigil:
//
//	input  [B,3,H,W] float32 NCHW, RGB, v/255, letterboxed on 114
//	       (ultralytics/data/augment.py, LetterBox)
//	output [B,4+C,N] (as exported), or transposed [B,N,4+C]; column =
//	       cx, cy, w, h in input pixels, then C class scores (sigmoided,
//	       no objectness); N = Σ_s (H/s)(W/s), s = 8, 16, 32
//
// score = the best class score. Defaults: keep score ≥ 0.25 and
// class-aware NMS at IoU 0.7 (Ultralytics' predict defaults, conf and iou).
// The orientation is the one whose N is the anchor count of the input
// (strides 8, 16, 32; P6 models add 64, P2 models 4).
type yolov8 struct {
	classes, n    int
	channelsFirst bool
}

func (y *yolov8) defaults() formatDefaults {
	return formatDefaults{in: inputDefaults{layout: "nchw", order: "rgb", lo: 0, hi: 1, resize: "letterbox", pad: 114},
		score: 0.25, iou: 0.7, nms: nmsGreedy}
}

func (y *yolov8) expects() string {
	return "one image input and one output [B 4+classes N] or [B N 4+classes], N = anchors of strides 8, 16, 32 (8400 at 640x640)"
}

// anchorCounts are the anchor counts of a w×h input for strides 8-32
// (first), 8-64 and 4-32.
func anchorCounts(w, h int) []int64 {
	base := anchorRows(w, h)
	return []int64{int64(base), int64(base + (w/64)*(h/64)), int64(base + (w/4)*(h/4))}
}

func (y *yolov8) bind(im imageInput, others, out []TensorInfo, _ bool) (outBinding, error) {
	var ob outBinding
	if len(others) > 0 {
		return ob, fmt.Errorf("%w: inputs %v besides the image", ErrModelMismatch, others)
	}
	if len(out) != 1 || !shapeIs(out[0].Shape, int64(im.batch), -1, -1) || out[0].dtype() != "float32" {
		return ob, fmt.Errorf("%w: outputs %v, want one float32 [%d 4+classes N]", ErrModelMismatch, out, im.batch)
	}
	d1, d2 := out[0].Shape[1], out[0].Shape[2]
	rows := anchorCounts(im.w, im.h)
	isRows := func(d int64) bool { return slices.Contains(rows, d) }
	switch {
	case d1 < 0 && d2 < 0:
		return ob, fmt.Errorf("%w: output %v: two dynamic dimensions", ErrModelMismatch, out[0])
	case isRows(d2) || (d2 < 0 && !isRows(d1)):
		y.channelsFirst = true
		if d2 < 0 {
			d2 = rows[0]
		}
	case isRows(d1) || d1 < 0:
		y.channelsFirst = false
		if d1 < 0 {
			d1 = rows[0]
		}
	default:
		return ob, fmt.Errorf("%w: output %v: neither dimension is the number of anchors of a %dx%d input (%v for strides 8-32, 8-64, 4-32)",
			ErrModelMismatch, out[0], im.w, im.h, rows)
	}
	ch, n := d1, d2
	if !y.channelsFirst {
		ch, n = d2, d1
	}
	if ch < 5 {
		return ob, fmt.Errorf("%w: output %v: want 4 box values and at least one class score per anchor", ErrModelMismatch, out[0])
	}
	y.classes, y.n = int(ch)-4, int(n)
	ob.add(out[0], []int64{int64(im.batch), d1, d2})
	ob.classes = y.classes
	layout := "[B 4+C N]"
	if !y.channelsFirst {
		layout = "[B N 4+C], transposed"
	}
	ob.what = fmt.Sprintf("output %v: %s, cx,cy,w,h and %d class scores per anchor", out[0], layout, y.classes)
	return ob, nil
}

func (y *yolov8) decode(outs [][]float32, thr float32, sc *scratch, dst []pipeline.Detection) []pipeline.Detection {
	out, n, stride := outs[0], y.n, 4+y.classes
	if !y.channelsFirst {
		for i := 0; i < n; i++ {
			row := out[i*stride : (i+1)*stride]
			best, bestP := 0, row[4]
			for c := 1; c < y.classes; c++ {
				if p := row[4+c]; p > bestP {
					best, bestP = c, p
				}
			}
			if bestP >= thr {
				dst = y.add(dst, best, bestP, row[0], row[1], row[2], row[3])
			}
		}
		return dst
	}
	// [4+C, N]: each class's scores are one contiguous row; find every
	// anchor's best class row by row.
	if cap(sc.best) < n {
		sc.best, sc.bestP = make([]int32, n), make([]float32, n)
	}
	best, bestP := sc.best[:n], sc.bestP[:n]
	clear(best)
	copy(bestP, out[4*n:5*n])
	for c := 1; c < y.classes; c++ {
		for i, p := range out[(4+c)*n : (5+c)*n] {
			if p > bestP[i] {
				best[i], bestP[i] = int32(c), p
			}
		}
	}
	for i, p := range bestP {
		if p >= thr {
			dst = y.add(dst, int(best[i]), p, out[i], out[n+i], out[2*n+i], out[3*n+i])
		}
	}
	return dst
}

// add appends a candidate from a centre-size box.
func (y *yolov8) add(dst []pipeline.Detection, c int, score, cx, cy, w, h float32) []pipeline.Detection {
	return append(dst, pipeline.Detection{ClassID: c, Score: score,
		Box: pipeline.Box{X1: cx - w/2, Y1: cy - h/2, X2: cx + w/2, Y2: cy + h/2}})
}

// yoloE2E decodes end-to-end (NMS-free) YOLO exports, YOLOv10 and YOLO26:
//
//	input  as YOLOv8's
//	output [B,K,6], row = x1, y1, x2, y2 in input pixels, score, class
//	       (ultralytics/nn/modules/head.py, v10Detect / end2end); K = 300
//	       as exported
//
// No NMS. Default: keep score ≥ 0.25. Rows past the last detection carry
// score 0 and are skipped by the threshold.
type yoloE2E struct{ k int }

func (y *yoloE2E) defaults() formatDefaults {
	d := (&yolov8{}).defaults()
	d.nms = nmsNone
	return d
}

func (y *yoloE2E) expects() string {
	return "one image input and one output [B K 6] (x1, y1, x2, y2, score, class per row)"
}

func (y *yoloE2E) bind(im imageInput, others, out []TensorInfo, strict bool) (outBinding, error) {
	var ob outBinding
	if len(others) > 0 {
		return ob, fmt.Errorf("%w: inputs %v besides the image", ErrModelMismatch, others)
	}
	if len(out) != 1 || !shapeIs(out[0].Shape, int64(im.batch), -1, 6) || out[0].Shape[2] != 6 || out[0].dtype() != "float32" {
		return ob, fmt.Errorf("%w: outputs %v, want one float32 [%d K 6]", ErrModelMismatch, out, im.batch)
	}
	if out[0].Shape[1] < 1 {
		return ob, fmt.Errorf("%w: output %v: a dynamic number of detections; vigil needs it fixed (Ultralytics exports 300)", ErrModelMismatch, out[0])
	}
	y.k = int(out[0].Shape[1])
	ob.add(out[0], fixShape(out[0].Shape, im.batch))
	ob.what = fmt.Sprintf("output %v: %d rows of x1,y1,x2,y2,score,class, end to end", out[0], y.k)
	return ob, nil
}

func (y *yoloE2E) decode(outs [][]float32, thr float32, _ *scratch, dst []pipeline.Detection) []pipeline.Detection {
	out := outs[0]
	for i := 0; i < y.k; i++ {
		r := out[i*6 : i*6+6]
		if !(r[4] >= thr) {
			continue
		}
		c := classOf(r[5])
		if c < 0 {
			continue
		}
		dst = append(dst, pipeline.Detection{ClassID: c, Score: r[4], Box: pipeline.Box{X1: r[0], Y1: r[1], X2: r[2], Y2: r[3]}})
	}
	return dst
}
