package redact

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"rtsp://admin:s3cret@10.0.0.5:554/s1": "rtsp://admin:***@10.0.0.5:554/s1",
		"rtsp://cam/s1":                       "rtsp://cam/s1",
		"/a/b.avi":                            "/a/b.avi",
		"rtsp://admin@cam/s":                  "rtsp://admin@cam/s",
		"rtsp://admin:p%40ss%3Aw0rd%2Fx%25y@10.0.0.5/s":     "rtsp://admin:***@10.0.0.5/s",
		"rtsp://admin:p@ss:w0rd@10.0.0.5:554/s":             "rtsp://admin:***@10.0.0.5:554/s",
		"rtsp://admin:s3cr@t:xy/z@127.0.0.1:18554/cam":      "rtsp://admin:***@127.0.0.1:18554/cam",
		"rtsp://admin:w0%rd@10.0.0.5/s":                     "rtsp://admin:***@10.0.0.5/s",
		"rtsp://cam/s?user=admin&password=qsecret&ch=1":     "rtsp://cam/s?user=admin&password=***&ch=1",
		"http://cam/snap?Token=abc#frag":                    "http://cam/snap?Token=***#frag",
		"nats://bob:hunter2@h:4222":                         "nats://bob:***@h:4222",
		"rtsp://u:p@cam/s?pwd=1&PassWord=2&api%5Fkey=3&x=4": "rtsp://u:***@cam/s?pwd=***&PassWord=***&api%5Fkey=***&x=4",
	} {
		require.Equal(t, want, URL(in), in)
	}
	require.Equal(t, "nats://a:***@h1:4222,nats://h2:4222", URLs("nats://a:b@h1:4222, nats://h2:4222"))
}
