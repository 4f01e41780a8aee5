package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// panicAt wraps the real engine and panics on one frame, as a crash in a
// C library reached through cgo would surface in Go.
type panicAt struct {
	pipeline.Engine
	mu sync.Mutex
	n  int
	at int
}

func (p *panicAt) Detect(img pipeline.Image, st *pipeline.StageTimes, dst []pipeline.Detection) ([]pipeline.Detection, error) {
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	if n == p.at {
		panic("simulated crash in the engine")
	}
	return p.Engine.Detect(img, st, dst)
}

// A panic inside one stream fails that stream only; the other keeps running.
func TestPanicFailsOnlyItsStream(t *testing.T) {
	eng := engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sup := pipeline.NewSupervisor(ctx)
	var events []pipeline.Event
	var mu sync.Mutex
	build := func(id string, e pipeline.Engine) func(*pipeline.Status) (pipeline.StreamConfig, error) {
		return func(*pipeline.Status) (pipeline.StreamConfig, error) {
			src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), Realtime: true, Loop: true})
			if err != nil {
				return pipeline.StreamConfig{}, err
			}
			return pipeline.StreamConfig{ID: id, Source: src, Engine: e, Sink: &collectSink{}, OnEvent: func(ev pipeline.Event) {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			}}, nil
		}
	}
	require.True(t, sup.Apply("bad", "v1", build("bad", &panicAt{Engine: eng, at: 10})))
	require.True(t, sup.Apply("good", "v1", build("good", eng)))
	require.False(t, sup.Apply("good", "v1", build("good", eng)), "same version: untouched")

	require.Eventually(t, func() bool { s, _ := sup.Status("bad"); return s.State == pipeline.StateFailed }, 20*time.Second, 20*time.Millisecond)
	s, _ := sup.Status("bad")
	require.Contains(t, s.LastError, "panic: simulated crash")
	g, _ := sup.Status("good")
	require.Equal(t, pipeline.StateRunning, g.State)
	time.Sleep(1500 * time.Millisecond)
	g2, _ := sup.Status("good")
	require.Equal(t, pipeline.StateRunning, g2.State)
	require.True(t, g2.LastFrame.After(g.LastFrame), "the good stream keeps going")

	mu.Lock()
	var types []string
	for _, e := range events {
		if e.StreamID == "bad" {
			types = append(types, string(e.Type))
		}
	}
	mu.Unlock()
	require.Equal(t, "starting running failed", strings.Join(types, " "))

	require.True(t, sup.Remove("good"))
	require.True(t, sup.Remove("bad"))
	require.False(t, sup.Remove("bad"))
	cancel()
	sup.Wait()
}

// A build error (e.g. a model that does not load) marks the stream failed
// without running it.
func TestSupervisorBuildError(t *testing.T) {
	sup := pipeline.NewSupervisor(context.Background())
	sup.Apply("x", "v1", func(*pipeline.Status) (pipeline.StreamConfig, error) {
		return pipeline.StreamConfig{}, context.DeadlineExceeded
	})
	s, ok := sup.Status("x")
	require.True(t, ok)
	require.Equal(t, pipeline.StateFailed, s.State)
	sup.Apply("x", "v2", nil)
	s, _ = sup.Status("x")
	require.Equal(t, pipeline.StateStopped, s.State, "nil build: disabled")
	require.Equal(t, []string{"x"}, sup.IDs())
	sup.Remove("x")
	sup.Wait()
}

// Cross-stream batching with real engines of batch 1, 4 and 8: four
// streams share one batcher; every frame is processed, with the right
// detections, and executions carry more than one frame.
func TestBatcherAcrossStreams(t *testing.T) { batcherAcrossStreams(t, 1) }

// Two batches in flight at once (as with the GPU engine's pinned slots):
// every frame still comes back exactly once, and Run waits for the running
// batches before it returns (goleak checks the package).
func TestBatcherConcurrentBatches(t *testing.T) { batcherAcrossStreams(t, 2) }

func batcherAcrossStreams(t *testing.T, concurrency int) {
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	var engines []pipeline.BatchEngine
	var first *infer.Engine
	for _, f := range []string{"face_detection_front_128x128_barracuda.onnx", "face_detection_front_128x128_barracuda.b4.onnx", "face_detection_front_128x128_barracuda.b8.onnx"} {
		sc := decode.NewScaler()
		e, err := infer.Open(infer.Options{Name: "blazeface", Path: testenv.Model(t, f), Resizer: sc})
		require.NoError(t, err)
		t.Cleanup(func() { e.Close(); sc.Close() })
		engines = append(engines, e)
		if first == nil {
			first = e
		}
	}
	m := pipeline.NewMetrics(prometheus.NewRegistry())
	b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: engines, Preferred: []int{4, 8}, MaxQueueDelay: 3 * time.Millisecond, Metrics: m, Concurrency: concurrency})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	var wg sync.WaitGroup
	sinks := make([]*collectSink, 4)
	for i := range sinks {
		sinks[i] = &collectSink{}
		src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi")})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "b", Source: src, Engine: first, Sink: sinks[i], Batcher: b, Lossless: true}))
		}()
	}
	wg.Wait()
	cancel()
	<-done
	for _, s := range sinks {
		require.Len(t, s.seqs, 270)
		require.Greater(t, s.dets, 240)
	}
	var metric dto.Metric
	require.NoError(t, m.BatchSize.Write(&metric))
	h := metric.GetHistogram()
	mean := h.GetSampleSum() / float64(h.GetSampleCount())
	t.Logf("%d executions for %d frames, mean batch %.2f", h.GetSampleCount(), 4*270, mean)
	require.Greater(t, mean, 1.5, "frames from different streams share executions")
}

// A request whose deadline has passed is refused with ErrLate, and the
// refusal is counted in vigil_batch_late_total; one with time to spare
// runs.
func TestBatcherLateCounted(t *testing.T) {
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	e, err := infer.Open(infer.Options{Name: "blazeface", Path: testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), Resizer: sc})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close(); sc.Close() })
	m := pipeline.NewMetrics(prometheus.NewRegistry())
	b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: []pipeline.BatchEngine{e}, MaxQueueDelay: time.Millisecond, Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()

	img := oneFrame(t)
	var st pipeline.StageTimes
	_, err = b.Do(ctx, time.Now().Add(time.Minute), img, &st, nil)
	require.NoError(t, err, "time to spare: runs")
	_, err = b.Do(ctx, time.Now().Add(-time.Second), img, &st, nil)
	require.ErrorIs(t, err, pipeline.ErrLate)
	var metric dto.Metric
	require.NoError(t, m.BatchLate.Write(&metric))
	require.Equal(t, 1.0, metric.GetCounter().GetValue())
}

// gated wraps a real batch engine and holds each execution until its
// gate is opened, so that a test can keep the batcher's slots busy.
type gated struct {
	pipeline.BatchEngine
	gate chan struct{}
}

func (g *gated) DetectBatch(imgs []pipeline.Image, sts []*pipeline.StageTimes, dsts [][]pipeline.Detection) ([][]pipeline.Detection, error) {
	<-g.gate
	return g.BatchEngine.DetectBatch(imgs, sts, dsts)
}

// While every slot is busy, a request that can no longer make its
// deadline is refused at once, not when a slot frees: its stream moves on
// to a younger frame.
func TestBatcherRefusesLateWhileSlotsBusy(t *testing.T) {
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	e, err := infer.Open(infer.Options{Name: "blazeface", Path: testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), Resizer: sc})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close(); sc.Close() })
	g := &gated{BatchEngine: e, gate: make(chan struct{})}
	close(g.gate) // open for the first, measuring run
	m := pipeline.NewMetrics(prometheus.NewRegistry())
	b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: []pipeline.BatchEngine{g}, MaxQueueDelay: time.Millisecond, Metrics: m, Concurrency: 2})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()

	img := oneFrame(t)
	var st pipeline.StageTimes
	_, err = b.Do(ctx, time.Time{}, img, &st, nil)
	require.NoError(t, err, "measures the engine")

	g.gate = make(chan struct{}) // executions now wait
	var busy sync.WaitGroup
	for range 2 { // fill both slots
		busy.Add(1)
		go func() {
			defer busy.Done()
			var st pipeline.StageTimes
			_, err := b.Do(ctx, time.Time{}, img, &st, nil)
			require.NoError(t, err)
		}()
	}
	require.Eventually(t, func() bool { w, _ := b.Load(); return w == 0 }, 5*time.Second, time.Millisecond, "both dispatched")
	res := make(chan error, 1)
	go func() {
		var st pipeline.StageTimes
		_, err := b.Do(ctx, time.Now().Add(time.Millisecond), img, &st, nil)
		res <- err
	}()
	select {
	case err = <-res:
		require.ErrorIs(t, err, pipeline.ErrLate)
	case <-time.After(10 * time.Second):
		t.Error("a late request was held while both slots were busy")
	}
	close(g.gate)
	busy.Wait()
	if err == nil {
		<-res
	}
}

// oneFrame decodes the first frame of Megamind.avi; it is released at the
// end of the test.
func oneFrame(t *testing.T) pipeline.Image {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi")})
	require.NoError(t, err)
	frames := make(chan *pipeline.Frame, 1)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = src.Run(ctx, func(f *pipeline.Frame) {
			select {
			case frames <- f:
			default:
				f.Image.Release()
			}
		})
	}()
	f := <-frames
	cancel()
	<-ran
	t.Cleanup(f.Image.Release)
	return f.Image
}

// slowFirst wraps a real batch engine and stalls its first execution, as
// a hiccup of the host or the GPU would.
type slowFirst struct {
	pipeline.BatchEngine
	once  sync.Once
	stall time.Duration
}

func (s *slowFirst) DetectBatch(imgs []pipeline.Image, sts []*pipeline.StageTimes, dsts [][]pipeline.Detection) ([][]pipeline.Detection, error) {
	s.once.Do(func() { time.Sleep(s.stall) })
	return s.BatchEngine.DetectBatch(imgs, sts, dsts)
}

// One stalled execution of the batch-4 engine leaves its estimate far
// above the deadlines. While other batches (here a serial requester on the
// batch-1 engine) keep the batcher busy, that estimate must still expire:
// it is refreshed only by batch-4 runs, which it would refuse for ever,
// and throughput would collapse to batches of one (seen on the H200: 268
// of 2,553 fps).
func TestBatcherStaleBatchEstimateExpires(t *testing.T) {
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	var engines []pipeline.BatchEngine
	for _, f := range []string{"face_detection_front_128x128_barracuda.onnx", "face_detection_front_128x128_barracuda.b4.onnx"} {
		sc := decode.NewScaler()
		e, err := infer.Open(infer.Options{Name: "blazeface", Path: testenv.Model(t, f), Resizer: sc})
		require.NoError(t, err)
		t.Cleanup(func() { e.Close(); sc.Close() })
		engines = append(engines, e)
	}
	engines[1] = &slowFirst{BatchEngine: engines[1], stall: 400 * time.Millisecond}
	b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: engines, MaxQueueDelay: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	img := oneFrame(t)
	round := func(deadline time.Time) (ok int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var st pipeline.StageTimes
				if _, err := b.Do(ctx, deadline, img, &st, nil); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return ok
	}
	require.Equal(t, 4, round(time.Time{}), "the stalled batch of 4, no deadline")
	_, perFrame := b.Load()
	require.GreaterOrEqual(t, perFrame, 90*time.Millisecond, "400 ms for 4 frames")

	// Only the batch-1 engine runs for 2 × StaleEstimate.
	for end := time.Now().Add(2 * pipeline.StaleEstimate); time.Now().Before(end); {
		var st pipeline.StageTimes
		_, err := b.Do(ctx, time.Time{}, img, &st, nil)
		require.NoError(t, err)
	}
	_, perFrame = b.Load()
	require.Zero(t, perFrame, "the batch-4 estimate has expired")
	require.Equal(t, 4, round(time.Now().Add(300*time.Millisecond)), "a batch of 4 with a 300 ms deadline runs again")
}
