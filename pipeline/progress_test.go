package pipeline_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

// The progress line keeps drops (faults) and skips (policy) apart, and says
// nothing about skips on a stream that has none.
func TestWriteProgressSkips(t *testing.T) {
	var b bytes.Buffer
	pipeline.WriteProgress(&b, []pipeline.StreamSnapshot{
		{ID: "limited", FPSIn: 25, FPSOut: 5, In: 125, Out: 25, Skipped: 100},
		{ID: "plain", FPSIn: 25, FPSOut: 24, In: 125, Out: 120, Dropped: 5},
	}, "")
	require.Equal(t,
		"limited          in  25.0 fps  out   5.0 fps  p50    0.0 ms  p99    0.0 ms    0.0 det/s  dropped 0  skipped 100\n"+
			"plain            in  25.0 fps  out  24.0 fps  p50    0.0 ms  p99    0.0 ms    0.0 det/s  dropped 5\n", b.String())
}

// A stream that published nothing in the interval (a camera that is down)
// shows no latency rather than a healthy-looking 0.0 ms.
func TestWriteProgressNothingPublished(t *testing.T) {
	var b bytes.Buffer
	pipeline.WriteProgress(&b, []pipeline.StreamSnapshot{{ID: "down"}}, "")
	require.Equal(t, "down             in   0.0 fps  out   0.0 fps  p50      – ms  p99      – ms    0.0 det/s  dropped 0\n", b.String())
}
