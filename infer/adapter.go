package infer

import (
	"errors"
	"fmt"

	"github.com/vigil-video/vigil/pipeline"
)

// ErrModelMismatch is returned (wrapped) when a model's inputs or outputs do
// not have the shapes its adapter needs; it is caught when the engine opens,
// not at the first frame.
var ErrModelMismatch = errors.New("model does not fit adapter")

// TensorInfo is a model input or output: its name and its shape, with -1 for
// a dynamic dimension.
type TensorInfo struct {
	Name  string
	Shape []int64
}

func (t TensorInfo) String() string { return fmt.Sprintf("%q %v", t.Name, t.Shape) }

// Binding is what an adapter learned from the model's signature.
type Binding struct {
	// Input is the name of the single image input.
	Input string
	// Batch is the model's fixed batch size (the input's first dimension).
	Batch int
	// InW and InH are the model input size in pixels.
	InW, InH int
	// Outputs are the output names, in the order Decode expects them.
	Outputs []string
	// OutShapes are the matching output shapes.
	OutShapes [][]int64
	// Order is the channel order the adapter wants from the resizer.
	Order pipeline.PixelOrder
}

// Adapter owns a model family's pre- and post-processing.
type Adapter interface {
	// Name is the adapter's name as used in configs ("blazeface", "yolox").
	Name() string
	// Bind checks the model signature and returns how to feed it, or an
	// error wrapping ErrModelMismatch that names the offending tensor.
	Bind(in, out []TensorInfo) (Binding, error)
	// Fill writes one item's slice of the input tensor from pix, the ContentW×ContentH packed
	// 8-bit image (channel order Binding.Order) of lb. When full is false
	// only the content area is written: the padding from an earlier call
	// with the same lb is still in place.
	Fill(dst []float32, pix []byte, lb Letterbox, full bool)
	// Format says how Fill lays out and scales pixels, for preprocessors
	// other than Fill (the GPU kernel in infer/gpu).
	Format() TensorFormat
	// Labels are the class names Decode gives detections (Detection.Label),
	// indexed by class id; valid after a successful Bind (YOLOX's depend
	// on the model's number of classes).
	Labels() []string
	// Decode turns one item's raw outputs (in Binding.Outputs order, each
	// the item's slice of a [Batch, ...] output) into detections in source
	// pixels, appended to dst.
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
}

// NewAdapter returns the adapter called name with the given thresholds
// (0 takes the adapter's default). Known names: "blazeface", "yolox".
func NewAdapter(name string, scoreThreshold, iouThreshold float32) (Adapter, error) {
	switch name {
	case "blazeface":
		return newBlazeFace(scoreThreshold, iouThreshold), nil
	case "yolox":
		return newYOLOX(scoreThreshold, iouThreshold), nil
	}
	return nil, fmt.Errorf("unknown adapter %q (want blazeface or yolox)", name)
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

// AdapterNames lists the adapters NewAdapter knows.
func AdapterNames() []string { return []string{"blazeface", "yolox"} }

// fixedDim returns d as an int when it is a fixed, positive dimension.
func fixedDim(d int64) (int, bool) { return int(d), d > 0 }

func shapeIs(s []int64, want ...int64) bool {
	if len(s) != len(want) {
		return false
	}
	for i := range s {
		if want[i] >= 0 && s[i] != want[i] {
			return false
		}
	}
	return true
}
