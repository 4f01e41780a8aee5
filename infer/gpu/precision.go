package gpu

import (
	"crypto/sha256"
	_ "embed" // builtin.jpg
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/onnxfp16"
	"github.com/vigil-video/vigil/pipeline"
)

// Precision is the maths an engine's model runs in (infer.precision).
type Precision string

// The precisions: fp32 (IEEE single precision throughout, the CPU engine's
// results), tf32 (the CUDA provider's TensorFloat-32 tensor-core maths for
// convolutions and matrix products: a 10-bit mantissa on their inputs) and
// fp16 (half-precision weights and activations, see Open).
const (
	PrecisionFP32 Precision = "fp32"
	PrecisionTF32 Precision = "tf32"
	PrecisionFP16 Precision = "fp16"
)

// ParsePrecision checks a precision from a config or flag ("" is fp32).
// Errors name the value and the known ones.
func ParsePrecision(s string) (Precision, error) {
	switch p := Precision(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return PrecisionFP32, nil
	case PrecisionFP32, PrecisionTF32, PrecisionFP16:
		return p, nil
	}
	return "", fmt.Errorf("precision %q: want fp32, tf32 or fp16", s)
}

// builtinJPEG is frame 300 of OpenCV's sample vtest.avi (768x576, people
// walking; from Debian's opencv-doc, as scripts/setup.sh fetches it,
// re-encoded as a JPEG at ffmpeg's -q:v 4), the frame Open checks fp16
// against fp32 on.
//
//go:embed builtin.jpg
var builtinJPEG []byte

// BuiltinFrame decodes the built-in frame (a 768x576 street scene with
// people) through FFmpeg into a 4:2:0 picture; the caller releases it.
// Errors: FFmpeg's, or a temporary file that cannot be written.
func BuiltinFrame() (pipeline.Image, error) {
	img, err := decode.FirstFrame(builtinJPEG)
	if err != nil {
		return nil, fmt.Errorf("the built-in frame: %w", err)
	}
	return img, nil
}

// FP16Copy returns the path of the fp16 copy of the model at path
// (onnxfp16.Convert), making it on first use in dir ("" is the OS's
// temporary directory) as <dir>/fp16/<sha256 of the model>.onnx, so a
// changed model gets a new copy. Errors: reading the model, a graph
// onnxfp16 cannot convert, or writing the copy.
func FP16Copy(path, dir string) (string, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "fp16", hex.EncodeToString(h.Sum(nil))+".onnx")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	conv, err := onnxfp16.Convert(src, onnxfp16.Options{})
	if err != nil {
		return "", fmt.Errorf("model %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".fp16-*.onnx")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(conv)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return out, nil
}

// agreesWithFP32 runs the built-in frame through e and through an fp32
// engine of the same model (one instance, eager) and returns "" when their
// detections agree by infer.CompareAt (a detection on one side only is
// forgiven when it scored within infer.MatchScore of the threshold), else
// why not.
func (e *Engine) agreesWithFP32() (string, error) {
	img, err := BuiltinFrame()
	if err != nil {
		return "", err
	}
	defer img.Release()
	o := e.o
	o.Precision, o.Instances, o.Slots, o.CUDAGraph, o.OnBatch = PrecisionFP32, 1, 1, false, nil
	o.TensorRT.CUDAGraph = false
	ref, err := open(o)
	if err != nil {
		return "", err
	}
	defer ref.Close()
	want, err := detectOne(ref, img)
	if err != nil {
		return "", err
	}
	got, err := detectOne(e, img)
	if err != nil {
		return "", err
	}
	c := infer.CompareAt(want, got, infer.ScoreThreshold(e.adapter))
	if len(c.Bad) == 0 {
		return "", nil
	}
	return fmt.Sprintf("on the built-in frame %d of %d detections match fp32's (first miss: %s)", c.Matched(), c.Total, c.Bad[0]), nil
}

// detectOne runs one image as a batch of one.
func detectOne(e *Engine, img pipeline.Image) ([]pipeline.Detection, error) {
	d, err := e.DetectBatch([]pipeline.Image{img}, []*pipeline.StageTimes{{}}, make([][]pipeline.Detection, 1))
	if err != nil {
		return nil, err
	}
	return d[0], nil
}
