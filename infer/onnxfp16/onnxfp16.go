// Package onnxfp16 makes a half-precision (fp16) copy of an ONNX model for
// vigil's GPU engine, in Go, with no Python at run time.
//
// Convert keeps the model's inputs and outputs in fp32 (a Cast at each
// boundary), so the engine feeds and reads it as it does the original. Every
// node whose operator is in an allow list of operators that behave in
// half precision (convolutions, activations, pooling, element-wise
// arithmetic, concatenation and layout ops, resize, matrix products) runs
// in fp16, its float initializers stored as fp16 (values beyond fp16's
// range clamped to ±65504). Inputs that must stay fp32 whatever the data
// type (Resize's roi and scales, Upsample's scales) stay fp32, as do integer
// tensors (shapes, indices, axes). Every other node runs in fp32 as before,
// with Casts inserted where an fp16 tensor meets it. The graph's value_info
// (type annotations) is dropped, since types changed; ONNX Runtime infers
// them again.
//
// The model is read and written with protowire at the field numbers of
// onnx.proto (ModelProto, GraphProto, NodeProto, TensorProto,
// ValueInfoProto, https://github.com/onnx/onnx/blob/main/onnx/onnx.proto),
// which ONNX keeps stable; fields Convert does not need are copied as they
// are.
package onnxfp16

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrUnsupported is wrapped by Convert's errors for models it does not
// convert: subgraphs (If, Loop, Scan), model-local functions, sparse or
// external float initializers, or a tensor whose type it cannot tell.
var ErrUnsupported = errors.New("onnxfp16: unsupported model")

// Options tune Convert.
type Options struct {
	// KeepFP32 are op types to keep in fp32 even if the allow list has
	// them (e.g. "Resize").
	KeepFP32 []string
}

// onnx.proto's TensorProto.DataType values used here.
const (
	dtFloat   = 1
	dtFloat16 = 10
)

// onnx.proto's AttributeProto.AttributeType values used here.
const (
	atInt    = 2
	atTensor = 4
	atGraph  = 5
	atGraphs = 10
)

// halfOps are the operators (default domain) that run in fp16. Every float
// input of theirs becomes fp16, except those in fp32Inputs.
var halfOps = map[string]bool{
	"Conv": true, "ConvTranspose": true, "Relu": true, "LeakyRelu": true, "PRelu": true, "Sigmoid": true,
	"HardSigmoid": true, "HardSwish": true, "Tanh": true, "Clip": true, "Mul": true, "Add": true, "Sub": true,
	"Div": true, "Neg": true, "Abs": true, "Max": true, "Min": true, "Sum": true, "MaxPool": true,
	"AveragePool": true, "GlobalAveragePool": true, "GlobalMaxPool": true, "Concat": true, "Resize": true,
	"Upsample": true, "Reshape": true, "Transpose": true, "Slice": true, "Split": true, "Squeeze": true,
	"Unsqueeze": true, "Flatten": true, "Identity": true, "BatchNormalization": true, "Pad": true,
	"MatMul": true, "Gemm": true, "Gather": true, "Expand": true, "Tile": true, "DepthToSpace": true,
	"SpaceToDepth": true,
}

// fp32Inputs are the inputs (by index) of half ops that are float32 in
// every opset whatever the data's type: Resize's roi and scales (opset 11+;
// roi is its own type parameter), Upsample's scales.
var fp32Inputs = map[string][]int{"Resize": {1, 2}, "Upsample": {1}}

// kind is what Convert knows of a tensor's element type.
type kind int

const (
	kUnknown kind = iota
	kOther        // not a float32/float16 tensor (int64 shapes, indices...)
	kF32
	kF16
)

type node struct {
	in, out       []string
	name, op, dom string
	rest          []byte // the other fields, as read
	castTo        int64  // for a Cast: its "to" (0: none)
	constType     int32  // for a Constant: its value's data type (0: none)
	hasSubgraphs  bool
}

type tensor struct {
	name     string
	dims     []int64
	dataType int32
	floats   []float32 // float_data
	raw      []byte    // raw_data
	external bool
	rest     []byte
}

type graph struct {
	nodes    []*node
	inits    []*tensor
	inputs   [][]byte // ValueInfoProto, as read
	outputs  [][]byte
	inElem   map[string]int32
	outElem  map[string]int32
	outNames []string
	viElem   map[string]int32
	rest     []byte
	sparse   bool
}

func fieldErr(what string) error { return fmt.Errorf("%w: malformed %s", ErrUnsupported, what) }

// each calls fn for each field of a message.
func each(b []byte, what string, fn func(num protowire.Number, typ protowire.Type, v []byte, raw []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fieldErr(what)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fieldErr(what)
		}
		raw := b[:n+m]
		val := b[n : n+m]
		if typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b[n:])
			if k < 0 {
				return fieldErr(what)
			}
			val = v
		}
		if err := fn(num, typ, val, raw); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}

func varint(v []byte) int64 {
	x, n := protowire.ConsumeVarint(v)
	if n < 0 {
		return 0
	}
	return int64(x)
}

func parseNode(b []byte) (*node, error) {
	n := &node{}
	err := each(b, "NodeProto", func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			n.in = append(n.in, string(v))
		case num == 2 && typ == protowire.BytesType:
			n.out = append(n.out, string(v))
		case num == 3 && typ == protowire.BytesType:
			n.name = string(v)
		case num == 4 && typ == protowire.BytesType:
			n.op = string(v)
		case num == 7 && typ == protowire.BytesType:
			n.dom = string(v)
		default:
			if num == 5 && typ == protowire.BytesType {
				if err := n.attr(v); err != nil {
					return err
				}
			}
			n.rest = append(n.rest, raw...)
		}
		return nil
	})
	return n, err
}

// attr notes what Convert needs of an attribute: subgraphs, a Cast's
// "to", a Constant's value type.
func (n *node) attr(b []byte) error {
	var name string
	var at, i int64
	var t []byte
	err := each(b, "AttributeProto", func(num protowire.Number, typ protowire.Type, v, _ []byte) error {
		switch num {
		case 1:
			name = string(v)
		case 20:
			at = varint(v)
		case 3:
			i = varint(v)
		case 5:
			t = v
		case 6, 11:
			n.hasSubgraphs = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	if at == atGraph || at == atGraphs {
		n.hasSubgraphs = true
	}
	if name == "to" {
		n.castTo = i
	}
	if name == "value" && t != nil {
		tt, err := parseTensor(t)
		if err != nil {
			return err
		}
		n.constType = tt.dataType
	}
	return nil
}

func parseTensor(b []byte) (*tensor, error) {
	t := &tensor{}
	err := each(b, "TensorProto", func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType: // packed dims
			for len(v) > 0 {
				x, k := protowire.ConsumeVarint(v)
				if k < 0 {
					return fieldErr("TensorProto.dims")
				}
				t.dims = append(t.dims, int64(x))
				v = v[k:]
			}
		case num == 1 && typ == protowire.VarintType:
			t.dims = append(t.dims, varint(v))
		case num == 2:
			t.dataType = int32(varint(v))
		case num == 8:
			t.name = string(v)
		case num == 4 && typ == protowire.BytesType: // packed float_data
			for len(v) >= 4 {
				x, k := protowire.ConsumeFixed32(v)
				if k < 0 {
					return fieldErr("TensorProto.float_data")
				}
				t.floats = append(t.floats, math.Float32frombits(x))
				v = v[k:]
			}
		case num == 4 && typ == protowire.Fixed32Type:
			x, _ := protowire.ConsumeFixed32(v)
			t.floats = append(t.floats, math.Float32frombits(x))
		case num == 9:
			t.raw = v
		case num == 13:
			t.external = true
			t.rest = append(t.rest, raw...)
		case num == 14:
			if varint(v) == 1 {
				t.external = true
			}
			t.rest = append(t.rest, raw...)
		default:
			t.rest = append(t.rest, raw...)
		}
		return nil
	})
	return t, err
}

// valueElem reads a ValueInfoProto's name and tensor element type (0 when
// it is not a tensor or has none).
func valueElem(b []byte) (string, int32, error) {
	var name string
	var elem int32
	err := each(b, "ValueInfoProto", func(num protowire.Number, _ protowire.Type, v, _ []byte) error {
		switch num {
		case 1:
			name = string(v)
		case 2: // TypeProto
			return each(v, "TypeProto", func(num protowire.Number, _ protowire.Type, v, _ []byte) error {
				if num == 1 { // tensor_type
					return each(v, "TypeProto.Tensor", func(num protowire.Number, _ protowire.Type, v, _ []byte) error {
						if num == 1 {
							elem = int32(varint(v))
						}
						return nil
					})
				}
				return nil
			})
		}
		return nil
	})
	return name, elem, err
}

func parseGraph(b []byte) (*graph, error) {
	g := &graph{inElem: map[string]int32{}, outElem: map[string]int32{}, viElem: map[string]int32{}}
	err := each(b, "GraphProto", func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
		switch num {
		case 1:
			n, err := parseNode(v)
			if err != nil {
				return err
			}
			g.nodes = append(g.nodes, n)
		case 5:
			t, err := parseTensor(v)
			if err != nil {
				return err
			}
			g.inits = append(g.inits, t)
		case 11, 12, 13:
			name, elem, err := valueElem(v)
			if err != nil {
				return err
			}
			switch num {
			case 11:
				g.inputs = append(g.inputs, append([]byte(nil), v...))
				g.inElem[name] = elem
			case 12:
				g.outputs = append(g.outputs, append([]byte(nil), v...))
				g.outElem[name] = elem
				g.outNames = append(g.outNames, name)
			case 13:
				g.viElem[name] = elem // dropped from the output
			}
		case 15:
			g.sparse = true
		default:
			g.rest = append(g.rest, raw...)
		}
		return nil
	})
	return g, err
}

// Convert returns the fp16 copy of model (a serialised ModelProto; see the
// package comment). Errors wrap ErrUnsupported for models it cannot
// convert safely.
func Convert(model []byte, o Options) ([]byte, error) {
	var out []byte
	graphs := 0
	err := each(model, "ModelProto", func(num protowire.Number, typ protowire.Type, v, raw []byte) error {
		switch num {
		case 7:
			graphs++
			g, err := parseGraph(v)
			if err != nil {
				return err
			}
			gb, err := convertGraph(g, o)
			if err != nil {
				return err
			}
			out = protowire.AppendTag(out, 7, protowire.BytesType)
			out = protowire.AppendBytes(out, gb)
		case 25:
			return fmt.Errorf("%w: model-local functions", ErrUnsupported)
		default:
			out = append(out, raw...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if graphs != 1 {
		return nil, fmt.Errorf("%w: not an ONNX model (%d graphs)", ErrUnsupported, graphs)
	}
	return out, nil
}

// converter holds one graph's conversion state.
type converter struct {
	g      *graph
	keep   map[string]bool
	kinds  map[string]kind
	inits  map[string]*tensor
	used   map[string]bool // every tensor name, for fresh names
	cast16 map[string]string
	cast32 map[string]string
	copy16 map[string]string // fp32 initializer -> its fp16 copy
	out    []*node
	extra  []*tensor
}

func convertGraph(g *graph, o Options) ([]byte, error) {
	if g.sparse {
		return nil, fmt.Errorf("%w: sparse initializers", ErrUnsupported)
	}
	c := &converter{g: g, keep: map[string]bool{}, kinds: map[string]kind{}, inits: map[string]*tensor{},
		used: map[string]bool{}, cast16: map[string]string{}, cast32: map[string]string{}, copy16: map[string]string{}}
	for _, k := range o.KeepFP32 {
		c.keep[k] = true
	}
	for name, e := range g.inElem {
		c.used[name] = true
		c.kinds[name] = elemKind(e)
	}
	for _, t := range g.inits {
		c.used[t.name] = true
		c.inits[t.name] = t
		c.kinds[t.name] = elemKind(t.dataType)
		if t.dataType == dtFloat && t.external {
			return nil, fmt.Errorf("%w: initializer %s has external data", ErrUnsupported, t.name)
		}
	}
	for _, n := range g.nodes {
		if n.hasSubgraphs {
			return nil, fmt.Errorf("%w: node %s (%s) has subgraphs", ErrUnsupported, n.name, n.op)
		}
		for _, x := range append(n.in, n.out...) {
			c.used[x] = true
		}
	}
	// A float initializer that some node reads in fp32 (or that is also a
	// graph input, which a caller could override) keeps its fp32 self and
	// gets an fp16 copy where fp16 is read; otherwise it becomes fp16.
	fp32Use := map[string]bool{}
	for _, n := range g.nodes {
		for i, x := range n.in {
			if !c.half(n) || c.fp32Input(n, i) {
				fp32Use[x] = true
			}
		}
	}
	for _, t := range g.inits {
		if _, isInput := g.inElem[t.name]; t.dataType == dtFloat && !fp32Use[t.name] && !isInput {
			t.toHalf()
			c.kinds[t.name] = kF16
		}
	}
	for _, n := range g.nodes {
		if err := c.node(n); err != nil {
			return nil, err
		}
	}
	// Graph outputs left in fp16: their producer writes a new name, and a
	// Cast back to fp32 gives the output its name.
	for _, name := range g.outNames {
		if c.kinds[name] != kF16 {
			continue
		}
		h := c.fresh(name + "_fp16")
		for _, n := range c.out {
			for i := range n.in {
				if n.in[i] == name {
					n.in[i] = h
				}
			}
			for i := range n.out {
				if n.out[i] == name {
					n.out[i] = h
				}
			}
		}
		c.out = append(c.out, castNode(h, name, dtFloat))
	}
	return c.encode(), nil
}

func elemKind(e int32) kind {
	switch e {
	case dtFloat:
		return kF32
	case dtFloat16:
		return kF16
	case 0:
		return kUnknown
	}
	return kOther
}

// half reports whether n runs in fp16.
func (c *converter) half(n *node) bool {
	return (n.dom == "" || n.dom == "ai.onnx") && halfOps[n.op] && !c.keep[n.op]
}

func (c *converter) fp32Input(n *node, i int) bool {
	for _, j := range fp32Inputs[n.op] {
		if i == j {
			return true
		}
	}
	return false
}

func (c *converter) fresh(base string) string {
	name := base
	for k := 1; c.used[name]; k++ {
		name = base + "_" + strconv.Itoa(k)
	}
	c.used[name] = true
	return name
}

func castNode(from, to string, dt int64) *node {
	return &node{in: []string{from}, out: []string{to}, name: to, op: "Cast", castTo: dt}
}

// as16 returns the name of an fp16 version of x for a half node, adding a
// Cast or an fp16 copy of an initializer as needed.
func (c *converter) as16(x string) (string, error) {
	switch c.kinds[x] {
	case kF16, kOther:
		return x, nil
	case kUnknown:
		return "", fmt.Errorf("%w: cannot tell the element type of %s (no value_info for it)", ErrUnsupported, x)
	}
	if t, ok := c.inits[x]; ok {
		if h, ok := c.copy16[x]; ok {
			return h, nil
		}
		h := c.fresh(x + "_fp16")
		cp := *t
		cp.name = h
		cp.toHalf()
		c.extra = append(c.extra, &cp)
		c.copy16[x], c.kinds[h] = h, kF16
		return h, nil
	}
	if h, ok := c.cast16[x]; ok {
		return h, nil
	}
	h := c.fresh(x + "_fp16")
	c.out = append(c.out, castNode(x, h, dtFloat16))
	c.cast16[x], c.kinds[h] = h, kF16
	return h, nil
}

// as32 returns the name of an fp32 version of x for a node that reads it
// in fp32.
func (c *converter) as32(x string) string {
	if c.kinds[x] != kF16 {
		return x
	}
	if h, ok := c.cast32[x]; ok {
		return h
	}
	h := c.fresh(x + "_fp32")
	c.out = append(c.out, castNode(x, h, dtFloat))
	c.cast32[x], c.kinds[h] = h, kF32
	return h
}

func (c *converter) node(n *node) error {
	if !c.half(n) {
		for i, x := range n.in {
			if x != "" {
				n.in[i] = c.as32(x)
			}
		}
		for i, x := range n.out {
			c.kinds[x] = c.outKind(n, i)
		}
		c.out = append(c.out, n)
		return nil
	}
	first := kOther
	if len(n.in) > 0 && n.in[0] != "" {
		first = c.kinds[n.in[0]]
	}
	for i, x := range n.in {
		if x == "" {
			continue
		}
		if c.fp32Input(n, i) {
			n.in[i] = c.as32(x)
			continue
		}
		h, err := c.as16(x)
		if err != nil {
			return fmt.Errorf("node %s (%s): %w", n.name, n.op, err)
		}
		n.in[i] = h
	}
	for i, x := range n.out {
		switch {
		case n.op == "MaxPool" && i > 0: // Indices
			c.kinds[x] = kOther
		case first == kF32 || first == kF16:
			c.kinds[x] = kF16
		default:
			c.kinds[x] = first
		}
	}
	c.out = append(c.out, n)
	return nil
}

// outKind is the element kind of output i of a node left in fp32.
func (c *converter) outKind(n *node, i int) kind {
	if e, ok := c.g.viElem[n.out[i]]; ok && e != 0 {
		return elemKind(e)
	}
	if e, ok := c.g.outElem[n.out[i]]; ok && e != 0 {
		return elemKind(e)
	}
	switch {
	case n.op == "Cast":
		return elemKind(int32(n.castTo))
	case n.op == "Constant" && n.constType != 0:
		return elemKind(n.constType)
	case n.op == "Shape" || n.op == "Size" || n.op == "NonZero" || n.op == "NonMaxSuppression",
		(n.op == "TopK" || n.op == "ArgMax" || n.op == "ArgMin") && i > 0:
		return kOther
	}
	return kUnknown
}

// toHalf converts a float32 tensor to float16 in raw_data.
func (t *tensor) toHalf() {
	vals := t.floats
	if t.raw != nil {
		vals = make([]float32, len(t.raw)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(uint32(t.raw[4*i]) | uint32(t.raw[4*i+1])<<8 | uint32(t.raw[4*i+2])<<16 | uint32(t.raw[4*i+3])<<24)
		}
	}
	raw := make([]byte, 2*len(vals))
	for i, v := range vals {
		h := FloatToHalf(v)
		raw[2*i], raw[2*i+1] = byte(h), byte(h>>8)
	}
	t.dataType, t.floats, t.raw = dtFloat16, nil, raw
}

// FloatToHalf rounds f to the nearest IEEE 754 binary16 value (ties to
// even), clamping finite values beyond the largest half, 65504, to it;
// infinities and NaN stay so.
func FloatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf, NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case f > 65504 || f < -65504:
		return sign | 0x7bff
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7bff
	}
	if e <= 0 { // subnormal half, or zero
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is right
	}
	if h >= 0x7c00 {
		return sign | 0x7bff
	}
	return sign | uint16(h)
}

func (c *converter) encode() []byte {
	var b []byte
	for _, n := range c.out {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, n.encode())
	}
	for _, t := range append(c.g.inits, c.extra...) {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, t.encode())
	}
	for _, v := range c.g.inputs {
		b = protowire.AppendTag(b, 11, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	for _, v := range c.g.outputs {
		b = protowire.AppendTag(b, 12, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	return append(b, c.g.rest...)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func (n *node) encode() []byte {
	var b []byte
	for _, x := range n.in {
		b = appendString(b, 1, x)
	}
	for _, x := range n.out {
		b = appendString(b, 2, x)
	}
	if n.name != "" {
		b = appendString(b, 3, n.name)
	}
	b = appendString(b, 4, n.op)
	if n.dom != "" {
		b = appendString(b, 7, n.dom)
	}
	if n.rest == nil && n.op == "Cast" { // a Cast Convert made: its "to"
		var a []byte
		a = appendString(a, 1, "to")
		a = protowire.AppendTag(a, 3, protowire.VarintType)
		a = protowire.AppendVarint(a, uint64(n.castTo))
		a = protowire.AppendTag(a, 20, protowire.VarintType)
		a = protowire.AppendVarint(a, atInt)
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, a)
	}
	return append(b, n.rest...)
}

func (t *tensor) encode() []byte {
	var b []byte
	if len(t.dims) > 0 {
		var d []byte
		for _, x := range t.dims {
			d = protowire.AppendVarint(d, uint64(x))
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.dataType))
	if len(t.floats) > 0 {
		var f []byte
		for _, x := range t.floats {
			f = protowire.AppendFixed32(f, math.Float32bits(x))
		}
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, f)
	}
	if t.name != "" {
		b = appendString(b, 8, t.name)
	}
	if t.raw != nil {
		b = protowire.AppendTag(b, 9, protowire.BytesType)
		b = protowire.AppendBytes(b, t.raw)
	}
	return append(b, t.rest...)
}
