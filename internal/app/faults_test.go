package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
	"github.com/vigil-video/vigil/sinks"
)

// damagedH264 makes a 50-frame H.264 elementary stream with the ffmpeg CLI
// and flips 8 bytes at 20 places in its second half: slices the decoder
// conceals or fails on.
func damagedH264(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "damaged.h264")
	out, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi",
		"-i", "testsrc=size=320x240:rate=25", "-frames:v", "50", "-c:v", "libx264", "-bf", "0", "-g", "50",
		"-pix_fmt", "yuv420p", p).CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", out)
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	testenv.Damage(data, 20, 8)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// Damaged frames reach the messages (corrupt: true, valid against the
// schema) and vigil_frames_corrupt_total, which counts exactly them.
func TestCorruptFramesEndToEnd(t *testing.T) {
	schema := compileSchema(t)
	path := damagedH264(t)
	v := vigiltest.Start(t, t.TempDir(), "pipeline: {progress_interval: 0s, queue_size: 100, budget_ms: 0}")
	var mu sync.Mutex
	var msgs []sinks.Message
	_, err := v.NC.Subscribe("vigil.bad.detections", func(m *nats.Msg) {
		var raw any
		var msg sinks.Message
		if json.Unmarshal(m.Data, &raw) != nil || schema.Validate(raw) != nil || json.Unmarshal(m.Data, &msg) != nil {
			msg.StreamID = "invalid: " + string(m.Data) // fails the check below
		}
		mu.Lock()
		msgs = append(msgs, msg)
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, v.NC.Flush())
	code, b := v.Call("POST", "/v1/streams", fmt.Sprintf(`{"id":"bad","url":%q,"model":"blazeface"}`, path))
	require.Equal(t, http.StatusCreated, code, string(b))

	// The file ends; every frame it decoded is then published (no drops:
	// no budget, a queue longer than the file).
	var decoded float64
	testenv.Eventually(t, func() bool {
		decoded = vigiltest.MetricValue(t, v, `vigil_frames_decoded_total{stream="bad"}`)
		mu.Lock()
		defer mu.Unlock()
		return decoded > 0 && float64(len(msgs)) == decoded && vigiltest.MetricValue(t, v, `vigil_frames_processed_total{stream="bad"}`) == decoded
	}, 30*time.Second, 50*time.Millisecond, "every decoded frame published")
	mu.Lock()
	defer mu.Unlock()
	corrupt := 0
	for _, m := range msgs {
		require.Equal(t, "bad", m.StreamID)
		if m.Corrupt {
			corrupt++
		}
	}
	require.NotZero(t, corrupt)
	require.Less(t, corrupt, len(msgs), "frames before the damage are whole")
	require.Equal(t, float64(corrupt), vigiltest.MetricValue(t, v, `vigil_frames_corrupt_total{stream="bad"}`))
}
