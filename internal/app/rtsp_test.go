package app_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/sinks"
)

// A real RTSP server (gst-rtsp-server through python3-gi) serves vtest.avi
// re-encoded to H.264 by FFmpeg; vigil reads it over RTSP/TCP and publishes
// a schema-valid message for at least 100 frames.
func TestRTSPEndToEnd(t *testing.T) {
	schema := compileSchema(t)
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true})

	cfg := `
data_dir: "` + t.TempDir() + `"
api: {listen: "127.0.0.1:0"}
log: {level: warn}
metrics: {listen: "off"}
nats: {listen: "127.0.0.1:0"}
pipeline: {progress_interval: 0s}
streams:
  - {id: street, url: "` + srv.URL + `", transport: tcp, model: blazeface, open_timeout: 10s, stall_timeout: 5s}
`
	c, err := config.Parse([]byte(cfg), "rtsp.yaml")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := runSubscribed(t, ctx, c, nil, "vigil.street.detections")
	testenv.Eventually(t, func() bool { return len(r.messages()) >= 100 }, 90*time.Second, 100*time.Millisecond, "100 frames over RTSP")
	cancel()
	require.NoError(t, r.wait())

	msgs := r.messages()
	var last uint64
	for i, m := range msgs {
		var v any
		require.NoError(t, json.Unmarshal(m.Data, &v))
		require.NoError(t, schema.Validate(v), "message %d", i)
		var msg sinks.Message
		require.NoError(t, json.Unmarshal(m.Data, &msg))
		require.Equal(t, 768, msg.Width)
		require.Equal(t, 576, msg.Height)
		if i > 0 {
			require.Greater(t, msg.Seq, last)
		}
		last = msg.Seq
	}
}
