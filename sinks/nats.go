package sinks

import (
	"bytes"
	"context"
	"encoding/json"
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

// NATSOptions configure a NATS sink.
type NATSOptions struct {
	// URL is a NATS URL or a comma-separated list of cluster URLs.
	URL string
	// Prefix is the first subject token (default "vigil").
	Prefix string
	// Name is the client connection name (default "vigil").
	Name string
	// Token is presented to the server when not empty.
	Token  string
	Logger *zap.Logger
}

// NATS publishes results to NATS; it implements pipeline.Sink and is safe
// for concurrent use by several streams.
type NATS struct {
	nc     *nats.Conn
	prefix string
	bufs   sync.Pool
	// instance (a pipeline.NewEpoch made at dial) and n number the
	// messages of PublishStream, for their Nats-Msg-Id.
	instance string
	n        atomic.Uint64
}

var _ pipeline.Sink = (*NATS)(nil)

// DialNATS connects to o.URL, retrying the initial connect for up to 10 s
// (or until ctx ends) and reconnecting forever afterwards (messages
// published while disconnected are buffered by the client, up to its 8 MiB
// reconnect buffer). It returns an error naming the URL, credentials
// redacted, if no server answers.
func DialNATS(ctx context.Context, o NATSOptions) (*NATS, error) {
	if o.Prefix == "" {
		o.Prefix = "vigil"
	}
	if o.Name == "" {
		o.Name = "vigil"
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	var nc *nats.Conn
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err = nats.Connect(o.URL, nats.Name(o.Name), nats.Token(o.Token), nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second), nats.Timeout(2*time.Second),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil { // nil on a deliberate Close
					log.Warn("NATS disconnected", zap.Error(err))
				}
			}),
			nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", zap.String("url", c.ConnectedUrlRedacted())) }),
		)
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
	return &NATS{nc: nc, prefix: o.Prefix, instance: pipeline.NewEpoch()}, nil
}

// Conn returns the underlying connection (for other publishers, e.g. events).
func (s *NATS) Conn() *nats.Conn { return s.nc }

// Publish implements pipeline.Sink. Errors come from encoding or from the
// client (closed connection, reconnect buffer full).
func (s *NATS) Publish(_ context.Context, r *pipeline.Result) error {
	m := stamp(r)
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
	if err := s.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("publishing to %s: %w", msg.Subject, err)
	}
	finish(r)
	return nil
}

// PublishStream publishes data (a JSON document) to
// <prefix>.<streamID>.<kind> (KindEvents, KindAlerts) with header
// Nats-Msg-Id <stream_id>/<kind>/<instance>/<n>: instance is new for every
// connection vigil makes (pipeline.NewEpoch at DialNATS) and n counts this
// connection's PublishStream messages from 1, so ids never repeat across
// restarts. Errors come from the client (closed connection, reconnect
// buffer full).
func (s *NATS) PublishStream(streamID, kind string, data []byte) error {
	id := streamID + "/" + kind + "/" + s.instance + "/" + strconv.FormatUint(s.n.Add(1), 10)
	msg := &nats.Msg{Subject: StreamSubject(s.prefix, streamID, kind), Header: nats.Header{"Nats-Msg-Id": []string{id}}, Data: data}
	if err := s.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("publishing to %s: %w", msg.Subject, err)
	}
	return nil
}

// Close flushes pending messages (up to 5 s) and closes the connection.
// It is idempotent.
func (s *NATS) Close() error {
	if s.nc.IsClosed() {
		return nil
	}
	err := s.nc.FlushTimeout(5 * time.Second)
	s.nc.Close()
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
