package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// specsOnly is the stored registry without live status, for comparisons.
func specsOnly(t *testing.T, v *vigiltest.Vigil) string {
	code, b := v.Call("GET", "/v1/streams", "")
	require.Equal(t, http.StatusOK, code)
	var l struct{ Streams []api.Stream }
	require.NoError(t, json.Unmarshal(b, &l))
	for i := range l.Streams {
		l.Streams[i].Status = nil
	}
	out, _ := json.Marshal(l.Streams)
	return string(out)
}

func TestRestartRestoresStreams(t *testing.T) {
	dir := t.TempDir()
	v := vigiltest.Start(t, dir, `streams: [{id: seeded, url: "`+testenv.Media(t, "tree.avi")+`", realtime: true, loop: true}]`)
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "added", "Megamind.avi", `,"labels":{"site":"lab"}`))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("seeded", "running", 20*time.Second)
	v.WaitState("added", "running", 20*time.Second)
	v.Stop()

	// Restart without the config stream: both come back from the bucket.
	v2 := vigiltest.Start(t, dir, "")
	s := v2.WaitState("added", "running", 20*time.Second)
	require.Equal(t, "lab", s.Labels["site"])
	v2.WaitState("seeded", "running", 20*time.Second)
}

func TestBadRequestsLeaveRegistryUnchanged(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "")
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "cam1", "tree.avi", ""))
	require.Equal(t, http.StatusCreated, code, string(b))
	before := specsOnly(t, v)
	mm := testenv.Media(t, "Megamind.avi")
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		field                    string
	}{
		{"bad id", "POST", "/v1/streams", `{"id":"a.b","url":"` + mm + `"}`, 400, "id"},
		{"id too long", "POST", "/v1/streams", `{"id":"` + strings.Repeat("x", 65) + `","url":"` + mm + `"}`, 400, "id"},
		{"missing url", "POST", "/v1/streams", `{"id":"x"}`, 400, "url"},
		{"unsupported scheme", "POST", "/v1/streams", `{"id":"x","url":"ftp://cam/1"}`, 400, "url"},
		// The mask vigil shows in place of a password, copied back (the
		// console's edit form did): the stored password would be lost.
		{"masked password", "POST", "/v1/streams", `{"id":"x","url":"rtsp://viewer:***@127.0.0.1:1/cam"}`, 400, "url"},
		{"patch masked password", "PATCH", "/v1/streams/cam1", `{"url":"rtsp://viewer:***@127.0.0.1:2/cam"}`, 400, "url"},
		{"unknown field", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","colour":"red"}`, 400, "colour"},
		{"wrong type", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","fps_limit":"fast"}`, 400, "fps_limit"},
		{"bad priority", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","priority":"urgent"}`, 400, "priority"},
		{"unknown model", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","model":"nope"}`, 400, "model"},
		{"bad timeout", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","stall_timeout":"-1s"}`, 400, "stall_timeout"},
		{"malformed JSON", "POST", "/v1/streams", `{"id":`, 400, ""},
		{"oversized body", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","labels":{"a":"` + strings.Repeat("y", 70000) + `"}}`, 413, ""},
		{"duplicate id", "POST", "/v1/streams", `{"id":"cam1","url":"` + mm + `"}`, 409, "id"},
		{"patch changes id", "PATCH", "/v1/streams/cam1", `{"id":"cam2"}`, 400, "id"},
		{"patch bad transport", "PATCH", "/v1/streams/cam1", `{"transport":"sctp"}`, 400, "transport"},
		{"patch unknown field", "PATCH", "/v1/streams/cam1", `{"fps":3}`, 400, "fps"},
		{"patch missing stream", "PATCH", "/v1/streams/nope", `{"loop":false}`, 404, "id"},
		{"delete bad id", "DELETE", "/v1/streams/a.b", "", 400, "id"},
		{"delete missing", "DELETE", "/v1/streams/nope", "", 404, "id"},
		{"get bad id", "GET", "/v1/streams/%2e%2e", "", 400, "id"},
		// Analytics (issue 15): geometry, names and classes, the classes
		// read from the stream's model (BlazeFace: face).
		{"self-intersecting zone", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","analytics":{"zones":[{"name":"z","polygon":[[0,0],[9,9],[9,0],[0,9]]}]}}`, 400, "analytics.zones[0].polygon"},
		{"line with a == b", "PATCH", "/v1/streams/cam1", `{"analytics":{"lines":[{"name":"l","a":[5,5],"b":[5,5]}]}}`, 400, "analytics.lines[0].b"},
		{"unknown class", "PATCH", "/v1/streams/cam1", `{"analytics":{"lines":[{"name":"l","a":[0,0],"b":[9,9],"classes":["person"]}]}}`, 400, "analytics.lines[0].classes[0]"},
		{"zone name not a subject token", "POST", "/v1/streams", `{"id":"x","url":"` + mm + `","analytics":{"zones":[{"name":"a>b","polygon":[[0,0],[9,0],[9,9]]}]}}`, 400, "analytics.zones[0].name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := v.Call(tc.method, tc.path, tc.body)
			require.Equal(t, tc.code, code, string(b))
			var e api.Error
			require.NoError(t, json.Unmarshal(b, &e), "a JSON error body: %s", b)
			require.NotEmpty(t, e.Error)
			require.Equal(t, tc.field, e.Field, e.Error)
		})
	}
	req, _ := http.NewRequest("POST", v.EP.API+"/v1/streams", strings.NewReader(`{"id":"x","url":"`+mm+`"}`))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)

	require.Equal(t, before, specsOnly(t, v), "the registry is unchanged")
}

func TestConcurrentCreateDelete(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "")
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan string, 4*n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c%d", i)
			body := fmt.Sprintf(`{"id":%q,"url":%q,"realtime":true,"loop":true,"fps_limit":2}`, id, testenv.Media(t, "tree.avi"))
			if code, b := post(v.EP.API+"/v1/streams", body); code != http.StatusCreated {
				errs <- fmt.Sprintf("create %s: %d %s", id, code, b)
			}
			if i%2 == 0 { // half are deleted again at once
				if code, b := do("DELETE", v.EP.API+"/v1/streams/"+id); code != http.StatusNoContent {
					errs <- fmt.Sprintf("delete %s: %d %s", id, code, b)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%d", i)
		if i%2 == 0 {
			_, ok := v.Stream(id)
			require.False(t, ok, id)
		} else {
			v.WaitState(id, "running", 30*time.Second)
		}
	}
}

func post(url, body string) (int, string) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func do(method, url string) (int, string) {
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// After 20 add/remove cycles the goroutine count is back where it started.
func TestAddRemoveCyclesLeakNoGoroutines(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "")
	v.Call("GET", "/v1/streams", "") // warm the HTTP keep-alive connection
	time.Sleep(200 * time.Millisecond)
	base := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "cyc", "tree.avi", ""))
		require.Equal(t, http.StatusCreated, code, string(b))
		v.WaitState("cyc", "running", 20*time.Second)
		code, _ = v.Call("DELETE", "/v1/streams/cyc", "")
		require.Equal(t, http.StatusNoContent, code)
		testenv.Eventually(t, func() bool { _, ok := v.Stream("cyc"); return !ok }, 10*time.Second, 10*time.Millisecond, "stream cyc removed")
	}
	testenv.Eventually(t, func() bool { return runtime.NumGoroutine() <= base+2 }, 10*time.Second, 50*time.Millisecond,
		"goroutines: %d now, %d before", runtime.NumGoroutine(), base)
}

// Credentials in a stream URL appear in no log line, API response, event
// or metric: passwords holding any of @ : / % # ? percent-encoded as RFC
// 3986 requires (the streams run and fail to connect, so errors mention
// the URL), passwords with a raw '#' or '?' that the API refuses with a
// 400 naming the field (issue 14, item 5: the 400 echoed them), and a
// stored value with such a URL written to the bucket by something other
// than the API, which fails when it starts.
func TestCredentialsRedacted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // a camera that refuses connections: errors mention the URL
	v := vigiltest.Start(t, t.TempDir(), "")
	var secrets []string
	ev := map[string]*vigiltest.EventLog{}
	for i, pw := range []struct{ encoded, raw string }{
		{"p%40ss%3Aw0rd%2Fx%25y", "p@ss:w0rd/x%y"},
		{"h%23sh%3Fq%26x%3Dy", "h#sh?q&x=y"},
	} {
		id := fmt.Sprintf("sec%d", i)
		ev[id] = v.Events(id)
		secrets = append(secrets, pw.encoded, pw.raw)
		url := "rtsp://admin:" + pw.encoded + "@" + addr + "/stream1"
		code, b := v.Call("POST", "/v1/streams", `{"id":"`+id+`","url":"`+url+`","stall_timeout":"1s"}`)
		require.Equal(t, http.StatusCreated, code, "POST answered %d", code)
		testenv.NoSecret(t, "the 201 reply", string(b), pw.encoded)
		s := v.WaitState(id, "reconnecting", 20*time.Second)
		require.Equal(t, "rtsp://admin:***@"+addr+"/stream1", s.URL)
		require.Contains(t, s.Status.LastError, "admin:***@")
	}
	for _, tc := range []struct{ url, secret string }{
		{"rtsp://admin:pa#ss@" + addr + "/s", "pa#ss"},
		{"rtsp://admin:pa?ss@" + addr + "/s", "pa?ss"},
		{"rtsp://admin:12#34@" + addr + "/s", "12#34"},
		{"rtsp:/admin:typo5ecret@" + addr + "/s", "typo5ecret"},
		{"http://" + addr + "/snap?token=t0k#en@x", "t0k#en"},
	} {
		secrets = append(secrets, tc.secret)
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/streams", `{"id":"bad","url":"` + tc.url + `"}`},
			{"PATCH", "/v1/streams/sec0", `{"url":"` + tc.url + `"}`},
		} {
			code, b := v.Call(req.method, req.path, req.body)
			testenv.NoSecret(t, req.method+"'s reply", string(b), tc.secret)
			require.Equal(t, http.StatusBadRequest, code, "%s answered %d", req.method, code)
			var e api.Error
			require.NoError(t, json.Unmarshal(b, &e))
			require.Equal(t, "url", e.Field)
			require.Contains(t, e.Error, "***")
		}
	}
	// A value written to the bucket directly (an older vigil, a script):
	// it is refused when the stream starts, and the refusal is logged.
	stored := "rtsp://admin:st0red#pw@" + addr + "/s"
	secrets = append(secrets, "st0red#pw")
	js, err := jetstream.New(v.NC)
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), "vigil_streams")
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), "streams.stored", []byte(`{"id":"stored","url":"`+stored+`"}`))
	require.NoError(t, err)
	v.WaitLogs(`stream cannot start.*"stream":"stored".*admin:\*\*\*@`)
	s := v.WaitState("stored", "failed", 10*time.Second)
	require.Contains(t, s.Status.LastError, "invalid stored spec: url: ")
	for id, l := range ev {
		testenv.Eventually(t, func() bool { return len(l.All()) >= 2 }, 10*time.Second, 20*time.Millisecond, "two events of %s", id)
	}

	_, list := v.Call("GET", "/v1/streams", "")
	resp, err := http.Get("http://" + v.EP.Metrics + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var events strings.Builder
	for _, l := range ev {
		for _, e := range l.All() {
			events.WriteString(e.Raw)
		}
	}
	for what, text := range map[string]string{"the logs": v.Logs.String(), "GET /v1/streams": string(list), "the events": events.String(), "/metrics": string(metrics)} {
		for _, secret := range secrets {
			testenv.NoSecret(t, what, text, secret)
		}
	}
	require.Contains(t, v.Logs.String(), "admin:***@", "the logs do mention the (redacted) URL")
}

// Outage / camera reboot: the RTSP server of one camera goes away for 15 s
// and comes back; the stream
// goes reconnecting (event within stall_timeout + 1 s), runs again within
// the backoff cap, and a second, healthy stream keeps its frame rate.
func TestOutageAndRecovery(t *testing.T) {
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true})
	v := vigiltest.Start(t, t.TempDir(), "")
	ev := v.Events("cam")
	frames := v.CountFrames()
	code, b := v.Call("POST", "/v1/streams", `{"id":"cam","url":"`+srv.URL+`","stall_timeout":"2s"}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	code, b = v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "healthy", "Megamind.avi", ""))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("cam", "running", 30*time.Second)
	v.WaitState("healthy", "running", 30*time.Second)
	time.Sleep(2 * time.Second)

	down := time.Now()
	srv.Stop()
	testenv.Eventually(t, func() bool { _, ok := ev.First("reconnecting", down); return ok }, 10*time.Second, 10*time.Millisecond, "a reconnecting event after the cut")
	e, _ := ev.First("reconnecting", down)
	require.Less(t, e.Received.Sub(down), 2*time.Second+time.Second, "event within stall_timeout + 1 s")
	require.NotEmpty(t, e.Reason)
	v.WaitState("cam", "reconnecting", 5*time.Second)
	// A camera reboot: 15 s away, then back as a new server process (new
	// SSRC, new RTP sequence numbers and timestamps).
	time.Sleep(15*time.Second - time.Since(down))

	up := time.Now()
	srv.Restart(t)
	s := v.WaitState("cam", "running", 35*time.Second)
	require.Less(t, time.Since(up), 30*time.Second+5*time.Second, "running again within the backoff cap")
	require.GreaterOrEqual(t, s.Status.Reconnects, 1)

	// The healthy stream (23.98 fps) kept its rate while the other was down.
	n := frames.Between("healthy", down, up)
	want := 23.98 * up.Sub(down).Seconds()
	require.GreaterOrEqual(t, float64(n), 0.85*want, "healthy stream: %d frames in %.1f s", n, up.Sub(down).Seconds())
}

// A server that keeps the RTSP session open but stops sending is detected
// as stalled within stall_timeout.
func TestStallDetected(t *testing.T) {
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true, StallAfter: 4 * time.Second})
	v := vigiltest.Start(t, t.TempDir(), "")
	ev := v.Events("stall")
	code, b := v.Call("POST", "/v1/streams", `{"id":"stall","url":"`+srv.URL+`","stall_timeout":"2s"}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("stall", "running", 30*time.Second)
	s := v.WaitState("stall", "reconnecting", 15*time.Second)
	require.Contains(t, s.Status.LastError, "timed out")
	last := s.Status.LastFrame
	// The event travels through NATS after the status changes: wait for
	// it (10 s: far beyond a loopback delivery, on a loaded machine).
	testenv.Eventually(t, func() bool { _, ok := ev.First("reconnecting", time.Time{}); return ok }, 10*time.Second, 10*time.Millisecond, "a reconnecting event")
	e, _ := ev.First("reconnecting", time.Time{})
	require.Less(t, e.Time.Sub(last), 2*time.Second+time.Second, "stall detected within stall_timeout (+1 s)")
}
