package decode

import (
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// UDP receive buffers for RTSP over UDP.
//
// FFmpeg 5.1 asks the kernel for a 384 KiB receive buffer per RTP socket
// (libavformat/udp.c, UDP_RX_BUF_SIZE), and Linux cuts that to
// net.core.rmem_max (212,992 bytes unless raised): 42 ms of a 40 Mbit/s 4K
// stream. A keyframe, which a camera sends in one burst, or a moment in
// which the reader is busy (decoding that keyframe, a GC pause) overflows
// it, and the kernel drops the datagrams without a word: 4K at 40 Mbit/s
// over UDP decoded 33 % fewer frames than over TCP. vigil sizes the buffer
// per stream instead (FFmpeg's rtsp option buffer_size, the SO_RCVBUF of
// each RTP and RTCP socket):
//
//	bytes = peak bitrate × window / 8
//	peak   = 2 × the average bitrate (VBR peaks, keyframe bursts)
//	window = 500 ms, how far behind the reader may fall
//	       = one second of the average bitrate
//
// The average is the stream's video bitrate measured over its previous
// session of at least udpRateMinSession, else DefaultUDPBitrate: FFmpeg
// 5.1 does not read the SDP's b=AS line (rtsp.c skips b= lines), so before
// a first session nothing tells it. The result is at least FFmpeg's own
// 384 KiB and at most 64 MiB. The kernel doubles the value for its
// bookkeeping (socket(7)) and caps it at net.core.rmem_max; vigil logs
// once per stream when the cap cuts what it asked for.
const (
	// DefaultUDPBitrate (bits/s) sizes the UDP receive buffer of an RTSP
	// stream whose bitrate vigil has not measured yet: 40 Mbit/s, a 4K
	// camera's, so 5 MB. The buffer is a limit, not an allocation: a
	// slower stream only uses what it queues.
	DefaultUDPBitrate = 40_000_000
	// udpBufferWindow is one second of the average bitrate: 500 ms at twice
	// the average (see above).
	udpBufferWindow = time.Second
	// udpBufferMin is FFmpeg 5.1's own request (UDP_RX_BUF_SIZE).
	udpBufferMin = 384 << 10
	udpBufferMax = 64 << 20
	// udpRateMinSession: shorter sessions do not measure the bitrate (a
	// GOP or more, so that keyframes are in the average).
	udpRateMinSession = 5 * time.Second
)

// rmemMaxPath is the kernel's cap on SO_RCVBUF (proc(5)).
const rmemMaxPath = "/proc/sys/net/core/rmem_max"

// udpBufferSize is the receive buffer in bytes for a stream of the given
// average bitrate (bits/s; 0: unknown, DefaultUDPBitrate).
func udpBufferSize(bitrate float64) int {
	if bitrate <= 0 {
		bitrate = DefaultUDPBitrate
	}
	b := bitrate / 8 * udpBufferWindow.Seconds()
	return int(min(max(b, udpBufferMin), udpBufferMax))
}

// rmemMax reads net.core.rmem_max in bytes; 0 when unknown.
func rmemMax() int {
	b, err := os.ReadFile(rmemMaxPath)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// udpBuffer returns the buffer_size for the next open of an RTSP/UDP
// stream, and logs once when net.core.rmem_max (limit, 0: unknown) cuts it.
func (s *Source) udpBuffer(limit int) int {
	size := udpBufferSize(s.udpRate)
	if limit > 0 && size > limit && !s.udpCapped {
		s.udpCapped = true
		s.o.Logger.Warn("the kernel caps this stream's UDP receive buffer: datagrams may be dropped at its peak bitrate; raise net.core.rmem_max",
			zap.Int("asked_bytes", size), zap.Int("rmem_max", limit), zap.Float64("bitrate_mbps", bitrateOr(s.udpRate)/1e6),
			zap.Duration("holds", time.Duration(float64(limit)*8/bitrateOr(s.udpRate)*float64(time.Second)).Round(time.Millisecond)),
			zap.String("fix", "sysctl -w net.core.rmem_max="+strconv.Itoa(size)))
	}
	return size
}

func bitrateOr(r float64) float64 {
	if r <= 0 {
		return DefaultUDPBitrate
	}
	return r
}

// noteRate records the video bitrate of a session that read bytes of
// video packets between first and last, if it lasted long enough.
func (s *Source) noteRate(bytes int64, first, last time.Time) {
	if d := last.Sub(first); d >= udpRateMinSession && bytes > 0 {
		s.udpRate = float64(bytes) * 8 / d.Seconds()
	}
}
