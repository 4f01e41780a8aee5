package decode_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// rtspFrames reads n frames from url and returns their metadata; got,
// when not nil, counts them as they come.
func rtspFrames(ctx context.Context, url string, n int, got *atomic.Int64) ([]pipeline.Frame, error) {
	src, err := decode.New(decode.Options{URL: url})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var frames []pipeline.Frame
	err = src.Run(ctx, func(f *pipeline.Frame) {
		f.Image.Release()
		c := *f
		c.Image = nil
		if got != nil {
			got.Add(1)
		}
		if frames = append(frames, c); len(frames) == n {
			cancel()
		}
	})
	if len(frames) == n {
		err = nil
	}
	return frames, err
}

// B-frame streams over RTSP, with the camera's correct PTS: H.264 with 3
// B-frames, and open-GOP HEVC cut at a CRA picture (its 3 RASL pictures
// cannot be decoded and are skipped by the decoder). Frames come out in
// display order, one frame interval (10 fps) apart from the very first,
// with no discontinuity, for a client that starts with the stream, and
// whole frame intervals apart for one that joins it mid-way. FFmpeg's RTSP demuxer gives a session's first
// access unit no PTS: its frame used to be stamped with the DTS of a later
// packet (the HEVC stream's second frame came 0.2 s after its first, and a
// late joiner published one PTS twice).
func TestRTSPBFrameTimestamps(t *testing.T) {
	media := testenv.Media(t, "vtest.avi") // 10 fps
	for _, c := range []struct {
		name, file string
	}{
		{"H.264 B-frames", rtsptest.EncodeH264BFrames(t, media, 0)},
		{"HEVC from a CRA", rtsptest.EncodeHEVCCRA(t, media, 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := rtsptest.Start(t, c.file, rtsptest.Options{Loop: true})
			// A loaded machine may need a while to open and decode.
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			type result struct {
				frames []pipeline.Frame
				err    error
			}
			first := make(chan result, 1)
			var got atomic.Int64
			go func() {
				f, err := rtspFrames(ctx, srv.URL, 80, &got)
				first <- result{f, err}
			}()
			// Join once the first client has had 3 s of frames: the shared
			// stream is then mid-GOP or at a keyframe, wherever.
			testenv.Eventually(t, func() bool { return got.Load() >= 30 }, time.Minute, 20*time.Millisecond, "the first client's frames")
			late, err := rtspFrames(ctx, srv.URL, 30, nil)
			require.NoError(t, err)
			r := <-first
			require.NoError(t, r.err)
			// The first client: one frame interval apart from the very
			// first frame (RTP time is exact to 1/90000 s).
			require.Empty(t, breaksAt(r.frames), "reordering is no discontinuity")
			for i := 1; i < len(r.frames); i++ {
				require.InDelta(t, 0.1, r.frames[i].PTS-r.frames[i-1].PTS, 1e-4, "frame %d: %.4f after %.4f", i, r.frames[i].PTS, r.frames[i-1].PTS)
			}
			// The late joiner: its decoder may skip the RASL pictures of
			// the first CRA picture it meets (their references came before
			// the join), which leaves a gap of whole frames.
			require.Empty(t, breaksAt(late), "reordering is no discontinuity")
			for i := 1; i < len(late); i++ {
				step := (late[i].PTS - late[i-1].PTS) / 0.1
				require.InDelta(t, math.Round(step), step, 1e-3, "frame %d: %.4f after %.4f", i, late[i].PTS, late[i-1].PTS)
				require.GreaterOrEqual(t, math.Round(step), 1.0, "frame %d: %.4f after %.4f", i, late[i].PTS, late[i-1].PTS)
				require.LessOrEqual(t, math.Round(step), float64(1+rtsptest.HEVCCRALeading), "frame %d", i)
			}
		})
	}
}
