//go:build gpu

package bench

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/cuda"
)

// h264Clip makes a 640×360 H.264 clip of FFmpeg's test pattern, 3 s at 30
// fps, that direct NVDEC decodes.
func h264Clip(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "h264.mp4")
	out, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30",
		"-frames:v", "90", "-c:v", "libx264", "-bf", "0", "-g", "30", "-pix_fmt", "yuv420p", p).CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", out)
	return p
}

// On a GPU, vigil's decode-only ceilings run direct NVDEC (every session
// direct, no note), both at once, and print both capacities to paste; the
// engine ceiling's frames are device-resident NVDEC frames. Checked for
// structure, not speed.
func TestVigilCeilingsGPU(t *testing.T) {
	if err := cuda.Init(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	clip := h264Clip(t)
	c := config.Default()
	var out bytes.Buffer
	var r StreamsResult
	o := StreamsOptions{Source: clip, CeilingFor: ceilingSettle + 2*time.Second}
	require.NoError(t, measureVigilCeilings(context.Background(), &c, o, []int{0}, &r, &out))
	t.Log(out.String())
	require.Len(t, r.Ceilings, 2)
	nv := r.Ceilings[0]
	require.Equal(t, KindNVDEC, nv.Kind)
	require.NoError(t, nv.Err)
	require.Equal(t, NVDECSessionsPerGPU, nv.Parallel)
	require.InDelta(t, 640*360, nv.PixelRate/nv.FPS, 1)
	require.NotContains(t, out.String(), "sessions through FFmpeg's hwaccel")
	require.NotContains(t, out.String(), "decoded on the CPU")
	require.Greater(t, r.Together, 0.0)
	require.Greater(t, r.NVDECPixelRate, 0.0)
	require.Greater(t, r.CPUPixelRate, 0.0)
	require.Contains(t, out.String(), "measured together")
	require.Regexp(t, `\n    nvdec_pixel_rate: [0-9]+   # one GPU's NVDEC, direct\n`, out.String())

	frames, resident, err := heldFrames(context.Background(), &c, clip, 0, true)
	require.NoError(t, err)
	require.True(t, resident, "NVDEC frames, in device memory")
	require.Len(t, frames, residentFrames)
	for _, f := range frames {
		require.Equal(t, 640, f.Width())
		f.Release()
	}
}
