package infer

import "math"

// Letterbox is the mapping between a source frame and a model input of
// InW×InH pixels: the frame is scaled by Scale = min(InW/SrcW, InH/SrcH),
// keeping its aspect ratio, to ContentW×ContentH = floor(Src·Scale) pixels
// and placed at the top-left corner; the rest is padding. This is YOLOX's
// preprocessing (yolox/data/data_augment.py, preproc) and, for a square
// input, MediaPipe's "pad to a square, then resize" with the padding at the
// right and bottom, so mapping back is a single division by Scale.
// NewStretch makes the other mapping, which fills the input.
type Letterbox struct {
	SrcW, SrcH         int
	InW, InH           int
	ContentW, ContentH int
	// Scale is the horizontal scale, ScaleY the vertical one: the same
	// for a letterbox, InW/SrcW and InH/SrcH for a stretch.
	Scale, ScaleY float64
}

// NewLetterbox computes the mapping for a srcW×srcH frame (pixels, > 0).
func NewLetterbox(srcW, srcH, inW, inH int) Letterbox {
	r := math.Min(float64(inW)/float64(srcW), float64(inH)/float64(srcH))
	// The 1e-9 keeps floor(768·416/768) at 416 despite rounding in r.
	cw := min(max(int(math.Floor(float64(srcW)*r+1e-9)), 1), inW)
	ch := min(max(int(math.Floor(float64(srcH)*r+1e-9)), 1), inH)
	return Letterbox{SrcW: srcW, SrcH: srcH, InW: inW, InH: inH, ContentW: cw, ContentH: ch, Scale: r, ScaleY: r}
}

// NewStretch is the mapping that resizes a srcW×srcH frame to the whole
// inW×inH input, aspect ratio lost (RT-DETR's and RF-DETR's
// preprocessing): no padding.
func NewStretch(srcW, srcH, inW, inH int) Letterbox {
	return Letterbox{SrcW: srcW, SrcH: srcH, InW: inW, InH: inH, ContentW: inW, ContentH: inH,
		Scale: float64(inW) / float64(srcW), ScaleY: float64(inH) / float64(srcH)}
}

// ToSource maps a point in model-input pixels to source-frame pixels.
func (l Letterbox) ToSource(x, y float64) (float64, float64) {
	return x / l.Scale, y / l.ScaleY
}

// clampBox maps a box from model-input pixels to source pixels, clamped to
// the frame.
func (l Letterbox) clampBox(x1, y1, x2, y2 float64) (float32, float32, float32, float32) {
	w, h := float64(l.SrcW), float64(l.SrcH)
	c := func(v, hi float64) float32 { return float32(math.Min(math.Max(v, 0), hi)) }
	return c(x1/l.Scale, w), c(y1/l.ScaleY, h), c(x2/l.Scale, w), c(y2/l.ScaleY, h)
}
