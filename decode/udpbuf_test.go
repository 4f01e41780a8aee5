package decode

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The arithmetic of udpbuf.go: one second of the average bitrate (500 ms
// at twice the average), between FFmpeg's own 384 KiB and 64 MiB.
func TestUDPBufferSize(t *testing.T) {
	require.Equal(t, 5_000_000, udpBufferSize(0), "unknown: 40 Mbit/s")
	require.Equal(t, 5_000_000, udpBufferSize(40e6))
	require.Equal(t, 1_250_000, udpBufferSize(10e6))
	require.Equal(t, 384<<10, udpBufferSize(1e6), "never less than FFmpeg asks for")
	require.Equal(t, 64<<20, udpBufferSize(1e10))
}

// A buffer cut by net.core.rmem_max is logged once per stream, with the
// request that would fit.
func TestUDPBufferCapLoggedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s, err := New(Options{URL: "rtsp://127.0.0.1:1/cam", Transport: "udp", Logger: zap.New(core)})
	require.NoError(t, err)
	require.Equal(t, 5_000_000, s.udpBuffer(0), "rmem_max unknown")
	require.Equal(t, 5_000_000, s.udpBuffer(8<<20), "fits")
	require.Zero(t, logs.Len())
	require.Equal(t, 5_000_000, s.udpBuffer(212_992), "asks for what it needs; the kernel cuts it")
	require.Equal(t, 5_000_000, s.udpBuffer(212_992))
	require.Equal(t, 1, logs.Len(), "once")
	e := logs.All()[0]
	require.EqualValues(t, 5_000_000, e.ContextMap()["asked_bytes"])
	require.EqualValues(t, 212_992, e.ContextMap()["rmem_max"])
	require.Equal(t, "sysctl -w net.core.rmem_max=5000000", e.ContextMap()["fix"])
}

// A session of 5 s or more measures the bitrate the next open sizes the
// buffer for; a shorter one keeps the previous estimate.
func TestUDPBufferFromMeasuredRate(t *testing.T) {
	s, err := New(Options{URL: "rtsp://127.0.0.1:1/cam", Transport: "udp"})
	require.NoError(t, err)
	t0 := time.Now()
	s.noteRate(10_000_000, t0, t0.Add(4*time.Second)) // 20 Mbit/s, too short
	require.Equal(t, 5_000_000, s.udpBuffer(0))
	s.noteRate(12_500_000, t0, t0.Add(10*time.Second)) // 10 Mbit/s
	require.Equal(t, 1_250_000, s.udpBuffer(0))
}
