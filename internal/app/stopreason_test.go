package app_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
	"github.com/vigil-video/vigil/sinks"
)

// A stream that vigil stops at shutdown is handed over (the node drains
// its leases first), and its stopped event says so: it said "removed", the
// reason of a stream deleted from the registry, so a consumer of the events
// took a restart of vigil for the camera's removal. A stream deleted
// through the API still says "removed".
func TestStoppedReasonAtShutdown(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), `pipeline: {progress_interval: 0s}`)
	clip := testenv.Media(t, "Megamind.avi")
	for _, id := range []string{"kept", "gone"} {
		code, b := v.Call("POST", "/v1/streams", `{"id":"`+id+`","url":"`+clip+`","realtime":true,"loop":true}`)
		require.Equal(t, http.StatusCreated, code, string(b))
	}
	gone := v.Events("gone")
	// Its own connection: v.Stop closes v.NC before stopping vigil.
	nc, err := nats.Connect(v.EP.NATS)
	require.NoError(t, err)
	defer nc.Close()
	kept := make(chan *nats.Msg, 16)
	_, err = nc.ChanSubscribe(sinks.StreamSubject("vigil", "kept", sinks.KindEvents), kept)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	v.WaitState("kept", "running", time.Minute)
	v.WaitState("gone", "running", time.Minute)
	start := time.Now()
	code, b := v.Call("DELETE", "/v1/streams/gone", "")
	require.Equal(t, http.StatusNoContent, code, string(b))
	// Within 10 s: the event is published as the stream stops, which its
	// worker does within a frame (42 ms); the margin is for a loaded machine.
	testenv.Eventually(t, func() bool { _, ok := gone.First("stopped", start); return ok }, 10*time.Second, 20*time.Millisecond, "gone's stopped event")
	e, _ := gone.First("stopped", start)
	require.Equal(t, "removed", e.Reason, e.Raw)

	v.Stop()
	// The event was published before vigil's NATS server stopped; its
	// delivery to this client may trail v.Stop by the socket's latency
	// (10 s: a margin for a loaded machine).
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-kept:
			var e struct{ Type, Reason string }
			require.NoError(t, json.Unmarshal(m.Data, &e))
			if e.Type == "stopped" {
				require.Equal(t, "handed over", e.Reason, string(m.Data))
				return
			}
		case <-deadline:
			t.Fatal("no stopped event for kept within 10 s of vigil stopping")
		}
	}
}
