package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
)

// runVigil runs an in-process `vigil run` with the config body (data_dir
// and a silent progress line are added) until the test ends.
func runVigil(t *testing.T, body string) app.Endpoints {
	t.Helper()
	c, err := config.Parse([]byte(fmt.Sprintf("data_dir: %q\npipeline: {progress_interval: 0s}\n%s", t.TempDir(), body)), "test.yaml")
	require.NoError(t, err)
	ep, _ := startVigil(t, c)
	return ep
}

// startVigil runs an in-process `vigil run` with c until stop is called
// or the test ends.
func startVigil(t *testing.T, c config.Config) (app.Endpoints, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan app.Endpoints, 1)
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, c, zap.NewNop(), nil, func(ep app.Endpoints) { ready <- ep }) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); require.NoError(t, <-done) }) }
	t.Cleanup(stop)
	select {
	case ep := <-ready:
		return ep, stop
	case err := <-done:
		t.Fatalf("vigil did not start: %v", err)
	}
	return app.Endpoints{}, stop
}

// The API round trip through the CLI, against an in-process `vigil run`
// with a bearer token.
func TestStreamsCLIRoundTrip(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600))
	ep := runVigil(t, fmt.Sprintf(`
api: {listen: "127.0.0.1:0", token_file: %q}
metrics: {listen: "off"}
nats: {listen: "127.0.0.1:0"}
`, tokenFile))
	common := []string{"--api", ep.API, "--token-file", tokenFile}
	streams := func(args ...string) (int, string, string) {
		return vigil(append([]string{"streams"}, append(args, common...)...)...)
	}

	rc, out, errOut := streams("add", "--id", "cam1", "--url", testenv.Media(t, "Megamind.avi"), "--realtime", "--loop", "--label", "site=hq", "--priority", "high")
	require.Equal(t, 0, rc, errOut)
	require.Contains(t, out, "cam1")
	require.Contains(t, out, "STATE")

	var s api.Stream
	testenv.Eventually(t, func() bool {
		rc, out, _ := streams("get", "cam1", "-o", "json")
		return rc == 0 && json.Unmarshal([]byte(out), &s) == nil && s.Status != nil && s.Status.State == "running"
	}, 20*time.Second, 50*time.Millisecond, "cam1 running")
	require.Equal(t, "hq", s.Labels["site"])
	require.Equal(t, "high", s.Priority)
	require.Equal(t, 720, s.Status.Width)
	require.Equal(t, "mpeg4", s.Status.Codec)

	rc, out, errOut = streams("set", "cam1", "--fps-limit", "5", "-o", "json")
	require.Equal(t, 0, rc, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	require.Equal(t, 5.0, s.FPSLimit)
	require.Equal(t, "hq", s.Labels["site"], "set changes only the given fields")

	rc, out, errOut = streams("ls", "-o", "json")
	require.Equal(t, 0, rc, errOut)
	var list []api.Stream
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 1)
	testenv.Eventually(t, func() bool { // restarted by set; table shows it running again
		rc, out, _ := streams("ls")
		return rc == 0 && strings.Contains(out, "720x528") && strings.Contains(out, "running")
	}, 20*time.Second, 50*time.Millisecond, "the table shows cam1 running at 720x528 again")

	rc, _, errOut = streams("add", "--id", "cam1", "--url", testenv.Media(t, "Megamind.avi"))
	require.Equal(t, 2, rc, "a duplicate is bad input")
	require.Contains(t, errOut, "already exists")
	rc, _, errOut = streams("add", "--id", "x", "--url", "ftp://cam/1")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "field url")

	rc, out, errOut = streams("rm", "cam1")
	require.Equal(t, 0, rc, errOut)
	require.Contains(t, out, "removed cam1")
	rc, out, _ = streams("ls", "-o", "json")
	require.Equal(t, 0, rc)
	require.Equal(t, "[]", strings.TrimSpace(out))
	rc, _, errOut = streams("get", "cam1")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "not found")

	// Without the token the API refuses.
	rc, _, errOut = vigil("streams", "ls", "--api", ep.API)
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "HTTP 401")
}

// With nats.token_file the embedded NATS server refuses clients without
// the token (so the registry and detections are not open to anyone on the
// host); vigil tail --token-file reads.
func TestNATSToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "nats-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("nats-secret\n"), 0o600))
	ep := runVigil(t, fmt.Sprintf(`
api: {listen: "off"}
metrics: {listen: "off"}
nats: {listen: "127.0.0.1:0", token_file: %q}
streams: [{id: tok, url: %q, realtime: true, loop: true}]
`, tokenFile, testenv.Media(t, "Megamind.avi")))

	// A missing or wrong token is bad input (status 2, as the API's 401
	// is for vigil streams) that points at --token-file, not at a vigil
	// that is not up; a token written in the URL is not echoed.
	rc, _, errOut := vigil("tail", "--nats", ep.NATS, "--count", "1")
	require.Equal(t, 2, rc, errOut)
	require.Contains(t, errOut, "Authorization Violation")
	require.Contains(t, errOut, "see --token-file")
	require.NotContains(t, errOut, "is vigil run up")
	wrong := strings.Replace(ep.NATS, "nats://", "nats://wrong-tok3n@", 1)
	rc, _, errOut = vigil("tail", "--nats", wrong, "--count", "1")
	require.Equal(t, 2, rc, errOut)
	require.NotContains(t, errOut, "wrong-tok3n")
	rc, out, errOut := vigil("tail", "--nats", ep.NATS, "--count", "2", "--token-file", tokenFile)
	require.Equal(t, 0, rc, errOut)
	require.Contains(t, out, "tok")
}

// The start-up lines give commands that work as printed: vigil tail gets
// --token-file with nats.token_file (it had only --nats, which the server
// then refused), and a token in nats.url (nats://TOKEN@host) is masked.
func TestReadyLinesNameTokenFiles(t *testing.T) {
	var c config.Config
	c.NATS.TokenFile = "/etc/vigil/nats.token"
	c.API.TokenFile = "/etc/vigil/api.token"
	var b strings.Builder
	printReady(&b, c, app.Endpoints{NATS: "nats://s3cr3t@127.0.0.1:4222", API: "http://127.0.0.1:8080"})
	out := b.String()
	require.Contains(t, out, "watch with: vigil tail --nats nats://***@127.0.0.1:4222 --token-file /etc/vigil/nats.token\n")
	require.Contains(t, out, "vigil streams ls --api http://127.0.0.1:8080 --token-file /etc/vigil/api.token\n")
	require.NotContains(t, out, "s3cr3t")
}

// streams ls shows a stream's error whole while it is current (the cause
// is at its end, past any width), and not once the stream has recovered;
// streams get then shows it as past, with its time. The table has a
// column of dropped frames per second.
func TestStreamsTableErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	ln.Close() // a camera that refuses connections
	srv := rtsptest.Start(t, rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150), rtsptest.Options{Loop: true})
	ep := runVigil(t, `
api: {listen: "127.0.0.1:0"}
metrics: {listen: "off"}
nats: {listen: "127.0.0.1:0"}
`)
	// try runs a streams command; require is for the test goroutine, so
	// the polls below use try and state.
	try := func(args ...string) (string, bool) {
		rc, out, _ := vigil(append([]string{"streams"}, append(args, "--api", ep.API)...)...)
		return out, rc == 0
	}
	streams := func(args ...string) string {
		t.Helper()
		out, ok := try(args...)
		require.True(t, ok, "vigil streams %v", args)
		return out
	}
	// state returns a stream's state and last error ("" before it has a
	// status).
	state := func(id string) (string, string) {
		out, ok := try("get", id, "-o", "json")
		var s api.Stream
		if !ok || json.Unmarshal([]byte(out), &s) != nil || s.Status == nil {
			return "", ""
		}
		return string(s.Status.State), s.Status.LastError
	}
	streams("add", "--id", "gone", "--url", "rtsp://"+closed+"/site-12/building-north/entrance-camera-3/main", "--stall-timeout", "1s")
	streams("add", "--id", "cam", "--url", srv.URL, "--stall-timeout", "1s")
	var goneErr string
	testenv.Eventually(t, func() bool {
		var st string
		st, goneErr = state("gone")
		return st == "reconnecting" && goneErr != ""
	}, 20*time.Second, 50*time.Millisecond, "gone reconnecting with an error")
	testenv.Eventually(t, func() bool { st, _ := state("cam"); return st == "running" }, 30*time.Second, 50*time.Millisecond, "cam running")
	out := streams("ls")
	t.Log("\n" + out)
	require.Regexp(t, `(?m)^ID\s+STATE\s+NODE\s+FPS IN\s+FPS OUT\s+FPS DROP\s+FPS SKIP\s+RESOLUTION\s+CODEC\s+RECONNECTS\s+MODEL\s+URL\s+ERROR$`, out)
	require.Regexp(t, `(?m)^gone\s+reconnecting\s+.*`+regexp.QuoteMeta(goneErr)+`$`, out, "the current error, whole")
	require.Greater(t, len(goneErr), 60, "longer than the old column's cut")

	srv.Stop()
	var camErr string
	testenv.Eventually(t, func() bool {
		var st string
		st, camErr = state("cam")
		return st == "reconnecting" && camErr != ""
	}, 20*time.Second, 20*time.Millisecond, "cam reconnecting with an error")
	require.Contains(t, streams("ls"), camErr)
	srv.Restart(t)
	// Backoff: 1 s doubling; a few attempts at most before the restart.
	testenv.Eventually(t, func() bool { st, _ := state("cam"); return st == "running" }, 40*time.Second, 50*time.Millisecond, "cam running again")
	_, camErr = state("cam") // the last attempt's, which may differ from the first's
	out = streams("ls")
	t.Log("\n" + out)
	require.Regexp(t, `(?m)^cam\s+running\s+\S+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+`, out)
	require.NotContains(t, out, camErr, "a past error is not in the table")
	out = streams("get", "cam")
	t.Log("\n" + out)
	require.NotContains(t, strings.SplitN(out, "\n", 3)[1], camErr)
	require.Regexp(t, `(?m)^past error \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+, now running\): `+regexp.QuoteMeta(camErr)+`$`, out)
}

// vigil streams add|set --analytics FILE and streams apply carry a
// stream's analytics: a bad file is bad input naming the field before
// anything is sent, a class the model lacks is the API's 400 naming it,
// a change of analytics alone is applied without a restart (the same
// epoch), apply replaces the block whole (the tracker settings the file no
// longer has are gone) and says so, and --analytics none removes it.
func TestStreamsAnalyticsCLI(t *testing.T) {
	ep := runVigil(t, `
api: {listen: "127.0.0.1:0"}
metrics: {listen: "off"}
nats: {listen: "127.0.0.1:0"}
`)
	streams := func(args ...string) (int, string, string) {
		return vigil(append([]string{"streams"}, append(args, "--api", ep.API)...)...)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	clip := testenv.FacePan(t)
	stream := func(analytics string) string {
		return write("vigil.yaml", "streams:\n  - id: pan\n    url: "+clip+"\n    realtime: true\n    loop: true\n    analytics:\n"+analytics)
	}
	get := func() api.Stream {
		rc, out, errOut := streams("get", "pan", "-o", "json")
		require.Equal(t, 0, rc, errOut)
		var s api.Stream
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		return s
	}

	cfg := stream("      tracker: {lost_after: 3s}\n      zones: [{name: right, polygon: [[256, 0], [512, 0], [512, 256]], classes: [face]}]\n")
	rc, out, errOut := streams("apply", "--config", cfg)
	require.Equal(t, 0, rc, errOut)
	require.Equal(t, "pan: added\n", out)
	var s api.Stream
	testenv.Eventually(t, func() bool { s = get(); return s.Status != nil && s.Status.State == "running" }, 20*time.Second,
		50*time.Millisecond, "pan running")
	epoch := s.Status.Epoch
	require.Equal(t, 3*time.Second, time.Duration(s.Analytics.Tracker.LostAfter))

	rc, _, errOut = streams("set", "pan", "--analytics", write("bad.yaml", "analytics:\n  lines: [{name: l, a: [1, 1], b: [1, 1]}]\n"))
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "analytics.lines[0].b: [1 1]: the same point as a")
	rc, _, errOut = streams("set", "pan", "--analytics", write("person.yaml", "analytics:\n  lines: [{name: l, a: [1, 1], b: [9, 9], classes: [person]}]\n"))
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "field analytics.lines[0].classes[0]")

	cfg = stream("      lines: [{name: mid, a: [256, 256], b: [256, 0]}]\n")
	rc, out, errOut = streams("apply", "--config", cfg)
	require.Equal(t, 0, rc, errOut)
	require.Equal(t, "pan: changed (analytics only: applied without a restart)\n", out)
	s = get()
	require.Zero(t, s.Analytics.Tracker, "the tracker settings the file dropped are gone")
	require.Empty(t, s.Analytics.Zones)
	require.Equal(t, "mid", s.Analytics.Lines[0].Name)

	rc, _, errOut = streams("set", "pan", "--analytics", "none")
	require.Equal(t, 0, rc, errOut)
	s = get()
	require.Nil(t, s.Analytics)
	require.Equal(t, epoch, s.Status.Epoch, "no restart through all of it")
	require.Equal(t, "running", string(s.Status.State))
}
