package infer

import (
	"errors"
	"fmt"
	"sync"

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
