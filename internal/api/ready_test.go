package api_test

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/api"
)

// /readyz answers what the service's Ready hook says, 200 or 503 with the
// reason, and needs no token even when every other call does.
func TestReadyz(t *testing.T) {
	var why atomic.Pointer[error]
	srv, _ := newServerOptions(t, api.Options{Token: "secret", Ready: func() error {
		if p := why.Load(); p != nil {
			return *p
		}
		return nil
	}})
	srv.Start()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get(api.ReadyPath)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", body)

	notYet := errors.New("registry not read yet")
	why.Store(&notYet)
	code, body = get(api.ReadyPath)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: registry not read yet\n", body)

	// The token still guards everything else.
	code, _ = get("/v1/streams")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(api.ReadyPath + "/x")
	require.Equal(t, http.StatusUnauthorized, code)
}
