package decode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/pipeline"
)

// tsPart makes one second of 25 fps H.264 (160×120) in MPEG-TS whose
// timestamps start offset seconds later than ffmpeg's default, with bf
// B-frames.
func tsPart(t *testing.T, name string, offset, bf int) string {
	return makeMedia(t, name, "-f", "lavfi", "-i", "testsrc=size=160x120:rate=25", "-frames:v", "25",
		"-c:v", "libx264", "-bf", fmt.Sprint(bf), "-g", "25", "-pix_fmt", "yuv420p", "-output_ts_offset", fmt.Sprint(offset))
}

// concat joins files byte-wise, as a recorder that restarts its muxer
// writes them (MPEG-TS needs nothing more).
func concat(t *testing.T, name string, files ...string) string {
	t.Helper()
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		all = append(all, b...)
	}
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, all, 0o644))
	return p
}

// breaksAt returns the indexes of the frames flagged Discontinuity.
func breaksAt(frames []pipeline.Frame) []int {
	var at []int
	for i, f := range frames {
		if f.Discontinuity {
			at = append(at, i)
		}
	}
	return at
}

// requireIncreasing checks that PTS never goes back (or repeats).
func requireIncreasing(t *testing.T, frames []pipeline.Frame) {
	t.Helper()
	for i := 1; i < len(frames); i++ {
		require.Greater(t, frames[i].PTS, frames[i-1].PTS, "frame %d: PTS %.3f after %.3f", i, frames[i].PTS, frames[i-1].PTS)
	}
}

// Timestamp discontinuities in a real-time file: two MPEG-TS parts with
// PTS 1000 s then 0 s (the demuxer unwraps the step back into a +26 h
// jump, which the pacer used to sleep through), one part concatenated with
// itself (PTS repeat: a step back of 1 s), and the step back with B-frames
// (DTS != PTS inside each part, which is no discontinuity). The second
// part is paced like the first, PTS keeps increasing, and exactly its
// first frame is flagged.
func TestRealtimeTimestampDiscontinuities(t *testing.T) {
	const fps = 25.0
	cases := []struct {
		name   string
		path   string
		bf     int
		breaks []int
	}{
		{"step back 1000 s to 0 s", concat(t, "back.ts", tsPart(t, "a.ts", 1000, 0), tsPart(t, "b.ts", 0, 0)), 0, []int{25}},
		{"repeat", concat(t, "rep.ts", tsPart(t, "c.ts", 0, 0), tsPart(t, "d.ts", 0, 0)), 0, []int{25}},
		{"step back, B-frames", concat(t, "backb.ts", tsPart(t, "e.ts", 1000, 3), tsPart(t, "f.ts", 0, 3)), 3, []int{25}},
		{"B-frames, no step", concat(t, "b.ts", tsPart(t, "g.ts", 0, 3)), 3, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The input plays for 2 s; the bug slept ~26 h. A minute
			// separates the two whatever the machine's load.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			frames, _, _, err := collect(t, ctx, decode.Options{URL: c.path, Realtime: true})
			require.NoError(t, ctx.Err(), "the source must not hang at the step")
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, frames, 25*(1+len(c.breaks)))
			requireIncreasing(t, frames)
			require.Equal(t, c.breaks, breaksAt(frames))
			for _, b := range c.breaks {
				// The new timeline starts one frame after the old one
				// ends; with B-frames its first frame also comes after
				// its own DTS by the reorder delay (at most bf frames).
				step := frames[b].PTS - frames[b-1].PTS
				require.GreaterOrEqual(t, step, 1/fps-1e-6, "PTS step at the break")
				require.LessOrEqual(t, step, (1+float64(c.bf))/fps+1e-6, "PTS step at the break")
				// Paced on both sides: the second part takes its 24
				// frame intervals of wall time (less a few frames the
				// decoder holds, as in TestRealtimePacing), and the
				// break itself costs no wait.
				second := frames[len(frames)-1].Arrival.Sub(frames[b].Arrival)
				require.Greater(t, second, time.Duration(24/fps*float64(time.Second))-300*time.Millisecond)
				require.Less(t, frames[b].Arrival.Sub(frames[b-1].Arrival), time.Second)
			}
		})
	}
}

// A looping file with a timestamp repeat inside: every pass has its own
// break (flagged), the loop points are seamless (not flagged, one frame
// apart), and PTS keeps increasing throughout.
func TestLoopWithTimestampRepeat(t *testing.T) {
	rep := concat(t, "rep.ts", tsPart(t, "a.ts", 0, 0), tsPart(t, "b.ts", 0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := decode.New(decode.Options{URL: rep, Loop: true})
	require.NoError(t, err)
	var frames []pipeline.Frame
	err = src.Run(ctx, func(f *pipeline.Frame) {
		f.Image.Release()
		c := *f
		c.Image = nil
		if frames = append(frames, c); len(frames) == 125 { // two and a half passes
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	requireIncreasing(t, frames)
	require.Equal(t, []int{25, 75}, breaksAt(frames))
	for _, i := range []int{50, 100} { // loop points
		require.InDelta(t, 1/25.0, frames[i].PTS-frames[i-1].PTS, 1e-6, "loop at frame %d", i)
	}
}

// A reconnect (a second Run of the same Source, as the supervisor does)
// continues the PTS of the first: its first frame is flagged and placed
// after the last one by the wall time between them.
func TestReconnectContinuesPTS(t *testing.T) {
	file := tsPart(t, "cam.ts", 0, 0)
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(file))))
	defer srv.Close()
	src, err := decode.New(decode.Options{URL: srv.URL + "/cam.ts"})
	require.NoError(t, err)
	require.True(t, src.Live())
	var frames []pipeline.Frame
	emit := func(f *pipeline.Frame) {
		f.Image.Release()
		c := *f
		c.Image = nil
		frames = append(frames, c)
	}
	require.ErrorIs(t, src.Run(context.Background(), emit), io.EOF)
	require.ErrorIs(t, src.Run(context.Background(), emit), io.EOF)
	require.Len(t, frames, 50)
	requireIncreasing(t, frames)
	require.Equal(t, []int{25}, breaksAt(frames))
	wall := frames[25].Arrival.Sub(frames[24].Arrival).Seconds()
	require.InDelta(t, max(1/25.0, wall), frames[25].PTS-frames[24].PTS, 1e-6)
}

// A sender that stamps its packets in decode order (PTS = DTS), as
// GStreamer does for a raw H.265 stream its parser cannot reorder: every
// reordered B-frame's own PTS is earlier than the previous frame's (half
// the frames with 3 B-frames). This is the whole-session disorder seen on
// an HEVC camera over RTSP; with correct timestamps its frames come out in
// order (TestRTSPOpenGOPHEVC). Like FFmpeg's best_effort_timestamp, vigil
// then uses the DTS of the packet each frame came out with: PTS increases
// and is off by at most the reorder depth (3 frames).
func TestDecodeOrderTimestamps(t *testing.T) {
	const fps, bf = 25.0, 3
	src := makeMedia(t, "b.ts", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=25", "-frames:v", "50",
		"-c:v", "libx264", "-bf", fmt.Sprint(bf), "-g", "25", "-pix_fmt", "yuv420p")
	stamped := makeMedia(t, "dts.ts", "-i", src, "-c", "copy", "-bsf:v", "setts=pts=DTS")
	frames, _, _, err := collect(t, context.Background(), decode.Options{URL: stamped})
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, frames, 50)
	requireIncreasing(t, frames)
	require.Empty(t, breaksAt(frames), "reordering is no discontinuity")
	for i := 1; i < len(frames); i++ {
		require.LessOrEqual(t, frames[i].PTS-frames[i-1].PTS, (1+bf)/fps+1e-6, "frame %d", i)
	}
	require.InDelta(t, 49/fps, frames[49].PTS, bf/fps+1e-6)
}
