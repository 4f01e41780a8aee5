package natsserver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/sinks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// vigilServer starts the embedded server the way vigil run does: the
// config file (data_dir, nats.*) through config.Parse and
// natsserver.OptionsFrom, with the token read from nats.token_file.
func vigilServer(t testing.TB, dataDir, yaml string) (*server.Server, natsserver.Options) {
	t.Helper()
	c, err := config.Parse([]byte("data_dir: "+dataDir+"\n"+yaml), filepath.Join(dataDir, "vigil.yaml"))
	require.NoError(t, err)
	token := ""
	if c.NATS.TokenFile != "" {
		token, err = config.ReadToken(c.NATS.TokenFile)
		require.NoError(t, err)
	}
	o := natsserver.OptionsFrom(&c, token)
	s, err := natsserver.StartOptions(o)
	require.NoError(t, err)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, o
}

// messages collects what an MQTT client receives; the paho callbacks run
// on paho's goroutines, so they only record, and the test goroutine
// checks.
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

// connect connects a paho MQTT 3.1.1 client to addr and returns it with
// the CONNECT's error (nil: accepted). user/pass "" are not sent.
func connect(t *testing.T, addr, clientID, user, pass string, clean bool, onMsg mqtt.MessageHandler) (mqtt.Client, error) {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(clientID).SetProtocolVersion(4).
		SetCleanSession(clean).SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(onMsg)
	if user != "" {
		o.SetUsername(user)
	}
	if pass != "" {
		o.SetPassword(pass)
	}
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return c, fmt.Errorf("CONNECT timed out")
	}
	return c, tok.Error()
}

// subscribe subscribes c to filter at qos and waits for the SUBACK.
func subscribe(t *testing.T, c mqtt.Client, filter string, qos byte) {
	t.Helper()
	tok := c.Subscribe(filter, qos, nil)
	require.True(t, tok.WaitTimeout(10*time.Second), "SUBACK for %s", filter)
	require.NoError(t, tok.Error())
}

// arrives publishes data on NATS as vigil publishes events
// (sinks.PublishStream: <prefix>.<stream>.<kind>, with a Nats-Msg-Id)
// until an MQTT message with that payload reaches got, and returns it. It
// publishes more than once because a core NATS publish is not stored: one
// sent before the server has routed a fresh subscription would be missed.
func arrives(t *testing.T, sink *sinks.NATS, got *messages, stream, kind, data string) mqtt.Message {
	t.Helper()
	var found mqtt.Message
	testenv.Eventually(t, func() bool {
		require.NoError(t, sink.PublishStream(stream, kind, []byte(data)))
		for _, m := range got.get() {
			if string(m.Payload()) == data {
				found = m
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "%q published on NATS %s.%s.%s never reached the MQTT client", data, "vigil", stream, kind)
	return found
}

func dial(t *testing.T, url, token string) *sinks.NATS {
	t.Helper()
	sink, err := sinks.DialNATS(context.Background(), sinks.NATSOptions{URL: url, Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sink.Close()) })
	return sink
}

// An MQTT client subscribed to vigil/<id>/analytics gets what vigil
// publishes on the NATS subject vigil.<id>.analytics, with no bridge, at
// QoS 0 and 1 (issue 15, item 3): `.` in a subject is `/` in a topic, `*`
// and `>` are `+` and `#`. A QoS 1 subscription gets vigil's messages at
// QoS 0: they were published on core NATS, not stored, and MQTT delivers
// at the lower of the two QoS.
func TestMQTTClientsGetVigilSubjects(t *testing.T) {
	s, o := vigilServer(t, t.TempDir(), "nats: {listen: \"127.0.0.1:0\", mqtt: {listen: \"127.0.0.1:0\"}}\n")
	addr := natsserver.MQTTAddr(s)
	require.NotEmpty(t, addr)
	require.True(t, config.Loopback(addr), addr)
	require.Empty(t, natsserver.MQTTWarning(o), "loopback: nothing to warn about")
	sink := dial(t, s.ClientURL(), "")
	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("QoS%d", qos), func(t *testing.T) {
			var got messages
			c, err := connect(t, addr, fmt.Sprintf("sub-q%d", qos), "", "", true, got.add)
			require.NoError(t, err)
			defer c.Disconnect(250)
			subscribe(t, c, "vigil/cam1/analytics", qos)
			subscribe(t, c, "vigil/+/counts", qos)

			ev := fmt.Sprintf(`{"schema":"vigil.analytics/v1","type":"line_cross","qos":%d}`, qos)
			m := arrives(t, sink, &got, "cam1", "analytics", ev)
			require.Equal(t, "vigil/cam1/analytics", m.Topic())
			require.Equal(t, byte(0), m.Qos(), "NATS publishes reach MQTT at QoS 0")
			require.False(t, m.Retained())
			m = arrives(t, sink, &got, "cam2", "counts", fmt.Sprintf(`{"counts":%d}`, qos))
			require.Equal(t, "vigil/cam2/counts", m.Topic(), "+ matches one subject token")

			// Nothing else: not cam2's events, not cam1's detections.
			require.NoError(t, sink.PublishStream("cam2", "analytics", []byte("other stream")))
			require.NoError(t, sink.PublishStream("cam1", "detections", []byte("other kind")))
			arrives(t, sink, &got, "cam1", "analytics", "marker")
			for _, m := range got.get() {
				require.NotContains(t, []string{"other stream", "other kind"}, string(m.Payload()), m.Topic())
			}
		})
	}
}

// With nats.token_file, an MQTT client gives the token as its password,
// with any user name (MQTT 3.1.1 sends a password only with a user name;
// nats-server checks the password alone against the token): without it,
// with the token as the user name, or with a wrong password, CONNECT is
// refused.
func TestMQTTToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("s3cr3t-t0ken\n"), 0o600))
	s, o := vigilServer(t, dir, "nats: {listen: \"127.0.0.1:0\", token_file: "+tokenFile+", mqtt: {listen: \"127.0.0.1:0\"}}\n")
	addr := natsserver.MQTTAddr(s)
	require.Empty(t, natsserver.MQTTWarning(o))

	for _, tc := range []struct{ name, user, pass string }{
		{"no credentials", "", ""},
		{"token as user name", "s3cr3t-t0ken", ""},
		{"wrong password", "ha", "guess"},
	} {
		c, err := connect(t, addr, "refused", tc.user, tc.pass, true, nil)
		require.Error(t, err, tc.name)
		require.Equal(t, "not Authorized", err.Error(), tc.name) // CONNACK return code 5
		require.False(t, c.IsConnected(), tc.name)
	}

	sink := dial(t, s.ClientURL(), "s3cr3t-t0ken")
	for _, qos := range []byte{0, 1} {
		var got messages
		c, err := connect(t, addr, fmt.Sprintf("ha-q%d", qos), "homeassistant", "s3cr3t-t0ken", true, got.add)
		require.NoError(t, err)
		subscribe(t, c, "vigil/cam1/analytics", qos)
		m := arrives(t, sink, &got, "cam1", "analytics", fmt.Sprintf(`{"qos":%d}`, qos))
		require.Equal(t, "vigil/cam1/analytics", m.Topic())
		c.Disconnect(250)
	}
}

// MQTT keeps its sessions and retained messages in the embedded server's
// JetStream store (data_dir/jetstream), so they outlive a restart of
// vigil: a client with a persistent session (clean session off) gets its
// subscriptions back without subscribing again, and a retained message is
// given to a new subscriber. While the client was away, a QoS 1 message
// published by another MQTT client was kept for it; one vigil published on
// NATS was not (core NATS messages are not stored).
func TestMQTTSessionsAndRetainedSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	yaml := "nats: {listen: \"127.0.0.1:0\", mqtt: {listen: \"127.0.0.1:0\"}}\n"
	s, _ := vigilServer(t, dir, yaml)
	var first messages
	ha, err := connect(t, natsserver.MQTTAddr(s), "ha", "", "", false, first.add)
	require.NoError(t, err)
	subscribe(t, ha, "vigil/cam1/events", 1)
	ha.Disconnect(250)
	pub, err := connect(t, natsserver.MQTTAddr(s), "publisher", "", "", true, nil)
	require.NoError(t, err)
	tok := pub.Publish("vigil/cam1/status", 1, true, "online")
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	pub.Disconnect(250)
	s.Shutdown()
	s.WaitForShutdown()

	s, _ = vigilServer(t, dir, yaml) // a new run of vigil, the same data_dir
	addr := natsserver.MQTTAddr(s)
	sink := dial(t, s.ClientURL(), "")
	require.NoError(t, sink.PublishStream("cam1", "events", []byte("published on NATS while away")))
	pub, err = connect(t, addr, "publisher", "", "", true, nil)
	require.NoError(t, err)
	tok = pub.Publish("vigil/cam1/events", 1, false, "published on MQTT at QoS 1 while away")
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	pub.Disconnect(250)

	var got messages
	ha, err = connect(t, addr, "ha", "", "", false, got.add) // no Subscribe: the session has it
	require.NoError(t, err)
	defer ha.Disconnect(250)
	m := arrives(t, sink, &got, "cam1", "events", `{"event":"after the restart"}`)
	require.Equal(t, "vigil/cam1/events", m.Topic())
	var payloads []string
	for _, m := range got.get() {
		payloads = append(payloads, string(m.Payload()))
	}
	require.Contains(t, payloads, "published on MQTT at QoS 1 while away")
	require.NotContains(t, payloads, "published on NATS while away")

	var retained messages
	c, err := connect(t, addr, "late", "", "", true, retained.add)
	require.NoError(t, err)
	defer c.Disconnect(250)
	subscribe(t, c, "vigil/+/status", 0)
	testenv.Eventually(t, func() bool { return len(retained.get()) > 0 }, 10*time.Second, 20*time.Millisecond,
		"the retained message never came")
	m = retained.get()[0]
	require.Equal(t, "online", string(m.Payload()))
	require.True(t, m.Retained())
}

// The refusals at start: MQTT needs JetStream, and a port in use fails at
// once; MQTTWarning is the WARN for an insecure listener.
func TestMQTTRefusals(t *testing.T) {
	_, err := natsserver.StartOptions(natsserver.Options{Listen: "127.0.0.1:0", MQTTListen: "127.0.0.1:0"})
	require.ErrorContains(t, err, "MQTT needs JetStream")

	s, _ := vigilServer(t, t.TempDir(), "nats: {listen: \"127.0.0.1:0\", mqtt: {listen: \"127.0.0.1:0\"}}\n")
	busy := natsserver.MQTTAddr(s)
	start := time.Now()
	_, err = natsserver.StartOptions(natsserver.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), MQTTListen: busy})
	require.ErrorContains(t, err, "embedded NATS MQTT cannot listen on "+busy)
	require.Less(t, time.Since(start), 5*time.Second, "a port in use fails at once, not after the 10 s wait")

	for _, tc := range []struct {
		o    natsserver.Options
		warn bool
	}{
		{natsserver.Options{MQTTListen: "0.0.0.0:1883"}, true},
		{natsserver.Options{MQTTListen: ":1883"}, true},
		{natsserver.Options{MQTTListen: "0.0.0.0:1883", Token: "t"}, false},
		{natsserver.Options{MQTTListen: "127.0.0.1:1883"}, false},
		{natsserver.Options{MQTTListen: "off"}, false},
		{natsserver.Options{}, false},
	} {
		w := natsserver.MQTTWarning(tc.o)
		if !tc.warn {
			require.Empty(t, w, "%+v", tc.o)
			continue
		}
		require.Contains(t, w, "nats.mqtt.insecure: true", "%+v", tc.o)
		require.Contains(t, w, tc.o.MQTTListen)
		require.Contains(t, w, "set nats.token_file")
	}
}
