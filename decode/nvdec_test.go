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

// Direct NVDEC without a driver: hwaccel auto decodes H.264 on the CPU and
// says why once (the driver missing, in the cuda package's words), even
// when the file loops; hwaccel cuda fails with that reason; a bad
// decode.nvdec is refused by New.
func TestNVDECDirectFallbackWithoutGPU(t *testing.T) {
	testenv.SkipIfGPU(t)
	clip := makeMedia(t, "clip.mp4", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-t", "1", "-c:v", "libx264", "-pix_fmt", "yuv420p")
	core, logs := observer.New(zap.InfoLevel)
	src, err := decode.New(decode.Options{URL: clip, HWAccel: decode.HWAuto, NVDEC: decode.NVDECDirect, Loop: true, Logger: zap.New(core)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err = src.Run(ctx, func(f *pipeline.Frame) {
		require.False(t, f.Image.(*decode.Picture).OnGPU())
		f.Image.Release()
		if n++; n == 60 { // past the first loop
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	fallbacks := logs.FilterMessage("NVDEC unavailable for this stream; decoding on the CPU").All()
	require.Len(t, fallbacks, 1)
	require.Contains(t, fallbacks[0].ContextMap()["error"], "cuda: no NVIDIA driver found")
	require.False(t, src.Info().NVDEC)
	require.False(t, src.Info().Direct)

	src, err = decode.New(decode.Options{URL: clip, HWAccel: decode.HWCUDA, NVDEC: decode.NVDECDirect})
	require.NoError(t, err)
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release() })
	require.ErrorContains(t, err, "decode.hwaccel cuda: cuda: no NVIDIA driver found")

	_, err = decode.New(decode.Options{URL: clip, NVDEC: "cuvid"})
	require.ErrorContains(t, err, `decode.nvdec "cuvid": want direct or ffmpeg`)
	for in, want := range map[string]decode.NVDECMode{"": decode.DefaultNVDEC, "Direct": decode.NVDECDirect, " ffmpeg ": decode.NVDECFFmpeg} {
		m, err := decode.ParseNVDECMode(in)
		require.NoError(t, err)
		require.Equal(t, want, m, "ParseNVDECMode(%q)", in)
	}
}
