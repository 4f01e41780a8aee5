package infer

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/vigil-video/vigil/pipeline"
)

// ErrModelMismatch is returned (wrapped) when a model's inputs or outputs do
// not have the shapes its format needs, when no format fits (format auto),
// or when the file is not an ONNX model at all; it is caught when the
// engine opens, not at the first frame.
var ErrModelMismatch = errors.New("model does not fit its format")

// TensorInfo is a model input or output: its name, its shape, with -1 for
// a dynamic dimension, and its element type ("float32", "float16",
// "uint8", "int64", ...; "" reads as float32).
type TensorInfo struct {
	Name  string
	Shape []int64
	Type  string
}

func (t TensorInfo) String() string {
	if t.Type == "" || t.Type == "float32" {
		return fmt.Sprintf("%q %v", t.Name, t.Shape)
	}
	return fmt.Sprintf("%q %v %s", t.Name, t.Shape, t.Type)
}

func (t TensorInfo) dtype() string {
	if t.Type == "" {
		return "float32"
	}
	return t.Type
}

// ConstInput is an input other than the image that vigil feeds the same
// values every run: RT-DETR's orig_target_sizes, the input size [W, H]
// per batch item, so that its boxes come out in model-input pixels.
type ConstInput struct {
	Name  string
	Shape []int64
	// Type is "int64", "int32" or "float32".
	Type   string
	Values []int64
}

// Binding is what an adapter learned from the model's signature.
type Binding struct {
	// Input is the name of the single image input, InShape its shape as
	// vigil runs it (dynamic dimensions fixed) and InType its element type
	// ("float32", "float16" or "uint8").
	Input   string
	InShape []int64
	InType  string
	// Batch is the model's batch size (the input's first dimension; 1
	// when it is dynamic).
	Batch int
	// InW and InH are the model input size in pixels.
	InW, InH int
	// Stretch: frames are resized to InW×InH without keeping their aspect
	// ratio (input.resize stretch); otherwise letterboxed.
	Stretch bool
	// Consts are the other inputs, fed constant values.
	Consts []ConstInput
	// Outputs are the output names, in the order Decode expects them.
	Outputs []string
	// OutShapes are the matching output shapes (dynamic dimensions fixed)
	// and OutTypes their element types; engines hand Decode every output
	// as float32 values.
	OutShapes [][]int64
	OutTypes  []string
	// Order is the channel order the adapter wants from the resizer.
	Order pipeline.PixelOrder
	// Chosen says in one line which format reads the model and, for
	// format auto, why: `yolov8 (auto: output "output0" [1 84 3549]: [B
	// 4+C N], cx,cy,w,h and 80 class scores per anchor)`, or `yolov8
	// (given)`.
	Chosen string
}

// Letterbox is the mapping of a srcW×srcH frame onto the model input:
// NewLetterbox, or NewStretch with input.resize stretch.
func (b Binding) Letterbox(srcW, srcH int) Letterbox {
	if b.Stretch {
		return NewStretch(srcW, srcH, b.InW, b.InH)
	}
	return NewLetterbox(srcW, srcH, b.InW, b.InH)
}

// Adapter owns a model's pre- and post-processing.
type Adapter interface {
	// Name is the format's name ("blazeface", "yolox", "yolov8", ...);
	// valid after a successful Bind when the format is auto.
	Name() string
	// Bind checks the model signature and returns how to feed it, or an
	// error wrapping ErrModelMismatch that names the offending tensor.
	Bind(in, out []TensorInfo) (Binding, error)
	// Fill writes one item's slice of the input tensor, as float32 values
	// (engines convert them to the input's element type), from pix, the
	// ContentW×ContentH packed 8-bit image (channel order Binding.Order)
	// of lb. When full is false only the content area is written: the
	// padding from an earlier call with the same lb is still in place.
	Fill(dst []float32, pix []byte, lb Letterbox, full bool)
	// Format says how Fill lays out and scales pixels, for preprocessors
	// other than Fill (the GPU kernel in infer/gpu).
	Format() TensorFormat
	// Labels are the class names Decode gives detections (Detection.Label),
	// indexed by class id; valid after a successful Bind.
	Labels() []string
	// Decode turns one item's raw outputs (in Binding.Outputs order, each
	// the item's slice of a [Batch, ...] output, as float32) into
	// detections in source pixels, appended to dst. Rows with NaN or
	// infinite values are skipped; boxes are clamped to the frame. It is
	// safe for concurrent use (the GPU engine decodes its slots at once).
	Decode(outs [][]float32, lb Letterbox, dst []pipeline.Detection) []pipeline.Detection
}

// TensorFormat is how an adapter writes one image into its slice of the
// input tensor: channel layout, channel order and the affine scaling of
// 8-bit values.
type TensorFormat struct {
	// NCHW: planar [3, H, W] per item; otherwise interleaved [H, W, 3].
	NCHW bool
	// Order of the three channels.
	Order pipeline.PixelOrder
	// A pixel value v in 0..255 is stored as v*Scale + Bias.
	Scale, Bias float32
	// Pad is the stored value of letterbox padding (already scaled).
	Pad float32
	// Channels, when not nil, replaces Scale, Bias and Pad per channel
	// (input.mean and input.std).
	Channels *ChannelNorm
}

// NewAdapter returns the adapter for a model block; s.Format "" or
// "auto" picks the format in Bind. Errors: s.Check's.
func NewAdapter(s Spec) (Adapter, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	f, _ := CanonicalFormat(s.Format)
	return &adapter{spec: s, format: f, scratch: &sync.Pool{}}, nil
}

// ItemOutputs sets dst[k] to item i's part of outs[k], for outputs of a
// batch of batch items ([batch, ...], row-major, so item i is the i-th of
// batch equal slices): what Adapter.Decode takes for one item. No copy;
// dst must have len(outs) entries.
func ItemOutputs(dst, outs [][]float32, batch, i int) {
	for k, o := range outs {
		per := len(o) / batch
		dst[k] = o[i*per : (i+1)*per]
	}
}

// AdapterNames lists the formats NewAdapter knows (Formats).
func AdapterNames() []string { return Formats() }

// fixedDim returns d as an int when it is a fixed, positive dimension.
func fixedDim(d int64) (int, bool) { return int(d), d > 0 }

// shapeIs reports whether s has want's rank and agrees with it where want
// is ≥ 0; a dynamic (-1) dimension of s agrees with anything.
func shapeIs(s []int64, want ...int64) bool {
	if len(s) != len(want) {
		return false
	}
	for i := range s {
		if want[i] >= 0 && s[i] >= 0 && s[i] != want[i] {
			return false
		}
	}
	return true
}

// fixShape returns s with its dynamic dimensions replaced: the first by
// batch, any other by the matching entry of want (≥ 0).
func fixShape(s []int64, batch int, want ...int64) []int64 {
	out := append([]int64(nil), s...)
	for i := range out {
		if out[i] < 0 {
			if i == 0 {
				out[i] = int64(batch)
			} else if i < len(want) {
				out[i] = want[i]
			}
		}
	}
	return out
}

// nmsKind is how a format's overlapping candidates are merged.
type nmsKind int

const (
	nmsNone     nmsKind = iota // end-to-end models: the graph did it
	nmsGreedy                  // greedy, per class (YOLO)
	nmsWeighted                // MediaPipe's weighted merge (BlazeFace)
)

// formatDefaults are a format's conventions.
type formatDefaults struct {
	in         inputDefaults
	score, iou float32
	nms        nmsKind
}

// outBinding is what a decoder bound.
type outBinding struct {
	names   []string
	shapes  [][]int64
	types   []string
	classes int // 0: not in the shapes (labels, or COCO's 80)
	consts  []ConstInput
	what    string // the layout in words, for format auto's line
}

func (o *outBinding) add(t TensorInfo, shape []int64) {
	o.names, o.shapes, o.types = append(o.names, t.Name), append(o.shapes, shape), append(o.types, t.dtype())
}

// decoder reads one output format.
type decoder interface {
	defaults() formatDefaults
	// expects says which inputs and outputs the format takes.
	expects() string
	// bind checks the outputs, and the inputs other than the image, for
	// the bound image input. strict (format auto) refuses what an
	// explicit format would still take on trust.
	bind(im imageInput, others, out []TensorInfo, strict bool) (outBinding, error)
	// decode appends the candidates of one item scoring at least thr
	// (boxes and keypoints in model-input pixels) to dst, with sc as its
	// scratch space. Concurrent calls each get their own sc.
	decode(outs [][]float32, thr float32, sc *scratch, dst []pipeline.Detection) []pipeline.Detection
}

func newDecoder(format string) decoder {
	switch format {
	case FormatBlazeFace:
		return newBlazeFace()
	case FormatYOLOX:
		return &yolox{}
	case FormatYOLOv8:
		return &yolov8{}
	case FormatYOLOv10:
		return &yoloE2E{}
	case FormatRTDETR:
		return &rtdetr{}
	case FormatRFDETR:
		return &rfdetr{}
	case FormatSSD:
		return &ssd{}
	}
	panic("infer: no decoder for format " + format)
}

// adapter is the Adapter of every format: the image input and the
// post-processing (labels, classes, thresholds, NMS, mapping to the
// frame) are common; a decoder reads the format's outputs.
type adapter struct {
	spec   Spec
	format string // "" until bound under auto
	dec    decoder
	d      formatDefaults
	tf     TensorFormat
	fl     *filler
	labels []string
	// minThr is the lowest threshold; thrOf[c] is class c's and keep[c]
	// whether it is kept (nil: all, at defThr).
	minThr, defThr, iouThr float32
	thrOf                  map[int]float32
	keep                   map[int]bool
	square                 bool
	lastOut                outBinding
	// scratch holds *scratch: Decode runs concurrently on the GPU
	// engine's slots.
	scratch *sync.Pool
}

// scratch is one Decode call's working space, reused through a pool.
type scratch struct {
	cands []pipeline.Detection
	best  []int32 // per anchor (yolov8, channels first)
	bestP []float32
}

func (a *adapter) Name() string         { return a.format }
func (a *adapter) Format() TensorFormat { return a.tf }
func (a *adapter) Labels() []string     { return a.labels }

// squareOnly: BlazeFace's anchor grids assume an S×S input.
func (a *adapter) squareOnly() bool { return a.square }

func (a *adapter) Bind(in, out []TensorInfo) (Binding, error) {
	img, others, err := splitInputs(in)
	if a.format != "" {
		if err != nil {
			return Binding{}, fmt.Errorf("format %s: %w", a.format, err)
		}
		b, err := a.bindAs(a.format, img, others, out, false)
		if err != nil {
			return Binding{}, fmt.Errorf("format %s: %w (it takes %s)", a.format, err, newDecoder(a.format).expects())
		}
		b.Chosen = a.format + " (given)"
		return b, nil
	}
	if err != nil {
		return Binding{}, fmt.Errorf("format auto: %w; set the model's format (%s)", err, strings.Join(Formats(), ", "))
	}
	return a.auto(img, others, in, out)
}

// auto binds the one format that fits; when several do, the class count
// decides (the labels' length, else COCO's 80).
func (a *adapter) auto(img TensorInfo, others, in, out []TensorInfo) (Binding, error) {
	type fit struct {
		format string
		t      *adapter
		b      Binding
		ob     outBinding
	}
	var fits []fit
	var why []string
	for _, f := range Formats() {
		t := &adapter{spec: a.spec, format: f}
		b, err := t.bindAs(f, img, others, out, true)
		if err != nil {
			why = append(why, f+": "+strings.TrimPrefix(err.Error(), ErrModelMismatch.Error()+": "))
			continue
		}
		fits = append(fits, fit{f, t, b, t.lastOut})
	}
	if len(fits) > 1 {
		want := 80
		if a.spec.Labels != nil {
			want = len(a.spec.Labels)
		}
		var same []fit
		for _, f := range fits {
			if f.ob.classes == 0 || f.ob.classes == want {
				same = append(same, f)
			}
		}
		if len(same) > 0 {
			fits = same
		}
	}
	switch len(fits) {
	case 1:
		f := fits[0]
		pool := a.scratch
		*a = *f.t
		a.scratch = pool
		b := f.b
		b.Chosen = fmt.Sprintf("%s (auto: %s)", f.format, f.ob.what)
		return b, nil
	case 0:
		return Binding{}, fmt.Errorf("%w: format auto: no format fits inputs %v, outputs %v (%s); set the model's format and input",
			ErrModelMismatch, in, out, strings.Join(why, "; "))
	}
	var names []string
	for _, f := range fits {
		names = append(names, f.format+" ("+f.ob.what+")")
	}
	return Binding{}, fmt.Errorf("%w: format auto: inputs %v, outputs %v fit more than one format: %s; set the model's format (or its labels, whose number tells the class count)",
		ErrModelMismatch, in, out, strings.Join(names, " or "))
}

// bindAs binds the model as format f.
func (a *adapter) bindAs(f string, img TensorInfo, others, out []TensorInfo, strict bool) (Binding, error) {
	a.format, a.dec = f, newDecoder(f)
	a.d = a.dec.defaults()
	im, err := bindImage(img, a.spec.Input, a.d.in)
	if err != nil {
		return Binding{}, err
	}
	ob, err := a.dec.bind(im, others, out, strict)
	if err != nil {
		return Binding{}, err
	}
	for i, t := range ob.types {
		if !outputTypeOK(t) {
			return Binding{}, fmt.Errorf("%w: output %s is %s; vigil reads float32, float16, int64 and int32 outputs", ErrModelMismatch, ob.names[i], t)
		}
	}
	a.lastOut = ob
	if a.tf, err = tensorFormat(im, a.spec.Input, a.d.in); err != nil {
		return Binding{}, err
	}
	a.fl = newFiller(a.tf)
	if err := a.bindPost(ob.classes); err != nil {
		return Binding{}, err
	}
	_, a.square = a.dec.(*blazeFace)
	resize := a.spec.Input.Resize
	if resize == "" {
		resize = a.d.in.resize
	}
	return Binding{Input: im.info.Name, InShape: im.shape(), InType: im.dtype, Batch: im.batch, InW: im.w, InH: im.h,
		Stretch: resize == "stretch", Consts: ob.consts, Outputs: ob.names, OutShapes: ob.shapes, OutTypes: ob.types,
		Order: a.tf.Order}, nil
}

// bindPost sets the labels, the classes kept and the thresholds for a
// model of the given class count (0: unknown).
func (a *adapter) bindPost(classes int) error {
	s := a.spec
	switch {
	case s.Labels != nil && classes > len(s.Labels):
		return fmt.Errorf("%w: %d labels for a model with %d classes", ErrModelMismatch, len(s.Labels), classes)
	case s.Labels != nil:
		a.labels = s.Labels
	case a.format == FormatBlazeFace:
		a.labels = []string{"face"}
	case a.format == FormatSSD:
		a.labels = COCO91Labels()
	case classes == 0:
		a.labels = COCOLabels()
	default:
		a.labels = make([]string, classes)
		for c := range a.labels {
			a.labels[c] = cocoLabel(c, classes)
		}
	}
	id := map[string]int{}
	for c, l := range a.labels {
		if _, dup := id[l]; !dup {
			id[l] = c
		}
	}
	a.defThr, a.iouThr = a.d.score, a.d.iou
	if s.ScoreThreshold > 0 {
		a.defThr = s.ScoreThreshold
	}
	if s.IoUThreshold > 0 {
		a.iouThr = s.IoUThreshold
	}
	a.keep, a.thrOf = nil, map[int]float32{}
	if s.Classes != nil {
		a.keep = map[int]bool{}
		for _, n := range s.Classes {
			c, ok := id[n]
			if !ok {
				return fmt.Errorf("%w: classes: %q is not one of the model's labels", ErrModelMismatch, n)
			}
			a.keep[c] = true
		}
	}
	a.minThr = a.defThr
	for n, v := range s.ClassThresholds {
		c, ok := id[n]
		if !ok {
			return fmt.Errorf("%w: class_thresholds: %q is not one of the model's labels", ErrModelMismatch, n)
		}
		a.thrOf[c] = v
		if a.keep == nil || a.keep[c] {
			a.minThr = min(a.minThr, v)
		}
	}
	return nil
}

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

// typeName is ORT's element type as TensorInfo.Type spells it.
func typeName(t ort.TensorElementDataType) string {
	switch t {
	case ort.TensorElementDataTypeFloat:
		return "float32"
	case ort.TensorElementDataTypeFloat16:
		return "float16"
	case ort.TensorElementDataTypeUint8:
		return "uint8"
	case ort.TensorElementDataTypeInt8:
		return "int8"
	case ort.TensorElementDataTypeInt32:
		return "int32"
	case ort.TensorElementDataTypeInt64:
		return "int64"
	case ort.TensorElementDataTypeDouble:
		return "float64"
	case ort.TensorElementDataTypeBool:
		return "bool"
	}
	return fmt.Sprintf("type%d", int(t))
}
