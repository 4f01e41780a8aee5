package pipeline_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// trackAnalyzer runs the real tracker (analytics.Stage) on every frame.
type trackAnalyzer struct{ st *analytics.Stage }

func (a trackAnalyzer) Analyze(r *pipeline.Result) bool {
	a.st.Observe(r.PTS, r.Capture, r.Width, r.Height, r.Detections)
	return true
}

func (trackAnalyzer) Close() {}

// switchSink records each result's model, epoch and track ids, and flips
// the stream to its light route at seq on and back at seq off.
type switchSink struct {
	status  *pipeline.Status
	on, off uint64
	mu      sync.Mutex
	seqs    []uint64
	models  []string
	epochs  map[string]bool
	tracks  []map[string]bool // by result
}

func (s *switchSink) Publish(_ context.Context, r *pipeline.Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seqs = append(s.seqs, r.Seq)
	s.models = append(s.models, r.Model)
	s.epochs[r.Epoch] = true
	ids := map[string]bool{}
	for _, d := range r.Detections {
		if d.TrackID != "" {
			ids[d.TrackID] = true
		}
	}
	s.tracks = append(s.tracks, ids)
	switch r.Seq {
	case s.on:
		s.status.SetLight(true)
	case s.off:
		s.status.SetLight(false)
	}
	return nil
}

func blazeFace(t *testing.T, name, file string) *infer.Engine {
	t.Helper()
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	e, err := infer.Open(infer.Options{Name: name, Path: testenv.Model(t, file), Resizer: sc})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close(); sc.Close() })
	return e
}

// Real FFmpeg, two real BlazeFace engines and the real tracker: a stream
// switched to its light route mid-run and back keeps its decoder (every
// frame in order, one epoch) and its tracks (a track id spans each
// switch), and each result names the model that produced it, from the
// frame after the switch.
func TestRunStreamLightRoute(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "m"})
	require.NoError(t, err)
	status := pipeline.NewStatus(pipeline.StateStarting)
	st, err := analytics.New("m", "e", analytics.Config{})
	require.NoError(t, err)
	const on, off = 80, 160
	sink := &switchSink{status: status, on: on, off: off, epochs: map[string]bool{}}
	heavy := blazeFace(t, "faces", "face_detection_back_256x256_barracuda.onnx")
	light := blazeFace(t, "faces-light", "face_detection_front_128x128_barracuda.onnx")
	require.NoError(t, pipeline.RunStream(context.Background(), pipeline.StreamConfig{
		ID: "m", Epoch: "e", Source: src, Engine: heavy, Sink: sink, Lossless: true, Status: status,
		Light: &pipeline.Route{Engine: light}, Analyzer: trackAnalyzer{st},
	}))
	require.Greater(t, len(sink.seqs), off+10, "the clip is longer than the test's switches")
	for i, seq := range sink.seqs {
		require.Equal(t, uint64(i), seq, "every frame, in order: the decoder ran on")
		want := "faces"
		if seq > on && seq <= off {
			want = "faces-light"
		}
		require.Equal(t, want, sink.models[i], "seq %d", seq)
	}
	require.Len(t, sink.epochs, 1, "one run of the stream")
	// A face tracked across each switch keeps its id: the tracker is the
	// same, and classes match by name ("face" in both models).
	spans := func(at uint64) int {
		n := 0
		for id := range sink.tracks[at] {
			if sink.tracks[at+1][id] {
				n++
			}
		}
		return n
	}
	t.Logf("track ids spanning the switch to the light model: %d, back: %d", spans(on), spans(off))
	require.Positive(t, spans(on), "a track id spans the switch to the light model")
	require.Positive(t, spans(off), "and the switch back")
	require.Equal(t, "faces", status.Snapshot().Model)
}
