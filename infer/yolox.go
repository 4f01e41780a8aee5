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
	classes int
	grids   []yoloxGrid
}

type yoloxGrid struct{ w, h, stride int }

var yoloxStrides = []int{8, 16, 32}

func (y *yolox) defaults() formatDefaults {
	return formatDefaults{in: inputDefaults{layout: "nchw", order: "bgr", lo: 0, hi: 255, resize: "letterbox", pad: 114},
		score: 0.3, iou: 0.45, nms: nmsGreedy}
}

func (y *yolox) expects() string {
	return "one image input [B 3 H W] (H, W multiples of 32) and one output [B N 5+classes], N = anchors of strides 8, 16, 32 (3549 at 416x416)"
}

// anchorRows is the number of grid cells of strides 8, 16 and 32 on a
// w×h input: the rows of a YOLOX or YOLOv8 output (8400 at 640×640).
func anchorRows(w, h int) int {
	n := 0
	for _, s := range yoloxStrides {
		n += (w / s) * (h / s)
	}
	return n
}

func (y *yolox) bind(im imageInput, others, out []TensorInfo, _ bool) (outBinding, error) {
	var ob outBinding
	if len(others) > 0 {
		return ob, fmt.Errorf("%w: inputs %v besides the image", ErrModelMismatch, others)
	}
	if !im.nchw || im.h%32 != 0 || im.w%32 != 0 {
		return ob, fmt.Errorf("%w: input %v: want NCHW with H and W multiples of 32", ErrModelMismatch, im.info)
	}
	rows := anchorRows(im.w, im.h)
	if len(out) != 1 || !shapeIs(out[0].Shape, int64(im.batch), int64(rows), -1) || out[0].Shape[2] < 6 {
		return ob, fmt.Errorf("%w: outputs %v, want one [%d %d 5+classes] for a %dx%d input", ErrModelMismatch, out, im.batch, rows, im.w, im.h)
	}
	y.grids = y.grids[:0]
	for _, s := range yoloxStrides {
		y.grids = append(y.grids, yoloxGrid{im.w / s, im.h / s, s})
	}
	y.classes = int(out[0].Shape[2]) - 5
	ob.add(out[0], fixShape(out[0].Shape, im.batch))
	ob.classes = y.classes
	ob.what = fmt.Sprintf("output %v: grid cells of strides 8/16/32, box, objectness and %d class scores", out[0], y.classes)
	return ob, nil
}

func (y *yolox) decode(outs [][]float32, thr float32, _ *scratch, dst []pipeline.Detection) []pipeline.Detection {
	out := outs[0]
	stride := 5 + y.classes
	row := 0
	for _, g := range y.grids {
		s := float64(g.stride)
		for gy := 0; gy < g.h; gy++ {
			for gx := 0; gx < g.w; gx++ {
				v := out[row*stride : (row+1)*stride]
				row++
				obj := v[4]
				if obj < thr { // score = obj·p ≤ obj
					continue
				}
				best, bestP := 0, v[5]
				for c := 1; c < y.classes; c++ {
					if v[5+c] > bestP {
						best, bestP = c, v[5+c]
					}
				}
				score := obj * bestP
				if score < thr {
					continue
				}
				cx, cy := (float64(v[0])+float64(gx))*s, (float64(v[1])+float64(gy))*s
				w, h := math.Exp(float64(v[2]))*s, math.Exp(float64(v[3]))*s
				dst = append(dst, pipeline.Detection{ClassID: best, Score: score,
					Box: pipeline.Box{X1: float32(cx - w/2), Y1: float32(cy - h/2), X2: float32(cx + w/2), Y2: float32(cy + h/2)}})
			}
		}
	}
	return dst
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
