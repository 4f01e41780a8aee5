package decode_test

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// Without an NVIDIA driver, hwaccel auto decodes on the CPU and says why
// once per stream, even when the file loops; hwaccel cuda fails.
func TestNVDECFallbackWithoutGPU(t *testing.T) {
	testenv.SkipIfGPU(t)
	core, logs := observer.New(zap.InfoLevel)
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), HWAccel: decode.HWAuto, Logger: zap.New(core)})
	require.NoError(t, err)
	n := 0
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		require.False(t, f.Image.(*decode.Picture).OnGPU())
		f.Image.Release()
		n++
	})
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 270, n)
	require.Equal(t, 1, logs.FilterMessage("NVDEC unavailable for this stream; decoding on the CPU").Len())
	require.False(t, src.Info().NVDEC)

	src, err = decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), HWAccel: decode.HWCUDA})
	require.NoError(t, err)
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release() })
	require.ErrorContains(t, err, "decode.hwaccel cuda: ")

	_, err = decode.New(decode.Options{URL: "x.mp4", HWAccel: "vaapi"})
	require.ErrorContains(t, err, `decode.hwaccel "vaapi": want auto, cuda or none`)
}
