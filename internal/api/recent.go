package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/vigil-video/vigil/sinks"
)

// RecentEvents is how many analytics events Recent keeps per stream.
const RecentEvents = 50

// recentStreams and recentBytes bound what Recent keeps: the streams it
// keeps anything for, and the bytes of the messages kept, all streams
// together (32 MiB: 50 events of ~500 bytes for 1,000 streams, with
// room). Subjects come from whoever may publish on NATS, not only from
// the registry; past a bound, new messages are dropped.
const (
	recentStreams = 4096
	recentBytes   = 32 << 20
)

// Recent keeps, for every stream, the latest analytics counts and the
// last RecentEvents analytics events published on NATS
// (<prefix>.<id>.counts and <prefix>.<id>.analytics, by whichever node
// runs the stream), for the console's stream page. It is safe for
// concurrent use.
type Recent struct {
	prefix string
	subs   []*nats.Subscription

	mu      sync.Mutex
	streams map[string]*recentStream
	bytes   int // of every message kept
}

type recentStream struct {
	counts json.RawMessage
	events []json.RawMessage // oldest first, at most RecentEvents
}

// StreamAnalytics is the body of GET /v1/streams/{id}/analytics.
type StreamAnalytics struct {
	// Counts is the latest counts message of the stream (schema
	// vigil.counts/v1), null before the first.
	Counts json.RawMessage `json:"counts"`
	// Events are its latest analytics events (schema vigil.analytics/v1),
	// newest first, at most RecentEvents.
	Events []json.RawMessage `json:"events"`
}

// NewRecent subscribes on nc to every stream's counts and analytics
// subjects under prefix; Close unsubscribes.
func NewRecent(nc *nats.Conn, prefix string) (*Recent, error) {
	r := &Recent{prefix: prefix, streams: map[string]*recentStream{}}
	for _, kind := range []string{sinks.KindCounts, sinks.KindAnalytics} {
		sub, err := nc.Subscribe(sinks.StreamSubject(prefix, "*", kind), r.add)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("subscribing to %s: %w", kind, err)
		}
		r.subs = append(r.subs, sub)
	}
	return r, nil
}

// Close unsubscribes.
func (r *Recent) Close() {
	for _, s := range r.subs {
		_ = s.Unsubscribe() // fails only when the connection is closed: nothing to stop then
	}
}

func (r *Recent) add(m *nats.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, r.prefix+".")
	id, kind, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || !json.Valid(m.Data) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.streams[id]
	if st == nil {
		if len(r.streams) >= recentStreams {
			return
		}
		st = &recentStream{}
		r.streams[id] = st
	}
	data := json.RawMessage(slices.Clone(m.Data))
	if kind == sinks.KindCounts {
		if r.bytes+len(data)-len(st.counts) <= recentBytes {
			r.bytes += len(data) - len(st.counts)
			st.counts = data
		}
		return
	}
	if len(st.events) == RecentEvents {
		r.bytes -= len(st.events[0])
		st.events = slices.Delete(st.events, 0, 1)
	}
	if r.bytes+len(data) <= recentBytes {
		r.bytes += len(data)
		st.events = append(st.events, data)
	}
}

// Of returns what Recent holds for stream id.
func (r *Recent) Of(id string) StreamAnalytics {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := StreamAnalytics{Counts: json.RawMessage("null"), Events: []json.RawMessage{}}
	st := r.streams[id]
	if st == nil {
		return out
	}
	if st.counts != nil {
		out.Counts = st.counts
	}
	for i := len(st.events) - 1; i >= 0; i-- {
		out.Events = append(out.Events, st.events[i])
	}
	return out
}

// Forget drops what Recent holds for stream id (it was removed).
func (r *Recent) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.streams[id]
	if st == nil {
		return
	}
	r.bytes -= len(st.counts)
	for _, e := range st.events {
		r.bytes -= len(e)
	}
	delete(r.streams, id)
}
