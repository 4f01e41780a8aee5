package infer

import (
	"fmt"
	"math"
	"strconv"

	"github.com/vigil-video/vigil/pipeline"
)

// yolox decodes YOLOX detectors exported with YOLOX's tools/export_onnx.py
// (decoding not folded into the graph), YOLOX ≥ 0.1.1rc0 conventions:
//
//	input  [B,3,H,W] float32 NCHW, planes B,G,R, plain 0..255, letterboxed
//	       at the top-left on a canvas of 114 (yolox/data/data_augment.py)
//	       (B = 1 as exported, or N for copies made by scripts/batch_models.py)
//	output [B,N,5+C], N = Σ_s (H/s)(W/s) for strides 8, 16, 32, rows finest
//	       level first, cells row-major; row = tx,ty,tw,th,obj,p0..p(C-1)
//
// Box (yolox/models/yolo_head.py, decode_outputs): centre ((tx+gx)·s,
// (ty+gy)·s), size (e^tw·s, e^th·s) in input pixels. obj and p are already
// sigmoided in the graph; score = obj·p_c for the best class c. Defaults:
// keep score ≥ 0.3 (YOLOX demo's visualisation threshold), class-aware NMS
// at IoU 0.45 (yolox/utils/boxes.py, multiclass_nms_class_aware).
type yolox struct {
	thr, iouThr float32
	classes     int
	grids       []yoloxGrid
	cands       []pipeline.Detection
}

type yoloxGrid struct{ w, h, stride int }

var yoloxStrides = []int{8, 16, 32}

func newYOLOX(thr, iouThr float32) *yolox {
	if thr <= 0 {
		thr = 0.3
	}
	if iouThr <= 0 {
		iouThr = 0.45
	}
	return &yolox{thr: thr, iouThr: iouThr}
}

func (y *yolox) Name() string { return "yolox" }

// Labels are cocoLabel's names of the model's classes: the 80 COCO names,
// or class0, class1, ... for a model with another number of classes.
func (y *yolox) Labels() []string {
	l := make([]string, y.classes)
	for c := range l {
		l[c] = cocoLabel(c, y.classes)
	}
	return l
}

func (y *yolox) Bind(in, out []TensorInfo) (Binding, error) {
	if len(in) != 1 || !shapeIs(in[0].Shape, -1, 3, -1, -1) || in[0].Shape[0] < 1 {
		return Binding{}, fmt.Errorf("%w yolox: inputs %v, want one [B 3 H W] (NCHW BGR, fixed batch B)", ErrModelMismatch, in)
	}
	batch := in[0].Shape[0]
	h, okH := fixedDim(in[0].Shape[2])
	w, okW := fixedDim(in[0].Shape[3])
	if !okH || !okW || h%32 != 0 || w%32 != 0 {
		return Binding{}, fmt.Errorf("%w yolox: input %v needs a fixed H and W divisible by 32", ErrModelMismatch, in[0])
	}
	rows := 0
	y.grids = y.grids[:0]
	for _, s := range yoloxStrides {
		y.grids = append(y.grids, yoloxGrid{w / s, h / s, s})
		rows += (w / s) * (h / s)
	}
	if len(out) != 1 || !shapeIs(out[0].Shape, batch, int64(rows), -1) || out[0].Shape[2] < 6 {
		return Binding{}, fmt.Errorf("%w yolox: outputs %v, want one [%d %d 5+classes] for a %dx%d input", ErrModelMismatch, out, batch, rows, w, h)
	}
	y.classes = int(out[0].Shape[2]) - 5
	return Binding{Input: in[0].Name, Batch: int(batch), InW: w, InH: h, Outputs: []string{out[0].Name}, OutShapes: [][]int64{out[0].Shape}, Order: pipeline.BGR}, nil
}

// Format: NCHW BGR in 0..255 (YOLOX's preproc), padding 114.
func (y *yolox) Format() TensorFormat {
	return TensorFormat{NCHW: true, Order: pipeline.BGR, Scale: 1, Pad: 114}
}

func (y *yolox) Fill(dst []float32, pix []byte, lb Letterbox, full bool) {
	plane := lb.InW * lb.InH
	if full {
		for i := range dst {
			dst[i] = 114
		}
	}
	for yy := 0; yy < lb.ContentH; yy++ {
		src := pix[yy*lb.ContentW*3 : (yy+1)*lb.ContentW*3]
		o := yy * lb.InW
		b, g, r := dst[o:o+lb.ContentW], dst[plane+o:plane+o+lb.ContentW], dst[2*plane+o:2*plane+o+lb.ContentW]
		for x := range b {
			b[x], g[x], r[x] = float32(src[3*x]), float32(src[3*x+1]), float32(src[3*x+2])
		}
	}
}

func (y *yolox) Decode(outs [][]float32, lb Letterbox, dst []pipeline.Detection) []pipeline.Detection {
	out := outs[0]
	stride := 5 + y.classes
	y.cands = y.cands[:0]
	row := 0
	for _, g := range y.grids {
		s := float64(g.stride)
		for gy := 0; gy < g.h; gy++ {
			for gx := 0; gx < g.w; gx++ {
				v := out[row*stride : (row+1)*stride]
				row++
				obj := v[4]
				if obj < y.thr { // score = obj·p ≤ obj
					continue
				}
				best, bestP := 0, v[5]
				for c := 1; c < y.classes; c++ {
					if v[5+c] > bestP {
						best, bestP = c, v[5+c]
					}
				}
				score := obj * bestP
				if score < y.thr {
					continue
				}
				cx, cy := (float64(v[0])+float64(gx))*s, (float64(v[1])+float64(gy))*s
				w, h := math.Exp(float64(v[2]))*s, math.Exp(float64(v[3]))*s
				x1, y1, x2, y2 := lb.clampBox(cx-w/2, cy-h/2, cx+w/2, cy+h/2)
				y.cands = append(y.cands, pipeline.Detection{
					Label: cocoLabel(best, y.classes), ClassID: best, Score: score,
					Box: pipeline.Box{X1: x1, Y1: y1, X2: x2, Y2: y2},
				})
			}
		}
	}
	return nmsClassAware(y.cands, y.iouThr, dst)
}

// cocoLabel names class c of an 80-class COCO model, else "class<c>".
func cocoLabel(c, classes int) string {
	if classes == len(cocoClasses) && c >= 0 && c < len(cocoClasses) {
		return cocoClasses[c]
	}
	return "class" + strconv.Itoa(c)
}

// cocoClasses are the 80 COCO detection classes in the order YOLOX and
// most COCO detectors use (yolox/data/datasets/coco_classes.py).
var cocoClasses = [...]string{
	"person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
	"fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
	"elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
	"skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
	"wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
	"broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed",
	"dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven",
	"toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
}
