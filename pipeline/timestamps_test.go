package pipeline_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// timelineSink records the published PTS and discontinuity flags.
type timelineSink struct {
	mu      sync.Mutex
	results []pipeline.Result
}

func (c *timelineSink) Publish(_ context.Context, r *pipeline.Result) error {
	c.mu.Lock()
	c.results = append(c.results, pipeline.Result{Seq: r.Seq, PTS: r.PTS, Discontinuity: r.Discontinuity, Capture: r.Capture})
	c.mu.Unlock()
	r.Published = time.Now()
	return nil
}

// repeatTS makes 3 s of 25 fps MPEG-TS concatenated with itself: its
// timestamps step back by 3 s, more than the 2 s StaleAfter, as a camera's
// that resets its clock.
func repeatTS(t *testing.T) string {
	t.Helper()
	part := filepath.Join(t.TempDir(), "part.ts")
	b, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=25",
		"-frames:v", "75", "-c:v", "libx264", "-bf", "0", "-pix_fmt", "yuv420p", part).CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", b)
	data, err := os.ReadFile(part)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "repeat.ts")
	require.NoError(t, os.WriteFile(p, append(data, data...), 0o644))
	return p
}

// A live stream (a real-time file run as a camera) whose timestamps reset:
// no frame is dropped as stale (the reset used to cost StaleAfter of
// on-time video), the reset is counted once, PTS keeps increasing and the
// first message from the new timeline says so.
func TestRunStreamTimestampReset(t *testing.T) {
	src, err := decode.New(decode.Options{URL: repeatTS(t), Realtime: true})
	require.NoError(t, err)
	sink := &timelineSink{}
	m := pipeline.NewMetrics(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng := engine(t)
	done := make(chan error)
	go func() {
		done <- pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "cam", Source: src, Engine: eng, Sink: sink, Live: true, Metrics: m})
	}()
	// Both parts, 6 s of real time; the wait is generous for a loaded machine.
	testenv.Eventually(t, func() bool { return testutil.ToFloat64(m.Decoded.WithLabelValues("cam")) >= 150 }, time.Minute, 10*time.Millisecond, "both parts decoded")
	cancel()
	require.NoError(t, <-done)

	require.Zero(t, testutil.ToFloat64(m.Dropped.WithLabelValues("cam", pipeline.StageIngest, string(pipeline.DropStale))))
	// One break inside the file; the live source's reopen at its end may add
	// one more before the cancel lands.
	require.GreaterOrEqual(t, testutil.ToFloat64(m.PTSDiscontinuities.WithLabelValues("cam")), 1.0)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var flagged []uint64
	for i, r := range sink.results {
		if i > 0 {
			require.Greater(t, r.PTS, sink.results[i-1].PTS, "seq %d", r.Seq)
		}
		if r.Discontinuity && r.Seq < 150 {
			flagged = append(flagged, r.Seq)
		}
	}
	require.Len(t, flagged, 1)
	require.GreaterOrEqual(t, flagged[0], uint64(75), "on the first message of the second part (seq 75 unless it was dropped)")
	for _, r := range sink.results {
		if r.Seq >= 75 {
			require.Equal(t, flagged[0], r.Seq, "the first message at or after the break")
			break
		}
	}
}

// lastPTS returns the PTS of the last published result (-1 before any).
func (c *timelineSink) lastPTS() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.results) == 0 {
		return -1
	}
	return c.results[len(c.results)-1].PTS
}

// An RTSP camera (10 fps) resets its timestamps mid-session, back to its
// start after 5 s, as one did when another client re-joined its mount;
// then it restarts, and the stream reconnects. No on-time frame is dropped
// as stale (the reset used to cost 2 s of frames), PTS keeps increasing
// through both (it used to go back at each), and each is counted once and
// flagged on the next message. After the reconnect PTS has advanced by the
// wall time between the two frames.
func TestRunStreamRTSPResetAndReconnect(t *testing.T) {
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true})
	src, err := decode.New(decode.Options{URL: srv.URL, StreamID: "cam"})
	require.NoError(t, err)
	sink := &timelineSink{}
	m := pipeline.NewMetrics(nil)
	eng := engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() {
		done <- pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "cam", Source: src, Engine: eng, Sink: sink, Live: true, Metrics: m,
			BackoffInitial: 100 * time.Millisecond})
	}()
	decoded := func() float64 { return testutil.ToFloat64(m.Decoded.WithLabelValues("cam")) }
	breaks := func() float64 { return testutil.ToFloat64(m.PTSDiscontinuities.WithLabelValues("cam")) }
	// Generous waits: opening and encoding compete with the other tests.
	testenv.Eventually(t, func() bool { return sink.lastPTS() > 5 }, time.Minute, 20*time.Millisecond, "5 s of stream")
	back, err := srv.ResetTimestamps()
	require.NoError(t, err)
	require.Greater(t, back, 3*time.Second, "back more than StaleAfter (2 s)")
	n := decoded()
	testenv.Eventually(t, func() bool { return decoded() >= n+30 }, time.Minute, 20*time.Millisecond, "3 s after the reset")
	afterReset := breaks()
	srv.Restart(t) // returns once the server is back: frames from now on come after the reconnect
	n = decoded()
	testenv.Eventually(t, func() bool { return decoded() >= n+10 }, time.Minute, 20*time.Millisecond, "1 s after the reconnect")
	cancel()
	require.NoError(t, <-done)

	require.Zero(t, testutil.ToFloat64(m.Dropped.WithLabelValues("cam", pipeline.StageIngest, string(pipeline.DropStale))))
	require.Equal(t, 1.0, afterReset, "the reset")
	require.Equal(t, 2.0, breaks(), "the reset and the reconnect")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var flagged []int
	for i, r := range sink.results {
		if i > 0 {
			require.Greater(t, r.PTS, sink.results[i-1].PTS, "seq %d", r.Seq)
		}
		if r.Discontinuity {
			flagged = append(flagged, i)
		}
	}
	require.Len(t, flagged, 2)
	for _, i := range flagged {
		prev, r := sink.results[i-1], sink.results[i]
		if r.Seq != prev.Seq+1 {
			continue // frames dropped between them: the step is not one frame
		}
		// The new timeline goes on from the previous frame by the wall
		// time between them (a live source), at least one frame. The
		// decoder times packet reads, Capture is stamped microseconds
		// later: 10 ms covers the scheduling between the two.
		wall := r.Capture.Sub(prev.Capture).Seconds()
		require.InDelta(t, max(wall, 0.1), r.PTS-prev.PTS, 0.01, "seq %d: %.3f s of wall time", r.Seq, wall)
	}
}
