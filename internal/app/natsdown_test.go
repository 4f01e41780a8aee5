package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/doctor"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// An external NATS server (JetStream under its own directory) that the
// test stops and starts again on the same port.
type externalNATS struct {
	t    *testing.T
	dir  string
	addr string
	ns   *server.Server
}

// startExternalNATS starts the server; its cleanup is registered first, so
// it runs after that of a vigil started later (cleanups run last in,
// first out).
func startExternalNATS(t *testing.T) *externalNATS {
	t.Helper()
	x := &externalNATS{t: t, dir: t.TempDir(), addr: "127.0.0.1:0"}
	x.start()
	x.addr = x.ns.Addr().String()
	t.Cleanup(x.stop)
	return x
}

func (x *externalNATS) start() {
	x.t.Helper()
	ns, err := natsserver.Start(x.addr, x.dir, "")
	require.NoError(x.t, err)
	x.ns = ns
}

func (x *externalNATS) stop() {
	if x.ns != nil {
		x.ns.Shutdown()
		x.ns.WaitForShutdown()
		x.ns = nil
	}
}

// With the external NATS server stopped, the progress line marks the
// published frames as buffered and says since when NATS is down, the
// metrics say it (vigil_nats_connected 0, the reconnect buffer filling,
// the stream still up: it runs), `streams ls` answers at once from the
// streams vigil runs with a line on NATS, changes are refused at once,
// and doctor warns; after the restart everything says connected again.
func TestNATSOutageVisible(t *testing.T) {
	x := startExternalNATS(t)
	v := vigiltest.Start(t, t.TempDir(), fmt.Sprintf("nats: {url: %q}\npipeline: {progress_interval: 250ms}\n", "nats://"+x.addr))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("progress:\n%s", v.Progress.String())
		}
	})
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "cam", "Megamind.avi", ""))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("cam", "running", 20*time.Second)
	normal := regexp.MustCompile(`(?m)^cam\s+in\s+[\d.]+ fps  out\s+[1-9][\d.]* fps  p50`)
	testenv.Eventually(t, func() bool { return normal.MatchString(v.Progress.String()) }, 10*time.Second, 20*time.Millisecond, "a plain progress line for cam")
	require.Equal(t, 1.0, vigiltest.MetricValue(t, v, "vigil_nats_connected{node=\""+vigiltest.NodeID+"\"}"))

	x.stop()
	mark := len(v.Progress.String())
	buffered := regexp.MustCompile(`(?m)^cam\s+in\s+[\d.]+ fps  out\s+[\d.]+ fps \([1-9][\d.]* buffered, NATS down \d+ s\)  p50`)
	natsLine := regexp.MustCompile(`(?m)^NATS\s+down \d+ s: [1-9]\d* messages \(\d+ KiB of 8\.0 MiB\) held in the reconnect buffer`)
	testenv.Eventually(t, func() bool {
		p := v.Progress.String()[mark:]
		return buffered.MatchString(p) && natsLine.MatchString(p)
	}, 10*time.Second, 20*time.Millisecond, "a buffered progress line and a NATS line")
	require.Equal(t, 0.0, vigiltest.MetricValue(t, v, "vigil_nats_connected{node=\""+vigiltest.NodeID+"\"}"))
	require.Positive(t, vigiltest.MetricValue(t, v, "vigil_nats_reconnect_buffer_bytes{node=\""+vigiltest.NodeID+"\"}"))
	require.Positive(t, vigiltest.MetricValue(t, v, "vigil_nats_reconnect_buffer_messages{node=\""+vigiltest.NodeID+"\"}"))
	require.Equal(t, 1.0, vigiltest.MetricValue(t, v, `vigil_stream_up{stream="cam"}`), "the stream runs; its output is what is held")

	// The registry is on NATS: the list comes from what vigil last read,
	// at once (the registry's own timeout is 5 s; 2 s is a regression
	// guard with room for a loaded machine).
	list := func() (api.StreamList, int, time.Duration) {
		t0 := time.Now()
		code, b := v.Call("GET", "/v1/streams", "")
		var l api.StreamList
		_ = json.Unmarshal(b, &l)
		return l, code, time.Since(t0)
	}
	l, code, took := list()
	require.Equal(t, http.StatusOK, code)
	require.Less(t, took, 2*time.Second)
	testenv.Eventually(t, func() bool { // fps_buffered counts complete seconds
		l, _, _ = list()
		return len(l.Streams) == 1 && l.Streams[0].Status != nil && l.Streams[0].Status.FPSBuffered > 0
	}, 10*time.Second, 50*time.Millisecond, "fps_buffered in the API")
	require.NotNil(t, l.NATS)
	require.False(t, l.NATS.Connected)
	require.Positive(t, l.NATS.HeldMessages)
	require.NotEmpty(t, l.RegistryError)
	var table bytes.Buffer
	require.NoError(t, client.PrintStreamList(&table, "table", l, time.Now()))
	t.Log("\n" + table.String())
	require.Regexp(t, `(?m)^NATS is down \(for \d+ s\): [1-9]\d* messages`, table.String())
	require.Regexp(t, `(?m)^cam\s+running\s+vigiltest\s+[\d.]+\s+[\d.]+ \([\d.]+ buffered\)`, table.String())
	code, b = v.Call("GET", "/v1/streams/cam", "")
	require.Equal(t, http.StatusOK, code, string(b))
	code, _ = v.Call("GET", "/v1/streams/nope", "")
	require.Equal(t, http.StatusNotFound, code)
	code, b = v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "other", "Megamind.avi", ""))
	require.Equal(t, http.StatusServiceUnavailable, code, string(b))
	require.Contains(t, string(b), "NATS, which is unreachable")
	code, b = v.Call("DELETE", "/v1/streams/cam", "")
	require.Equal(t, http.StatusServiceUnavailable, code, string(b))

	var out bytes.Buffer
	_, err := doctor.Run(context.Background(), doctor.Options{URL: "http://" + v.EP.Metrics + "/metrics", Window: time.Second}, &out)
	require.NoError(t, err)
	t.Log(out.String())
	// The NATS line warns, with what the client holds (doctor's own tests
	// check the report's other lines).
	require.Regexp(t, `(?m)^  WARN NATS connection +down, [1-9]\d* held \(\d+ KiB of 8\.0 MiB\) +\(want connected`, out.String())

	x.start()
	testenv.Eventually(t, func() bool {
		return vigiltest.MetricValue(t, v, "vigil_nats_connected{node=\""+vigiltest.NodeID+"\"}") == 1 && vigiltest.MetricValue(t, v, "vigil_nats_reconnects_total{node=\""+vigiltest.NodeID+"\"}") == 1
	}, 15*time.Second, 20*time.Millisecond, "vigil_nats_connected 1 and one reconnect")
	v.WaitLogs(`"msg":"NATS reconnected"`)
	require.Zero(t, vigiltest.MetricValue(t, v, "vigil_nats_reconnect_buffer_messages{node=\""+vigiltest.NodeID+"\"}"))
	// The buffered rate covers the progress line's window (complete
	// seconds), so the first lines after the reconnect may still show the
	// frames held before it: wait for the newest line to be plain.
	testenv.Eventually(t, func() bool {
		lines := strings.Split(strings.TrimSpace(v.Progress.String()), "\n")
		last := lines[len(lines)-1]
		return normal.MatchString(last) && !strings.Contains(last, "buffered")
	}, 15*time.Second, 20*time.Millisecond, "a plain progress line, with no NATS line after it, once NATS is back")
	require.Zero(t, vigiltest.MetricValue(t, v, `vigil_nats_undelivered_messages_total{kind="detections",reason="buffer_full"}`))
}
