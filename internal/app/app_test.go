package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
	"github.com/vigil-video/vigil/sinks"
)

// Every goroutine but nats.go's known one (testenv.IgnoreNATSPutLeak:
// event snapshots go through ObjectStore.Put) is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreNATSPutLeak) }

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(sinks.SchemaJSON))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("detections.schema.json", doc))
	s, err := c.Compile("detections.schema.json")
	require.NoError(t, err)
	return s
}

// End to end in-process: `vigil run` wiring with the embedded NATS on a
// free port over Megamind.avi (270 frames, frame 0 black, faces after).
func TestRunEndToEnd(t *testing.T) {
	schema := compileSchema(t)
	cfg := `
data_dir: "` + t.TempDir() + `"
api: {listen: "127.0.0.1:0"}
log: {level: warn}
metrics: {listen: "127.0.0.1:0"}
nats: {listen: "127.0.0.1:0"}
pipeline: {progress_interval: 1s, queue_size: 300, budget_ms: 0}
streams:
  - id: megamind
    url: ` + testenv.Media(t, "Megamind.avi") + `
    model: blazeface
`
	c, err := config.Parse([]byte(cfg), "e2e.yaml")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := vigiltest.NewLockedWriter()
	r := runSubscribed(t, ctx, c, progress, "vigil.megamind.detections")
	metricsURL := "http://" + r.ep.Metrics + "/metrics"
	testenv.Eventually(t, func() bool { return len(r.messages()) == 270 }, 60*time.Second, 50*time.Millisecond, "all 270 frames published")
	msgs := r.messages()

	faces := 0
	var epoch string
	for i, m := range msgs {
		var v any
		require.NoError(t, json.Unmarshal(m.Data, &v))
		require.NoError(t, schema.Validate(v), "message %d: %s", i, m.Data)
		var msg sinks.Message
		require.NoError(t, json.Unmarshal(m.Data, &msg))
		if i == 0 {
			epoch = msg.Epoch
		}
		require.Equal(t, epoch, msg.Epoch, "one run, one epoch")
		require.Equal(t, "megamind/"+epoch+"/"+strconv.Itoa(i), m.Header.Get("Nats-Msg-Id"))
		require.Equal(t, uint64(i), msg.Seq)
		require.Equal(t, 720, msg.Width)
		require.GreaterOrEqual(t, msg.LatencyMS.Total, msg.LatencyMS.Infer)
		require.False(t, msg.PublishTime.Before(msg.CaptureTime))
		if i > 0 && len(msg.Detections) > 0 {
			faces++
		}
	}
	require.GreaterOrEqual(t, float64(faces)/269, 0.9, "frames after frame 0 with a face: %d of 269", faces)

	// The stream counts a frame as processed just after publishing it, so
	// the last frame's counters can lag its message by a moment.
	wants := []string{
		`vigil_frames_decoded_total{stream="megamind"} 270` + "\n",
		`vigil_frames_processed_total{stream="megamind"} 270` + "\n",
		`vigil_stage_latency_seconds_bucket{stage="infer",stream="megamind"`,
		`vigil_stage_latency_seconds_count{stage="total",stream="megamind"} 270` + "\n",
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(metricsURL)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := slices.IndexFunc(wants, func(w string) bool { return !strings.Contains(string(b), w) })
		if missing < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics 5 s after the 270th message lack %s:\n%s", wants[missing], b)
		}
	}
	testenv.Eventually(t, func() bool { return strings.Contains(progress.String(), "megamind") }, 5*time.Second, 50*time.Millisecond, "a progress line for megamind")
	cancel()
	require.NoError(t, r.wait())
}

// subscribedRun is an in-process `vigil run` whose detections on one
// subject are collected from the moment it is ready, before any frame.
type subscribedRun struct {
	ep   app.Endpoints
	done chan error
	mu   sync.Mutex
	msgs []*nats.Msg
}

// runSubscribed starts app.Run with c (progress lines to progress, which
// may be nil) and, from its ready callback, subscribes to subject; it
// returns once the subscription is in place, and fails t if vigil stops
// before. The callback runs on Run's goroutine, so it reports to the test
// goroutine rather than calling require itself.
func runSubscribed(t *testing.T, ctx context.Context, c config.Config, progress io.Writer, subject string) *subscribedRun {
	t.Helper()
	r := &subscribedRun{done: make(chan error, 1)}
	var nc *nats.Conn
	subscribed := make(chan error, 1)
	go func() {
		r.done <- app.Run(ctx, c, zaptest.NewLogger(t), progress, func(ep app.Endpoints) {
			r.ep = ep
			var err error
			if nc, err = nats.Connect(ep.NATS); err == nil {
				_, err = nc.Subscribe(subject, func(m *nats.Msg) {
					r.mu.Lock()
					r.msgs = append(r.msgs, m)
					r.mu.Unlock()
				})
			}
			if err == nil {
				err = nc.Flush()
			}
			subscribed <- err
		})
	}()
	select {
	case err := <-subscribed:
		require.NoError(t, err)
	case err := <-r.done:
		t.Fatalf("vigil stopped before it was ready: %v", err)
	}
	t.Cleanup(nc.Close)
	return r
}

// messages returns the messages received so far.
func (r *subscribedRun) messages() []*nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// wait returns Run's result once it has returned (after ctx ended).
func (r *subscribedRun) wait() error { return <-r.done }
