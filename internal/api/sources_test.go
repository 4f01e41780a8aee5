package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/allowlist"
	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/internal/testenv"
)

// With api.allowed_sources, a stream whose url the list refuses is
// answered 403 naming the field, on POST and on PATCH, and the registry
// is left as it was (issue 14, item 6b).
func TestAllowedSources(t *testing.T) {
	sources, bad := allowlist.Parse([]string{"rtsp://10.0.0.0/8", "rtsp://cam-*.site.local", "file:///srv/video/"})
	require.Empty(t, bad)
	srv, reg := newServerOptions(t, api.Options{Sources: sources})
	srv.Start()
	call := func(method, path, body string) (int, api.Error) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		testenv.NoSecret(t, method+" "+path, string(b), "s3cr3t")
		var e api.Error
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e
	}
	for i, url := range []string{"rtsp://10.1.2.3/s", "rtsp://cam-1.site.local/s", "/srv/video/a.mp4", "file:///srv/video/b/c.mp4"} {
		code, e := call("POST", "/v1/streams", fmt.Sprintf(`{"id":"ok%d","url":%q}`, i, url))
		require.Equal(t, http.StatusCreated, code, "%s: %s", url, e.Error)
	}
	list := func() []registry.Entry {
		es, err := reg.List(context.Background(), nil)
		require.NoError(t, err)
		return es
	}
	before := list()
	for _, tc := range []struct{ url, why string }{
		{"rtsp://admin:s3cr3t@169.254.169.254/latest", "host 169.254.169.254 matches no rtsp:// entry"},
		{"rtsps://10.1.2.3/s", "host 10.1.2.3 matches no rtsps:// entry"},
		{"http://10.1.2.3/s", "host 10.1.2.3 matches no http:// entry"},
		{"rtsp://cam-1.site.local.evil.com/s", "host cam-1.site.local.evil.com matches no rtsp:// entry"},
		{"rtsp://cam-1.site.local@192.168.0.1/s", "host 192.168.0.1 matches no rtsp:// entry"},
		{"rtsp://127.1/s", `host "127.1" is a number the resolver reads as an IPv4 address`},
		{"/etc/passwd", "the file /etc/passwd is under no file:// entry"},
		{"/srv/video/../../etc/passwd", "the file /etc/passwd is under no file:// entry"},
	} {
		code, e := call("POST", "/v1/streams", `{"id":"nope","url":"`+tc.url+`"}`)
		require.Equal(t, http.StatusForbidden, code, tc.url)
		require.Equal(t, "url", e.Field)
		require.Contains(t, e.Error, "url: ")
		require.Contains(t, e.Error, "not allowed by api.allowed_sources: "+tc.why)
		code, e = call("PATCH", "/v1/streams/"+before[0].Spec.ID, `{"url":"`+tc.url+`"}`)
		require.Equal(t, http.StatusForbidden, code, tc.url)
		require.Equal(t, "url", e.Field)
	}
	require.Equal(t, before, list(), "the registry is unchanged")

	// A stream stored before the list was tightened (written to the bucket
	// by a vigil without the list): it cannot be changed without fixing
	// its url, and can be deleted.
	_, err := reg.Create(context.Background(), registry.Spec{ID: "old", URL: "rtsp://192.168.1.9/s"})
	require.NoError(t, err)
	code, e := call("PATCH", "/v1/streams/old", `{"fps_limit":5}`)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "url", e.Field)
	code, _ = call("PATCH", "/v1/streams/old", `{"url":"rtsp://10.9.9.9/s"}`)
	require.Equal(t, http.StatusOK, code)
	code, _ = call("DELETE", "/v1/streams/old", "")
	require.Equal(t, http.StatusNoContent, code)
}
