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

	testenv.Eventually(t, func() bool { s, _ := sup.Status("bad"); return s.State == pipeline.StateFailed }, 20*time.Second, 20*time.Millisecond, "stream bad failed")
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
	var engines []pipeline.BatchEngine
	opened := openBlazeFace(t, "face_detection_front_128x128_barracuda.onnx", "face_detection_front_128x128_barracuda.b4.onnx", "face_detection_front_128x128_barracuda.b8.onnx")
	for _, e := range opened {
		engines = append(engines, e)
	}
	first := opened[0]
	m := pipeline.NewMetrics(prometheus.NewRegistry())
	b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: engines, Preferred: []int{4, 8}, MaxQueueDelay: 3 * time.Millisecond, Metrics: m, Concurrency: concurrency})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	var wg sync.WaitGroup
	sinks := make([]*collectSink, 4)
	errs := make([]error, len(sinks)) // RunStream's results, checked on the test goroutine
	for i := range sinks {
		sinks[i] = &collectSink{}
		src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi")})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pipeline.RunStream(ctx, pipeline.StreamConfig{ID: "b", Source: src, Engine: first, Sink: sinks[i], Batcher: b, Lossless: true})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "stream %d", i)
	}
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
	e := openBlazeFace(t, "face_detection_front_128x128_barracuda.onnx")[0]
	m := pipeline.NewMetrics(prometheus.NewRegistry())
	b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: []pipeline.BatchEngine{e}, MaxQueueDelay: time.Millisecond, Metrics: m})
	ctx := startBatcher(t, b)

	img := oneFrame(t)
	var st pipeline.StageTimes
	_, err := b.Do(ctx, time.Now().Add(-time.Second), img, &st, nil)
	require.ErrorIs(t, err, pipeline.ErrLate, "past its deadline before any estimate")
	_, err = b.Do(ctx, time.Now().Add(time.Minute), img, &st, nil)
	require.NoError(t, err, "time to spare: runs")
	_, err = b.Do(ctx, time.Now().Add(-time.Second), img, &st, nil)
	require.ErrorIs(t, err, pipeline.ErrLate)
	var metric dto.Metric
	require.NoError(t, m.BatchLate.Write(&metric))
	require.Equal(t, 2.0, metric.GetCounter().GetValue())
}

// gated wraps a real batch engine and holds each execution until its
// gate is opened, so that a test can keep the batcher's slots busy;
// entered receives one value per execution that reached the gate.
type gated struct {
	pipeline.BatchEngine
	gate    chan struct{}
	entered chan struct{}
}

func (g *gated) DetectBatch(imgs []pipeline.Image, sts []*pipeline.StageTimes, dsts [][]pipeline.Detection) ([][]pipeline.Detection, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.BatchEngine.DetectBatch(imgs, sts, dsts)
}

// While every slot is busy, a request that can no longer make its
// deadline is refused at once, not when a slot frees: its stream moves on
// to a younger frame.
func TestBatcherRefusesLateWhileSlotsBusy(t *testing.T) {
	e := openBlazeFace(t, "face_detection_front_128x128_barracuda.onnx")[0]
	g := &gated{BatchEngine: e, gate: make(chan struct{}), entered: make(chan struct{}, 8)}
	close(g.gate) // open for the first, measuring run
	m := pipeline.NewMetrics(prometheus.NewRegistry())
	b := pipeline.NewBatcher(pipeline.BatcherConfig{Engines: []pipeline.BatchEngine{g}, MaxQueueDelay: time.Millisecond, Metrics: m, Concurrency: 2})
	ctx := startBatcher(t, b)

	img := oneFrame(t)
	var st pipeline.StageTimes
	_, err := b.Do(ctx, time.Time{}, img, &st, nil)
	require.NoError(t, err, "measures the engine")
	<-g.entered

	g.gate = make(chan struct{}) // executions now wait
	busyErrs := make(chan error, 2)
	for range 2 { // fill both slots
		go func() {
			var st pipeline.StageTimes
			_, err := b.Do(ctx, time.Time{}, img, &st, nil)
			busyErrs <- err
		}()
	}
	<-g.entered // both slots are held at the gate
	<-g.entered
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
	require.NoError(t, <-busyErrs)
	require.NoError(t, <-busyErrs)
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

// openBlazeFace opens real BlazeFace engines, one per model file of
// testdata (the batch-1 model and its .b4/.b8 copies), closed when the test
// ends.
func openBlazeFace(t *testing.T, files ...string) []*infer.Engine {
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	var out []*infer.Engine
	for _, f := range files {
		sc := decode.NewScaler()
		e, err := infer.Open(infer.Options{Name: "blazeface", Path: testenv.Model(t, f), Resizer: sc})
		require.NoError(t, err)
		t.Cleanup(func() { e.Close(); sc.Close() })
		out = append(out, e)
	}
	return out
}

// startBatcher runs b's dispatcher until the test ends and returns the
// context to call Do with.
func startBatcher(t *testing.T, b *pipeline.Batcher) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}
