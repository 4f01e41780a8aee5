package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// An alert's log line carries "reasons" only when it has some: a
// budget_miss alert has none and used to log "reasons": null.
func TestAlertLogHasNoNullReasons(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "pipeline: {progress_interval: 0s, alert_interval: 100ms}\n")
	// A 1 ms budget: the first frame (and the first after each idle spell,
	// before any cost is measured) is not predicted late, runs, and is
	// published long after 1 ms; the frames after it are dropped as
	// deadline, which raises frame_drop alerts with reasons.
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "late", "Megamind.avi", `,"budget_ms":1`))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitLogs(`"msg":"alert","stream":"late","type":"budget_miss","count":\d+}`,
		`"msg":"alert","stream":"late","type":"frame_drop","count":\d+,"reasons":\{"deadline":\d+`)
	require.NotContains(t, v.Logs.String(), `"reasons":null`)
}

// vigil tail --stream with an id that is not registered is bad input that
// names the registered streams, at once (it used to wait silently for
// ever); a disabled stream, and a quiet spell, get a note.
func TestTailUnknownAndQuietStreams(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "")
	for _, body := range []string{vigiltest.FileStream(t, "cam", "tree.avi", ""), vigiltest.FileStream(t, "off", "tree.avi", `,"enabled":false`)} {
		code, b := v.Call("POST", "/v1/streams", body)
		require.Equal(t, http.StatusCreated, code, string(b))
	}
	// The context is only the test's backstop (a minute: on today's code
	// Tail waited until it ended); the answer has to come without it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := app.Tail(ctx, app.TailOptions{URL: v.EP.NATS, Stream: "nope"}, io.Discard)
	require.Error(t, err)
	require.True(t, cli.IsBadInput(err), "%v", err)
	require.ErrorContains(t, err, `--stream "nope": no such stream in registry vigil_streams (registered: cam, off)`)
	require.Less(t, time.Since(start), 30*time.Second, "answered, not timed out")

	notes := vigiltest.NewLockedWriter()
	done := make(chan error, 1)
	tctx, stop := context.WithCancel(ctx)
	go func() {
		done <- app.Tail(tctx, app.TailOptions{URL: v.EP.NATS, Stream: "off", Notes: notes, Quiet: 100 * time.Millisecond}, io.Discard)
	}()
	testenv.Eventually(t, func() bool {
		s := notes.String()
		return strings.Contains(s, "stream off is disabled") && strings.Contains(s, "no message on vigil.off.detections for 100ms")
	}, 20*time.Second, 20*time.Millisecond, "notes: %s", notes)
	stop()
	require.NoError(t, <-done)

	// A registered stream that runs: its messages, no note.
	notes = vigiltest.NewLockedWriter()
	var out bytes.Buffer
	require.NoError(t, app.Tail(ctx, app.TailOptions{URL: v.EP.NATS, Stream: "cam", Count: 2, Notes: notes}, &out))
	require.Equal(t, 2, strings.Count(out.String(), "cam "))
	require.Empty(t, notes.String())
}
