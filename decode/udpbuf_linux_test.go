//go:build linux

package decode_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// udpReceiveBuffers returns the SO_RCVBUF of this process's IPv4 UDP
// sockets (the test camera is another process: these are FFmpeg's).
func udpReceiveBuffers(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var bufs []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		if typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || typ != syscall.SOCK_DGRAM {
			continue
		}
		if sa, err := syscall.Getsockname(fd); err != nil {
			continue
		} else if _, ok := sa.(*syscall.SockaddrInet4); !ok {
			continue
		}
		if n, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF); err == nil {
			bufs = append(bufs, n)
		}
	}
	return bufs
}

// rmemMax reads net.core.rmem_max.
func rmemMax(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return n
}

// The RTP sockets of an RTSP stream over UDP get the receive buffer vigil
// sizes (decode/udpbuf.go), not FFmpeg's 384 KiB: at first one second of
// 40 Mbit/s (5,000,000 bytes), then, on the next open, one second of the
// bitrate measured over the first session (at least 384 KiB).
func TestUDPReceiveBuffer(t *testing.T) {
	const first = 5_000_000
	limit := rmemMax(t)
	if min(first, limit) <= 384<<10 {
		t.Skipf("net.core.rmem_max is %d: the kernel gives FFmpeg's default and vigil's request the same buffer", limit)
	}
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true})
	src, err := decode.New(decode.Options{URL: srv.URL, Transport: "udp"})
	require.NoError(t, err)
	session := func(frames int) (bufs []int, took time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n := 0
		var start time.Time
		err := src.Run(ctx, func(f *pipeline.Frame) {
			f.Image.Release()
			if n++; n == 1 {
				start = time.Now()
				bufs = udpReceiveBuffers(t)
			}
			if n == frames {
				took = time.Since(start)
				cancel()
			}
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, frames, n)
		return bufs, took
	}
	// Linux doubles what it is asked for (socket(7)), after capping it at
	// rmem_max.
	// 100 frames, 10 s at vtest's 10 fps: the session lasts more than the
	// 5 s that measure a rate even if the server sends its first seconds
	// in a burst (70 frames took 5.7 s).
	bufs, took := session(100)
	t.Logf("first session: %v (rmem_max %d), %v", bufs, limit, took)
	require.NotEmpty(t, bufs, "RTP and RTCP sockets")
	for _, b := range bufs {
		require.Equal(t, 2*min(first, limit), b)
	}
	bufs, _ = session(1)
	t.Logf("second session: %v", bufs)
	require.NotEmpty(t, bufs)
	for _, b := range bufs {
		require.Less(t, b, 2*min(first, limit), "sized for the measured rate, below 40 Mbit/s")
		require.GreaterOrEqual(t, b, 2*(384<<10))
	}
}
