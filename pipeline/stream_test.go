package pipeline_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

func TestMain(m *testing.M) {
	decode.SetLogger(nil)
	goleak.VerifyTestMain(m)
}

// collectSink records published results; delay slows it down.
type collectSink struct {
	mu    sync.Mutex
	seqs  []uint64
	dets  int
	delay time.Duration
}

func (c *collectSink) Publish(_ context.Context, r *pipeline.Result) error {
	time.Sleep(c.delay)
	c.mu.Lock()
	c.seqs = append(c.seqs, r.Seq)
	c.dets += len(r.Detections)
	c.mu.Unlock()
	r.Published = time.Now()
	r.Stages.Total = r.Published.Sub(r.Capture)
	return nil
}

func engine(t *testing.T) *infer.Engine {
	t.Helper()
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	e, err := infer.Open(infer.Options{Name: "blazeface", Path: testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), Resizer: sc})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close(); sc.Close() })
	return e
}

// Real FFmpeg + ORT: a lossless run processes every frame in order.
func TestRunStreamLossless(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "m"})
	require.NoError(t, err)
	sink := &collectSink{}
	reg := prometheus.NewRegistry()
	m := pipeline.NewMetrics(reg)
	require.NoError(t, pipeline.RunStream(context.Background(), pipeline.StreamConfig{
		ID: "m", Source: src, Engine: engine(t), Sink: sink, Lossless: true, Metrics: m,
	}))
	require.Len(t, sink.seqs, 270)
	for i, s := range sink.seqs {
		require.Equal(t, uint64(i), s)
	}
	require.Greater(t, sink.dets, 240, "Megamind has a face in almost every frame")
	require.Equal(t, 270.0, testutil.ToFloat64(m.Processed.WithLabelValues("m")))
	require.Equal(t, 270.0, testutil.ToFloat64(m.Decoded.WithLabelValues("m")))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems, "metric names follow Prometheus conventions")
	// The file ended: stopped, as a 0/1 enum of every state.
	require.Equal(t, 0.0, testutil.ToFloat64(m.Up.WithLabelValues("m")))
	for _, st := range []pipeline.State{pipeline.StateStarting, pipeline.StateRunning, pipeline.StateReconnecting, pipeline.StateFailed, pipeline.StateStopped} {
		want := 0.0
		if st == pipeline.StateStopped {
			want = 1
		}
		require.Equal(t, want, testutil.ToFloat64(m.StreamState.WithLabelValues("m", string(st))), st)
	}
	m.Forget("m")
	require.Zero(t, testutil.CollectAndCount(m.StreamState), "Forget removes the state series")
}

// When a stream says running (its status, and the event published from
// it), its status already has the first frame's size and codec: `vigil
// streams` and shapes read them as soon as the state is running.
func TestRunningStatusHasFirstFrame(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "first"})
	require.NoError(t, err)
	st := pipeline.NewStatus(pipeline.StateStarting)
	var atRunning []pipeline.StatusSnapshot // written by OnEvent, read after RunStream returned
	require.NoError(t, pipeline.RunStream(context.Background(), pipeline.StreamConfig{
		ID: "first", Source: src, Engine: engine(t), Sink: &collectSink{}, Lossless: true, Status: st,
		OnEvent: func(e pipeline.Event) {
			if e.Type == pipeline.StateRunning {
				atRunning = append(atRunning, st.Snapshot())
			}
		},
	}))
	require.Len(t, atRunning, 1)
	require.Equal(t, 720, atRunning[0].Width)
	require.Equal(t, "mpeg4", atRunning[0].Codec)
}

// A slow sink behind a fast file: the bounded queue drops the oldest
// frames (counted as queue_full) instead of growing; what is published
// stays in order and every decoded frame is either published or dropped.
func TestRunStreamDropsOldestWhenBehind(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "slow"})
	require.NoError(t, err)
	sink := &collectSink{delay: 5 * time.Millisecond}
	m := pipeline.NewMetrics(nil)
	stats := pipeline.NewStats()
	require.NoError(t, pipeline.RunStream(context.Background(), pipeline.StreamConfig{
		ID: "slow", Source: src, Engine: engine(t), Sink: sink, QueueSize: 2, Metrics: m, Stats: stats,
	}))
	dropped := testutil.ToFloat64(m.Dropped.WithLabelValues("slow", pipeline.StageQueue, string(pipeline.DropQueueFull)))
	require.Positive(t, dropped)
	require.Equal(t, 270.0, float64(len(sink.seqs))+dropped)
	for i := 1; i < len(sink.seqs); i++ {
		require.Greater(t, sink.seqs[i], sink.seqs[i-1])
	}
	snap := stats.Snapshot()
	require.Len(t, snap, 1)
	require.Equal(t, 270, snap[0].In)
	require.Equal(t, int(dropped), snap[0].Dropped)
}

// Cancelling a looping real-time stream returns promptly and leaks no
// goroutine (goleak in TestMain) and no frame.
func TestRunStreamCancel(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), Realtime: true, Loop: true})
	require.NoError(t, err)
	sink := &collectSink{}
	ctx, cancel := context.WithCancel(context.Background())
	eng := engine(t) // opened here: engine fails t, which only the test goroutine may do
	done := make(chan error)
	go func() {
		done <- pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "c", Source: src, Engine: eng, Sink: sink})
	}()
	testenv.Eventually(t, func() bool { sink.mu.Lock(); defer sink.mu.Unlock(); return len(sink.seqs) > 5 }, 10*time.Second, 10*time.Millisecond, "more than 5 frames published")
	start := time.Now()
	cancel()
	require.NoError(t, <-done)
	require.Less(t, time.Since(start), 2*time.Second)
}

// countingSource records when each Run of a real source started.
type countingSource struct {
	pipeline.Source
	mu    sync.Mutex
	calls []time.Time
	errs  []error
}

func (c *countingSource) Run(ctx context.Context, emit func(*pipeline.Frame)) error {
	c.mu.Lock()
	c.calls = append(c.calls, time.Now())
	c.mu.Unlock()
	err := c.Source.Run(ctx, emit)
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
	return err
}

// A live camera that refuses connections (a real FFmpeg RTSP open against
// a closed port) is retried with backoff until cancelled.
func TestRunStreamReconnectBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	real, err := decode.New(decode.Options{URL: "rtsp://" + addr + "/cam"})
	require.NoError(t, err)
	src := &countingSource{Source: real}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	err = pipeline.RunStream(ctx, pipeline.StreamConfig{
		ID: "r", Source: src, Engine: engine(t), Sink: &collectSink{}, Live: true,
		BackoffInitial: 40 * time.Millisecond, BackoffMax: 160 * time.Millisecond,
	})
	require.NoError(t, err)
	src.mu.Lock()
	defer src.mu.Unlock()
	require.GreaterOrEqual(t, len(src.calls), 3, "retried")
	require.ErrorContains(t, src.errs[0], "open")
	require.LessOrEqual(t, len(src.calls), 12, "with backoff, not a busy loop")
	for i := 1; i < len(src.calls); i++ {
		require.GreaterOrEqual(t, src.calls[i].Sub(src.calls[i-1]), 20*time.Millisecond, "at least half the initial delay")
	}
}

// recordAnalyzer is an Analyzer that records what it sees and marks the
// detections, so that the sink can tell it ran first.
type recordAnalyzer struct {
	seqs   []uint64 // worker goroutine, then read after RunStream
	closed int
	after  bool // Analyze was called after Close
}

func (a *recordAnalyzer) Analyze(r *pipeline.Result) bool {
	if a.closed > 0 {
		a.after = true
	}
	a.seqs = append(a.seqs, r.Seq)
	for i := range r.Detections {
		r.Detections[i].TrackID = "seen"
	}
	return r.Seq%2 == 0 // as if analytics were on for even frames only
}

func (a *recordAnalyzer) Close() { a.closed++ }

// markSink records the seqs it publishes and whether every detection came
// marked by the analyzer.
type markSink struct {
	collectSink
	unmarked  int
	wrongTime int // results with an analytics time when Analyze said it did not run, or without one when it did
}

func (m *markSink) Publish(ctx context.Context, r *pipeline.Result) error {
	for _, d := range r.Detections {
		if d.TrackID != "seen" {
			m.unmarked++
		}
	}
	if (r.Stages.Analytics > 0) != (r.Seq%2 == 0) || r.Ready.IsZero() {
		m.wrongTime++
	}
	return m.collectSink.Publish(ctx, r)
}

// The Analyzer sees exactly the frames that are published, in order and
// before the sink; frames skipped by policy never reach it; Close is
// called once, at the end.
func TestRunStreamAnalyzer(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "m"})
	require.NoError(t, err)
	sink := &markSink{}
	a := &recordAnalyzer{}
	// Lossless but limited to 50 fps by decode time: a file decodes far
	// faster, so most frames are skipped at ingest.
	require.NoError(t, pipeline.RunStream(context.Background(), pipeline.StreamConfig{
		ID: "m", Source: src, Engine: engine(t), Sink: sink, Lossless: true, FPSLimit: 50, Analyzer: a,
	}))
	require.Less(t, len(sink.seqs), 270, "frames were skipped")
	require.NotEmpty(t, sink.seqs)
	require.Equal(t, sink.seqs, a.seqs, "analyzed exactly the published frames, in order")
	require.Zero(t, sink.unmarked, "the sink saw the analyzer's marks")
	require.Zero(t, sink.wrongTime, "a result has an analytics time when Analyze ran, and only then")
	require.Equal(t, 1, a.closed)
	require.False(t, a.after)
}
