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
// package's threshold), weighted merge at IoU 0.3.
type blazeFace struct {
	thr, iouThr float32
	side        int
	anchors     []pipeline.Point // normalised centres, 512 then 384
	cands       []pipeline.Detection
}

const blazeAnchors16, blazeAnchors8 = 16 * 16 * 2, 8 * 8 * 6

func newBlazeFace(thr, iouThr float32) *blazeFace {
	if thr <= 0 {
		thr = 0.75
	}
	if iouThr <= 0 {
		iouThr = 0.3
	}
	b := &blazeFace{thr: thr, iouThr: iouThr}
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

func (b *blazeFace) Name() string { return "blazeface" }

// Labels: BlazeFace detects faces only.
func (b *blazeFace) Labels() []string { return []string{"face"} }

// squareOnly: the anchor grids assume an S×S input (Bind refuses others).
func (b *blazeFace) squareOnly() bool { return true }

func (b *blazeFace) Bind(in, out []TensorInfo) (Binding, error) {
	if len(in) != 1 || !shapeIs(in[0].Shape, -1, -1, -1, 3) || in[0].Shape[1] != in[0].Shape[2] || in[0].Shape[0] < 1 {
		return Binding{}, fmt.Errorf("%w blazeface: inputs %v, want one [B S S 3] (NHWC RGB, square, fixed batch B)", ErrModelMismatch, in)
	}
	batch := in[0].Shape[0]
	s, ok := fixedDim(in[0].Shape[1])
	if !ok {
		return Binding{}, fmt.Errorf("%w blazeface: input %v has a dynamic size; a fixed-shape model is needed", ErrModelMismatch, in[0])
	}
	find := func(want ...int64) (TensorInfo, error) {
		for _, o := range out {
			if shapeIs(o.Shape, want...) {
				return o, nil
			}
		}
		return TensorInfo{}, fmt.Errorf("%w blazeface: no output of shape %v among %v", ErrModelMismatch, want, out)
	}
	var names []string
	var shapes [][]int64
	for _, want := range [][]int64{{batch, blazeAnchors16, 1}, {batch, blazeAnchors8, 1}, {batch, blazeAnchors16, 16}, {batch, blazeAnchors8, 16}} {
		o, err := find(want...)
		if err != nil {
			return Binding{}, err
		}
		names, shapes = append(names, o.Name), append(shapes, want)
	}
	b.side = s
	return Binding{Input: in[0].Name, Batch: int(batch), InW: s, InH: s, Outputs: names, OutShapes: shapes, Order: pipeline.RGB}, nil
}

// blazeLUT maps an 8-bit value v to v/127.5-1.
var blazeLUT = func() (t [256]float32) {
	for v := range t {
		t[v] = float32(v)/127.5 - 1
	}
	return t
}()

// Format: NHWC RGB in [-1, 1] (v/127.5 - 1, blazeLUT), black (-1) padding.
func (b *blazeFace) Format() TensorFormat {
	return TensorFormat{Order: pipeline.RGB, Scale: 1 / 127.5, Bias: -1, Pad: -1}
}

func (b *blazeFace) Fill(dst []float32, pix []byte, lb Letterbox, full bool) {
	if full {
		for i := range dst {
			dst[i] = -1 // black padding
		}
	}
	for y := 0; y < lb.ContentH; y++ {
		row := dst[y*lb.InW*3 : y*lb.InW*3+lb.ContentW*3]
		src := pix[y*lb.ContentW*3 : (y+1)*lb.ContentW*3]
		for i, v := range src {
			row[i] = blazeLUT[v]
		}
	}
}

func (b *blazeFace) Decode(outs [][]float32, lb Letterbox, dst []pipeline.Detection) []pipeline.Detection {
	scores16, scores8, boxes16, boxes8 := outs[0], outs[1], outs[2], outs[3]
	s := float32(b.side)
	b.cands = b.cands[:0]
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
		if score <= b.thr {
			continue
		}
		a := b.anchors[i]
		cx, cy := a.X*s+r[0], a.Y*s+r[1]
		w, h := r[2], r[3]
		kps := make([]pipeline.Point, 6)
		for j := range kps {
			kps[j] = pipeline.Point{X: a.X*s + r[4+2*j], Y: a.Y*s + r[5+2*j]}
		}
		b.cands = append(b.cands, pipeline.Detection{
			Label: "face", Score: score, Keypoints: kps,
			Box: pipeline.Box{X1: cx - w/2, Y1: cy - h/2, X2: cx + w/2, Y2: cy + h/2},
		})
	}
	start := len(dst)
	dst = weightedMerge(b.cands, b.iouThr, dst)
	for i := start; i < len(dst); i++ { // model pixels -> source pixels
		d := &dst[i]
		d.Box.X1, d.Box.Y1, d.Box.X2, d.Box.Y2 = lb.clampBox(float64(d.Box.X1), float64(d.Box.Y1), float64(d.Box.X2), float64(d.Box.Y2))
		for k := range d.Keypoints {
			x, y := lb.ToSource(float64(d.Keypoints[k].X), float64(d.Keypoints[k].Y))
			d.Keypoints[k] = pipeline.Point{X: float32(x), Y: float32(y)}
		}
	}
	return dst
}
