// Package vigiltest runs `vigil run` in-process for tests (Start): the
// real service (internal/app.Run) with embedded NATS, the API and the
// metrics endpoint on free loopback ports, and helpers to drive and watch
// it: API calls, stream states, log lines, events, alerts, detection
// counts and metric values scraped from /metrics. The service's own tests
// and those of the tools that talk to a running vigil (doctor, the
// clients) share it. Its helpers call require on the goroutine they are
// called from: call them from the test's goroutine only.
package vigiltest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
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
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/sinks"
)

// Vigil is an in-process `vigil run` for tests.
type Vigil struct {
	t testing.TB
	// EP are the addresses it serves.
	EP app.Endpoints
	// Logs receives its log, as JSON lines at debug level.
	Logs *LockedWriter
	// Progress receives the progress lines (pipeline.progress_interval,
	// off unless the body sets it).
	Progress *LockedWriter
	// NC is a client connection to its NATS server.
	NC *nats.Conn
	// Token, when set, is sent as the bearer token of Call (the body's
	// api.token_file holds it).
	Token  string
	cancel context.CancelFunc
	done   chan error
}

// NodeID is the node.id Start gives a vigil whose body has no node
// section: per-node series carry it (label node).
const NodeID = "vigiltest"

// Start runs app.Run with the given config body (YAML; data_dir, and the
// API, NATS and metrics on free loopback ports unless body has its own
// api, metrics or nats section, are added) and waits until ready. The
// test's cleanup stops it (Stop).
func Start(t testing.TB, dataDir, body string) *Vigil {
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
	if !regexp.MustCompile(`(?m)^node:`).MatchString(body) {
		cfg += "node: {id: " + NodeID + "}\n"
	}
	c, err := config.Parse([]byte(cfg), "test.yaml")
	require.NoError(t, err)
	v := &Vigil{t: t, done: make(chan error, 1), Logs: NewLockedWriter(), Progress: NewLockedWriter()}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(v.Logs), zap.DebugLevel))
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	ready := make(chan app.Endpoints, 1)
	go func() { v.done <- app.Run(ctx, c, log, v.Progress, func(ep app.Endpoints) { ready <- ep }) }()
	select {
	case v.EP = <-ready:
	case err := <-v.done:
		t.Fatalf("vigil did not start: %v\n%s", err, v.Logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("vigil did not become ready")
	}
	v.NC, err = nats.Connect(v.EP.NATS)
	require.NoError(t, err)
	t.Cleanup(v.Stop)
	return v
}

// WaitLogs waits up to 10 s until each regular expression in patterns
// matches vigil's log, and fails the test with the log when one does not.
// A line written just after an effect a test can see (a stream is running
// a moment before the line saying that it started is written) can lag it,
// so tests wait for log lines rather than read them once.
func (v *Vigil) WaitLogs(patterns ...string) {
	v.t.Helper()
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile(p)
	}
	missing := ""
	ok := func() bool {
		logs := v.Logs.String()
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
			v.t.Fatalf("no log line matches %s in 10 s:\n%s", missing, v.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops vigil and requires that Run returned no error; a second call
// does nothing.
func (v *Vigil) Stop() {
	if v.cancel == nil {
		return
	}
	v.NC.Close()
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

// Call does an API request and returns the status and body.
func (v *Vigil) Call(method, path, body string) (int, []byte) {
	v.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, v.EP.API+path, rd)
	require.NoError(v.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if v.Token != "" {
		req.Header.Set("Authorization", "Bearer "+v.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(v.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(v.t, err)
	return resp.StatusCode, b
}

// Stream returns stream id as the API answers it; false when it answers
// anything but 200.
func (v *Vigil) Stream(id string) (api.Stream, bool) {
	code, b := v.Call("GET", "/v1/streams/"+id, "")
	if code != http.StatusOK {
		return api.Stream{}, false
	}
	var s api.Stream
	require.NoError(v.t, json.Unmarshal(b, &s))
	return s, true
}

// WaitState waits until stream id reports state and returns the stream.
func (v *Vigil) WaitState(id, state string, within time.Duration) api.Stream {
	v.t.Helper()
	var s api.Stream
	deadline := time.Now().Add(within)
	for {
		var ok bool
		s, ok = v.Stream(id)
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

// Events subscribes to a stream's lifecycle events.
func (v *Vigil) Events(id string) *EventLog {
	el := &EventLog{}
	_, err := v.NC.Subscribe(sinks.StreamSubject("vigil", id, sinks.KindEvents), func(m *nats.Msg) {
		var e struct {
			Type    string    `json:"type"`
			Time    time.Time `json:"time"`
			Reason  string    `json:"reason"`
			Attempt int       `json:"attempt"`
		}
		if json.Unmarshal(m.Data, &e) == nil {
			el.mu.Lock()
			el.events = append(el.events, Event{e.Type, e.Time, e.Reason, e.Attempt, time.Now(), string(m.Data)})
			el.mu.Unlock()
		}
	})
	require.NoError(v.t, err)
	require.NoError(v.t, v.NC.Flush())
	return el
}

// Event is one lifecycle event as received.
type Event struct {
	Type     string
	Time     time.Time
	Reason   string
	Attempt  int
	Received time.Time // when the subscription got it
	Raw      string    // the message
}

// EventLog records the events of one stream (Events).
type EventLog struct {
	mu     sync.Mutex
	events []Event
}

// First returns the first event of type typ received at or after after.
func (l *EventLog) First(typ string, after time.Time) (Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.Type == typ && !e.Received.Before(after) {
			return e, true
		}
	}
	return Event{}, false
}

// All returns the events received so far.
func (l *EventLog) All() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...)
}

// AlertLog records the alerts published on vigil.*.alerts (Alerts).
type AlertLog struct {
	mu     sync.Mutex
	alerts []string
}

// Alerts subscribes to every stream's alerts.
func (v *Vigil) Alerts() *AlertLog {
	al := &AlertLog{}
	_, err := v.NC.Subscribe(sinks.StreamSubject("vigil", "*", sinks.KindAlerts), func(m *nats.Msg) {
		al.mu.Lock()
		al.alerts = append(al.alerts, string(m.Data))
		al.mu.Unlock()
	})
	require.NoError(v.t, err)
	require.NoError(v.t, v.NC.Flush())
	return al
}

// All returns the alerts received so far, as their JSON.
func (al *AlertLog) All() []string {
	al.mu.Lock()
	defer al.mu.Unlock()
	return append([]string(nil), al.alerts...)
}

// FrameCounter counts detection messages per stream (CountFrames).
type FrameCounter struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

// CountFrames subscribes to every stream's detections.
func (v *Vigil) CountFrames() *FrameCounter {
	fc := &FrameCounter{times: map[string][]time.Time{}}
	_, err := v.NC.Subscribe(sinks.Subject("vigil", "*"), func(m *nats.Msg) {
		id := strings.Split(m.Subject, ".")[1]
		fc.mu.Lock()
		fc.times[id] = append(fc.times[id], time.Now())
		fc.mu.Unlock()
	})
	require.NoError(v.t, err)
	require.NoError(v.t, v.NC.Flush())
	return fc
}

// Between counts stream id's frames received in [from, to).
func (fc *FrameCounter) Between(id string, from, to time.Time) int {
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

// MessageLog collects a stream's detection messages (Messages).
type MessageLog struct {
	mu   sync.Mutex
	msgs []sinks.Message
}

// Messages subscribes to stream id's detections and decodes each message
// (one that does not decode is left out: tests that check the wire form
// validate against the schema themselves).
func (v *Vigil) Messages(id string) *MessageLog {
	ml := &MessageLog{}
	_, err := v.NC.Subscribe(sinks.Subject("vigil", id), func(m *nats.Msg) {
		var msg sinks.Message
		if json.Unmarshal(m.Data, &msg) == nil {
			ml.mu.Lock()
			ml.msgs = append(ml.msgs, msg)
			ml.mu.Unlock()
		}
	})
	require.NoError(v.t, err)
	require.NoError(v.t, v.NC.Flush())
	return ml
}

// All returns the messages received so far.
func (ml *MessageLog) All() []sinks.Message {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return slices.Clone(ml.msgs)
}

// Len is the number of messages received so far.
func (ml *MessageLog) Len() int {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return len(ml.msgs)
}

// FileStream is the JSON of a stream spec for the API: media (a file of
// the asset cache) played in real time and looped, extra appended to the
// object (e.g. `,"fps_limit":5`).
func FileStream(t testing.TB, id, media string, extra string) string {
	return fmt.Sprintf(`{"id":%q,"url":%q,"realtime":true,"loop":true%s}`, id, testenv.Media(t, media), extra)
}

// MetricValue scrapes one series from vigil's /metrics, e.g.
// `vigil_stream_up{stream="cam"}` (labels in the order Prometheus writes
// them); 0 when absent.
func MetricValue(t testing.TB, v *Vigil, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + v.EP.Metrics + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var f float64
			_, err := fmt.Sscan(rest, &f)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// LockedWriter is a bytes.Buffer safe for concurrent writes and reads.
type LockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// NewLockedWriter returns an empty LockedWriter.
func NewLockedWriter() *LockedWriter { return &LockedWriter{} }

// Write appends p.
func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
