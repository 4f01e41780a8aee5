package infer

import (
	"fmt"
	"strings"

	"github.com/vigil-video/vigil/pipeline"
)

// ssd decodes TensorFlow Object Detection API exports converted to ONNX
// (tf2onnx; the ONNX model zoo's SSD-MobileNet, Frigate's model_type ssd):
//
//	input   [B,H,W,3] uint8 RGB (the graph normalises), resized to H×W
//	        without keeping the aspect ratio (fixed_shape_resizer); a
//	        float input takes 2·v/255-1
//	outputs detection_boxes [B,N,4] ymin, xmin, ymax, xmax normalised to
//	        0..1; detection_classes [B,N] COCO category ids (1..90) as
//	        floats; detection_scores [B,N]; num_detections [B] (optional)
//
// The outputs are told apart by name (box, class, score, num). No NMS
// (the graph's). Default: keep score ≥ 0.5. Labels default to COCO's
// category ids (COCO91Labels).
type ssd struct {
	n    int
	w, h float32
}

func (s *ssd) defaults() formatDefaults {
	return formatDefaults{in: inputDefaults{layout: "nhwc", order: "rgb", lo: -1, hi: 1, resize: "stretch", pad: 0},
		score: 0.5, iou: 0.5, nms: nmsNone}
}

func (s *ssd) expects() string {
	return "one image input; outputs detection_boxes [B N 4] (ymin, xmin, ymax, xmax, normalised), detection_classes [B N], detection_scores [B N] and optionally num_detections [B]"
}

func (s *ssd) bind(im imageInput, others, out []TensorInfo, _ bool) (outBinding, error) {
	var ob outBinding
	if len(others) > 0 {
		return ob, fmt.Errorf("%w: inputs %v besides the image", ErrModelMismatch, others)
	}
	find := func(word string) int {
		for i, o := range out {
			if strings.Contains(strings.ToLower(o.Name), word) {
				return i
			}
		}
		return -1
	}
	b, c, sc, num := find("box"), find("class"), find("score"), find("num")
	want := 3
	if num >= 0 {
		want = 4
	}
	if b < 0 || c < 0 || sc < 0 || len(out) != want {
		return ob, fmt.Errorf("%w: outputs %v, want detection_boxes, detection_classes, detection_scores (and num_detections)", ErrModelMismatch, out)
	}
	batch := int64(im.batch)
	n := out[b].Shape[1]
	if !shapeIs(out[b].Shape, batch, -1, 4) || out[b].Shape[2] != 4 || n < 1 ||
		!shapeIs(out[c].Shape, batch, n) || !shapeIs(out[sc].Shape, batch, n) {
		return ob, fmt.Errorf("%w: outputs %v, want boxes [B N 4], classes and scores [B N] with one fixed N", ErrModelMismatch, out)
	}
	s.n = int(n)
	ob.add(out[b], []int64{batch, n, 4})
	ob.add(out[c], []int64{batch, n})
	ob.add(out[sc], []int64{batch, n})
	if num >= 0 {
		if !shapeIs(out[num].Shape, batch) {
			return ob, fmt.Errorf("%w: output %v, want num_detections [B]", ErrModelMismatch, out[num])
		}
		ob.add(out[num], []int64{batch})
	}
	ob.what = fmt.Sprintf("outputs %q, %q, %q: %d boxes of TensorFlow's detection API", out[b].Name, out[c].Name, out[sc].Name, s.n)
	s.w, s.h = float32(im.w), float32(im.h)
	return ob, nil
}

func (s *ssd) decode(outs [][]float32, thr float32, _ *scratch, dst []pipeline.Detection) []pipeline.Detection {
	boxes, classes, scores := outs[0], outs[1], outs[2]
	n := s.n
	if len(outs) == 4 && outs[3][0] >= 0 && outs[3][0] < float32(n) {
		n = int(outs[3][0])
	}
	for i := 0; i < n; i++ {
		if !(scores[i] >= thr) {
			continue
		}
		c := classOf(classes[i])
		if c < 0 {
			continue
		}
		b := boxes[4*i : 4*i+4]
		dst = append(dst, pipeline.Detection{ClassID: c, Score: scores[i],
			Box: pipeline.Box{X1: b[1] * s.w, Y1: b[0] * s.h, X2: b[3] * s.w, Y2: b[2] * s.h}})
	}
	return dst
}

// coco80To91 are the COCO category ids (1..90, with gaps) of the 80
// classes in cocoClasses' order: the ids TensorFlow's detection API and
// DETR exports with remapped categories give.
var coco80To91 = [...]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28,
	31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60,
	61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90}

// COCO91Labels returns 91 names indexed by COCO category id: the 80
// classes at their ids, "class<N>" at the ids COCO leaves unused (0, 12,
// 26, ...). Give them as labels to an export whose class ids are COCO's
// category ids (the ssd format's default).
func COCO91Labels() []string {
	l := make([]string, 91)
	for i := range l {
		l[i] = fmt.Sprintf("class%d", i)
	}
	for i, id := range coco80To91 {
		l[id] = cocoClasses[i]
	}
	return l
}
