package live

import (
	"bytes"
	"image"
	"image/jpeg"

	"github.com/vigil-video/vigil/pipeline"
)

// Limited ("MPEG") range to full ("JPEG") range, ITU-R BT.601 §2.5.3 /
// BT.709 §4.6: luma 16..235 and chroma 16..240 (128 ± 112) stretched to
// 0..255, as JPEG (JFIF 1.02) stores samples.
var lumaLUT, chromaLUT = func() (l, c [256]uint8) {
	for i := range 256 {
		l[i] = clamp8((float64(i) - 16) * 255 / 219)
		c[i] = clamp8((float64(i)-128)*255/224 + 128)
	}
	return
}()

func clamp8(v float64) uint8 {
	switch {
	case v <= 0:
		return 0
	case v >= 255:
		return 255
	}
	return uint8(v + 0.5)
}

// fullRange makes p's samples full range in place (p is the caller's
// copy), so that a JPEG decoder shows the colours the video has. The
// matrix is left as it is: JPEG decoders assume BT.601, so an HD stream's
// BT.709 colours are shown slightly off (hues shift by a few degrees),
// which an overview picture can live with.
func fullRange(p *pipeline.Picture) {
	if p.FullRange {
		return
	}
	img := p.Image
	for i, v := range img.Y {
		img.Y[i] = lumaLUT[v]
	}
	for i, v := range img.Cb {
		img.Cb[i] = chromaLUT[v]
	}
	for i, v := range img.Cr {
		img.Cr[i] = chromaLUT[v]
	}
	p.FullRange = true
}

// encode writes img as a baseline JPEG of the given quality (1-100).
// image/jpeg takes 4:2:0 *image.YCbCr as it is, without converting to RGB.
func encode(img *image.YCbCr, quality int) []byte {
	var b bytes.Buffer
	b.Grow(img.Rect.Dx() * img.Rect.Dy() / 8)
	_ = jpeg.Encode(&b, img, &jpeg.Options{Quality: quality}) // a bytes.Buffer does not fail
	return b.Bytes()
}

// cloneYCbCr copies img, for drawing on without touching the original.
func cloneYCbCr(img *image.YCbCr) *image.YCbCr {
	c := *img
	c.Y = bytes.Clone(img.Y)
	c.Cb = bytes.Clone(img.Cb)
	c.Cr = bytes.Clone(img.Cr)
	return &c
}

// copyPicture copies src's samples into dst, of the same size.
func copyPicture(dst, src *pipeline.Picture) {
	copy(dst.Image.Y, src.Image.Y)
	copy(dst.Image.Cb, src.Image.Cb)
	copy(dst.Image.Cr, src.Image.Cr)
	dst.FullRange = src.FullRange
}
