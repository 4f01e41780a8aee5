package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

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
	err := client.Tail(ctx, client.TailOptions{URL: v.EP.NATS, Stream: "nope"}, io.Discard)
	require.Error(t, err)
	require.True(t, cli.IsBadInput(err), "%v", err)
	require.ErrorContains(t, err, `--stream "nope": no such stream in registry vigil_streams (registered: cam, off)`)
	require.Less(t, time.Since(start), 30*time.Second, "answered, not timed out")

	notes := vigiltest.NewLockedWriter()
	done := make(chan error, 1)
	tctx, stop := context.WithCancel(ctx)
	go func() {
		done <- client.Tail(tctx, client.TailOptions{URL: v.EP.NATS, Stream: "off", Notes: notes, Quiet: 100 * time.Millisecond}, io.Discard)
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
	require.NoError(t, client.Tail(ctx, client.TailOptions{URL: v.EP.NATS, Stream: "cam", Count: 2, Notes: notes}, &out))
	require.Equal(t, 2, strings.Count(out.String(), "cam "))
	require.Empty(t, notes.String())
}
