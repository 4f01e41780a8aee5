package infer

import (
	"fmt"
	"strings"
	"sync"

	"github.com/vigil-video/vigil/pipeline"
)

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

// ScoreThreshold is the score below which detections are dropped: the
// model's score_threshold, else its format's default (infer.ScoreThreshold;
// class_thresholds can set other classes' apart).
func (a *adapter) ScoreThreshold() float32 { return a.defThr }

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
