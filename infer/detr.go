package infer

import (
	"fmt"
	"math"
	"strings"

	"github.com/vigil-video/vigil/pipeline"
)

// rtdetr decodes RT-DETR and D-FINE as lyuwenyu's deploy export writes
// them (RT-DETR's tools/export_onnx.py, with its postprocessor):
//
//	inputs  images [B,3,H,W] float32 RGB v/255, resized to H×W without
//	        keeping the aspect ratio; orig_target_sizes [B,2] int64 (w, h)
//	outputs labels [B,Q] int64, boxes [B,Q,4] x1,y1,x2,y2 scaled to
//	        orig_target_sizes, scores [B,Q] (Q = 300)
//
// vigil feeds orig_target_sizes the input size, so boxes come out in
// input pixels, and maps them back itself. No NMS. Default: keep score ≥
// 0.5. Labels are the model's class ids: an export that remaps them to
// COCO category ids (remap_mscoco_category, 1..90) needs labels of 91
// names.
type rtdetr struct{ q int }

func (r *rtdetr) defaults() formatDefaults {
	return formatDefaults{in: inputDefaults{layout: "nchw", order: "rgb", lo: 0, hi: 1, resize: "stretch", pad: 114},
		score: 0.5, iou: 0.5, nms: nmsNone}
}

func (r *rtdetr) expects() string {
	return "inputs images [B 3 H W] and orig_target_sizes [B 2]; outputs labels [B Q], boxes [B Q 4], scores [B Q]"
}

func (r *rtdetr) bind(im imageInput, others, out []TensorInfo, _ bool) (outBinding, error) {
	var ob outBinding
	if len(others) != 1 || !shapeIs(others[0].Shape, int64(im.batch), 2) {
		return ob, fmt.Errorf("%w: inputs besides the image %v, want one [%d 2] (orig_target_sizes)", ErrModelMismatch, others, im.batch)
	}
	sizes := others[0]
	switch sizes.dtype() {
	case "int64", "int32", "float32":
	default:
		return ob, fmt.Errorf("%w: input %v: want int64, int32 or float32", ErrModelMismatch, sizes)
	}
	if len(out) != 3 {
		return ob, fmt.Errorf("%w: outputs %v, want labels, boxes and scores", ErrModelMismatch, out)
	}
	b := indexOfShape(out, int64(im.batch), -1, 4)
	var pair []int
	for i, o := range out {
		if i != b && shapeIs(o.Shape, int64(im.batch), -1) {
			pair = append(pair, i)
		}
	}
	if b < 0 || len(pair) != 2 {
		return ob, fmt.Errorf("%w: outputs %v, want [B Q 4] boxes and two [B Q] (labels, scores)", ErrModelMismatch, out)
	}
	// labels: the integer one, else the one named so.
	l, s := pair[0], pair[1]
	isLabels := func(t TensorInfo) bool {
		return strings.HasPrefix(t.dtype(), "int") || strings.Contains(strings.ToLower(t.Name), "label")
	}
	if isLabels(out[s]) && !isLabels(out[l]) {
		l, s = s, l
	}
	if !isLabels(out[l]) || isLabels(out[s]) || out[s].dtype() != "float32" || out[b].dtype() != "float32" {
		return ob, fmt.Errorf("%w: outputs %v: cannot tell labels (integers, or named labels) from float32 scores", ErrModelMismatch, out)
	}
	q := out[b].Shape[1]
	for _, i := range pair {
		if d := out[i].Shape[1]; q < 0 || (d >= 0 && d != q) {
			return ob, fmt.Errorf("%w: outputs %v: want one fixed number of queries", ErrModelMismatch, out)
		}
	}
	r.q = int(q)
	batch := int64(im.batch)
	ob.add(out[l], []int64{batch, q})
	ob.add(out[b], []int64{batch, q, 4})
	ob.add(out[s], []int64{batch, q})
	vals := make([]int64, 0, 2*im.batch)
	for range im.batch {
		vals = append(vals, int64(im.w), int64(im.h))
	}
	ob.consts = []ConstInput{{Name: sizes.Name, Shape: []int64{batch, 2}, Type: sizes.dtype(), Values: vals}}
	ob.what = fmt.Sprintf("inputs %v and %v; %d queries of labels %q, boxes %q, scores %q", im.info, sizes, r.q, out[l].Name, out[b].Name, out[s].Name)
	return ob, nil
}

func (r *rtdetr) decode(outs [][]float32, thr float32, _ *scratch, dst []pipeline.Detection) []pipeline.Detection {
	labels, boxes, scores := outs[0], outs[1], outs[2]
	for i := 0; i < r.q; i++ {
		if !(scores[i] >= thr) {
			continue
		}
		c := classOf(labels[i])
		if c < 0 {
			continue
		}
		b := boxes[4*i : 4*i+4]
		dst = append(dst, pipeline.Detection{ClassID: c, Score: scores[i], Box: pipeline.Box{X1: b[0], Y1: b[1], X2: b[2], Y2: b[3]}})
	}
	return dst
}

// rfdetr decodes Roboflow's RF-DETR export (rfdetr's export, main.py
// export_onnx):
//
//	input   [B,3,H,W] float32 RGB, ImageNet mean/std on v/255, resized to
//	        H×W without keeping the aspect ratio
//	outputs dets [B,Q,4] cx, cy, w, h normalised to 0..1; labels [B,Q,C]
//	        class logits (sigmoid, no background column)
//
// Each query gives one detection, of its best class (score =
// sigmoid(logit)); RF-DETR's own post-processing takes the top 300
// (query, class) pairs, which can give a query two classes. No NMS.
// Default: keep score ≥ 0.5.
type rfdetr struct {
	q, classes int
	w, h       float32
}

func (r *rfdetr) defaults() formatDefaults {
	return formatDefaults{in: inputDefaults{layout: "nchw", order: "rgb", lo: 0, hi: 1, mean: []float32{0.485, 0.456, 0.406},
		std: []float32{0.229, 0.224, 0.225}, resize: "stretch", pad: 114}, score: 0.5, iou: 0.5, nms: nmsNone}
}

func (r *rfdetr) expects() string {
	return "one image input; outputs dets [B Q 4] (normalised cx, cy, w, h) and labels [B Q classes] (logits)"
}

func (r *rfdetr) bind(im imageInput, others, out []TensorInfo, _ bool) (outBinding, error) {
	var ob outBinding
	if len(others) > 0 {
		return ob, fmt.Errorf("%w: inputs %v besides the image", ErrModelMismatch, others)
	}
	if len(out) != 2 || out[0].dtype() != "float32" || out[1].dtype() != "float32" ||
		!shapeIs(out[0].Shape, int64(im.batch), -1, -1) || !shapeIs(out[1].Shape, int64(im.batch), -1, -1) {
		return ob, fmt.Errorf("%w: outputs %v, want two float32: dets [B Q 4] and labels [B Q classes]", ErrModelMismatch, out)
	}
	d, l := 0, 1
	switch {
	case strings.Contains(out[0].Name, "label") || (out[1].Shape[2] == 4 && out[0].Shape[2] != 4 && !strings.Contains(out[1].Name, "label")):
		d, l = 1, 0
	}
	q := out[d].Shape[1]
	if out[d].Shape[2] != 4 || q < 1 || out[l].Shape[1] != q || out[l].Shape[2] < 1 {
		return ob, fmt.Errorf("%w: outputs %v, want dets [B Q 4] and labels [B Q classes] with one fixed Q", ErrModelMismatch, out)
	}
	r.q, r.classes, r.w, r.h = int(q), int(out[l].Shape[2]), float32(im.w), float32(im.h)
	ob.add(out[d], fixShape(out[d].Shape, im.batch))
	ob.add(out[l], fixShape(out[l].Shape, im.batch))
	ob.classes = r.classes
	ob.what = fmt.Sprintf("outputs %v (boxes) and %v (%d class logits) for %d queries", out[d], out[l], r.classes, r.q)
	return ob, nil
}

func (r *rfdetr) decode(outs [][]float32, thr float32, _ *scratch, dst []pipeline.Detection) []pipeline.Detection {
	dets, logits := outs[0], outs[1]
	// sigmoid is monotonic: compare logits with the threshold's logit.
	lthr := float32(math.Log(float64(thr) / (1 - float64(thr))))
	for i := 0; i < r.q; i++ {
		row := logits[i*r.classes : (i+1)*r.classes]
		best, bl := 0, row[0]
		for c := 1; c < r.classes; c++ {
			if row[c] > bl {
				best, bl = c, row[c]
			}
		}
		if !(bl >= lthr) {
			continue
		}
		b := dets[4*i : 4*i+4]
		cx, cy, w, h := b[0]*r.w, b[1]*r.h, b[2]*r.w, b[3]*r.h
		dst = append(dst, pipeline.Detection{ClassID: best, Score: float32(1 / (1 + math.Exp(-float64(bl)))),
			Box: pipeline.Box{X1: cx - w/2, Y1: cy - h/2, X2: cx + w/2, Y2: cy + h/2}})
	}
	return dst
}
