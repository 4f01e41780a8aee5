package infer

import (
	"fmt"
	"math"

	"github.com/vigil-video/vigil/pipeline"
)

// blazeFace decodes MediaPipe BlazeFace (face_detection_front 128×128 and
// face_detection_back 256×256, as converted for Barracuda by keijiro):
//
//	input   [B,S,S,3] float32 NHWC, RGB, v/127.5-1 (range [-1,1]); B = 1 as
//	        shipped, or N for copies made by scripts/batch_models.py
//	outputs [B,512,1] and [B,384,1] score logits, [B,512,16] and [B,384,16]
//	        regressors, for the 16×16×2 and 8×8×6 anchor grids
//
// Anchors are unit-size with centres ((gx+0.5)/G, (gy+0.5)/G), cell-major
// (MediaPipe SsdAnchorsCalculator with fixed_anchor_size). Regressors are in
// input pixels: box centre (ax·S+r0, ay·S+r1), size (r2, r3), keypoint j at
// (ax·S+r[4+2j], ay·S+r[5+2j]): eye, eye, nose tip, mouth, ear, ear in image
// order. Scores are sigmoid(clip(logit, ±80)) (MediaPipe clips at ±100; 80
// keeps exp in float32 range). Defaults: keep score > 0.75 (the Unity
// package's threshold), weighted merge at IoU 0.3; black padding.
type blazeFace struct {
	side    int
	anchors []pipeline.Point // normalised centres, 512 then 384
}

const blazeAnchors16, blazeAnchors8 = 16 * 16 * 2, 8 * 8 * 6

func newBlazeFace() *blazeFace {
	b := &blazeFace{}
	for _, g := range []struct{ grid, per int }{{16, 2}, {8, 6}} {
		for gy := 0; gy < g.grid; gy++ {
			for gx := 0; gx < g.grid; gx++ {
				c := pipeline.Point{X: (float32(gx) + 0.5) / float32(g.grid), Y: (float32(gy) + 0.5) / float32(g.grid)}
				for k := 0; k < g.per; k++ {
					b.anchors = append(b.anchors, c)
				}
			}
		}
	}
	return b
}

func (b *blazeFace) defaults() formatDefaults {
	return formatDefaults{in: inputDefaults{layout: "nhwc", order: "rgb", lo: -1, hi: 1, resize: "letterbox", pad: 0},
		score: 0.75, iou: 0.3, nms: nmsWeighted}
}

func (b *blazeFace) expects() string {
	return "one image input [B S S 3] (square) and outputs [B 512 1], [B 384 1], [B 512 16], [B 384 16]"
}

func (b *blazeFace) bind(im imageInput, others, out []TensorInfo, _ bool) (outBinding, error) {
	var ob outBinding
	if len(others) > 0 {
		return ob, fmt.Errorf("%w: inputs %v besides the image", ErrModelMismatch, others)
	}
	if im.nchw || im.w != im.h {
		return ob, fmt.Errorf("%w: input %v: want NHWC and square", ErrModelMismatch, im.info)
	}
	batch := int64(im.batch)
	for _, want := range [][]int64{{batch, blazeAnchors16, 1}, {batch, blazeAnchors8, 1}, {batch, blazeAnchors16, 16}, {batch, blazeAnchors8, 16}} {
		i := indexOfShape(out, want...)
		if i < 0 {
			return ob, fmt.Errorf("%w: no output of shape %v among %v", ErrModelMismatch, want, out)
		}
		ob.add(out[i], want)
	}
	if len(out) != 4 {
		return ob, fmt.Errorf("%w: outputs %v, want the four anchor outputs only", ErrModelMismatch, out)
	}
	b.side = im.w
	ob.classes = 1
	ob.what = "the four outputs of BlazeFace's 896 anchors"
	return ob, nil
}

// indexOfShape returns the index of the first tensor of shape want, or -1.
func indexOfShape(ts []TensorInfo, want ...int64) int {
	for i, t := range ts {
		if shapeIs(t.Shape, want...) {
			return i
		}
	}
	return -1
}

func (b *blazeFace) decode(outs [][]float32, thr float32, _ *scratch, dst []pipeline.Detection) []pipeline.Detection {
	scores16, scores8, boxes16, boxes8 := outs[0], outs[1], outs[2], outs[3]
	s := float32(b.side)
	for i := 0; i < blazeAnchors16+blazeAnchors8; i++ {
		var logit float32
		var r []float32
		if i < blazeAnchors16 {
			logit, r = scores16[i], boxes16[i*16:i*16+16]
		} else {
			j := i - blazeAnchors16
			logit, r = scores8[j], boxes8[j*16:j*16+16]
		}
		logit = min(max(logit, -80), 80)
		score := float32(1 / (1 + math.Exp(-float64(logit))))
		if !(score > thr) {
			continue
		}
		a := b.anchors[i]
		cx, cy := a.X*s+r[0], a.Y*s+r[1]
		w, h := r[2], r[3]
		kps := make([]pipeline.Point, 6)
		for j := range kps {
			kps[j] = pipeline.Point{X: a.X*s + r[4+2*j], Y: a.Y*s + r[5+2*j]}
		}
		dst = append(dst, pipeline.Detection{Score: score, Keypoints: kps,
			Box: pipeline.Box{X1: cx - w/2, Y1: cy - h/2, X2: cx + w/2, Y2: cy + h/2}})
	}
	return dst
}
