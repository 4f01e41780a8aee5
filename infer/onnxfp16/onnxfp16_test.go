package onnxfp16_test

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/onnxfp16"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// halfToFloat widens binary16 exactly (the reference for FloatToHalf).
func halfToFloat(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10)&0x1f, float64(h&0x3ff)
	switch {
	case e == 0:
		return sign * float32(math.Ldexp(m, -24))
	case e == 0x1f && m == 0:
		return sign * float32(math.Inf(1))
	case e == 0x1f:
		return float32(math.NaN())
	}
	return sign * float32(math.Ldexp(1+m/1024, e-15))
}

// Every finite half survives the round trip, and values between two halves
// go to the nearer one (ties to the even one); the range clamps.
func TestFloatToHalf(t *testing.T) {
	for h := 0; h < 0x10000; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		f := halfToFloat(uint16(h))
		require.Equal(t, uint16(h), onnxfp16.FloatToHalf(f), "half %#04x = %g", h, f)
		if h&0x7fff == 0x7bff {
			continue // the largest: the next is infinity
		}
		next := halfToFloat(uint16(h + 1))
		if h&0x8000 == 0 {
			mid := (float64(f) + float64(next)) / 2
			below, above := float32(math.Nextafter(mid, math.Inf(-1))), float32(math.Nextafter(mid, math.Inf(1)))
			if float64(below) < mid && float64(below) > float64(f) {
				require.Equal(t, uint16(h), onnxfp16.FloatToHalf(below), "just below the midpoint above %#04x", h)
			}
			if float64(above) > mid && float64(above) < float64(next) {
				require.Equal(t, uint16(h+1), onnxfp16.FloatToHalf(above), "just above the midpoint above %#04x", h)
			}
			if float64(float32(mid)) == mid {
				want := uint16(h)
				if h&1 == 1 {
					want = uint16(h + 1)
				}
				require.Equal(t, want, onnxfp16.FloatToHalf(float32(mid)), "tie above %#04x", h)
			}
		}
	}
	require.Equal(t, uint16(0x7bff), onnxfp16.FloatToHalf(1e6), "clamped to 65504")
	require.Equal(t, uint16(0xfbff), onnxfp16.FloatToHalf(-70000))
	require.Equal(t, uint16(0x7c00), onnxfp16.FloatToHalf(float32(math.Inf(1))))
	require.Equal(t, uint16(0), onnxfp16.FloatToHalf(1e-10), "below half the smallest subnormal")
	require.True(t, math.IsNaN(float64(halfToFloat(onnxfp16.FloatToHalf(float32(math.NaN()))))))
}

func yoloxFP16(t *testing.T) (fp32, fp16 string) {
	t.Helper()
	fp32 = testenv.Shared(t, "models/yolox_nano.onnx")
	src, err := os.ReadFile(fp32)
	require.NoError(t, err)
	out, err := onnxfp16.Convert(src, onnxfp16.Options{})
	require.NoError(t, err)
	fp16 = filepath.Join(t.TempDir(), "yolox_nano.fp16.onnx")
	require.NoError(t, os.WriteFile(fp16, out, 0o644))
	return fp32, fp16
}

// The fp16 copy of YOLOX-Nano passes onnx.checker's full check (with
// shape and type inference, which catches an fp16 tensor meeting an fp32
// one), has fp32 inputs and outputs, fp16 weights and fp32 Resize scales.
func TestConvertYOLOXChecker(t *testing.T) {
	_, fp16 := yoloxFP16(t)
	py := `
import sys, collections, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
g = m.graph
assert g.input[0].type.tensor_type.elem_type == 1, "input not fp32"
assert g.output[0].type.tensor_type.elem_type == 1, "output not fp32"
inits = {t.name: t for t in g.initializer}
for n in g.node:
    if n.op_type == "Conv":
        assert inits[n.input[1]].data_type == 10, n.name
    if n.op_type == "Resize":
        assert inits[n.input[2]].data_type == 1, "Resize scales " + n.name
casts = [n for n in g.node if n.op_type == "Cast"]
assert len(casts) == 2, [(c.input, c.output) for c in casts]
print("ok", len(g.node), collections.Counter(t.data_type for t in g.initializer))
`
	out, err := exec.Command("/usr/bin/python3", "-c", py, fp16).CombinedOutput()
	if err != nil && errors.Is(err, exec.ErrNotFound) {
		t.Skip("no /usr/bin/python3 (python3-onnx)")
	}
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)
}

// Where ONNX Runtime's CPU provider has fp16 kernels, the copy's detections
// on vtest frames agree with the fp32 model's by vigil's rule (IoU ≥ 0.9,
// score within 0.02), a detection on one side only being allowed when it
// scored within 0.02 of the threshold (infer.CompareAt: seen here, a sports
// ball at 0.308 in fp16 only); the GPU test (gpu tag) checks the same on
// the CUDA provider, where fp16 is used.
func TestConvertYOLOXAgreesOnCPU(t *testing.T) {
	fp32, fp16 := yoloxFP16(t)
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	t.Cleanup(sc.Close)
	open := func(path string) *infer.Engine {
		e, err := infer.Open(infer.Options{Name: "yolox-nano", Path: path, Spec: infer.Spec{Format: "yolox"}, Resizer: sc})
		if err != nil && path == fp16 {
			t.Skipf("ONNX Runtime's CPU provider cannot run the fp16 copy here: %v", err)
		}
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Close()) })
		return e
	}
	e32, e16 := open(fp32), open(fp16)
	s, err := decode.New(decode.Options{URL: testenv.Media(t, "vtest.avi")})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c infer.Comparison
	frames := 0
	_ = s.Run(ctx, func(f *pipeline.Frame) {
		defer f.Image.Release()
		if f.Seq%50 != 0 {
			return
		}
		var st pipeline.StageTimes
		a, err := e32.Detect(f.Image, &st, nil)
		require.NoError(t, err)
		b, err := e16.Detect(f.Image, &st, nil)
		require.NoError(t, err)
		c.Add(infer.CompareAt(a, b, 0.3)) // the yolox adapter's default threshold
		if frames++; frames == 6 {
			cancel()
		}
	})
	require.Equal(t, 6, frames)
	require.Positive(t, c.Total, "the frames have people in them")
	require.Empty(t, c.Bad, "worst IoU %.3f, worst score difference %.4f", c.WorstIoU, c.WorstScore)
	t.Logf("%d detections on %d frames agree, %d only on one side within %.2f of the threshold; worst IoU %.3f, worst score difference %.4f",
		c.Total, frames, c.Marginal, infer.MatchScore, c.WorstIoU, c.WorstScore)
}

// A tiny graph by hand: x -> Conv(w) -> Resize(scales) -> Sigmoid -> y, and
// y also feeds a TopK (not a half op) whose values are an output too.
// Convert keeps the scales fp32, casts at the boundaries and before TopK,
// and the result passes onnx.checker.
func TestConvertSmallGraph(t *testing.T) {
	m := smallModel()
	out, err := onnxfp16.Convert(m, onnxfp16.Options{})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "small.onnx")
	require.NoError(t, os.WriteFile(path, out, 0o644))
	py := `
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
ops = [n.op_type for n in m.graph.node]
inits = {t.name: t.data_type for t in m.graph.initializer}
assert inits["w"] == 10 and inits["scales"] == 1 and inits["k"] == 7, inits
assert ops == ["Cast", "Conv", "Resize", "Sigmoid", "Cast", "TopK", "Cast"], ops
print(ops)
`
	res, err := exec.Command("/usr/bin/python3", "-c", py, path).CombinedOutput()
	if err != nil && errors.Is(err, exec.ErrNotFound) {
		t.Skip("no /usr/bin/python3 (python3-onnx)")
	}
	require.NoError(t, err, "%s", res)
}

// Models Convert does not take fail with ErrUnsupported, and nothing is
// half-converted: subgraphs, functions, garbage.
func TestConvertRefuses(t *testing.T) {
	_, err := onnxfp16.Convert([]byte("not a model"), onnxfp16.Options{})
	require.ErrorIs(t, err, onnxfp16.ErrUnsupported)
	// A graph whose If node carries a subgraph.
	ifNode := node([]string{"c"}, []string{"o"}, "If", attrGraph("then_branch"))
	_, err = onnxfp16.Convert(model(graph([][]byte{ifNode}, nil, nil, nil)), onnxfp16.Options{})
	require.ErrorIs(t, err, onnxfp16.ErrUnsupported)
	require.ErrorContains(t, err, "subgraphs")
	// A model-local function (ModelProto field 25).
	fn := protowire.AppendTag(model(graph(nil, nil, nil, nil)), 25, protowire.BytesType)
	fn = protowire.AppendBytes(fn, nil)
	_, err = onnxfp16.Convert(fn, onnxfp16.Options{})
	require.ErrorIs(t, err, onnxfp16.ErrUnsupported)
	// A half op fed by a tensor of unknown type (a custom op's output with
	// no value_info).
	g := graph([][]byte{node([]string{"x"}, []string{"u"}, "Custom", nil), node([]string{"u"}, []string{"y"}, "Sigmoid", nil)},
		nil, [][]byte{valueInfo("x", 1, 1)}, [][]byte{valueInfo("y", 1, 1)})
	_, err = onnxfp16.Convert(model(g), onnxfp16.Options{})
	require.ErrorIs(t, err, onnxfp16.ErrUnsupported)
	require.ErrorContains(t, err, "element type of u")
}

// --- a minimal ONNX writer for the tests (onnx.proto field numbers) ---

func str(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func msg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func vint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func node(in, out []string, op string, attrs []byte) []byte {
	var b []byte
	for _, x := range in {
		b = str(b, 1, x)
	}
	for _, x := range out {
		b = str(b, 2, x)
	}
	b = str(b, 3, op+"_"+out[0])
	b = str(b, 4, op)
	return append(b, attrs...)
}

func attrGraph(name string) []byte {
	a := str(nil, 1, name)
	a = msg(a, 6, str(nil, 2, "sub"))
	a = vint(a, 20, 5)
	return msg(nil, 5, a)
}

func attrInts(name string, v ...int64) []byte {
	a := str(nil, 1, name)
	for _, x := range v {
		a = vint(a, 8, uint64(x))
	}
	a = vint(a, 20, 7)
	return msg(nil, 5, a)
}

// valueInfo is a tensor ValueInfoProto of element type elem and shape
// dims.
func valueInfo(name string, elem int, dims ...int64) []byte {
	var shape []byte
	for _, d := range dims {
		shape = msg(shape, 1, vint(nil, 1, uint64(d)))
	}
	tt := vint(nil, 1, uint64(elem))
	tt = msg(tt, 2, shape)
	return msg(str(nil, 1, name), 2, msg(nil, 1, tt))
}

func floatTensor(name string, dims []int64, vals []float32) []byte {
	var b []byte
	for _, d := range dims {
		b = vint(b, 1, uint64(d))
	}
	b = vint(b, 2, 1)
	var f []byte
	for _, v := range vals {
		f = protowire.AppendFixed32(f, math.Float32bits(v))
	}
	b = msg(b, 4, f)
	return str(b, 8, name)
}

func int64Tensor(name string, vals []int64) []byte {
	b := vint(nil, 1, uint64(len(vals)))
	b = vint(b, 2, 7)
	var d []byte
	for _, v := range vals {
		d = protowire.AppendVarint(d, uint64(v))
	}
	b = msg(b, 7, d)
	return str(b, 8, name)
}

func graph(nodes, inits, inputs, outputs [][]byte) []byte {
	var b []byte
	for _, n := range nodes {
		b = msg(b, 1, n)
	}
	b = str(b, 2, "g")
	for _, x := range inits {
		b = msg(b, 5, x)
	}
	for _, x := range inputs {
		b = msg(b, 11, x)
	}
	for _, x := range outputs {
		b = msg(b, 12, x)
	}
	return b
}

func model(g []byte) []byte {
	b := vint(nil, 1, 7)                        // ir_version
	b = msg(b, 8, vint(str(nil, 1, ""), 2, 11)) // opset_import: "" v11
	return msg(b, 7, g)
}

func smallModel() []byte {
	w := make([]float32, 2*1*3*3)
	for i := range w {
		w[i] = float32(i) / 10
	}
	nodes := [][]byte{
		node([]string{"x", "w"}, []string{"c"}, "Conv", append(attrInts("kernel_shape", 3, 3), attrInts("pads", 1, 1, 1, 1)...)),
		node([]string{"c", "roi", "scales"}, []string{"r"}, "Resize", nil),
		node([]string{"r"}, []string{"y"}, "Sigmoid", nil),
		node([]string{"y", "k"}, []string{"v", "i"}, "TopK", nil),
	}
	inits := [][]byte{floatTensor("w", []int64{2, 1, 3, 3}, w), floatTensor("roi", []int64{0}, nil),
		floatTensor("scales", []int64{4}, []float32{1, 1, 2, 2}), int64Tensor("k", []int64{3})}
	return model(graph(nodes, inits, [][]byte{valueInfo("x", 1, 1, 1, 4, 4)},
		[][]byte{valueInfo("y", 1, 1, 2, 8, 8), valueInfo("v", 1, 1, 2, 8, 3), valueInfo("i", 7, 1, 2, 8, 3)}))
}
