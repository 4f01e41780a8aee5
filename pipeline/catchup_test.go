package pipeline

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// liveFrames makes frames of a 25 fps live stream: the first burst of them
// leave the decoder every burstGap (a connect's buffered second), the rest
// every 40 ms, as the camera sends them.
func liveFrames(t0 time.Time, burst, total int, burstGap time.Duration, released *int) []*Frame {
	var fs []*Frame
	at := t0
	for i := 0; i < total; i++ {
		if i > 0 && i < burst {
			at = at.Add(burstGap)
		} else if i > 0 {
			at = at.Add(40 * time.Millisecond)
		}
		fs = append(fs, &Frame{Seq: uint64(i), PTS: float64(i) * 0.04, Arrival: at, Decoded: at, Image: fakeImage{released}})
	}
	return fs
}

// The connect burst is recognised from decoder output times against PTS,
// also when the decoder is slowed down (a 25 ms gap now and then, more
// than half a frame interval), and ends once frames come in real time.
func TestCatchUpRecognisesTheBurst(t *testing.T) {
	var c catchUp
	released := 0
	fs := liveFrames(time.Unix(1000, 0), 25, 60, 8*time.Millisecond, &released)
	fs[10].Decoded = fs[9].Decoded.Add(25 * time.Millisecond) // a contended decode
	for i := 10; i < 25; i++ {
		fs[i].Decoded = fs[i].Decoded.Add(17 * time.Millisecond)
	}
	var in []bool
	for _, f := range fs {
		in = append(in, c.inBurst(f))
	}
	for i := 0; i < 25; i++ {
		require.True(t, in[i], "frame %d of the burst", i)
	}
	// After the burst, the stream gains nothing: it ends within
	// catchUpQuiet of stream time (8 frames at 25 fps).
	end := 25
	for end < len(in) && in[end] {
		end++
	}
	require.LessOrEqual(t, end, 25+int(catchUpQuiet/(40*time.Millisecond))+1, "ends once real time is reached")
	for i := end; i < len(in); i++ {
		require.False(t, in[i], "frame %d is live", i)
	}

	// A source faster than real time for good (a file over HTTP) is not
	// a connect burst: it ends after catchUpMax of stream time.
	c = catchUp{}
	n := 0
	for i := 0; i < 500; i++ {
		at := time.Unix(2000, 0).Add(time.Duration(i) * 4 * time.Millisecond)
		if c.inBurst(&Frame{PTS: float64(i) * 0.04, Decoded: at}) {
			n++
		}
	}
	require.Equal(t, int(catchUpMax/(40*time.Millisecond))+1, n)
}

// During the burst a new frame replaces the frames still waiting: they are
// skipped as catch_up (released, counted, no alert), never dropped as
// queue_full; afterwards the queue's drop-oldest policy is back.
func TestCatchUpGoesToTheLiveEdge(t *testing.T) {
	s, released := policyStream(StreamConfig{Live: true, QueueSize: 4})
	fs := liveFrames(time.Unix(1000, 0), 25, 40, 5*time.Millisecond, released)
	for _, f := range fs[:25] { // nobody pops: an engine busy with one frame
		s.emit(f)
	}
	require.Equal(t, 1, s.q.Len(), "the newest burst frame only")
	f, _ := s.q.Pop(s.ctx)
	require.Equal(t, uint64(24), f.Seq)
	require.Equal(t, 24, *released)
	require.Equal(t, int64(24), s.skippedSince.Load())
	require.Equal(t, 24.0, testutil.ToFloat64(s.m.m.Skipped.WithLabelValues("p", string(SkipCatchUp))))
	drops, _ := s.c.Status.TakeAlert()
	require.Empty(t, drops)

	// Live, and still nobody pops: the first live frames, within
	// catchUpQuiet of the burst, still count as catching up; after them
	// drop-oldest is back.
	quiet := 25 + int(catchUpQuiet/(40*time.Millisecond)) + 1
	for _, f := range fs[25:quiet] {
		s.emit(f)
	}
	skipped := testutil.ToFloat64(s.m.m.Skipped.WithLabelValues("p", string(SkipCatchUp)))
	for _, f := range fs[quiet:] {
		s.emit(f)
	}
	require.Equal(t, 4, s.q.Len())
	drops, _ = s.c.Status.TakeAlert()
	require.Positive(t, drops[DropQueueFull], "real overload after the burst is still a fault")
	require.Equal(t, skipped, testutil.ToFloat64(s.m.m.Skipped.WithLabelValues("p", string(SkipCatchUp))), "the burst is over")
}
