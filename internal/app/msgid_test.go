package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
	"github.com/vigil-video/vigil/sinks"
)

// eventLine matches the log line publishEvent writes for every event it
// publishes (one per lifecycle event).
var eventLine = regexp.MustCompile(`"msg":"stream (starting|running|reconnecting|failed|stopped|degraded|restored|model_switched)"`)

// A JetStream stream with de-duplication (the 2-minute default window)
// capturing vigil's subjects keeps every message of two consecutive vigil
// runs and of a reconfiguration (`vigil streams set`), count for count:
// seq starts at 0 in each run of a stream, so ids made of stream and seq
// alone were taken for duplicates of the first run's and dropped.
func TestJetStreamKeepsEveryRunsMessages(t *testing.T) {
	dir := t.TempDir()
	const frames = 270 // Megamind.avi, processed losslessly: queue 300, no budget
	body := `pipeline: {progress_interval: 0s, queue_size: 300, budget_ms: 0}`
	v := vigiltest.Start(t, dir, body)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The capture lives in the embedded server's store under dir, so it
	// outlives each vigil; every vigil gets its own client.
	capture := func(v *vigiltest.Vigil) jetstream.Stream {
		js, err := jetstream.New(v.NC)
		require.NoError(t, err)
		s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "CAPTURE", Subjects: []string{"vigil.*.detections", "vigil.*.events", "vigil.*.alerts"},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
		})
		require.NoError(t, err)
		return s
	}
	// stored returns the captured messages on subjects matching filter.
	stored := func(s jetstream.Stream, filter string) uint64 {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		require.NoError(t, err)
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n
	}
	// expect waits until the capture holds want() messages on filter, and
	// fails with what it holds if it does not within 30 s (JetStream stores
	// a message within milliseconds, and vigil logs an event just after
	// publishing it; the margin is for a loaded CI machine).
	expect := func(s jetstream.Stream, filter string, want func() uint64, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for stored(s, filter) != want() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		require.Equal(t, want(), stored(s, filter), "%s: messages captured on %s", what, filter)
	}
	count := func(n uint64) func() uint64 { return func() uint64 { return n } }
	eventsLogged := func(v *vigiltest.Vigil) uint64 { return uint64(len(eventLine.FindAllString(v.Logs.String(), -1))) }
	processed := func(v *vigiltest.Vigil) uint64 {
		return uint64(vigiltest.MetricValue(t, v, `vigil_frames_processed_total{stream="mm"}`))
	}

	// Run 1: the stream is added once the capture exists.
	c := capture(v)
	code, b := v.Call("POST", "/v1/streams", `{"id":"mm","url":"`+testenv.Media(t, "Megamind.avi")+`"}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	first := v.WaitState("mm", "stopped", 2*time.Minute)
	require.Equal(t, uint64(frames), processed(v))
	expect(c, "vigil.*.detections", count(frames), "first run")
	expect(c, "vigil.*.events", func() uint64 { return eventsLogged(v) }, "first run's events")
	events := eventsLogged(v)
	v.Stop() // the stream has ended: stopping publishes no event

	// Run 2: a new vigil over the same data directory runs the stored
	// stream again from frame 0.
	v = vigiltest.Start(t, dir, body)
	c = capture(v)
	second := v.WaitState("mm", "stopped", 2*time.Minute)
	require.NotEqual(t, first.Status.Epoch, second.Status.Epoch, "a new run, a new epoch")
	require.Equal(t, uint64(frames), processed(v))
	expect(c, "vigil.*.detections", count(2*frames), "second vigil run")

	// Run 3: `vigil streams set` (a PATCH) restarts the stream with its new
	// spec, again from frame 0.
	code, b = v.Call("PATCH", "/v1/streams/mm", `{"labels":{"site":"lab"}}`)
	require.Equal(t, http.StatusOK, code, string(b))
	testenv.Eventually(t, func() bool {
		s, ok := v.Stream("mm")
		return ok && s.Status != nil && s.Status.Epoch != second.Status.Epoch && s.Status.State == "stopped"
	}, 2*time.Minute, 50*time.Millisecond, "the reconfigured stream ran to its end")
	require.Equal(t, uint64(2*frames), processed(v), "the counter spans the two runs of this vigil")
	expect(c, "vigil.*.detections", count(3*frames), "after streams set")

	// Every event of the three runs is kept too.
	expect(c, "vigil.*.events", func() uint64 { return events + eventsLogged(v) }, "events of the three runs")
	require.GreaterOrEqual(t, events+eventsLogged(v), uint64(3*3), "starting, running and stopped in each run")

	// The last run's messages carry its epoch and the stream's labels.
	m, err := c.GetLastMsgForSubject(ctx, "vigil.mm.detections")
	require.NoError(t, err)
	var msg sinks.Message
	require.NoError(t, json.Unmarshal(m.Data, &msg))
	require.Equal(t, map[string]string{"site": "lab"}, msg.Labels)
	require.Equal(t, uint64(frames-1), msg.Seq)
	require.Equal(t, "mm/"+msg.Epoch+"/"+"269", m.Header.Get("Nats-Msg-Id"))
}
