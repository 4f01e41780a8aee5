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
	c.results = append(c.results, pipeline.Result{Seq: r.Seq, PTS: r.PTS, Discontinuity: r.Discontinuity})
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
