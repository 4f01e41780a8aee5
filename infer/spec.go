package infer

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// Spec is a model block: how to feed a model and how to read its outputs.
// Every field's zero value means "as the format (or the model) says", so
// Spec{} detects the format and takes its defaults.
type Spec struct {
	// Format is one of Formats, an alias of one (FormatAliases), or ""
	// and "auto" to recognise it from the model's inputs and outputs.
	Format string
	// Input overrides the format's preprocessing.
	Input InputSpec
	// Labels are the class names by class id; nil takes the format's
	// (BlazeFace: face; otherwise the 80 COCO names for an 80-class model,
	// class0, class1, ... else). A model with more classes than names is
	// refused when it is bound.
	Labels []string
	// Classes, when set, keeps only detections of these class names.
	Classes []string
	// ScoreThreshold (0..1) replaces the format's default when > 0;
	// ClassThresholds replace it for single classes, by name.
	ScoreThreshold  float32
	ClassThresholds map[string]float32
	// IoUThreshold (0..1) replaces the format's NMS overlap when > 0.
	IoUThreshold float32
}

// InputSpec is how vigil writes a frame into the model's image input.
// Zero values take the format's convention (see each format's doc) or,
// for Layout, DType and the size, what the model's input says.
type InputSpec struct {
	// Layout is "nchw" (planar) or "nhwc" (interleaved).
	Layout string
	// Order is the channel order, "rgb" or "bgr".
	Order string
	// DType is the input's element type, "float32", "float16" or "uint8";
	// it must be the model's.
	DType string
	// Range, when set, maps 8-bit levels 0..255 linearly onto
	// [Range[0], Range[1]] ([0, 1]: v/255).
	Range []float32
	// Mean and Std, when set, normalise each channel after Range:
	// (x - Mean[c]) / Std[c], given in R, G, B order (ImageNet: mean
	// [0.485, 0.456, 0.406], std [0.229, 0.224, 0.225] on a [0, 1] range,
	// Range's default when they are set).
	Mean, Std []float32
	// Resize is "letterbox" (keep the aspect ratio, pad right and bottom)
	// or "stretch" (fill the input, aspect ratio lost).
	Resize string
	// Pad is the 8-bit level (0..255) of letterbox padding, before
	// normalisation; nil takes the format's.
	Pad *float32
	// Width and Height (input.size) are the input size vigil runs a model
	// with dynamic height and width at (CUDA graphs and TensorRT profiles
	// need one fixed shape); for a fixed-size model they must match it or
	// be 0.
	Width, Height int
}

// Format names (Spec.Format).
const (
	FormatAuto      = "auto"
	FormatYOLOX     = "yolox"
	FormatBlazeFace = "blazeface"
	FormatYOLOv8    = "yolov8"
	FormatYOLOv10   = "yolov10"
	FormatRTDETR    = "rtdetr"
	FormatRFDETR    = "rfdetr"
	FormatSSD       = "ssd"
)

// Formats lists the output formats vigil decodes, in the order auto
// tries them.
func Formats() []string {
	return []string{FormatBlazeFace, FormatYOLOX, FormatYOLOv8, FormatYOLOv10, FormatRTDETR, FormatRFDETR, FormatSSD}
}

// FormatAliases maps other names users know a format by (the exporters'
// and Frigate's model_type) to vigil's.
var FormatAliases = map[string]string{
	"yolov9": FormatYOLOv8, "yolo11": FormatYOLOv8, "yolo-generic": FormatYOLOv8,
	"yolo26": FormatYOLOv10, "dfine": FormatRTDETR, "d-fine": FormatRTDETR,
}

// CanonicalFormat returns the format name f stands for ("" for auto), or
// an error listing the known names.
func CanonicalFormat(f string) (string, error) {
	f = strings.ToLower(f)
	if f == "" || f == FormatAuto {
		return "", nil
	}
	if a, ok := FormatAliases[f]; ok {
		return a, nil
	}
	if slices.Contains(Formats(), f) {
		return f, nil
	}
	return "", fmt.Errorf("unknown format %q (want auto, %s)", f, strings.Join(Formats(), ", "))
}

// Check reports the first problem with s that needs no model to see, as
// "key: problem" with key relative to the model block ("input.range"),
// or nil. The model's own fit is checked when it is bound.
func (s Spec) Check() error {
	if _, err := CanonicalFormat(s.Format); err != nil {
		return fmt.Errorf("format: %w", err)
	}
	in := s.Input
	checks := []struct {
		key, val string
		want     []string
	}{
		{"input.layout", in.Layout, []string{"nchw", "nhwc"}},
		{"input.order", in.Order, []string{"rgb", "bgr"}},
		{"input.dtype", in.DType, []string{"float32", "float16", "uint8"}},
		{"input.resize", in.Resize, []string{"letterbox", "stretch"}},
	}
	for _, c := range checks {
		if c.val != "" && !slices.Contains(c.want, c.val) {
			return fmt.Errorf("%s: %q: want %s", c.key, c.val, strings.Join(c.want, " or "))
		}
	}
	if r := in.Range; r != nil && (len(r) != 2 || r[0] == r[1] || !finite(r...)) {
		return fmt.Errorf("input.range: %v: want two different numbers [low, high]", r)
	}
	if (in.Mean == nil) != (in.Std == nil) || (in.Mean != nil && (len(in.Mean) != 3 || len(in.Std) != 3)) {
		return fmt.Errorf("input.mean and input.std: want three numbers each (R, G, B), both or neither")
	}
	for _, v := range in.Std {
		if v == 0 || !finite(v) {
			return fmt.Errorf("input.std: %v: want non-zero numbers", in.Std)
		}
	}
	if !finite(in.Mean...) {
		return fmt.Errorf("input.mean: %v: want numbers", in.Mean)
	}
	if in.Pad != nil && !(*in.Pad >= 0 && *in.Pad <= 255) { // !(…): NaN too
		return fmt.Errorf("input.pad: %v: want an 8-bit level, 0 to 255", *in.Pad)
	}
	if in.Width < 0 || in.Height < 0 || (in.Width == 0) != (in.Height == 0) || in.Width > 8192 || in.Height > 8192 {
		return fmt.Errorf("input.size: [%d, %d]: want [width, height], 1 to 8192 pixels each", in.Width, in.Height)
	}
	if !(s.ScoreThreshold >= 0 && s.ScoreThreshold <= 1) {
		return fmt.Errorf("score_threshold: %v: want 0..1", s.ScoreThreshold)
	}
	if !(s.IoUThreshold >= 0 && s.IoUThreshold <= 1) {
		return fmt.Errorf("iou_threshold: %v: want 0..1", s.IoUThreshold)
	}
	for c, v := range s.ClassThresholds {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("class_thresholds: %s: %v: want 0..1", c, v)
		}
	}
	for i, l := range s.Labels {
		if strings.TrimSpace(l) == "" {
			return fmt.Errorf("labels[%d]: empty name", i)
		}
	}
	return nil
}

func finite(v ...float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// ReadLabels reads a labels file: one class name per line, by class id
// from 0; blank lines and lines starting with # are skipped, surrounding
// space is trimmed. Errors: an unreadable or empty file.
func ReadLabels(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no class names in it", path)
	}
	return out, nil
}

// COCOLabels returns the 80 COCO class names in the order YOLOX,
// Ultralytics and most COCO detectors number them.
func COCOLabels() []string { return slices.Clone(cocoClasses[:]) }
