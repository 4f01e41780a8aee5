package infer

import (
	"encoding/binary"
	"fmt"
	"math"

	ort "github.com/yalue/onnxruntime_go"
)

// allocateInput makes the image input tensor of the binding's shape and
// element type, and e.in, the float32 values Fill writes: the tensor's own
// data for float32, else a buffer that toInput converts before each run.
func (e *Engine) allocateInput() error {
	shape := ort.NewShape(e.bind.InShape...)
	switch e.bind.InType {
	case "float32":
		t, err := ort.NewEmptyTensor[float32](shape)
		if err != nil {
			return fmt.Errorf("input tensor: %w", err)
		}
		e.input, e.in = t, t.GetData()
	case "uint8":
		t, err := ort.NewEmptyTensor[uint8](shape)
		if err != nil {
			return fmt.Errorf("input tensor: %w", err)
		}
		e.input, e.in = t, make([]float32, shape.FlattenedSize())
		dst := t.GetData()
		e.toInput = func() {
			for i, v := range e.in {
				dst[i] = uint8(min(max(v, 0), 255))
			}
		}
	case "float16":
		raw := make([]byte, 2*shape.FlattenedSize())
		t, err := ort.NewCustomDataTensor(shape, raw, ort.TensorElementDataTypeFloat16)
		if err != nil {
			return fmt.Errorf("input tensor: %w", err)
		}
		e.input, e.in = t, make([]float32, shape.FlattenedSize())
		e.toInput = func() {
			for i, v := range e.in {
				binary.LittleEndian.PutUint16(raw[2*i:], FloatToHalf(v))
			}
		}
	default:
		return fmt.Errorf("input tensor: element type %s", e.bind.InType)
	}
	return nil
}

// ConstTensor makes the ONNX Runtime tensor of a constant input (int64,
// int32 or float32 elements, of c.Shape). Errors: an element type it does
// not know, or ONNX Runtime's.
func ConstTensor(c ConstInput) (ort.Value, error) {
	shape := ort.NewShape(c.Shape...)
	switch c.Type {
	case "int64":
		return ort.NewTensor(shape, append([]int64(nil), c.Values...))
	case "int32":
		v := make([]int32, len(c.Values))
		for i, x := range c.Values {
			v[i] = int32(x)
		}
		return ort.NewTensor(shape, v)
	case "float32":
		v := make([]float32, len(c.Values))
		for i, x := range c.Values {
			v[i] = float32(x)
		}
		return ort.NewTensor(shape, v)
	}
	return nil, fmt.Errorf("element type %s", c.Type)
}

// outputTensor makes an output tensor of element type typ and returns its
// values as float32: the tensor's data for float32, else a buffer that
// conv fills after each run.
func outputTensor(s []int64, typ string) (ort.Value, []float32, func(), error) {
	shape := ort.NewShape(s...)
	switch typ {
	case "float32":
		t, err := ort.NewEmptyTensor[float32](shape)
		if err != nil {
			return nil, nil, nil, err
		}
		return t, t.GetData(), nil, nil
	case "int64":
		return intOutput[int64](shape)
	case "int32":
		return intOutput[int32](shape)
	case "float16":
		raw := make([]byte, 2*shape.FlattenedSize())
		t, err := ort.NewCustomDataTensor(shape, raw, ort.TensorElementDataTypeFloat16)
		if err != nil {
			return nil, nil, nil, err
		}
		out := make([]float32, shape.FlattenedSize())
		return t, out, func() {
			for i := range out {
				out[i] = halfToFloat(binary.LittleEndian.Uint16(raw[2*i:]))
			}
		}, nil
	}
	return nil, nil, nil, fmt.Errorf("element type %s; vigil reads float32, float16, int64 and int32 outputs", typ)
}

// intOutput is outputTensor for an integer element type: the tensor, a
// float32 buffer, and the conversion into it.
func intOutput[T int32 | int64](shape ort.Shape) (ort.Value, []float32, func(), error) {
	t, err := ort.NewEmptyTensor[T](shape)
	if err != nil {
		return nil, nil, nil, err
	}
	out, src := make([]float32, shape.FlattenedSize()), t.GetData()
	return t, out, func() {
		for i, v := range src {
			out[i] = float32(v)
		}
	}, nil
}

// run converts the input if needed, runs the session and converts the
// outputs that are not float32.
func (e *Engine) run() error {
	if e.toInput != nil {
		e.toInput()
	}
	if err := e.session.Run(); err != nil {
		return err
	}
	for _, f := range e.fromOut {
		f()
	}
	return nil
}

// halfToFloat widens an IEEE 754 binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// outputTypeOK reports whether an engine can read outputs of type t.
func outputTypeOK(t string) bool {
	switch t {
	case "float32", "float16", "int64", "int32":
		return true
	}
	return false
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
