package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
	"github.com/vigil-video/vigil/sinks"
)

// panAnalytics are the analytics of testenv.FacePan's stream: a zone over the
// right half and a line down the middle, drawn upwards (a at the bottom),
// so that "in" is left to right; both test the centre of the face box.
const panAnalytics = `{"zones":[{"name":"right","polygon":[[256,0],[512,0],[512,256],[256,256]],"classes":["face"],"anchor":"center"}],` +
	`"lines":[{"name":"mid","a":[256,256],"b":[256,0],"classes":["face"],"anchor":"center"}]}`

// schemas compiles the JSON Schemas of the three kinds of messages.
func schemas(t *testing.T) (det, ev, counts *jsonschema.Schema) {
	t.Helper()
	compile := func(name string, doc []byte) *jsonschema.Schema {
		d, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		require.NoError(t, err)
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		require.NoError(t, c.AddResource(name, d))
		s, err := c.Compile(name)
		require.NoError(t, err)
		return s
	}
	return compileSchema(t), compile("analytics.schema.json", analytics.SchemaJSON), compile("counts.schema.json", analytics.CountsSchemaJSON)
}

// valid requires that data is valid against s.
func valid(t *testing.T, s *jsonschema.Schema, data []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	require.NoError(t, err)
	require.NoError(t, s.Validate(v), "%s", data)
}

// received is one message a subscription got, and when.
type received struct {
	at   time.Time
	data []byte
}

// recorder keeps what one stream's subjects carry; NATS callbacks only
// record, the test goroutine checks.
type recorder struct {
	mu   sync.Mutex
	msgs map[string][]received // by kind
}

func record(t *testing.T, nc *nats.Conn, stream string) *recorder {
	t.Helper()
	r := &recorder{msgs: map[string][]received{}}
	for _, kind := range []string{sinks.KindDetections, sinks.KindAnalytics, sinks.KindCounts} {
		_, err := nc.Subscribe(sinks.StreamSubject("vigil", stream, kind), func(m *nats.Msg) {
			r.mu.Lock()
			r.msgs[kind] = append(r.msgs[kind], received{time.Now(), m.Data})
			r.mu.Unlock()
		})
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	return r
}

// get returns the messages of kind received at or after since.
func (r *recorder) get(kind string, since time.Time) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, m := range r.msgs[kind] {
		if !m.at.Before(since) {
			out = append(out, m)
		}
	}
	return out
}

// events decodes the analytics events received at or after since.
func (r *recorder) events(t *testing.T, since time.Time) []analytics.Event {
	var out []analytics.Event
	for _, m := range r.get(sinks.KindAnalytics, since) {
		var e analytics.Event
		require.NoError(t, json.Unmarshal(m.data, &e))
		out = append(out, e)
	}
	return out
}

// crossed reports whether events hold a crossing of line in direction dir.
func crossed(events []analytics.Event, line string, dir analytics.Direction) bool {
	for _, e := range events {
		if e.Type == analytics.EventLineCross && e.Line == line && e.Direction == dir {
			return true
		}
	}
	return false
}

// `vigil run` with a zone and a line on a real RTSP camera (the
// gst-rtsp-server test camera serving testenv.FacePan): detection messages carry
// track ids and zones and are schema-valid; events (track_start,
// zone_enter, line_cross both ways) come on vigil.<id>.analytics and to an
// MQTT client on vigil/<id>/analytics (nats.mqtt.listen); counts come on
// vigil.<id>.counts at most once a second and in the metrics. Changing
// the analytics alone (a PATCH) applies without a restart: same epoch, no
// lifecycle event, the same track id, the new line counts and the old
// one's series are gone. Stopping vigil ends the tracks (track_end), and a
// JetStream stream with de-duplication holds every event of two vigil
// runs exactly once: each run's seqs from 0 without a gap or a repeat,
// and a re-sent event is dropped as a duplicate.
func TestAnalyticsEndToEnd(t *testing.T) {
	detSchema, evSchema, countsSchema := schemas(t)
	srv := rtsptest.Start(t, rtsptest.EncodeH264(t, testenv.FacePan(t), 0), rtsptest.Options{Loop: true})
	dir := t.TempDir()
	const body = `nats: {listen: "127.0.0.1:0", mqtt: {listen: "127.0.0.1:0"}}`
	v := vigiltest.Start(t, dir, body)
	require.NotEmpty(t, v.EP.MQTT)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The capture lives in the embedded server's store under dir, so it
	// outlives each vigil.
	capture := func(v *vigiltest.Vigil) jetstream.Stream {
		js, err := jetstream.New(v.NC)
		require.NoError(t, err)
		s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "EVENTS", Subjects: []string{"vigil.*.analytics"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
		})
		require.NoError(t, err)
		return s
	}
	c := capture(v)
	rec := record(t, v.NC, "pan")
	lifecycle := v.Events("pan")

	var mq messages
	mc := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + v.EP.MQTT).SetClientID("e2e").SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetDefaultPublishHandler(mq.add))
	tok := mc.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	defer mc.Disconnect(250)
	tok = mc.Subscribe("vigil/pan/analytics", 0, nil)
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())

	start := time.Now()
	code, b := v.Call("POST", "/v1/streams", `{"id":"pan","url":"`+srv.URL+`","model":"blazeface","open_timeout":"10s","analytics":`+panAnalytics+`}`)
	require.Equal(t, http.StatusCreated, code, string(b))

	// Both crossings come within one 8 s period of the clip once the
	// stream runs; the rest is room for a loaded CI machine.
	testenv.Eventually(t, func() bool {
		ev := rec.events(t, start)
		return crossed(ev, "mid", analytics.DirIn) && crossed(ev, "mid", analytics.DirOut) && len(mq.get()) > 0
	}, 90*time.Second, 100*time.Millisecond, "crossings of mid both ways on NATS, and an event over MQTT")

	// Detections: schema-valid, with track ids once confirmed, and the
	// zone while the face is in the right half.
	var tracked, inZone int
	for _, m := range rec.get(sinks.KindDetections, start) {
		valid(t, detSchema, m.data)
		var msg sinks.Message
		require.NoError(t, json.Unmarshal(m.data, &msg))
		require.Positive(t, msg.LatencyMS.Analytics, "the stage's time is in the message")
		for _, d := range msg.Detections {
			if d.TrackID != "" {
				tracked++
				require.True(t, strings.HasPrefix(d.TrackID, msg.Epoch+"-"), "%s carries the run's epoch %s", d.TrackID, msg.Epoch)
			}
			if cx := (d.Box.X1 + d.Box.X2) / 2; d.TrackID != "" && len(d.Zones) > 0 {
				inZone++
				require.Equal(t, []string{"right"}, d.Zones)
				// In the right half, give or take the zone's inertia:
				// 3 frames at the clip's top speed of 4 px a frame.
				require.Greater(t, cx, float32(256-3*4), "in the right half")
			}
		}
	}
	require.Positive(t, tracked, "detections carry track ids")
	require.Positive(t, inZone, "and the zone they are in")

	// Events: schema-valid, one track start at least, zone entries.
	types := map[analytics.EventType]int{}
	for _, m := range rec.get(sinks.KindAnalytics, start) {
		valid(t, evSchema, m.data)
	}
	for _, e := range rec.events(t, start) {
		types[e.Type]++
	}
	require.Positive(t, types[analytics.EventTrackStart], "%v", types)
	require.Positive(t, types[analytics.EventZoneEnter], "%v", types)
	for _, m := range mq.get() {
		require.Equal(t, "vigil/pan/analytics", m.Topic())
		valid(t, evSchema, m.Payload())
	}

	// Counts: schema-valid, a change at most once a second (by their
	// frames' capture times: the sends are a second apart at least, the
	// frames' times less the variation of their latency, well under the
	// half second allowed here), and the crossings in the metrics.
	testenv.Eventually(t, func() bool {
		cs := rec.get(sinks.KindCounts, start)
		if len(cs) == 0 {
			return false
		}
		var last analytics.Counts
		require.NoError(t, json.Unmarshal(cs[len(cs)-1].data, &last))
		return len(last.Lines) == 1 && last.Lines[0].In["face"] >= 1 && last.Lines[0].Out["face"] >= 1
	}, 10*time.Second, 100*time.Millisecond, "counts with the crossings of mid")
	var prev analytics.Counts
	for i, m := range rec.get(sinks.KindCounts, start) {
		valid(t, countsSchema, m.data)
		var cnt analytics.Counts
		require.NoError(t, json.Unmarshal(m.data, &cnt))
		if i > 0 && cnt.Epoch == prev.Epoch {
			require.Greater(t, cnt.Version, prev.Version, "a counts message is a change")
			require.Greater(t, cnt.Time.Sub(prev.Time), 500*time.Millisecond, "counts %d and %d", prev.Version, cnt.Version)
		}
		prev = cnt
	}
	in := vigiltest.MetricValue(t, v, `vigil_analytics_line_crossings_total{class="face",direction="in",line="mid",stream="pan"}`)
	out := vigiltest.MetricValue(t, v, `vigil_analytics_line_crossings_total{class="face",direction="out",line="mid",stream="pan"}`)
	require.GreaterOrEqual(t, in, 1.0)
	require.GreaterOrEqual(t, out, 1.0)
	// A crossing since the last counts message is in the metric already.
	require.GreaterOrEqual(t, in, float64(prev.Lines[0].In["face"]), "the metric counts what the counts say")

	// Hot reload: the line moves to x 300 under another name.
	before, ok := v.Stream("pan")
	require.True(t, ok)
	require.Equal(t, "running", string(before.Status.State))
	trackID := func(since time.Time) string {
		ds := rec.get(sinks.KindDetections, since)
		for i := len(ds) - 1; i >= 0; i-- {
			var msg sinks.Message
			require.NoError(t, json.Unmarshal(ds[i].data, &msg))
			for _, d := range msg.Detections {
				if d.TrackID != "" {
					return d.TrackID
				}
			}
		}
		return ""
	}
	id := trackID(start)
	require.NotEmpty(t, id)
	reload := time.Now()
	code, b = v.Call("PATCH", "/v1/streams/pan", `{"analytics":{"lines":[{"name":"mid2","a":[300,256],"b":[300,0],"classes":["face"],"anchor":"center"}]}}`)
	require.Equal(t, http.StatusOK, code, string(b))
	v.WaitLogs(`"msg":"stream analytics reconfigured without a restart","stream":"pan"`)
	testenv.Eventually(t, func() bool { return crossed(rec.events(t, reload), "mid2", analytics.DirIn) }, 30*time.Second,
		100*time.Millisecond, "a crossing of the new line")
	after, ok := v.Stream("pan")
	require.True(t, ok)
	require.Equal(t, before.Status.Epoch, after.Status.Epoch, "the same run")
	require.Equal(t, "running", string(after.Status.State))
	require.Equal(t, before.Status.Reconnects, after.Status.Reconnects, "the same connection")
	for _, e := range lifecycle.All() {
		require.True(t, e.Received.Before(reload), "no lifecycle event after the reload: %s", e.Raw)
	}
	require.Equal(t, id, trackID(reload), "the face keeps its id")
	for _, e := range rec.events(t, reload) {
		require.NotEqual(t, "mid", e.Line, "the old line counts no more")
	}
	require.Zero(t, vigiltest.MetricValue(t, v, `vigil_analytics_line_crossings_total{class="face",direction="in",line="mid",stream="pan"}`),
		"the removed line's series are gone")
	require.GreaterOrEqual(t, vigiltest.MetricValue(t, v, `vigil_analytics_line_crossings_total{class="face",direction="in",line="mid2",stream="pan"}`), 1.0)

	// A restart of vigil: the tracks end as it stops; a new run over the
	// same data directory starts the stream again, with a new epoch.
	v.Stop()
	v = vigiltest.Start(t, dir, body)
	c = capture(v)
	s := v.WaitState("pan", "running", 60*time.Second)
	require.NotEqual(t, before.Status.Epoch, s.Status.Epoch)
	epochs := func() map[string][]analytics.Event {
		info, err := c.Info(ctx)
		require.NoError(t, err)
		by := map[string][]analytics.Event{}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := c.GetMsg(ctx, seq)
			require.NoError(t, err)
			var e analytics.Event
			require.NoError(t, json.Unmarshal(m.Data, &e))
			require.Equal(t, sinks.AnalyticsMsgID(e.StreamID, e.Epoch, e.Seq), m.Header.Get("Nats-Msg-Id"))
			by[e.Epoch] = append(by[e.Epoch], e)
		}
		return by
	}
	testenv.Eventually(t, func() bool { return len(epochs()[s.Status.Epoch]) > 0 }, 60*time.Second, 200*time.Millisecond,
		"the second run's first events captured")
	first := epochs()[before.Status.Epoch]
	ends := 0
	for _, e := range first {
		if e.Type == analytics.EventTrackEnd {
			ends++
		}
	}
	require.Positive(t, ends, "stopping vigil ended the first run's tracks")

	// Sent again with its id, an event is taken for the duplicate it is.
	js, err := jetstream.New(v.NC)
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	m, err := c.GetMsg(ctx, info.State.LastSeq) // within the 2-minute window
	require.NoError(t, err)
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	require.NoError(t, err)
	require.True(t, ack.Duplicate, "a re-sent event is dropped")

	by := epochs()
	require.Len(t, by, 2, "two runs")
	for ep, evs := range by {
		seqs := make([]int, len(evs))
		for i, e := range evs {
			seqs[i] = int(e.Seq)
		}
		sort.Ints(seqs)
		for i, q := range seqs {
			require.Equal(t, i, q, "run %s: every event once, from 0 without a gap: %v", ep, seqs)
		}
	}
	t.Logf("events captured: %d in the first run (%d track ends), %d in the second so far", len(by[before.Status.Epoch]), ends,
		len(by[s.Status.Epoch]))
}

// messages collects what an MQTT client receives (paho's goroutines only
// record).
type messages struct {
	mu   sync.Mutex
	msgs []mqtt.Message
}

func (m *messages) add(_ mqtt.Client, msg mqtt.Message) {
	m.mu.Lock()
	m.msgs = append(m.msgs, msg)
	m.mu.Unlock()
}

func (m *messages) get() []mqtt.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]mqtt.Message(nil), m.msgs...)
}
