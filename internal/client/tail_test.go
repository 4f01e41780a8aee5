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

// vigil tail --analytics prints a running stream's analytics events and
// counts readably; without it, detection lines show each tracked
// detection's track (#n) and zones.
func TestTailAnalytics(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "")
	// testenv.FacePan: one face crossing x 256 rightwards 2 s into the
	// clip, played in real time.
	spec := `{"id":"pan","url":"` + testenv.FacePan(t) + `","realtime":true,"analytics":` +
		`{"zones":[{"name":"right","polygon":[[256,0],[512,0],[512,256],[256,256]],"anchor":"center"}],` +
		`"lines":[{"name":"mid","a":[256,256],"b":[256,0],"anchor":"center"}]}}`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	done := make(chan error, 1)
	notes := vigiltest.NewLockedWriter()
	go func() {
		// Up to the crossing: the counts before it, the track's start,
		// the zone's entry and the crossing (a frame apart, in either
		// order) and the counts after them.
		done <- client.Tail(ctx, client.TailOptions{URL: v.EP.NATS, Analytics: true, Count: 5, Notes: notes, Quiet: 50 * time.Millisecond}, &out)
	}()
	// A quiet note comes once tail has subscribed: the stream added after
	// it cannot publish before.
	testenv.Eventually(t, func() bool { return strings.Contains(notes.String(), "vigil.*.analytics or vigil.*.counts") },
		20*time.Second, 20*time.Millisecond, "tail subscribed")
	code, b := v.Call("POST", "/v1/streams", spec)
	require.Equal(t, http.StatusCreated, code, string(b))
	require.NoError(t, <-done)
	lines := out.String()
	t.Log("\n" + lines)
	require.Regexp(t, `(?m)^pan +counts v1 +zone right: 0  line mid: in 0, out 0$`, lines)
	require.Regexp(t, `(?m)^pan +pts +[0-9.]+ s  track_start +face#1 \[`, lines)
	require.Regexp(t, `(?m)^pan +pts +2\.[0-9]+ s  line_cross +mid in +face#1 \[`, lines)

	out.Reset()
	require.NoError(t, client.Tail(ctx, client.TailOptions{URL: v.EP.NATS, Stream: "pan", Count: 3}, &out))
	require.Regexp(t, `face#1 0\.[0-9]+ \[[0-9]+,[0-9]+ [0-9]+,[0-9]+\]`, out.String())
}
