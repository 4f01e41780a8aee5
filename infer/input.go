package infer

import (
	"fmt"
	"math"
	"strings"

	"github.com/vigil-video/vigil/pipeline"
)

// inputDefaults are a format's preprocessing conventions, which the
// model block's input settings override.
type inputDefaults struct {
	layout, order string    // "nchw"/"nhwc" ("" from the shape), "rgb"/"bgr"
	lo, hi        float32   // 0..255 maps onto lo..hi
	mean, std     []float32 // R, G, B; nil: none
	resize        string    // "letterbox" or "stretch"
	pad           float32   // 8-bit level of letterbox padding
}

// imageInput is the model's image input as bound: where it is, its
// layout, size, batch and element type.
type imageInput struct {
	info  TensorInfo
	nchw  bool
	batch int
	w, h  int
	dtype string
}

// shape is the input's shape with its dynamic dimensions fixed.
func (im imageInput) shape() []int64 {
	if im.nchw {
		return []int64{int64(im.batch), 3, int64(im.h), int64(im.w)}
	}
	return []int64{int64(im.batch), int64(im.h), int64(im.w), 3}
}

// isImage reports whether t looks like an image input: rank 4 with 3
// channels in dimension 1 or 3.
func isImage(t TensorInfo) bool {
	return len(t.Shape) == 4 && (t.Shape[1] == 3 || t.Shape[3] == 3)
}

// splitInputs returns the model's one image input and its other inputs;
// it fails, listing them, when there is no image input or more than one.
func splitInputs(in []TensorInfo) (TensorInfo, []TensorInfo, error) {
	var imgs, others []TensorInfo
	for _, t := range in {
		if isImage(t) {
			imgs = append(imgs, t)
		} else {
			others = append(others, t)
		}
	}
	switch len(imgs) {
	case 1:
		return imgs[0], others, nil
	case 0:
		return TensorInfo{}, nil, fmt.Errorf("%w: no image input (rank 4 with 3 channels first or last) among inputs %v", ErrModelMismatch, in)
	}
	return TensorInfo{}, nil, fmt.Errorf("%w: %d image inputs %v; vigil feeds one image", ErrModelMismatch, len(imgs), imgs)
}

// bindImage resolves the image input's layout, size, batch and element
// type from its shape and the spec (the spec wins where the shape leaves
// a choice and must agree where it does not).
func bindImage(t TensorInfo, s InputSpec, d inputDefaults) (imageInput, error) {
	im := imageInput{info: t, dtype: t.dtype()}
	nchw, nhwc := t.Shape[1] == 3, t.Shape[3] == 3
	switch {
	case s.Layout == "nchw" && !nchw, s.Layout == "nhwc" && !nhwc:
		return im, fmt.Errorf("%w: input.layout %s does not fit input %v", ErrModelMismatch, s.Layout, t)
	case s.Layout != "":
		im.nchw = s.Layout == "nchw"
	case nchw && nhwc:
		im.nchw = d.layout != "nhwc"
	default:
		im.nchw = nchw
	}
	hd, wd := t.Shape[2], t.Shape[3]
	if !im.nchw {
		hd, wd = t.Shape[1], t.Shape[2]
	}
	var err error
	if im.w, err = sizeDim(wd, s.Width, "width", t); err != nil {
		return im, err
	}
	if im.h, err = sizeDim(hd, s.Height, "height", t); err != nil {
		return im, err
	}
	im.batch = 1
	if t.Shape[0] > 0 {
		im.batch = int(t.Shape[0])
	}
	if s.DType != "" && s.DType != im.dtype {
		return im, fmt.Errorf("%w: input.dtype %s, but input %v is %s", ErrModelMismatch, s.DType, t, im.dtype)
	}
	switch im.dtype {
	case "float32", "float16", "uint8":
	default:
		return im, fmt.Errorf("%w: input %v is %s; vigil feeds float32, float16 or uint8", ErrModelMismatch, t, im.dtype)
	}
	return im, nil
}

// sizeDim is the fixed size of dimension d, or the spec's size when d is
// dynamic; a spec size that contradicts a fixed one is an error.
func sizeDim(d int64, want int, what string, t TensorInfo) (int, error) {
	switch {
	case d > 0 && want != 0 && int64(want) != d:
		return 0, fmt.Errorf("%w: input.size %s %d, but input %v is fixed at %d", ErrModelMismatch, what, want, t, d)
	case d > 0:
		return int(d), nil
	case want > 0:
		return want, nil
	}
	return 0, fmt.Errorf("%w: input %v has a dynamic %s; set the model's input.size [width, height]", ErrModelMismatch, t, what)
}

// ChannelNorm is per-channel normalisation (mean/std): channel c of the
// tensor (in TensorFormat.Order) stores v*Scale[c] + Bias[c], and its
// padding Pad[c].
type ChannelNorm struct {
	Scale, Bias, Pad [3]float32
}

// tensorFormat works out how 8-bit pixels become tensor values.
func tensorFormat(im imageInput, s InputSpec, d inputDefaults) (TensorFormat, error) {
	f := TensorFormat{NCHW: im.nchw, Order: pipeline.RGB}
	order := s.Order
	if order == "" {
		order = d.order
	}
	if order == "bgr" {
		f.Order = pipeline.BGR
	}
	pad := d.pad
	if s.Pad != nil {
		pad = *s.Pad
	}
	if im.dtype == "uint8" {
		// Bytes as they are: the model normalises them itself.
		if s.Range != nil || s.Mean != nil {
			return f, fmt.Errorf("%w: input %v is uint8 (raw 8-bit levels); input.range, input.mean and input.std do not apply", ErrModelMismatch, im.info)
		}
		f.Scale, f.Pad = 1, float32(math.Round(float64(pad)))
		return f, nil
	}
	lo, hi, mean, std := d.lo, d.hi, d.mean, d.std
	if s.Mean != nil {
		mean, std, lo, hi = s.Mean, s.Std, 0, 1
	}
	if s.Range != nil {
		lo, hi = s.Range[0], s.Range[1]
	}
	f.Scale, f.Bias = float32((float64(hi)-float64(lo))/255), lo
	f.Pad = pad*f.Scale + f.Bias
	if mean == nil {
		return f, nil
	}
	n := &ChannelNorm{}
	for c := range 3 {
		rgb := c
		if f.Order == pipeline.BGR {
			rgb = 2 - c
		}
		n.Scale[c] = f.Scale / std[rgb]
		n.Bias[c] = (f.Bias - mean[rgb]) / std[rgb]
		n.Pad[c] = pad*n.Scale[c] + n.Bias[c]
	}
	f.Channels = n
	return f, nil
}

// describe is the format in words, for messages: "NCHW BGR 0..255".
func (f TensorFormat) describe() string {
	var b strings.Builder
	if f.NCHW {
		b.WriteString("NCHW ")
	} else {
		b.WriteString("NHWC ")
	}
	if f.Order == pipeline.BGR {
		b.WriteString("BGR")
	} else {
		b.WriteString("RGB")
	}
	if f.Channels != nil {
		fmt.Fprintf(&b, " mean/std %v·v+%v", f.Channels.Scale, f.Channels.Bias)
	} else {
		fmt.Fprintf(&b, " %g..%g", f.Bias, 255*f.Scale+f.Bias)
	}
	return b.String()
}

// filler writes 8-bit pixels into an item's float32 tensor slice through
// one lookup table per channel.
type filler struct {
	nchw bool
	lut  [3][256]float32
	pad  [3]float32
}

func newFiller(f TensorFormat) *filler {
	fl := &filler{nchw: f.NCHW}
	for c := range 3 {
		sc, bi, pd := f.Scale, f.Bias, f.Pad
		if f.Channels != nil {
			sc, bi, pd = f.Channels.Scale[c], f.Channels.Bias[c], f.Channels.Pad[c]
		}
		fl.pad[c] = pd
		for v := range 256 {
			fl.lut[c][v] = float32(v)*sc + bi
		}
	}
	return fl
}

// fill writes pix (ContentW×ContentH packed 3-channel pixels) into dst;
// the padding too when full.
func (fl *filler) fill(dst []float32, pix []byte, lb Letterbox, full bool) {
	plane := lb.InW * lb.InH
	if full {
		if fl.nchw {
			for c := range 3 {
				p := dst[c*plane : (c+1)*plane]
				for i := range p {
					p[i] = fl.pad[c]
				}
			}
		} else {
			for i := 0; i+2 < len(dst); i += 3 {
				dst[i], dst[i+1], dst[i+2] = fl.pad[0], fl.pad[1], fl.pad[2]
			}
		}
	}
	l0, l1, l2 := &fl.lut[0], &fl.lut[1], &fl.lut[2]
	for y := 0; y < lb.ContentH; y++ {
		src := pix[y*lb.ContentW*3 : (y+1)*lb.ContentW*3]
		if fl.nchw {
			o := y * lb.InW
			a, b, c := dst[o:o+lb.ContentW], dst[plane+o:plane+o+lb.ContentW], dst[2*plane+o:2*plane+o+lb.ContentW]
			for x := range a {
				a[x], b[x], c[x] = l0[src[3*x]], l1[src[3*x+1]], l2[src[3*x+2]]
			}
			continue
		}
		row := dst[y*lb.InW*3 : y*lb.InW*3+lb.ContentW*3]
		for x := 0; x < len(row); x += 3 {
			row[x], row[x+1], row[x+2] = l0[src[x]], l1[src[x+1]], l2[src[x+2]]
		}
	}
}

// FloatToHalf rounds v to the nearest IEEE 754 binary16 value (ties to
// even), as ONNX Runtime's float16 tensors hold it.
func FloatToHalf(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f: // overflow and Inf
		return sign | 0x7c00
	case exp <= 0: // subnormal or zero
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - exp)
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is right
	}
	return sign | uint16(h)
}
