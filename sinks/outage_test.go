package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/sinks"
)

// restartable is a NATS server (JetStream under dir) that a test stops
// and starts again on the same port, as an operator restarting an external
// server would.
type restartable struct {
	t     *testing.T
	dir   string
	addr  string
	token string // the server's auth token ("": none)
	ns    *server.Server
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	return startRestartableToken(t, "")
}

// startRestartableToken is startRestartable with a server that requires
// token.
func startRestartableToken(t *testing.T, token string) *restartable {
	t.Helper()
	r := &restartable{t: t, dir: t.TempDir(), addr: "127.0.0.1:0", token: token}
	r.start()
	r.addr = r.ns.Addr().(*net.TCPAddr).String()
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) start() {
	r.t.Helper()
	ns, err := natsserver.Start(r.addr, r.dir, r.token)
	require.NoError(r.t, err)
	r.ns = ns
}

func (r *restartable) stop() {
	if r.ns != nil {
		r.ns.Shutdown()
		r.ns.WaitForShutdown()
		r.ns = nil
	}
}

func (r *restartable) url() string { return "nats://" + r.addr }

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(core), logs
}

// While the server is down, published results are held by the client
// (Buffered, counted in the reconnect-buffer gauges, vigil_nats_connected
// 0); after it restarts they are sent, and a JetStream stream capturing
// the subject has every message, count for count.
func TestNATSOutageHeldThenSent(t *testing.T) {
	srv := startRestartable(t)
	admin, err := nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	defer admin.Close()
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	capture, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CAP", Subjects: []string{"vigil.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	log, logs := observed()
	s, err := sinks.DialNATS(ctx, sinks.NATSOptions{URL: srv.url(), Metrics: sinks.NewNATSMetrics(reg), Logger: log})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, 1.0, gauge(t, reg, "vigil_nats_connected"))

	for i := range 5 {
		r := result(uint64(i))
		require.NoError(t, s.Publish(ctx, r))
		require.False(t, r.Buffered, "connected: sent")
	}
	require.NoError(t, s.Conn().Flush())
	// Flush says the server read them, not that JetStream stored them: a
	// stream stores on its own goroutine, and a shutdown before that loses
	// them on the server's side, which is not the sink's to hold (the
	// likely cause of a clean-clone CI run on a loaded machine whose
	// stream never reached 16; the failure now says how many it has).
	testenv.Eventually(t, func() bool {
		info, err := capture.Info(ctx)
		return err == nil && info.State.Msgs == 5
	}, 15*time.Second, 20*time.Millisecond, "the 5 messages sent while connected are stored before the server stops")

	srv.stop()
	testenv.Eventually(t, func() bool { return !s.State().Connected }, 10*time.Second, 10*time.Millisecond, "the sink sees the server gone")
	require.Equal(t, 0.0, gauge(t, reg, "vigil_nats_connected"))
	for i := 5; i < 15; i++ {
		r := result(uint64(i))
		require.NoError(t, s.Publish(ctx, r), "held, not refused")
		require.True(t, r.Buffered, "disconnected: held in the reconnect buffer")
	}
	require.NoError(t, s.PublishStream("cam-1", sinks.KindEvents, []byte(`{}`)))
	st := s.State()
	require.Equal(t, 11, st.HeldMessages)
	require.Positive(t, st.HeldBytes)
	require.Equal(t, nats.DefaultReconnectBufSize, st.BufferLimitBytes)
	require.False(t, st.DownSince.IsZero())
	require.Equal(t, 11.0, gauge(t, reg, "vigil_nats_reconnect_buffer_messages"))
	require.Equal(t, float64(st.HeldBytes), gauge(t, reg, "vigil_nats_reconnect_buffer_bytes"))

	srv.start()
	testenv.Eventually(t, func() bool { st := s.State(); return st.Connected && st.HeldMessages == 0 }, 15*time.Second, 10*time.Millisecond, "reconnected, held messages sent")
	require.NoError(t, s.Conn().Flush())
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := capture.Info(ctx)
		if err == nil && info.State.Msgs == 16 {
			break
		}
		if time.Now().After(deadline) {
			var got uint64
			if info != nil {
				got = info.State.Msgs
			}
			t.Fatalf("5 sent before, 10 results and 1 event held and sent after the restart: the stream captured %d after 15s (%v); sink state %+v", got, err, s.State())
		}
	}
	st = s.State()
	require.Equal(t, uint64(1), st.Reconnects)
	require.Zero(t, st.Undelivered)
	require.Zero(t, st.HeldBytes)
	require.Equal(t, 1.0, gauge(t, reg, "vigil_nats_reconnects_total"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Equal(t, 1, logs.FilterMessageSnippet("NATS disconnected").Len())
	rec := logs.FilterMessage("NATS reconnected").All()
	require.Len(t, rec, 1)
	require.Equal(t, int64(11), rec[0].ContextMap()["held_messages_sent"])
}

// A publish that does not fit in the reconnect buffer fails and is counted
// as buffer_full; messages still held when the sink closes are counted as
// discarded, and publishes after that as closed.
func TestNATSOutageBufferFullAndDiscarded(t *testing.T) {
	srv := startRestartable(t)
	reg := prometheus.NewRegistry()
	m := sinks.NewNATSMetrics(reg)
	log, logs := observed()
	ctx := context.Background()
	// 16 KiB holds a few dozen of result()'s ~400-byte messages.
	s, err := sinks.DialNATS(ctx, sinks.NATSOptions{URL: srv.url(), Metrics: m, Logger: log,
		ReconnectBufSize: 16 << 10, CloseTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	srv.stop()
	testenv.Eventually(t, func() bool { return !s.State().Connected }, 10*time.Second, 10*time.Millisecond, "the sink sees the server gone")

	held := 0
	for ; held < 1000; held++ {
		err = s.Publish(ctx, result(uint64(held)))
		if err != nil {
			break
		}
	}
	require.ErrorIs(t, err, nats.ErrReconnectBufExceeded)
	require.Greater(t, held, 10)
	require.ErrorIs(t, s.PublishStream("cam-1", sinks.KindAlerts, make([]byte, 32<<10)), nats.ErrReconnectBufExceeded)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Undelivered.WithLabelValues("detections", sinks.UndeliveredBufferFull)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Undelivered.WithLabelValues("alerts", sinks.UndeliveredBufferFull)))
	require.Equal(t, held, s.State().HeldMessages)

	require.Error(t, s.Close(), "the final flush cannot succeed while the server is down")
	require.Equal(t, float64(held), testutil.ToFloat64(m.Undelivered.WithLabelValues("detections", sinks.UndeliveredDiscarded)))
	require.Equal(t, uint64(held+2), s.State().Undelivered)
	lost := logs.FilterMessageSnippet("held in its reconnect buffer are lost").All()
	require.Len(t, lost, 1)
	require.Equal(t, int64(held), lost[0].ContextMap()["messages"])

	err = s.Publish(ctx, result(9999))
	require.ErrorIs(t, err, nats.ErrConnectionClosed)
	require.Equal(t, 1.0, testutil.ToFloat64(m.Undelivered.WithLabelValues("detections", sinks.UndeliveredClosed)))
}

// nats.go writes asynchronous errors (slow consumer, a JetStream consumer
// that stopped sending heartbeats while the server is down) as bare,
// untimestamped lines on stderr unless the connection has an error
// handler; the sink's goes to the log.
func TestNATSAsyncErrorsLogged(t *testing.T) {
	ns, err := natsserver.Start("127.0.0.1:0", "", "")
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	log, logs := observed()
	s, err := sinks.DialNATS(context.Background(), sinks.NATSOptions{URL: ns.ClientURL(), Logger: log})
	require.NoError(t, err)
	defer s.Close()

	release := make(chan struct{})
	sub, err := s.Conn().Subscribe("slow", func(*nats.Msg) { <-release })
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(1, -1))
	require.NoError(t, s.Conn().Flush())
	pub, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer pub.Close()
	for range 10 {
		require.NoError(t, pub.Publish("slow", []byte("x")))
	}
	require.NoError(t, pub.Flush())
	testenv.Eventually(t, func() bool {
		for _, e := range logs.FilterMessage("NATS asynchronous error").All() {
			if errors.Is(e.Context[0].Interface.(error), nats.ErrSlowConsumer) && e.ContextMap()["subject"] == "slow" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the slow-consumer error is logged")
	close(release)
}

// gauge returns the value of the single series of a gauge or counter
// family.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.Metric, 1)
			if c := mf.Metric[0].GetCounter(); c != nil {
				return c.GetValue()
			}
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A token given as a NATS URL's user name (nats://TOKEN@host, which
// nats.go sends as the auth token) is not logged when the connection comes
// back: nats.go's ConnectedUrlRedacted masks only a password.
func TestNATSReconnectedHidesURLToken(t *testing.T) {
	const token = "s3cr3t-t0ken"
	srv := startRestartableToken(t, token)
	log, logs := observed()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sinks.DialNATS(ctx, sinks.NATSOptions{URL: "nats://" + token + "@" + srv.addr, Metrics: sinks.NewNATSMetrics(prometheus.NewRegistry()), Logger: log})
	require.NoError(t, err)
	defer s.Close()
	srv.stop()
	testenv.Eventually(t, func() bool { return !s.State().Connected }, 10*time.Second, 10*time.Millisecond, "the sink sees the server gone")
	srv.start()
	testenv.Eventually(t, func() bool { return logs.FilterMessage("NATS reconnected").Len() == 1 }, 15*time.Second, 10*time.Millisecond, "reconnected")
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			require.NotContains(t, fmt.Sprint(v), token, "%q: field %s", e.Message, k)
		}
	}
	require.Equal(t, "nats://***@"+srv.addr, logs.FilterMessage("NATS reconnected").All()[0].ContextMap()["url"])
}
