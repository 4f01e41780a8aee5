package app_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
)

// A NATS subscriber that stops reading its socket must not slow the
// pipeline: the server cuts it off as a slow consumer, and the frame rate
// seen by a healthy subscriber stays at the source's rate with no drops.
func TestSlowSubscriber(t *testing.T) {
	v := startVigil(t, t.TempDir(), "")
	// A raw NATS client that subscribes to everything and never reads.
	conn, err := net.Dial("tcp", strings.TrimPrefix(v.ep.NATS, "nats://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = bufio.NewReader(conn).ReadString('\n') // INFO
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"name\":\"stuck\"}\r\nSUB vigil.> 1\r\n")
	require.NoError(t, err)

	frames := v.countFrames()
	code, b := v.call("POST", "/v1/streams", fileStream(t, "busy", "Megamind.avi", ""))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.waitState("busy", "running", 20*time.Second)
	time.Sleep(time.Second)
	from := time.Now()
	time.Sleep(8 * time.Second)
	to := time.Now()
	n := frames.between("busy", from, to)
	require.GreaterOrEqual(t, float64(n), 0.9*23.98*to.Sub(from).Seconds(), "%d frames in %s", n, to.Sub(from))
	s, _ := v.stream("busy")
	require.Equal(t, "running", string(s.Status.State))
	resp, err := http.Get("http://" + v.ep.Metrics + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		require.False(t, strings.HasPrefix(sc.Text(), `vigil_frames_dropped_total{`), "no frame dropped: %s", sc.Text())
	}
}

// Sixteen streams, one stalled: the other fifteen keep their frame rate and
// only the stalled one changes state.
func TestSixteenStreamsOneStalled(t *testing.T) {
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true, StallAfter: 4 * time.Second})
	v := startVigil(t, t.TempDir(), "")
	frames := v.countFrames()
	code, b := v.call("POST", "/v1/streams", `{"id":"stalls","url":"`+srv.URL+`","stall_timeout":"2s"}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	const healthy = 15
	for i := 0; i < healthy; i++ {
		// vtest.avi: 768×576 at 10 fps, as a looping real-time camera.
		code, b := v.call("POST", "/v1/streams", fileStream(t, fmt.Sprintf("h%02d", i), "vtest.avi", ""))
		require.Equal(t, http.StatusCreated, code, string(b))
	}
	for i := 0; i < healthy; i++ {
		v.waitState(fmt.Sprintf("h%02d", i), "running", 30*time.Second)
	}
	v.waitState("stalls", "running", 30*time.Second)
	v.waitState("stalls", "reconnecting", 20*time.Second)
	from := time.Now()
	time.Sleep(6 * time.Second)
	to := time.Now()
	for i := 0; i < healthy; i++ {
		id := fmt.Sprintf("h%02d", i)
		n := frames.between(id, from, to)
		require.GreaterOrEqual(t, float64(n), 0.85*10*to.Sub(from).Seconds(), "%s: %d frames in %s", id, n, to.Sub(from))
		s, _ := v.stream(id)
		require.Equal(t, "running", string(s.Status.State), id)
		require.Zero(t, s.Status.Reconnects, id)
	}
}
