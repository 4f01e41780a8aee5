package pipeline_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// tapAnalyzer asks the tap for frames from the worker: Request at seq
// 10, Mark at seq 20 and at seq 21 twice.
type tapAnalyzer struct{ tap *pipeline.Tap }

func (a *tapAnalyzer) Analyze(r *pipeline.Result) bool {
	switch r.Seq {
	case 10:
		a.tap.Request() // taken after the analyzer: this very frame
	case 20:
		a.tap.Mark("twenty")
	case 21:
		a.tap.Mark("a")
		a.tap.Mark("b")
	}
	return false
}

func (a *tapAnalyzer) Close() {}

// messageSink is collectSink that also keeps the message, as the NATS
// sink does when KeepMessage asks.
type messageSink struct{ collectSink }

func (m *messageSink) Publish(ctx context.Context, r *pipeline.Result) error {
	if r.KeepMessage {
		r.Message = []byte("message of a frame")
	}
	return m.collectSink.Publish(ctx, r)
}

// Real FFmpeg + ORT on Megamind.avi (720×528): the tap hands over only the
// frames asked for, each with a copy of its picture at the stream's size
// (not the model's letterbox), its result and the marks made while it was
// analyzed; nobody asking, the deliver function is never called.
func TestTapHandsOverAskedFrames(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "m"})
	require.NoError(t, err)
	var mu sync.Mutex
	var got []*pipeline.TapFrame
	tap := pipeline.NewTap(func(tf *pipeline.TapFrame) {
		mu.Lock()
		got = append(got, tf)
		mu.Unlock()
	})
	sink := &messageSink{}
	require.NoError(t, pipeline.RunStream(context.Background(), pipeline.StreamConfig{
		ID: "m", Source: src, Engine: engine(t), Sink: sink, Lossless: true, Tap: tap, Analyzer: &tapAnalyzer{tap: tap},
	}))
	require.Len(t, sink.seqs, 270)
	require.Len(t, got, 3, "seq 10 (requested), 20 and 21 (marked), nothing else")
	for i, want := range []struct {
		seq   uint64
		marks []any
	}{{10, nil}, {20, []any{"twenty"}}, {21, []any{"a", "b"}}} {
		tf := got[i]
		require.Equal(t, want.seq, tf.Result.Seq)
		require.Equal(t, want.marks, tf.Marks)
		require.NoError(t, tf.Err)
		require.NotNil(t, tf.Picture)
		b := tf.Picture.Image.Bounds()
		require.Equal(t, [2]int{tf.Result.Width, tf.Result.Height}, [2]int{b.Dx(), b.Dy()})
		require.Equal(t, [2]int{720, 528}, [2]int{b.Dx(), b.Dy()}, "the stream's resolution")
		require.Equal(t, "message of a frame", string(tf.Message))
		require.NotEmpty(t, tf.Result.Detections, "Megamind has a face in frame %d", tf.Result.Seq)
		var sum int
		for _, v := range tf.Picture.Image.Y {
			sum += int(v)
		}
		require.Greater(t, sum/len(tf.Picture.Image.Y), 16, "a picture, not black")
	}
}
