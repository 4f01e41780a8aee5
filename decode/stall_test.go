package decode_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
)

// A live camera that sends one frame a second, with a stall timeout of
// 300 ms: the stall limit follows the stream's own interval (3 × 1 s), so
// the stream stays up to its end; and when it then hangs, the stall is
// caught after those 3 s, not never.
func TestSlowCameraStallLimit(t *testing.T) {
	slow := makeMedia(t, "slow.ts", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=1", "-frames:v", "8",
		"-c:v", "libx264", "-bf", "0", "-g", "4", "-pix_fmt", "yuv420p")
	const interval = time.Second
	t.Run("stays up", func(t *testing.T) {
		frames, _, _, err := collect(t, context.Background(), decode.Options{URL: liveHTTP(t, slow, interval, 0), StallTimeout: 300 * time.Millisecond})
		require.ErrorIs(t, err, io.EOF, "the stream ends with its input, not with a stall")
		require.Len(t, frames, 8)
	})
	t.Run("hangs", func(t *testing.T) {
		frames, _, _, err := collect(t, context.Background(), decode.Options{URL: liveHTTP(t, slow, interval, 6), StallTimeout: 300 * time.Millisecond})
		end := time.Now()
		require.ErrorIs(t, err, decode.ErrTimeout)
		require.GreaterOrEqual(t, len(frames), 5, "frames up to the hang")
		// The stall starts at the last frame before a gap of more than
		// the interval: the demuxer flushes the frames it still held (the
		// parser waits for the next frame's start) once interrupted.
		last := frames[len(frames)-1].Arrival
		for i := 1; i < len(frames); i++ {
			if frames[i].Arrival.Sub(frames[i-1].Arrival) > 2*interval {
				last = frames[i-1].Arrival
				break
			}
		}
		stall := end.Sub(last)
		limit := decode.StallIntervals * interval
		require.GreaterOrEqual(t, stall, limit)
		// The watchdog checks every 50 ms; a second more is load slack.
		require.Less(t, stall, limit+time.Second)
	})
}
