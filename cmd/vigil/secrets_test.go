package main

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
)

// A password never reaches vigil's output, however the URL that holds it
// is wrong, on every path a URL is echoed: check-config, run's start-up,
// detect, and streams add (the API's 400 reply). Issue 14, item 5: a raw
// '#' or '?' in the password made each of them print it.
func TestPasswordsNeverShown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens: a URL that parses fails to connect
	cases := []struct{ name, url, secret, want string }{
		{"raw #", "rtsp://admin:pa#ss@" + addr + "/s", "pa#ss", "percent-encode the password"},
		{"raw ?", "rtsp://admin:pa?ss@" + addr + "/s", "pa?ss", "percent-encode the password"},
		{"raw # and ?", "rtsp://admin:s#3?c@" + addr + "/s?x=1", "s#3?c", "percent-encode the password"},
		{"digits before #: once host admin, port 12", "rtsp://admin:12#34@" + addr + "/s", "12#34", "percent-encode the password"},
		{"raw /", "rtsp://admin:pa/ss@" + addr + "/s", "pa/ss", "raw '/'"},
		{"bad escape", "rtsp://admin:pa%zz@" + addr + "/s", "pa%zz", "not a valid URL"},
		{"scheme typo", "rtsp:/admin:typo5ecret@" + addr + "/s", "typo5ecret", "unsupported URL scheme"},
		{"token with #", "http://" + addr + "/snap?token=t0k#en@x", "t0k#en", "percent-encode"},
	}
	noSecret := func(t *testing.T, what, out, secret string) {
		t.Helper()
		testenv.NoSecret(t, what, out, secret)
		require.Contains(t, out, "***", "%s shows the URL, redacted", what)
	}
	for _, tc := range cases {
		t.Run("config "+tc.name, func(t *testing.T) {
			cfg := writeConfig(t, fmt.Sprintf("data_dir: %q\nstreams:\n  - {id: a, url: %q}\n", t.TempDir(), tc.url))
			for _, cmd := range [][]string{{"check-config", cfg}, {"run", "--config", cfg}} {
				rc, out, stderr := vigil(cmd...)
				noSecret(t, "vigil "+cmd[0], out+stderr, tc.secret)
				require.Equal(t, 2, rc, "vigil %s exits 2", cmd[0])
				require.Contains(t, stderr, "streams[0].url: ")
				require.Contains(t, stderr, tc.want)
			}
		})
		t.Run("detect "+tc.name, func(t *testing.T) {
			rc, out, stderr := vigil("detect", tc.url)
			noSecret(t, "vigil detect", out+stderr, tc.secret)
			require.Equal(t, 2, rc)
			require.Contains(t, stderr, tc.want)
		})
	}

	// A valid URL whose camera refuses the connection: detect names the
	// URL (redacted) in its error, and FFmpeg's own lines go through the
	// same redaction.
	rc, out, stderr := vigil("detect", "rtsp://admin:h%23sh%3Fpw@"+addr+"/s")
	for _, secret := range []string{"h%23sh%3Fpw", "h#sh?pw"} {
		testenv.NoSecret(t, "vigil detect", out+stderr, secret)
	}
	require.Equal(t, 1, rc)
	require.Contains(t, stderr, "decode rtsp://admin:***@"+addr+"/s")

	// Flags and arguments echoed back by the CLI.
	for _, args := range [][]string{
		{"tail", "rtsp://admin:s3cr3t@cam/s"},
		{"tail", "--nats", "nats://admin:s3cr3t@127.0.0.1:1", "--count", "x"},
		{"bench", "--duration", "rtsp://admin:s3cr3t@cam/s"},
		{"shapes", "--api", "ftp://admin:s3cr3t@cam/"},
		{"doctor", "--metrics", "ftp://admin:s3cr3t@cam/"},
		{"streams", "ls", "--api", "http://admin:s3cr3t@[cam/"},
		{"rtsp://admin:s3cr3t@cam/s"},
	} {
		rc, out, stderr := vigil(args...)
		testenv.NoSecret(t, "vigil "+args[0], out+stderr, "s3cr3t")
		require.Equal(t, 2, rc, "vigil %s exits 2", args[0])
	}

	// streams add: the API's 400 reply, shown by the CLI.
	ep := runVigil(t, "api: {listen: \"127.0.0.1:0\"}\nmetrics: {listen: \"off\"}\nnats: {listen: \"127.0.0.1:0\"}\n")
	for _, tc := range cases {
		t.Run("streams add "+tc.name, func(t *testing.T) {
			rc, out, stderr := vigil("streams", "add", "--api", ep.API, "--id", "x", "--url", tc.url)
			noSecret(t, "vigil streams add", out+stderr, tc.secret)
			require.Equal(t, 2, rc)
			require.Contains(t, stderr, "(HTTP 400, field url)")
			require.Contains(t, stderr, tc.want)
		})
	}
	rc, out, _ = vigil("streams", "ls", "--api", ep.API, "-o", "json")
	require.Equal(t, 0, rc)
	require.Equal(t, "[]", strings.TrimSpace(out), "nothing was registered")
}

// The API or the embedded NATS server on an address other than loopback
// without a token: check-config and run refuse the config, naming the
// field and the ways out (issue 14, item 6b).
func TestOpenListenersRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`api: {listen: "0.0.0.0:0"}`, `api.listen: "0.0.0.0:0" is not a loopback address and api.token_file is not set`},
		{`nats: {listen: ":0"}`, `nats.listen: ":0" is not a loopback address and nats.token_file is not set`},
		{`api: {listen: "[::]:0", insecure: false}`, `api.listen: "[::]:0" is not a loopback address`},
	} {
		cfg := writeConfig(t, fmt.Sprintf("data_dir: %q\n%s\n", t.TempDir(), tc.yaml))
		for _, cmd := range [][]string{{"check-config", cfg}, {"run", "--config", cfg}} {
			rc, _, stderr := vigil(cmd...)
			require.Equal(t, 2, rc, "vigil %s: %s", cmd[0], stderr)
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "insecure: true")
		}
	}
}

// api.allowed_sources applies to streams added with the CLI (a 403 naming
// the field, exit status 2) and to the config's own streams.
func TestAllowedSourcesCLI(t *testing.T) {
	ep := runVigil(t, "api: {listen: \"127.0.0.1:0\", allowed_sources: [\"rtsp://10.0.0.0/8\"]}\nmetrics: {listen: \"off\"}\nnats: {listen: \"127.0.0.1:0\"}\n")
	rc, _, stderr := vigil("streams", "add", "--api", ep.API, "--id", "x", "--url", "rtsp://admin:s3cr3t@192.168.7.7/s")
	testenv.NoSecret(t, "vigil streams add", stderr, "s3cr3t")
	require.Equal(t, 2, rc)
	require.Contains(t, stderr, "url: rtsp://admin:***@192.168.7.7/s: not allowed by api.allowed_sources: host 192.168.7.7 matches no rtsp:// entry (HTTP 403, field url)")
	rc, _, stderr = vigil("streams", "add", "--api", ep.API, "--id", "y", "--url", "rtsp://10.7.7.7/s", "--disabled")
	require.Equal(t, 0, rc, stderr)

	cfg := writeConfig(t, "api: {allowed_sources: [\"rtsp://10.0.0.0/8\"]}\nstreams:\n  - {id: a, url: \"rtsp://192.168.7.7/s\"}\n")
	rc, _, stderr = vigil("check-config", cfg)
	require.Equal(t, 2, rc)
	require.Contains(t, stderr, "streams[0].url: rtsp://192.168.7.7/s: not allowed by api.allowed_sources")
}
