package sinks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func result(seq uint64) *pipeline.Result {
	now := time.Now()
	return &pipeline.Result{
		StreamID: "cam-1", Epoch: "0000abcd1234", Labels: map[string]string{"site": "lab"}, Seq: seq, PTS: 1.5, Keyframe: true, Capture: now.Add(-20 * time.Millisecond),
		Ready: now.Add(-time.Millisecond), Width: 720, Height: 528, Model: "blazeface",
		Detections: []pipeline.Detection{{Label: "face", Score: 0.9, Box: pipeline.Box{X1: 1, Y1: 2, X2: 30, Y2: 40},
			Keypoints: []pipeline.Point{{X: 5, Y: 6}}}},
		Stages: pipeline.StageTimes{Decode: 2 * time.Millisecond, Infer: 3 * time.Millisecond},
	}
}

// Real embedded NATS: subject, Nats-Msg-Id header and payload.
func TestNATSPublish(t *testing.T) {
	ns, err := natsserver.Start("127.0.0.1:0", "", "")
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()

	sub, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer sub.Close()
	ch := make(chan *nats.Msg, 10)
	_, err = sub.ChanSubscribe("vigil.*.detections", ch)
	require.NoError(t, err)
	require.NoError(t, sub.Flush())

	s, err := sinks.DialNATS(context.Background(), sinks.NATSOptions{URL: ns.ClientURL()})
	require.NoError(t, err)
	r := result(42)
	require.NoError(t, s.Publish(context.Background(), r))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "idempotent")

	select {
	case m := <-ch:
		require.Equal(t, "vigil.cam-1.detections", m.Subject)
		require.Equal(t, "cam-1/0000abcd1234/42", m.Header.Get("Nats-Msg-Id"))
		var msg sinks.Message
		require.NoError(t, json.Unmarshal(m.Data, &msg))
		require.Equal(t, sinks.SchemaVersion, msg.Schema)
		require.Equal(t, uint64(42), msg.Seq)
		require.Equal(t, "0000abcd1234", msg.Epoch)
		require.Equal(t, map[string]string{"site": "lab"}, msg.Labels)
		require.Len(t, msg.Detections, 1)
		require.InDelta(t, 3.0, msg.LatencyMS.Infer, 1e-9)
		require.GreaterOrEqual(t, msg.LatencyMS.Total, 20.0)
		require.GreaterOrEqual(t, msg.LatencyMS.Publish, 1.0)
		require.Equal(t, msg.PublishTime, r.Published.UTC())
		require.Contains(t, string(m.Data), `"capture_time":"`)
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
	require.GreaterOrEqual(t, r.Stages.Total, 20*time.Millisecond, "metric-side total set after the send")
}

func TestDialNATSUnreachable(t *testing.T) {
	start := time.Now()
	_, err := sinks.DialNATS(context.Background(), sinks.NATSOptions{URL: "nats://127.0.0.1:1"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.Less(t, time.Since(start), 20*time.Second)
}

func TestJSONLines(t *testing.T) {
	var buf bytes.Buffer
	s := sinks.NewJSONLines(&buf)
	require.NoError(t, s.Publish(context.Background(), result(0)))
	r := result(1)
	r.Detections = nil
	require.NoError(t, s.Publish(context.Background(), r))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], `"detections":[]`, "an empty list, never null")
}
