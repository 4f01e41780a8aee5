package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// runLogged loads the config file at path as `vigil run --config` does and
// runs it in-process with a JSON logger, until stop or the test's end.
func runLogged(t *testing.T, path string) (app.Endpoints, func(), *vigiltest.LockedWriter) {
	t.Helper()
	c, err := config.Load(path)
	require.NoError(t, err)
	logs := vigiltest.NewLockedWriter()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zap.InfoLevel))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan app.Endpoints, 1)
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, c, log, nil, func(ep app.Endpoints) { ready <- ep }) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); require.NoError(t, <-done) }) }
	t.Cleanup(stop)
	select {
	case ep := <-ready:
		return ep, stop, logs
	case err := <-done:
		t.Fatalf("vigil did not start: %v\n%s", err, logs)
	}
	return app.Endpoints{}, stop, logs
}

// driftLines returns vigil's start-up warnings about config streams, by
// stream id: the message, the differences and the apply command.
func driftLines(t *testing.T, logs string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || !strings.HasPrefix(fmt.Sprint(m["msg"]), "config stream ") {
			continue
		}
		out[m["stream"].(string)] = m
	}
	return out
}

// A config file edited after its streams were seeded used to change
// nothing, without a word. vigil run now warns at start about each config
// stream the registry holds otherwise (changed or deleted through the API,
// or edited in the file), naming the fields, and prints the exact command
// that applies the file; running that command makes the registry match the
// file, and the next start is quiet.
func TestConfigDriftLoggedAndApplied(t *testing.T) {
	media := testenv.Media(t, "Megamind.avi")
	cfg := filepath.Join(t.TempDir(), "vigil.yaml")
	head := fmt.Sprintf("data_dir: %q\napi: {listen: \"127.0.0.1:0\"}\nmetrics: {listen: \"off\"}\nnats: {listen: \"127.0.0.1:0\"}\npipeline: {progress_interval: 0s}\n", t.TempDir())
	write := func(streams string) { require.NoError(t, os.WriteFile(cfg, []byte(head+"streams:\n"+streams), 0o644)) }
	write(fmt.Sprintf(`  - {id: x, url: %[1]q, realtime: true, loop: true}
  - {id: y, url: %[1]q, realtime: true, loop: true, labels: {old: "1"}}
  - {id: z, url: %[1]q, realtime: true, loop: true}
`, media))
	ep, stop, logs := runLogged(t, cfg)
	require.Empty(t, driftLines(t, logs.String()), "first start: seeded, nothing differs")
	c, err := client.New(ep.API, "", "")
	require.NoError(t, err)
	require.NoError(t, c.Do(context.Background(), "DELETE", "/v1/streams/z", nil, nil))
	stop()

	// The file changes x's rate and y's camera (with a password) and labels.
	write(fmt.Sprintf(`  - {id: x, url: %[1]q, realtime: true, loop: true, fps_limit: 5}
  - {id: y, url: "rtsp://viewer:s3cret@127.0.0.1:1/cam", labels: {site: hq}}
  - {id: z, url: %[1]q, realtime: true, loop: true}
`, media))
	ep, stop, logs = runLogged(t, cfg)
	lines := driftLines(t, logs.String())
	require.Len(t, lines, 3, logs.String())
	require.Equal(t, []any{"fps_limit: registry unset, file 5"}, lines["x"]["differences"])
	require.Equal(t, []any{
		fmt.Sprintf(`url: registry %q, file "rtsp://viewer:***@127.0.0.1:1/cam"`, media),
		`labels: registry {"old":"1"}, file {"site":"hq"}`,
		"realtime: registry true, file unset", "loop: registry true, file unset",
	}, lines["y"]["differences"])
	require.Contains(t, lines["z"]["msg"], "deleted through the API")
	require.NotContains(t, logs.String(), "s3cret", "no password in the log")

	for _, id := range []string{"x", "y", "z"} {
		apply := lines[id]["apply"].(string)
		require.Equal(t, fmt.Sprintf("vigil streams apply --config %s --api %s %s", cfg, ep.API, id), apply)
		rc, out, errOut := vigil(strings.Fields(apply)[1:]...)
		require.Equal(t, 0, rc, errOut)
		want := map[string]string{"x": "x: changed (it restarts)\n", "y": "y: changed (it restarts)\n", "z": "z: added\n"}[id]
		require.Equal(t, want, out)
	}
	get := func(id string) api.Stream {
		var s api.Stream
		require.NoError(t, c.Do(context.Background(), "GET", "/v1/streams/"+id, nil, &s))
		return s
	}
	c, err = client.New(ep.API, "", "")
	require.NoError(t, err)
	require.Equal(t, 5.0, get("x").FPSLimit)
	y := get("y")
	require.Equal(t, map[string]string{"site": "hq"}, y.Labels, "the label the file dropped is gone")
	require.Equal(t, "rtsp://viewer:***@127.0.0.1:1/cam", y.URL)
	require.False(t, y.Realtime)
	require.Equal(t, media, get("z").URL)

	rc, out, errOut := vigil("streams", "apply", "--config", cfg, "--api", ep.API)
	require.Equal(t, 0, rc, errOut)
	require.Equal(t, "x: unchanged\ny: unchanged\nz: unchanged\n", out)
	rc, _, errOut = vigil("streams", "apply", "--config", cfg, "--api", ep.API, "w")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, `stream "w" is not in `+cfg+" (its streams: x, y, z)")
	stop()

	_, _, logs = runLogged(t, cfg)
	require.Empty(t, driftLines(t, logs.String()), "applied: the registry matches the file")
}
