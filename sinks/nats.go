package sinks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/pipeline"
)

// Kinds of per-stream subjects: <prefix>.<stream_id>.<kind>.
const (
	KindDetections = "detections" // one Message per processed frame
	KindEvents     = "events"     // lifecycle events (pipeline.Event)
	KindAlerts     = "alerts"     // rate-limited alerts (pipeline.Alert)
	// KindAnalytics carries a stream's analytics events (tracks, zones,
	// lines: schema vigil.analytics/v1), one message per event.
	KindAnalytics = "analytics"
	// KindCounts carries a stream's analytics counts (zone occupancy, line
	// crossings: schema vigil.counts/v1), on change, at most once a second.
	KindCounts = "counts"
)

// StreamSubject returns <prefix>.<streamID>.<kind>. streamID must be a
// valid subject token (config validation ensures it).
func StreamSubject(prefix, streamID, kind string) string {
	return prefix + "." + streamID + "." + kind
}

// Subject returns the detections subject for a stream:
// <prefix>.<streamID>.detections.
func Subject(prefix, streamID string) string { return StreamSubject(prefix, streamID, KindDetections) }

// MsgID returns a detection message's Nats-Msg-Id header value,
// <stream_id>/<epoch>/<seq>. A JetStream stream capturing the subject drops
// a message whose id it has seen within its duplicate window (2 min by
// default): the epoch (pipeline.NewEpoch) is new in every run of the
// stream, so frames of a restarted or reconfigured stream, whose seq starts
// at 0 again, are never taken for duplicates, while a client's retry of the
// same message still is.
func MsgID(streamID, epoch string, seq uint64) string {
	return streamID + "/" + epoch + "/" + strconv.FormatUint(seq, 10)
}

// AnalyticsMsgID returns an analytics event's Nats-Msg-Id,
// <stream_id>/<epoch>/e<seq>: seq numbers the run's events (analytics.Event.Seq)
// and the "e" keeps them apart from the frames' ids (MsgID), so a
// JetStream stream with de-duplication keeps each event exactly once
// across restarts, like frames.
func AnalyticsMsgID(streamID, epoch string, seq uint64) string {
	return streamID + "/" + epoch + "/e" + strconv.FormatUint(seq, 10)
}

// CountsMsgID returns a counts message's Nats-Msg-Id,
// <stream_id>/<epoch>/c<version> (analytics.Counts.Version grows with
// every change within a run).
func CountsMsgID(streamID, epoch string, version uint64) string {
	return streamID + "/" + epoch + "/c" + strconv.FormatUint(version, 10)
}

// Headers of every message vigil publishes on a stream's subjects.
const (
	// HeaderNode carries node.id, the node that published the message
	// (also the "node" field of the JSON body).
	HeaderNode = "Vigil-Node"
	// HeaderLease carries the publishing node's fencing token for the
	// stream, a decimal integer: the revision of the lease write that made
	// it the stream's owner. Tokens of later owners are larger, so a
	// consumer that keeps the largest token seen per stream drops messages
	// of a deposed owner (docs/schema.md). Absent when no fence is set.
	HeaderLease = "Vigil-Lease"
)

// Fence says whether this node may publish for streamID now and with
// which fencing token (HeaderLease); package cluster provides it. It is
// called on every publish, so it must be cheap and safe for concurrent
// use.
type Fence func(streamID string) (token uint64, ok bool)

// ErrNotOwner is returned for a message the fence refused: this node does
// not hold the stream's lease (any more).
var ErrNotOwner = errors.New("this node does not hold the stream's lease")

// NATSOptions configure a NATS sink.
type NATSOptions struct {
	// URL is a NATS URL or a comma-separated list of cluster URLs.
	URL string
	// Prefix is the first subject token (default "vigil").
	Prefix string
	// Name is the client connection name (default "vigil").
	Name string
	// Token is presented to the server when not empty.
	Token string
	// Node is node.id: the "node" field of detection messages and the
	// Vigil-Node header of every message ("": neither).
	Node string
	// ReconnectBufSize bounds the bytes the client holds while
	// disconnected (0: nats.go's default, nats.DefaultReconnectBufSize,
	// 8 MiB); a publish that does not fit fails.
	ReconnectBufSize int
	// CloseTimeout bounds Close's final flush (default 5 s): while
	// disconnected, the time left for a server to come back before the
	// held messages are discarded.
	CloseTimeout time.Duration
	// Metrics receives the connection's state and undelivered messages
	// (nil: unregistered collectors).
	Metrics *NATSMetrics
	Logger  *zap.Logger
}

// NATS publishes results to NATS; it implements pipeline.Sink and is safe
// for concurrent use by several streams. Events and alerts go through
// PublishStream on the same connection, so that every message vigil sends
// is counted the same way.
//
// Core NATS publishes are not acknowledged, so "delivered" can only mean
// "written to a connected server's socket". While the connection is down,
// nats.go holds publishes in its reconnect buffer and sends them when it
// reconnects: such messages are published but Buffered, and counted as
// held until then. A publish that does not fit in the buffer fails
// (vigil_nats_undelivered_messages_total{reason="buffer_full"}); held
// messages still in the buffer when the connection closes are lost
// (reason="discarded"). Messages written to the socket just before a
// server dies, or flushed to a server that dies before routing them, are
// lost without any sign on the client: only a JetStream stream capturing
// the subjects (docs/schema.md) proves delivery.
type NATS struct {
	nc           *nats.Conn
	prefix       string
	node         string
	fence        atomic.Pointer[Fence]
	bufs         sync.Pool
	m            *NATSMetrics
	log          *zap.Logger
	closeTimeout time.Duration
	undelivered  atomic.Uint64
	// instance (a pipeline.NewEpoch made at dial) and n number the
	// messages of PublishStream, for their Nats-Msg-Id.
	instance string
	n        atomic.Uint64

	// mu orders publishes against the reconnect and close accounting, so
	// that a message seen as held is counted before a reconnect clears
	// the count (the reconnect handler runs after the status changed).
	mu        sync.Mutex
	held      map[string]int // kind -> messages accepted while disconnected, since the last (re)connect
	downSince time.Time      // zero while connected
}

var _ pipeline.Sink = (*NATS)(nil)

// DialNATS connects to o.URL, retrying the initial connect for up to 10 s
// (or until ctx ends) and reconnecting forever afterwards (messages
// published while disconnected are held by the client, up to its reconnect
// buffer, see NATS). Client-side errors and connection changes are logged
// through o.Logger (nats.go would print its asynchronous errors on stderr
// otherwise). It returns an error naming the URL, credentials redacted, if
// no server answers.
func DialNATS(ctx context.Context, o NATSOptions) (*NATS, error) {
	if o.Prefix == "" {
		o.Prefix = "vigil"
	}
	if o.Name == "" {
		o.Name = "vigil"
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 5 * time.Second
	}
	if o.Metrics == nil {
		o.Metrics = NewNATSMetrics(nil)
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &NATS{prefix: o.Prefix, node: o.Node, m: o.Metrics, log: log, closeTimeout: o.CloseTimeout, instance: pipeline.NewEpoch(), held: map[string]int{}}
	opts := []nats.Option{nats.Name(o.Name), nats.Token(o.Token), nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second), nats.Timeout(2 * time.Second),
		nats.DisconnectErrHandler(s.disconnected), nats.ReconnectHandler(s.reconnected),
		nats.ClosedHandler(func(*nats.Conn) { s.discardHeld("closed") }),
		nats.ErrorHandler(s.asyncError),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Debug("NATS reconnect attempt failed", zap.Error(err))
		}),
	}
	if o.ReconnectBufSize > 0 {
		opts = append(opts, nats.ReconnectBufSize(o.ReconnectBufSize))
	}
	var nc *nats.Conn
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err = nats.Connect(o.URL, opts...)
		if err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting to NATS at %s: %w", redact.URLs(o.URL), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", redact.URLs(o.URL), err)
	}
	s.nc = nc
	o.Metrics.sink.Store(s)
	return s, nil
}

// disconnected is the client's DisconnectErrHandler (err is nil on a
// deliberate Close).
func (s *NATS) disconnected(c *nats.Conn, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	if s.downSince.IsZero() {
		s.downSince = time.Now()
	}
	s.mu.Unlock()
	s.log.Warn("NATS disconnected: messages are held in the client's reconnect buffer until it is back (lost if it fills or vigil stops first)",
		zap.Error(err), zap.Int("buffer_limit_bytes", c.Opts.ReconnectBufSize))
}

// reconnected is the client's ReconnectHandler: the held messages were
// written to the new connection.
func (s *NATS) reconnected(c *nats.Conn) {
	s.mu.Lock()
	sent := 0
	for k, n := range s.held {
		sent += n
		delete(s.held, k)
	}
	down := time.Duration(0)
	if !s.downSince.IsZero() {
		down = time.Since(s.downSince)
	}
	s.downSince = time.Time{}
	s.mu.Unlock()
	s.log.Info("NATS reconnected", zap.String("url", redact.URLs(c.ConnectedUrl())), zap.Duration("down_for", down),
		zap.Int("held_messages_sent", sent))
}

// discardHeld counts the messages still held as undelivered (reason
// discarded): the connection closed before a server came back. It returns
// how many there were.
func (s *NATS) discardHeld(why string) int {
	s.mu.Lock()
	n := 0
	for k, c := range s.held {
		s.m.Undelivered.WithLabelValues(k, UndeliveredDiscarded).Add(float64(c))
		s.undelivered.Add(uint64(c))
		n += c
		delete(s.held, k)
	}
	s.mu.Unlock()
	if n > 0 {
		s.log.Error("NATS connection "+why+" while disconnected: the messages held in its reconnect buffer are lost", zap.Int("messages", n))
	}
	return n
}

// asyncError is the client's ErrorHandler: asynchronous errors (a slow
// consumer, a JetStream consumer gone quiet) go to the log instead of
// nats.go's default, untimestamped lines on stderr.
func (s *NATS) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	fields := []zap.Field{zap.Error(err)}
	if sub != nil {
		fields = append(fields, zap.String("subject", sub.Subject))
	}
	if errors.Is(err, nats.ErrConsumerNotActive) {
		// The registry watch's ordered consumer misses its heartbeats
		// while the server is unreachable; it resumes on reconnect.
		s.log.Debug("NATS consumer not active (server unreachable)", fields...)
		return
	}
	s.log.Warn("NATS asynchronous error", fields...)
}

// Conn returns the underlying connection (the registry uses it).
func (s *NATS) Conn() *nats.Conn { return s.nc }

// Node returns node.id as given in NATSOptions.
func (s *NATS) Node() string { return s.node }

// SetFence makes every later publish for a stream ask f first: a message
// f refuses is not sent (ErrNotOwner, counted as undelivered with reason
// not_owner), and one it allows carries its token in HeaderLease. Set it
// before streams start; nil: every message is allowed, without a token.
func (s *NATS) SetFence(f Fence) {
	if f == nil {
		s.fence.Store(nil)
		return
	}
	s.fence.Store(&f)
}

// stampHeaders adds HeaderNode and HeaderLease to m, or returns
// ErrNotOwner when the fence refuses streamID.
func (s *NATS) stampHeaders(streamID string, m *nats.Msg) error {
	if s.node != "" {
		m.Header.Set(HeaderNode, s.node)
	}
	f := s.fence.Load()
	if f == nil {
		return nil
	}
	token, ok := (*f)(streamID)
	if !ok {
		return fmt.Errorf("%w %s", ErrNotOwner, streamID)
	}
	m.Header.Set(HeaderLease, strconv.FormatUint(token, 10))
	return nil
}

// publish publishes m (one message of kind: KindDetections, KindEvents,
// KindAlerts, KindAnalytics, KindCounts) and reports whether the client held it in its reconnect
// buffer instead of sending it (the connection is down: see NATS). Errors
// come from the client (the reconnect buffer is full, the connection is
// closed, the message is too large); each is counted in
// vigil_nats_undelivered_messages_total.
func (s *NATS) publish(streamID, kind string, m *nats.Msg) (buffered bool, err error) {
	if err := s.stampHeaders(streamID, m); err != nil {
		s.m.Undelivered.WithLabelValues(kind, UndeliveredNotOwner).Inc()
		s.undelivered.Add(1)
		return false, err
	}
	s.mu.Lock()
	err = s.nc.PublishMsg(m)
	if err == nil && s.nc.Status() != nats.CONNECTED {
		buffered = true
		s.held[kind]++
		if s.downSince.IsZero() {
			s.downSince = time.Now()
		}
	}
	s.mu.Unlock()
	if err != nil {
		s.m.Undelivered.WithLabelValues(kind, undeliveredReason(err)).Inc()
		s.undelivered.Add(1)
		return false, fmt.Errorf("publishing to %s: %w", m.Subject, err)
	}
	return buffered, nil
}

// Publish implements pipeline.Sink, setting r.Buffered when the client
// held the message (see NATS), and r.Message to a copy of the body sent
// when r.KeepMessage asks. Errors come from encoding or from the
// client (closed connection, reconnect buffer full).
func (s *NATS) Publish(_ context.Context, r *pipeline.Result) error {
	m := stamp(r)
	m.Node = s.node
	buf, _ := s.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer s.bufs.Put(buf)
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(&m); err != nil {
		return fmt.Errorf("encoding message: %w", err)
	}
	msg := &nats.Msg{
		Subject: Subject(s.prefix, r.StreamID),
		Header:  nats.Header{"Nats-Msg-Id": []string{MsgID(r.StreamID, r.Epoch, r.Seq)}},
		Data:    bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}),
	}
	buffered, err := s.publish(r.StreamID, KindDetections, msg)
	if err != nil {
		return err
	}
	r.Buffered = buffered
	if r.KeepMessage {
		r.Message = bytes.Clone(msg.Data) // buf goes back to the pool
	}
	finish(r)
	return nil
}

// PublishStream publishes data (a JSON document) to
// <prefix>.<streamID>.<kind> (KindEvents, KindAlerts, ...) with header
// Nats-Msg-Id <stream_id>/<kind>/<instance>/<n>: instance is new for every
// connection vigil makes (pipeline.NewEpoch at DialNATS) and n counts this
// connection's PublishStream messages from 1, so ids never repeat across
// restarts. Like detections, a message published while NATS is down is
// held (see NATS). Errors come from the client (closed connection,
// reconnect buffer full).
func (s *NATS) PublishStream(streamID, kind string, data []byte) error {
	return s.PublishStreamID(streamID, kind, streamID+"/"+kind+"/"+s.instance+"/"+strconv.FormatUint(s.n.Add(1), 10), data)
}

// PublishStreamID is PublishStream with the caller's Nats-Msg-Id, for
// messages that name themselves for good (AnalyticsMsgID, CountsMsgID):
// a JetStream stream with de-duplication then keeps one copy of each
// even when it is published again. Errors are PublishStream's.
func (s *NATS) PublishStreamID(streamID, kind, msgID string, data []byte) error {
	msg := &nats.Msg{Subject: StreamSubject(s.prefix, streamID, kind), Header: nats.Header{"Nats-Msg-Id": []string{msgID}}, Data: data}
	_, err := s.publish(streamID, kind, msg)
	return err
}

// NATSState is the connection's state at one instant, as the API and the
// progress line show it.
type NATSState struct {
	// Connected is true while a server is connected.
	Connected bool `json:"connected"`
	// DownSince is when the connection was lost (zero while connected).
	DownSince time.Time `json:"down_since,omitzero"`
	// HeldMessages and HeldBytes are what the client holds in its
	// reconnect buffer, published while disconnected: sent on reconnect,
	// lost if the connection closes first. BufferLimitBytes is the
	// buffer's size; a publish that does not fit fails.
	HeldMessages     int `json:"held_messages"`
	HeldBytes        int `json:"held_bytes"`
	BufferLimitBytes int `json:"buffer_limit_bytes"`
	// Undelivered counts messages refused by the client or discarded
	// with the buffer since vigil started (every kind and reason of
	// vigil_nats_undelivered_messages_total).
	Undelivered uint64 `json:"undelivered_messages"`
	// Reconnects counts successful reconnections since vigil started.
	Reconnects uint64 `json:"reconnects"`
}

// State returns the connection's state now.
func (s *NATS) State() NATSState {
	st := NATSState{Connected: s.nc.Status() == nats.CONNECTED, BufferLimitBytes: s.nc.Opts.ReconnectBufSize,
		Undelivered: s.undelivered.Load(), Reconnects: s.nc.Stats().Reconnects}
	s.mu.Lock()
	for _, n := range s.held {
		st.HeldMessages += n
	}
	down := s.downSince
	s.mu.Unlock()
	if !st.Connected {
		st.DownSince = down
		if down.IsZero() { // the disconnect handler has not run yet
			st.DownSince = time.Now()
		}
		if b, err := s.nc.Buffered(); err == nil {
			st.HeldBytes = b
		}
	}
	return st
}

// Close flushes pending messages (up to NATSOptions.CloseTimeout, which
// while disconnected is the time left for a server to come back) and
// closes the connection; messages still held are counted as discarded. It
// is idempotent.
func (s *NATS) Close() error {
	if s.nc.IsClosed() {
		return nil
	}
	err := s.nc.FlushTimeout(s.closeTimeout)
	s.mu.Lock()
	up := s.nc.Status() == nats.CONNECTED
	s.nc.Close()
	s.mu.Unlock()
	if !up {
		s.discardHeld("closed")
	}
	if err != nil {
		return fmt.Errorf("flushing NATS: %w", err)
	}
	return nil
}

// JSONLines writes each result as one JSON line (Message) to W; it
// implements pipeline.Sink and serialises concurrent calls.
type JSONLines struct {
	mu  sync.Mutex
	enc *json.Encoder
}

var _ pipeline.Sink = (*JSONLines)(nil)

// NewJSONLines returns a sink writing to w.
func NewJSONLines(w io.Writer) *JSONLines { return &JSONLines{enc: json.NewEncoder(w)} }

// WriteJSON writes v (an analytics event or counts, say) as one JSON line
// between the results; errors come from encoding or the writer.
func (s *JSONLines) WriteJSON(v any) error {
	s.mu.Lock()
	err := s.enc.Encode(v)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("writing a JSON line: %w", err)
	}
	return nil
}

// Publish implements pipeline.Sink; errors come from the writer.
func (s *JSONLines) Publish(_ context.Context, r *pipeline.Result) error {
	m := stamp(r)
	s.mu.Lock()
	err := s.enc.Encode(&m)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("writing result: %w", err)
	}
	finish(r)
	return nil
}
