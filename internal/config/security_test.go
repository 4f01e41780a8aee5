package config

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
)

// nats.url errors show each URL of the list redacted, also when a password
// holds a raw ',' (the list used to be split there, showing the part after
// it on its own) or '#'.
func TestNATSURLErrorsHidePassword(t *testing.T) {
	for _, tc := range []struct{ url, secret, want string }{
		{"nats://bob:pa,ss@h1:4222", "ss@h1", "a ',' inside one URL"},
		{"nats://bob:pa,ss@h1:4222,nats://h2:4222", "pa,ss", "a ',' inside one URL"},
		{"ftp://bob:pa#ss@h1:4222", "pa#ss", "want nats://"},
		{"bob:pa#ss@h1:4222", "pa#ss", "want nats://"},
	} {
		_, err := Parse([]byte("nats: {url: \""+tc.url+"\"}\n"), "x.yaml")
		require.Error(t, err)
		testenv.NoSecret(t, "the nats.url error", err.Error(), tc.secret)
		require.Contains(t, err.Error(), tc.want)
		require.Contains(t, err.Error(), "***")
	}
}

// The API, the embedded NATS server and its MQTT listener are refused on
// an address other than loopback without a token, unless their own
// insecure key says so (issue 14, item 6b; issue 15, item 3 for MQTT);
// /metrics is not refused (vigil run warns).
func TestListenersOffLoopbackNeedAToken(t *testing.T) {
	token := t.TempDir() + "/token"
	require.NoError(t, os.WriteFile(token, []byte("t0ken\n"), 0o600))
	for _, tc := range []struct {
		name, yaml string
		refused    []string // fields; empty: accepted
	}{
		{"defaults", ``, nil},
		{"all interfaces", "api: {listen: \"0.0.0.0:8080\"}\nnats: {listen: \"0.0.0.0:4222\"}\nmetrics: {listen: \"0.0.0.0:9090\"}",
			[]string{"api.listen", "nats.listen"}},
		{"empty host", `api: {listen: ":8080"}`, []string{"api.listen"}},
		{"IPv6 any", `nats: {listen: "[::]:4222"}`, []string{"nats.listen"}},
		{"one interface", `api: {listen: "10.1.2.3:8080"}`, []string{"api.listen"}},
		{"a name is not resolved", `api: {listen: "vigil.lan:8080"}`, []string{"api.listen"}},
		{"loopback v4", "api: {listen: \"127.0.0.2:8080\"}\nnats: {listen: \"127.1.2.3:4222\"}", nil},
		{"loopback v6", "api: {listen: \"[::1]:8080\"}\nnats: {listen: \"[::1]:4222\"}", nil},
		{"localhost", "api: {listen: \"LocalHost:8080\"}\nnats: {listen: \"localhost:4222\"}", nil},
		{"API off", `api: {listen: "off"}`, nil},
		{"tokens", "api: {listen: \"0.0.0.0:8080\", token_file: " + token + "}\nnats: {listen: \"0.0.0.0:4222\", token_file: " + token + "}", nil},
		{"insecure", "api: {listen: \"0.0.0.0:8080\", insecure: true}\nnats: {listen: \"0.0.0.0:4222\", insecure: true}", nil},
		{"insecure is per listener", "api: {listen: \"0.0.0.0:8080\", insecure: true}\nnats: {listen: \"0.0.0.0:4222\"}", []string{"nats.listen"}},
		{"external NATS: nats.listen unused", "nats: {url: \"nats://10.0.0.9:4222\", listen: \"0.0.0.0:4222\"}", nil},
		{"MQTT off by default", `nats: {mqtt: {insecure: true}}`, nil},
		{"MQTT on loopback", `nats: {mqtt: {listen: "127.0.0.1:1883"}}`, nil},
		{"MQTT on every interface", `nats: {mqtt: {listen: "0.0.0.0:1883"}}`, []string{"nats.mqtt.listen"}},
		{"MQTT empty host", `nats: {mqtt: {listen: ":1883"}}`, []string{"nats.mqtt.listen"}},
		{"MQTT with the token", "nats: {token_file: " + token + ", mqtt: {listen: \"0.0.0.0:1883\"}}", nil},
		{"MQTT insecure", `nats: {mqtt: {listen: "0.0.0.0:1883", insecure: true}}`, nil},
		{"nats.insecure does not open MQTT", `nats: {listen: "0.0.0.0:4222", insecure: true, mqtt: {listen: "[::]:1883"}}`,
			[]string{"nats.mqtt.listen"}},
		{"MQTT insecure does not open NATS", `nats: {listen: "0.0.0.0:4222", mqtt: {listen: "0.0.0.0:1883", insecure: true}}`,
			[]string{"nats.listen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml), "x.yaml")
			if len(tc.refused) == 0 {
				require.NoError(t, err)
				require.NoError(t, c.CheckExposure())
				return
			}
			require.Error(t, err)
			for _, f := range tc.refused {
				require.Contains(t, err.Error(), f+": ")
				require.Contains(t, err.Error(), "is not a loopback address and "+strings.Split(f, ".")[0]+".token_file is not set")
				require.Contains(t, err.Error(), strings.TrimSuffix(f, ".listen")+".insecure: true")
			}
			require.Equal(t, len(tc.refused), strings.Count(err.Error(), "is not a loopback address"))
		})
	}
}

// api.allowed_sources: every bad entry is reported with its index, and a
// config stream the list does not allow is refused naming its url.
func TestAllowedSourcesConfig(t *testing.T) {
	_, err := Parse([]byte(`
api: {allowed_sources: ["rtsp://10.0.0.0/8", "10.0.0.0/8", "file://relative/", "rtsp://u:s3cr3t@cam.local"]}
`), "x.yaml")
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `api.allowed_sources[1]: "10.0.0.0/8": want scheme://host`)
	require.Contains(t, msg, `api.allowed_sources[2]: "file://relative/": a file entry names an absolute directory`)
	require.Contains(t, msg, `api.allowed_sources[3]: "rtsp://u:***@cam.local": an entry has no user info`)
	testenv.NoSecret(t, "the error", msg, "s3cr3t")

	dir := t.TempDir()
	c, err := Parse([]byte(`
api: {allowed_sources: ["rtsp://10.0.0.0/8", "file://`+dir+`"]}
models: [{name: m, path: /dev/null}]
streams:
  - {id: a, url: "rtsp://admin:pw@10.1.2.3/s", model: m}
  - {id: b, url: "`+dir+`/clip.mp4", model: m}
`), "x.yaml")
	require.NoError(t, err)
	l, err := c.Sources()
	require.NoError(t, err)
	require.NotNil(t, l)

	_, err = Parse([]byte(`
api: {allowed_sources: ["rtsp://10.0.0.0/8"]}
models: [{name: m, path: /dev/null}]
streams:
  - {id: a, url: "rtsp://admin:s3cr3t@192.168.1.5/s", model: m}
  - {id: b, url: "/etc/passwd", model: m}
  - {id: c, url: "rtsp://10.1.2.3/s", model: m}
`), "x.yaml")
	require.Error(t, err)
	msg = err.Error()
	testenv.NoSecret(t, "the error", msg, "s3cr3t")
	require.Contains(t, msg, "streams[0].url: rtsp://admin:***@192.168.1.5/s: not allowed by api.allowed_sources: host 192.168.1.5 matches no rtsp:// entry")
	require.Contains(t, msg, "streams[1].url: /etc/passwd: not allowed by api.allowed_sources: the file /etc/passwd is under no file:// entry")
	require.NotContains(t, msg, "streams[2]")
}

// nats.mqtt.listen is host:port or off, and only for the embedded server.
func TestMQTTListenConfig(t *testing.T) {
	c, err := Parse(nil, "x.yaml")
	require.NoError(t, err)
	require.Equal(t, "off", c.NATS.MQTT.Listen, "MQTT is off unless asked for")

	_, err = Parse([]byte(`nats: {mqtt: {listen: "1883"}}`), "x.yaml")
	require.ErrorContains(t, err, `nats.mqtt.listen: "1883": want host:port or off`)

	_, err = Parse([]byte(`nats: {url: "nats://10.0.0.9:4222", mqtt: {listen: "127.0.0.1:1883"}}`), "x.yaml")
	require.ErrorContains(t, err, `nats.mqtt.listen: "127.0.0.1:1883": the MQTT listener is the embedded NATS server's`)
	require.ErrorContains(t, err, "mqtt { port: 1883 }")
}
