package doctor_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/doctor"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// vigil doctor against a running vigil: the engine-time tail and queue
// delay are measured from its histograms; GPU and copy lines say why they
// cannot be measured on a machine without a GPU engine.
func TestDoctor(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "")
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "doc", "Megamind.avi", ""))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("doc", "running", 20*time.Second)
	var out bytes.Buffer
	checks, err := doctor.Run(context.Background(), doctor.Options{URL: "http://" + v.EP.Metrics + "/metrics", Window: 3 * time.Second}, &out)
	require.NoError(t, err)
	t.Log(out.String())
	byName := map[string]doctor.Check{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	require.Len(t, checks, 8)
	require.NotEmpty(t, byName["frames dropped"].Measured)
	require.NotEmpty(t, byName["engine time tail (P99/mean)"].Measured)
	require.NotEmpty(t, byName["queue delay (mean)"].Measured)
	require.Contains(t, out.String(), "n/a  host-device copy share")
	require.Equal(t, 8, strings.Count(out.String(), "(want "))
	require.True(t, byName["NATS connection"].OK)
	require.Equal(t, "1 of 1", byName["streams running"].Measured)

	_, err = doctor.Run(context.Background(), doctor.Options{URL: "http://127.0.0.1:1/metrics", Window: time.Millisecond}, &out)
	require.ErrorContains(t, err, "is vigil run up")
}

func checkNamed(t *testing.T, checks []doctor.Check, name string) doctor.Check {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q", name)
	return doctor.Check{}
}

// doctor names every stream that does not run, with its state and the
// direction to take: one reconnecting (a camera that refuses connections),
// one failed on its input (a file that is no video) and one failed before
// it could run (its model does not load, which RunStream never sees).
func TestDoctorReportsDownStreams(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // a camera that refuses connections
	junk := filepath.Join(t.TempDir(), "junk.mp4")
	require.NoError(t, os.WriteFile(junk, []byte("not a video"), 0o600))

	v := vigiltest.Start(t, t.TempDir(), "")
	for _, body := range []string{
		vigiltest.FileStream(t, "ok", "Megamind.avi", ""),
		`{"id":"gone","url":"rtsp://` + addr + `/s1","stall_timeout":"1s"}`,
		fmt.Sprintf(`{"id":"junk","url":%q}`, junk),
	} {
		code, b := v.Call("POST", "/v1/streams", body)
		require.Equal(t, http.StatusCreated, code, string(b))
	}
	// The API refuses a model that does not load; a registry value
	// written by something else (or a model file deleted since) is not.
	js, err := jetstream.New(v.NC)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "vigil_streams")
	require.NoError(t, err)
	_, err = kv.Put(ctx, "streams.nomodel", fmt.Appendf(nil, `{"id":"nomodel","url":%q,"model":"/nonexistent/m.onnx"}`, testenv.Media(t, "Megamind.avi")))
	require.NoError(t, err)

	v.WaitState("ok", "running", 20*time.Second)
	v.WaitState("gone", "reconnecting", 20*time.Second)
	v.WaitState("junk", "failed", 20*time.Second)
	v.WaitState("nomodel", "failed", 20*time.Second)
	require.Equal(t, 1.0, vigiltest.MetricValue(t, v, `vigil_stream_state{state="failed",stream="nomodel"}`))
	require.Equal(t, 0.0, vigiltest.MetricValue(t, v, `vigil_stream_up{stream="nomodel"}`))

	var out bytes.Buffer
	checks, err := doctor.Run(context.Background(), doctor.Options{URL: "http://" + v.EP.Metrics + "/metrics", Window: time.Second}, &out)
	require.NoError(t, err)
	t.Log(out.String())
	total := checkNamed(t, checks, "streams running")
	require.False(t, total.OK)
	require.Equal(t, "1 of 4", total.Measured)
	for id, state := range map[string]string{"gone": "reconnecting", "junk": "failed", "nomodel": "failed"} {
		c := checkNamed(t, checks, "stream "+id)
		require.False(t, c.OK)
		require.Equal(t, state, c.Measured)
		require.Contains(t, c.Advice, "vigil streams get "+id)
		require.Regexp(t, `WARN stream `+id+`\s+`+state+`\s+\(want running\)  -> `, out.String())
	}
	for _, c := range checks {
		require.NotEqual(t, "stream ok", c.Name, "a running stream gets no line of its own")
	}
}
