package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/config"
)

// vigil is an in-process `vigil run` for tests.
type vigil struct {
	t      *testing.T
	ep     app.Endpoints
	cancel context.CancelFunc
	done   chan error
	logs   *lockedWriter
	// progress receives the progress lines (pipeline.progress_interval,
	// off unless the body sets it).
	progress *lockedWriter
	nc       *nats.Conn
}

// startVigil runs app.Run with the given config body (YAML; data_dir, and
// the API, NATS and metrics on free loopback ports unless body has its own
// api, metrics or nats section, are added) and waits until ready.
func startVigil(t *testing.T, dataDir, body string) *vigil {
	t.Helper()
	cfg := fmt.Sprintf("data_dir: %q\n%s\n", dataDir, body)
	for _, key := range []string{"api", "metrics", "nats"} {
		if !regexp.MustCompile(`(?m)^` + key + `:`).MatchString(body) {
			cfg += key + ": {listen: \"127.0.0.1:0\"}\n"
		}
	}
	if !strings.Contains(body, "pipeline:") {
		cfg += "pipeline: {progress_interval: 0s}\n"
	}
	c, err := config.Parse([]byte(cfg), "test.yaml")
	require.NoError(t, err)
	v := &vigil{t: t, done: make(chan error, 1), logs: &lockedWriter{w: new(bytes.Buffer)}, progress: &lockedWriter{w: new(bytes.Buffer)}}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(v.logs), zap.DebugLevel))
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	ready := make(chan app.Endpoints, 1)
	go func() { v.done <- app.Run(ctx, c, log, v.progress, func(ep app.Endpoints) { ready <- ep }) }()
	select {
	case v.ep = <-ready:
	case err := <-v.done:
		t.Fatalf("vigil did not start: %v\n%s", err, v.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("vigil did not become ready")
	}
	v.nc, err = nats.Connect(v.ep.NATS)
	require.NoError(t, err)
	t.Cleanup(v.stop)
	return v
}

// waitLogs waits up to 10 s until each regular expression in patterns
// matches vigil's log, and fails the test with the log when one does not.
// A line written just after an effect a test can see (a stream is running
// a moment before the line saying that it started is written) can lag it,
// so tests wait for log lines rather than read them once.
func (v *vigil) waitLogs(patterns ...string) {
	v.t.Helper()
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile(p)
	}
	missing := ""
	ok := func() bool {
		logs := v.logs.String()
		for i, re := range res {
			if !re.MatchString(logs) {
				missing = patterns[i]
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			v.t.Fatalf("no log line matches %s in 10 s:\n%s", missing, v.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (v *vigil) stop() {
	if v.cancel == nil {
		return
	}
	v.nc.Close()
	http.DefaultClient.CloseIdleConnections()
	v.cancel()
	v.cancel = nil
	select {
	case err := <-v.done:
		require.NoError(v.t, err)
	case <-time.After(30 * time.Second):
		v.t.Fatal("vigil did not stop")
	}
}

// call does an API request and returns the status and body.
func (v *vigil) call(method, path, body string) (int, []byte) {
	v.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, v.ep.API+path, rd)
	require.NoError(v.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(v.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (v *vigil) stream(id string) (api.Stream, bool) {
	code, b := v.call("GET", "/v1/streams/"+id, "")
	if code != http.StatusOK {
		return api.Stream{}, false
	}
	var s api.Stream
	require.NoError(v.t, json.Unmarshal(b, &s))
	return s, true
}

// waitState waits until stream id reports state and returns the time.
func (v *vigil) waitState(id, state string, within time.Duration) api.Stream {
	v.t.Helper()
	var s api.Stream
	deadline := time.Now().Add(within)
	for {
		var ok bool
		s, ok = v.stream(id)
		if ok && s.Status != nil && string(s.Status.State) == state {
			break
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("stream %s never reached %s in %s (last: %+v)", id, state, within, s.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// events subscribes to a stream's lifecycle events.
func (v *vigil) events(id string) *eventLog {
	el := &eventLog{}
	_, err := v.nc.Subscribe("vigil."+id+".events", func(m *nats.Msg) {
		var e struct {
			Type    string    `json:"type"`
			Time    time.Time `json:"time"`
			Reason  string    `json:"reason"`
			Attempt int       `json:"attempt"`
		}
		if json.Unmarshal(m.Data, &e) == nil {
			el.mu.Lock()
			el.events = append(el.events, event{e.Type, e.Time, e.Reason, e.Attempt, time.Now(), string(m.Data)})
			el.mu.Unlock()
		}
	})
	require.NoError(v.t, err)
	require.NoError(v.t, v.nc.Flush())
	return el
}

type event struct {
	Type     string
	Time     time.Time
	Reason   string
	Attempt  int
	Received time.Time
	Raw      string
}

type eventLog struct {
	mu     sync.Mutex
	events []event
}

// first returns the first event of type typ received after t0.
func (l *eventLog) first(typ string, after time.Time) (event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.Type == typ && !e.Received.Before(after) {
			return e, true
		}
	}
	return event{}, false
}

func (l *eventLog) all() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.events...)
}

// frames counts detection messages per stream.
type frameCounter struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

func (v *vigil) countFrames() *frameCounter {
	fc := &frameCounter{times: map[string][]time.Time{}}
	_, err := v.nc.Subscribe("vigil.*.detections", func(m *nats.Msg) {
		id := strings.Split(m.Subject, ".")[1]
		fc.mu.Lock()
		fc.times[id] = append(fc.times[id], time.Now())
		fc.mu.Unlock()
	})
	require.NoError(v.t, err)
	require.NoError(v.t, v.nc.Flush())
	return fc
}

// between counts stream id's frames received in [from, to).
func (fc *frameCounter) between(id string, from, to time.Time) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	n := 0
	for _, t := range fc.times[id] {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}
