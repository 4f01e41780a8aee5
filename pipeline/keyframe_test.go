package pipeline_test

import (
	"context"
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

// keyframeSink records each published result's seq, keyframe and corrupt
// flags.
type keyframeSink struct {
	mu      sync.Mutex
	results []pipeline.Result
}

func (k *keyframeSink) Publish(_ context.Context, r *pipeline.Result) error {
	r.Published = time.Now()
	k.mu.Lock()
	k.results = append(k.results, pipeline.Result{Seq: r.Seq, Keyframe: r.Keyframe, Corrupt: r.Corrupt})
	k.mu.Unlock()
	return nil
}

// A live stream joined mid-GOP (its first IDR picture missing, its
// parameter sets there): the decoder returns the pictures before the first
// keyframe flagged corrupt, since their references were never received.
// They are skipped (before_keyframe), not published with made-up pixels and
// the false detections those give; the first published frame is the
// keyframe, and nothing is counted as a drop.
func TestLiveStreamSkipsFramesBeforeKeyframe(t *testing.T) {
	full := filepath.Join(t.TempDir(), "g50.h264")
	b, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25",
		"-frames:v", "100", "-c:v", "libx264", "-bf", "0", "-g", "50", "-pix_fmt", "yuv420p", full).CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", b)
	// 49 P-pictures that reference the removed IDR, then IDR + 49.
	late := testenv.RewriteH264(t, full, "late.h264", func(typ, nth int) bool { return typ != testenv.NALIDR || nth > 0 })
	src, err := decode.New(decode.Options{URL: late, Realtime: true, StreamID: "cam"})
	require.NoError(t, err)
	sink := &keyframeSink{}
	m := pipeline.NewMetrics(nil)
	eng := engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() {
		done <- pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "cam", Source: src, Engine: eng, Sink: sink, Live: true, Metrics: m})
	}()
	// 99 frames paced at 25 fps: 4 s; the wait is generous for a loaded machine.
	testenv.Eventually(t, func() bool { return testutil.ToFloat64(m.Decoded.WithLabelValues("cam")) >= 99 }, time.Minute, 10*time.Millisecond, "the first connection decoded")
	cancel()
	require.NoError(t, <-done)

	require.GreaterOrEqual(t, testutil.ToFloat64(m.Skipped.WithLabelValues("cam", string(pipeline.SkipBeforeKeyframe))), 49.0)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.NotEmpty(t, sink.results)
	require.True(t, sink.results[0].Keyframe, "the first published frame is the keyframe (seq %d)", sink.results[0].Seq)
	require.Equal(t, uint64(49), sink.results[0].Seq)
	for _, r := range sink.results {
		require.False(t, r.Corrupt, "seq %d published corrupt", r.Seq)
	}
}
