//go:build gpu

package decode_test

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/pipeline"
)

// h264Clip is an H.264 file for the NVDEC tests (VIGIL_H264), e.g. a
// 1080p30 clip made with `ffmpeg -i vtest.avi -vf scale=1920:1080,fps=30
// -c:v libx264 -b:v 6M clip.mp4`.
func h264Clip(t *testing.T) string {
	p := os.Getenv("VIGIL_H264")
	if p == "" {
		t.Skip("set VIGIL_H264 to an H.264 file")
	}
	return p
}

// NVDEC decodes the same frames as FFmpeg's software decoder, into NV12
// surfaces in GPU memory, and the Scaler reads them back to the same
// pixels (H.264 decoding is bit-exact).
func TestNVDECMatchesSoftware(t *testing.T) {
	clip := h264Clip(t)
	decodeAll := func(hw decode.HWAccel) ([][]byte, *decode.Info) {
		src, err := decode.New(decode.Options{URL: clip, HWAccel: hw})
		require.NoError(t, err)
		sc := decode.NewScaler()
		defer sc.Close()
		var out [][]byte
		err = src.Run(context.Background(), func(f *pipeline.Frame) {
			defer f.Image.Release()
			p := f.Image.(*decode.Picture)
			require.Equal(t, hw == decode.HWCUDA, p.OnGPU())
			if hw == decode.HWCUDA {
				c, ok := p.CUDA()
				require.True(t, ok)
				require.NotZero(t, c.Y)
				require.GreaterOrEqual(t, c.YStride, c.Width)
			}
			if f.Seq%25 == 0 {
				rgb := make([]byte, 320*180*3)
				require.NoError(t, sc.Resize(p, 320, 180, pipeline.RGB, rgb))
				out = append(out, rgb)
			}
		})
		require.ErrorIs(t, err, io.EOF)
		return out, src.Info()
	}
	sw, swInfo := decodeAll(decode.HWNone)
	hw, hwInfo := decodeAll(decode.HWCUDA)
	require.False(t, swInfo.NVDEC)
	require.True(t, hwInfo.NVDEC)
	require.Equal(t, len(sw), len(hw))
	for i := range sw {
		diff := 0
		for k := range sw[i] {
			d := int(sw[i][k]) - int(hw[i][k])
			if d < -1 || d > 1 {
				diff++
			}
		}
		require.Zero(t, diff, "frame %d: pixels more than one level apart", i*25)
	}
}
