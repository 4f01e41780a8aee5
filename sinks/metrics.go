package sinks

import (
	"errors"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a message was not delivered: the "reason" label of
// vigil_nats_undelivered_messages_total.
const (
	// UndeliveredBufferFull: the connection was down and the client's
	// reconnect buffer (NATSOptions.ReconnectBufSize) was full, so the
	// publish failed (a frame is also dropped as publish_error).
	UndeliveredBufferFull = "buffer_full"
	// UndeliveredDiscarded: the message was held in the reconnect buffer
	// and the connection closed (vigil stopped) before a server came back.
	UndeliveredDiscarded = "discarded"
	// UndeliveredClosed: published after the connection was closed.
	UndeliveredClosed = "closed"
	// UndeliveredError: any other refusal by the client (e.g. a message
	// over the server's max_payload).
	UndeliveredError = "error"
	// UndeliveredNotOwner: the node no longer held (or never held) the
	// stream's lease, so the fence (NATS.SetFence) refused the message:
	// another node may be running the stream.
	UndeliveredNotOwner = "not_owner"
)

func undeliveredReason(err error) string {
	switch {
	case errors.Is(err, ErrNotOwner):
		return UndeliveredNotOwner
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		return UndeliveredBufferFull
	case errors.Is(err, nats.ErrConnectionClosed):
		return UndeliveredClosed
	}
	return UndeliveredError
}

// NATSMetrics are the NATS connection's collectors:
//
//   - vigil_nats_connected: 1 while a server is connected, else 0;
//   - vigil_nats_reconnect_buffer_bytes and
//     vigil_nats_reconnect_buffer_messages: what the client holds while
//     disconnected (0 while connected), and
//     vigil_nats_reconnect_buffer_limit_bytes, the buffer's size;
//   - vigil_nats_reconnects_total: successful reconnections;
//   - vigil_nats_undelivered_messages_total{kind,reason}: messages that
//     were not delivered (kind: detections, events, alerts, analytics,
//     counts; reason: the Undelivered* constants).
//
// Create them with NewNATSMetrics and pass them in NATSOptions; the
// gauges read the sink that DialNATS returns (zero before it).
type NATSMetrics struct {
	// Undelivered is vigil_nats_undelivered_messages_total{kind,reason}.
	Undelivered *prometheus.CounterVec
	sink        atomic.Pointer[NATS]
}

// NewNATSMetrics creates the collectors and registers them with reg (nil:
// unregistered). It panics if the names are already registered with reg,
// as prometheus.MustRegister does.
func NewNATSMetrics(reg prometheus.Registerer) *NATSMetrics {
	m := &NATSMetrics{Undelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vigil_nats_undelivered_messages_total",
		Help: "Messages not delivered to NATS, by kind (detections, events, alerts, analytics, counts) and reason: buffer_full (refused while disconnected), discarded (held while disconnected, lost when the connection closed), closed, error, not_owner (refused: this node does not hold the stream's lease).",
	}, []string{"kind", "reason"})}
	state := func(f func(NATSState) float64) func() float64 {
		return func() float64 {
			s := m.sink.Load()
			if s == nil {
				return 0
			}
			return f(s.State())
		}
	}
	cs := []prometheus.Collector{
		m.Undelivered,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vigil_nats_connected", Help: "1 while the NATS connection is up, 0 while it is down (publishes are then held in the reconnect buffer).",
		}, state(func(st NATSState) float64 { return b2f(st.Connected) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vigil_nats_reconnect_buffer_bytes", Help: "Bytes published while NATS is disconnected, held by the client until it reconnects (0 while connected).",
		}, state(func(st NATSState) float64 { return float64(st.HeldBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vigil_nats_reconnect_buffer_messages", Help: "Messages published while NATS is disconnected, held by the client until it reconnects (0 while connected).",
		}, state(func(st NATSState) float64 { return float64(st.HeldMessages) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vigil_nats_reconnect_buffer_limit_bytes", Help: "Size of the NATS client's reconnect buffer; a publish that does not fit fails.",
		}, state(func(st NATSState) float64 { return float64(st.BufferLimitBytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "vigil_nats_reconnects_total", Help: "Successful reconnections to NATS.",
		}, state(func(st NATSState) float64 { return float64(st.Reconnects) })),
	}
	if reg != nil {
		reg.MustRegister(cs...)
	}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
