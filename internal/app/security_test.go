package app_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// Listeners open to the network say so at every start (issue 14, item 6b):
// the API and the embedded NATS server served without a token because the
// config says insecure: true, /metrics on any address but loopback, and an
// API token sent without TLS.
func TestExposureWarnings(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), `
api: {listen: "0.0.0.0:0", insecure: true}
nats: {listen: "0.0.0.0:0", insecure: true}
metrics: {listen: "0.0.0.0:0"}
`)
	v.WaitLogs(
		`"level":"warn".*"msg":"API open to the network without a token \(api.insecure: true\): anyone who can reach it can register streams that make vigil connect to any URL they name \(set api.allowed_sources to restrict them\)`,
		`"level":"warn".*"msg":"embedded NATS server open to the network without a token \(nats.insecure: true\)`,
		`"level":"warn".*"msg":"metrics endpoint open to the network without authentication`,
	)
	code, _ := v.Call("GET", "/v1/streams", "")
	require.Equal(t, http.StatusOK, code, "served without a token, as configured")
	v.Stop()

	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("t0ken\n"), 0o600))
	v = vigiltest.Start(t, t.TempDir(), `
api: {listen: "0.0.0.0:0", token_file: "`+token+`", allowed_sources: ["rtsp://10.0.0.0/8"]}
`)
	v.WaitLogs(`"level":"warn".*"msg":"API token sent in clear text over the network: set api.tls_cert and api.tls_key`)
	require.NotRegexp(t, `open to the network`, v.Logs.String(), "loopback NATS and metrics, and an API with a token, are not open")
}

// A Config that did not come through config.Parse is held to the same
// rule: app.Run refuses before it listens.
func TestRunRefusesOpenListeners(t *testing.T) {
	c, err := config.Parse([]byte("data_dir: \""+t.TempDir()+"\"\n"), "x.yaml")
	require.NoError(t, err)
	c.API.Listen, c.NATS.Listen = "0.0.0.0:0", ":0"
	// Should it start, it stops at once (and the test fails).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := false
	err = app.Run(ctx, c, zap.NewNop(), nil, func(app.Endpoints) { started = true; cancel() })
	require.False(t, started, "vigil started")
	require.True(t, cli.IsBadInput(err), "%v", err)
	require.Contains(t, err.Error(), `api.listen: "0.0.0.0:0" is not a loopback address and api.token_file is not set`)
	require.Contains(t, err.Error(), `nats.listen: ":0" is not a loopback address and nats.token_file is not set`)
}

// api.allowed_sources holds when a stored stream starts: a stream
// registered before the list was tightened fails with an error naming the
// list (and how to fix it) instead of connecting, and the API refuses new
// ones with 403.
func TestAllowedSourcesAtStart(t *testing.T) {
	dir := t.TempDir()
	v := vigiltest.Start(t, dir, "")
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "early", "tree.avi", ""))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("early", "running", 20*time.Second)
	v.Stop()

	media := filepath.Dir(testenv.Media(t, "tree.avi"))
	v = vigiltest.Start(t, dir, `api: {listen: "127.0.0.1:0", allowed_sources: ["rtsp://10.0.0.0/8"]}`)
	s := v.WaitState("early", "failed", 20*time.Second)
	require.Contains(t, s.Status.LastError, "url: "+media+"/tree.avi: not allowed by api.allowed_sources: the file "+media+"/tree.avi is under no file:// entry")
	require.Contains(t, s.Status.LastError, "vigil streams set early --url")
	v.WaitLogs(`"level":"error".*"msg":"stream cannot start".*"stream":"early".*not allowed by api.allowed_sources`)

	code, b = v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "late", "tree.avi", ""))
	require.Equal(t, http.StatusForbidden, code, string(b))
	require.Contains(t, string(b), `"field":"url"`)
	_, ok := v.Stream("late")
	require.False(t, ok, "nothing was stored")
	v.WaitLogs(`"level":"warn".*"msg":"stream refused".*"stream":"late"`)
}
