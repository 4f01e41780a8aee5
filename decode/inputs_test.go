package decode_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/pipeline"
)

// makeMedia runs the ffmpeg CLI to make a test input in a temp dir.
func makeMedia(t *testing.T, name string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("ffmpeg", append(append([]string{"-nostdin", "-hide_banner", "-loglevel", "error", "-y"}, args...), out)...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", b)
	return out
}

// Mid-stream resolution change: two H.264 segments, 640×360 then
// 1280×720, concatenated into one MPEG-TS. Frames of both sizes come out
// of one open (no restart), and the scaler follows the change.
func TestResolutionChangeMidStream(t *testing.T) {
	a := makeMedia(t, "a.ts", "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25", "-t", "1", "-c:v", "libx264", "-bf", "0", "-pix_fmt", "yuv420p")
	b := makeMedia(t, "b.ts", "-f", "lavfi", "-i", "testsrc=size=1280x720:rate=25", "-t", "1", "-c:v", "libx264", "-bf", "0", "-pix_fmt", "yuv420p")
	both := filepath.Join(t.TempDir(), "both.ts")
	da, err := os.ReadFile(a)
	require.NoError(t, err)
	db, err := os.ReadFile(b)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(both, append(da, db...), 0o644))

	src, err := decode.New(decode.Options{URL: both})
	require.NoError(t, err)
	sc := decode.NewScaler()
	defer sc.Close()
	sizes := map[[2]int]int{}
	var order [][2]int
	buf := make([]byte, 128*128*3)
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		defer f.Image.Release()
		sz := [2]int{f.Image.Width(), f.Image.Height()}
		if sizes[sz] == 0 {
			order = append(order, sz)
		}
		sizes[sz]++
		require.NoError(t, sc.Resize(f.Image, 128, 72, pipeline.RGB, buf))
	})
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, [][2]int{{640, 360}, {1280, 720}}, order)
	require.Equal(t, 25, sizes[[2]int{640, 360}])
	require.Equal(t, 25, sizes[[2]int{1280, 720}])
}

// An audio-only input is a clear error; an input whose first stream is
// audio decodes its video stream.
func TestAudioStreams(t *testing.T) {
	audio := makeMedia(t, "tone.mka", "-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-c:a", "pcm_s16le")
	src, err := decode.New(decode.Options{URL: audio})
	require.NoError(t, err)
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release() })
	require.ErrorIs(t, err, decode.ErrNoVideo)
	require.Contains(t, err.Error(), "tone.mka")

	mixed := makeMedia(t, "audio-first.mkv", "-f", "lavfi", "-i", "sine=frequency=440:duration=1",
		"-f", "lavfi", "-i", "testsrc=size=320x240:rate=10:duration=1", "-map", "0:a", "-map", "1:v", "-c:a", "pcm_s16le", "-c:v", "mpeg4")
	src, err = decode.New(decode.Options{URL: mixed})
	require.NoError(t, err)
	n := 0
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release(); n++ })
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 10, n)
}

// A file that is not video at all fails with a clear error naming it.
func TestNotAVideo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(p, []byte("this is not a video\n"), 0o644))
	src, err := decode.New(decode.Options{URL: p})
	require.NoError(t, err)
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release() })
	require.Error(t, err)
	require.Contains(t, err.Error(), "notes.txt")
}

// Looping keeps every frame and a PTS step of one frame across pass
// boundaries, whatever the container: MPEG-TS with B-frames (it seeks by
// DTS, so rewinding to the first PTS would land past the keyframe), MP4
// with B-frames, and a raw H.264 stream without timestamps (it cannot be
// rewound by time and is reopened). A short low-rate clip decoded with
// frame threads is not mistaken for a truncated one while the decoder
// still holds frames at the end of a pass.
func TestLoopAcrossContainers(t *testing.T) {
	gen := func(name string, rate, frames int, extra ...string) string {
		args := []string{"-f", "lavfi", "-i", fmt.Sprintf("testsrc=size=320x240:rate=%d", rate), "-frames:v", strconv.Itoa(frames),
			"-c:v", "libx264", "-pix_fmt", "yuv420p"}
		return makeMedia(t, name, append(args, extra...)...)
	}
	cases := []struct {
		name, path string
		threads    int
		frames     int
		fps        float64
	}{
		{"mpegts, B-frames", gen("b.ts", 25, 50, "-bf", "2", "-g", "25"), 1, 50, 25},
		{"mp4, B-frames", gen("b.mp4", 25, 50, "-bf", "2", "-g", "25"), 1, 50, 25},
		{"raw h264", gen("raw.h264", 25, 50, "-bf", "0", "-g", "25"), 1, 50, 25},
		{"5 fps, frame threads", gen("slow.mp4", 5, 20, "-bf", "0", "-g", "5"), 8, 20, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src, err := decode.New(decode.Options{URL: c.path, Loop: true, Threads: c.threads})
			require.NoError(t, err)
			var pts []float64
			err = src.Run(ctx, func(f *pipeline.Frame) {
				f.Image.Release()
				pts = append(pts, f.PTS)
				if len(pts) == 3*c.frames+5 { // two full rewinds and a bit
					cancel()
				}
			})
			require.ErrorIs(t, err, context.Canceled)
			for i := 1; i < len(pts); i++ {
				require.InDelta(t, 1/c.fps, pts[i]-pts[i-1], 0.2/c.fps, "frame %d: %.3f after %.3f", i, pts[i], pts[i-1])
			}
		})
	}
}
