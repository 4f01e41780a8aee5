package decode

import (
	"image"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSemiPlanarPicture: the copy out of NV12, and out of P010/P016
// (16-bit little-endian samples, the value in the high bits), of a 3×3
// picture (odd sizes: ⌈3/2⌉ = 2 chroma samples a row and 2 rows) whose
// rows are padded, as device pitches and FFmpeg's line sizes pad them. Each
// sample is distinct, so a wrong stride, a swapped Cb/Cr or a low byte
// taken instead of the high one shows as a wrong value. Expected values are
// written out by hand from the layouts (NVIDIA Video Codec SDK's NV12 and
// P016 surfaces; FFmpeg's AV_PIX_FMT_P010LE).
func TestSemiPlanarPicture(t *testing.T) {
	wantY := []byte{11, 12, 13, 21, 22, 23, 31, 32, 33}
	wantCb := []byte{101, 103, 111, 113}
	wantCr := []byte{102, 104, 112, 114}
	check := func(t *testing.T, y, uv []byte, yStride, uvStride, bps int) {
		pic := semiPlanarPicture(y, uv, yStride, uvStride, 3, 3, bps)
		img := pic.Image
		require.Equal(t, image.Rect(0, 0, 3, 3), img.Rect)
		var gotY, gotCb, gotCr []byte
		for r := range 3 {
			gotY = append(gotY, img.Y[r*img.YStride:r*img.YStride+3]...)
		}
		for r := range 2 {
			gotCb = append(gotCb, img.Cb[r*img.CStride:r*img.CStride+2]...)
			gotCr = append(gotCr, img.Cr[r*img.CStride:r*img.CStride+2]...)
		}
		require.Equal(t, wantY, gotY, "luma")
		require.Equal(t, wantCb, gotCb, "Cb")
		require.Equal(t, wantCr, gotCr, "Cr")
	}
	t.Run("NV12", func(t *testing.T) {
		const pad = 0xEE // padding bytes, never copied
		y := []byte{
			11, 12, 13, pad, pad,
			21, 22, 23, pad, pad,
			31, 32, 33, pad, pad,
		}
		uv := []byte{
			101, 102, 103, 104, pad,
			111, 112, 113, 114, pad,
		}
		check(t, y, uv, 5, 5, 1)
	})
	t.Run("P010", func(t *testing.T) {
		// Each 8-bit value v as a 16-bit sample v<<8 | 0x40 (the low byte
		// holds the 10-bit value's two low bits, shifted up 6): little
		// endian, so the low byte 0x40 comes first.
		s := func(vs ...byte) []byte {
			var out []byte
			for _, v := range vs {
				out = append(out, 0x40, v)
			}
			return out
		}
		pad := []byte{0xEE, 0xEE}
		y := append(append(append(append(append(s(11, 12, 13), pad...), s(21, 22, 23)...), pad...), s(31, 32, 33)...), pad...)
		uv := append(append(append(s(101, 102, 103, 104), pad...), s(111, 112, 113, 114)...), pad...)
		check(t, y, uv, 8, 10, 2)
	})
}
