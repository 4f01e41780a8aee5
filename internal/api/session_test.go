package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/internal/testenv"
)

const consoleToken = "s3cret-console-token"

// call does one request with client and returns the status, the body and
// the response.
func call(t *testing.T, c *http.Client, method, url, body string) (int, string, *http.Response) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp
}

// The console logs in with POST /v1/session: a right token sets the
// session cookie (HttpOnly, SameSite=Strict, no expiry, Secure under TLS,
// not the token itself), which every call then accepts; a wrong token is
// refused and sets nothing; DELETE clears it; the token is never logged.
func TestSessionCookie(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[useTLS], func(t *testing.T) {
			logs := &lockedBuf{}
			log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zap.DebugLevel))
			srv, _ := newServerOptions(t, api.Options{Token: consoleToken, Logger: log})
			if useTLS {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			jar, err := cookiejar.New(nil)
			require.NoError(t, err)
			c := srv.Client()
			c.Jar = jar

			code, _, _ := call(t, c, "GET", srv.URL+"/v1/streams", "")
			require.Equal(t, http.StatusUnauthorized, code, "no token, no cookie")

			code, body, resp := call(t, c, "POST", srv.URL+api.SessionPath, `{"token":"wrong"}`)
			require.Equal(t, http.StatusUnauthorized, code)
			require.JSONEq(t, `{"error":"wrong token","field":"token"}`, body)
			require.Empty(t, resp.Cookies(), "a wrong token sets no cookie")

			code, body, resp = call(t, c, "POST", srv.URL+api.SessionPath, `{"token":"`+consoleToken+`"}`)
			require.Equal(t, http.StatusOK, code, body)
			require.JSONEq(t, `{"auth":true}`, body)
			require.Len(t, resp.Cookies(), 1)
			ck := resp.Cookies()[0]
			require.Equal(t, api.SessionCookie, ck.Name)
			require.True(t, ck.HttpOnly)
			require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
			require.Equal(t, useTLS, ck.Secure)
			require.True(t, ck.Expires.IsZero(), "a session cookie: no Expires")
			require.Zero(t, ck.MaxAge)
			require.Equal(t, "/", ck.Path)
			testenv.NoSecret(t, "the session cookie", ck.Value, consoleToken)

			code, body, _ = call(t, c, "GET", srv.URL+"/v1/streams", "")
			require.Equal(t, http.StatusOK, code, "the cookie is accepted: %s", body)

			// A cookie of another value is not, the token itself included.
			for _, value := range []string{ck.Value + "x", consoleToken} {
				req, _ := http.NewRequest("GET", srv.URL+"/v1/streams", nil)
				req.AddCookie(&http.Cookie{Name: api.SessionCookie, Value: value})
				resp, err = srv.Client().Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			}

			code, _, resp = call(t, c, "DELETE", srv.URL+api.SessionPath, "")
			require.Equal(t, http.StatusNoContent, code)
			require.Len(t, resp.Cookies(), 1)
			require.Negative(t, resp.Cookies()[0].MaxAge, "cleared")
			code, _, _ = call(t, c, "GET", srv.URL+"/v1/streams", "")
			require.Equal(t, http.StatusUnauthorized, code, "logged out")

			testenv.NoSecret(t, "the API's log", logs.String(), consoleToken)
			require.Contains(t, logs.String(), "console login refused")
		})
	}
}

// The console's page and assets need no token (they hold no data, and
// the page must load to ask for one); the API behind it does.
func TestConsoleServed(t *testing.T) {
	srv, _ := newServer(t, consoleToken)
	srv.Start()
	c := srv.Client()
	code, body, resp := call(t, c, "GET", srv.URL+"/", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, body, `src="/ui/js/app.js"`)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")

	for _, p := range []string{"/ui/js/app.js", "/ui/js/live.js", "/ui/style.css"} {
		code, body, resp := call(t, c, "GET", srv.URL+p, "")
		require.Equal(t, http.StatusOK, code, p)
		require.NotEmpty(t, body)
		require.Regexp(t, `^(text/javascript|text/css)`, resp.Header.Get("Content-Type"), p)
	}
	code, _, _ = call(t, c, "GET", srv.URL+"/ui/nope.js", "")
	require.Equal(t, http.StatusNotFound, code)
	code, _, _ = call(t, c, "POST", srv.URL+"/", "")
	require.Equal(t, http.StatusUnauthorized, code, "only GET of the page is public")
	code, _, _ = call(t, c, "GET", srv.URL+"/v1/streams", "")
	require.Equal(t, http.StatusUnauthorized, code)

	// Without a token configured, logging in says so and sets nothing.
	open, _ := newServer(t, "")
	open.Start()
	code, body, resp = call(t, open.Client(), "POST", open.URL+api.SessionPath, `{"token":""}`)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"auth":false}`, body)
	require.Empty(t, resp.Cookies())
}

// GET /v1/streams/{id}/analytics answers the stream's latest counts and
// its recent events as published on NATS, newest first, at most
// RecentEvents; an unknown stream is 404.
func TestStreamAnalyticsRecent(t *testing.T) {
	ns, err := natsserver.Start("127.0.0.1:0", t.TempDir(), "")
	require.NoError(t, err)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(func() {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	reg, err := registry.Open(context.Background(), nc, "test_streams", 1)
	require.NoError(t, err)
	rec, err := api.NewRecent(nc, "vigil")
	require.NoError(t, err)
	defer rec.Close()
	_, err = reg.Create(context.Background(), registry.Spec{ID: "cam", URL: "rtsp://cam.example/1"})
	require.NoError(t, err)
	srv := httptest.NewServer(api.New(api.Options{Registry: reg, Recent: rec}).Handler())
	defer srv.Close()

	get := func(id string) (int, api.StreamAnalytics) {
		code, body, _ := call(t, srv.Client(), "GET", srv.URL+"/v1/streams/"+id+"/analytics", "")
		var out api.StreamAnalytics
		if code == http.StatusOK {
			require.NoError(t, json.Unmarshal([]byte(body), &out))
		}
		return code, out
	}
	code, out := get("cam")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, "null", string(out.Counts))
	require.Empty(t, out.Events)

	for i := range api.RecentEvents + 5 {
		require.NoError(t, nc.Publish("vigil.cam.analytics", []byte(`{"type":"track_start","seq":`+itoa(i)+`}`)))
	}
	require.NoError(t, nc.Publish("vigil.cam.counts", []byte(`{"version":1}`)))
	require.NoError(t, nc.Publish("vigil.cam.counts", []byte(`{"version":2}`)))
	require.NoError(t, nc.Publish("vigil.other.counts", []byte(`{"version":9}`)))
	require.NoError(t, nc.Publish("vigil.cam.analytics", []byte(`not json`)))
	require.NoError(t, nc.Flush())
	testenv.Eventually(t, func() bool {
		_, out = get("cam")
		return string(out.Counts) == `{"version":2}`
	}, 10*time.Second, 20*time.Millisecond, "the latest counts")
	require.Len(t, out.Events, api.RecentEvents)
	require.JSONEq(t, `{"type":"track_start","seq":`+itoa(api.RecentEvents+4)+`}`, string(out.Events[0]), "newest first")
	require.JSONEq(t, `{"type":"track_start","seq":5}`, string(out.Events[api.RecentEvents-1]))

	code, _ = get("nope")
	require.Equal(t, http.StatusNotFound, code)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// lockedBuf collects a log written from the server's goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
