package gpu_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/internal/testenv"
)

// On machines without an NVIDIA driver (CI) Open must fail at once with
// an error that says so, for callers to fall back to the CPU engine.
func TestOpenWithoutDriver(t *testing.T) {
	testenv.SkipIfGPU(t)
	_, err := gpu.Open(gpu.Options{Path: "model.onnx"})
	require.Error(t, err)
	require.True(t, errors.Is(err, cuda.ErrNoDriver), "%v", err)
	require.Contains(t, err.Error(), "libcuda.so.1")
}

// The conversion constants take the reference colours where they belong:
// limited-range white (Y 235, C 128) and full-range white (255) to 255,
// BT.601 red (Y 81, Cb 90, Cr 240) to about (255, 0, 0), BT.709 red
// (Y 63, Cb 102, Cr 240) likewise.
func TestCoefficients(t *testing.T) {
	rgb := func(m decode.Matrix, full bool, y, cb, cr float64) (float64, float64, float64) {
		ky, yoff, krv, kgu, kgv, kbu := gpu.Coefficients(m, full)
		yy, u, v := float64(ky)*(y-float64(yoff)), cb-128, cr-128
		return yy + float64(krv)*v, yy - float64(kgu)*u - float64(kgv)*v, yy + float64(kbu)*u
	}
	r, g, b := rgb(decode.BT601, false, 235, 128, 128)
	require.InDelta(t, 255, r, 0.01)
	require.InDelta(t, 255, g, 0.01)
	require.InDelta(t, 255, b, 0.01)
	r, _, _ = rgb(decode.BT709, true, 255, 128, 128)
	require.InDelta(t, 255, r, 0.01)
	r, g, b = rgb(decode.BT601, false, 81, 90, 240)
	require.InDelta(t, 255, r, 2)
	require.InDelta(t, 0, g, 2)
	require.InDelta(t, 0, b, 2)
	r, g, b = rgb(decode.BT709, false, 63, 102, 240)
	require.InDelta(t, 255, r, 2)
	require.InDelta(t, 0, g, 2)
	require.InDelta(t, 0, b, 2)
}

func TestHalfToFloat(t *testing.T) {
	for bits, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x5720: 114, 0x0001: 5.960464477539063e-08, 0x7bff: 65504, 0x0000: 0} {
		require.Equal(t, want, gpu.HalfToFloat(bits), "%#04x", bits)
	}
	require.True(t, math.IsInf(float64(gpu.HalfToFloat(0x7c00)), 1))
}
