package decode

/*
#include "fflog.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"

	"github.com/asticode/go-astiav"
	"github.com/prometheus/client_golang/prometheus"
)

// Faults are a Source's fault counts since New, over all its Runs.
type Faults struct {
	// PacketsLost: RTP packets the RTP demuxer found missing.
	PacketsLost uint64
	// DecodeErrors: packets the decoder failed on.
	DecodeErrors uint64
	// CorruptFrames: frames emitted with pipeline.Frame.Corrupt.
	CorruptFrames uint64
}

// faults counts a Source's faults, and exports them when it has counters.
type faults struct {
	lost, decodeErrors, corrupt atomic.Uint64
	// The stream's series, nil without Options.Metrics.
	lostC, decodeErrorsC, corruptC prometheus.Counter
}

func newFaults(m *Metrics, stream string) *faults {
	f := &faults{}
	if m != nil {
		// Resolved once, so the series exist (at 0) from the start.
		f.lostC = m.PacketsLost.WithLabelValues(stream)
		f.decodeErrorsC = m.DecodeErrors.WithLabelValues(stream)
		f.corruptC = m.FramesCorrupt.WithLabelValues(stream)
	}
	return f
}

func add(n uint64, a *atomic.Uint64, c prometheus.Counter) {
	a.Add(n)
	if c != nil {
		c.Add(float64(n))
	}
}

func (f *faults) packetsLost(n uint64) { add(n, &f.lost, f.lostC) }
func (f *faults) decodeError()         { add(1, &f.decodeErrors, f.decodeErrorsC) }
func (f *faults) corruptFrame()        { add(1, &f.corrupt, f.corruptC) }

func (f *faults) snapshot() Faults {
	return Faults{PacketsLost: f.lost.Load(), DecodeErrors: f.decodeErrors.Load(), CorruptFrames: f.corrupt.Load()}
}

// rtpMissedFormat is the printf format of the line with which FFmpeg's RTP
// demuxer reports a sequence gap it stopped waiting for (libavformat
// rtpdec.c, rtp_parse_queued_packet, AV_LOG_WARNING on the RTSP format
// context; FFmpeg 5.1 wraps a negative gap by adding 65535). RTCP receiver
// statistics and sequence numbers are private to libavformat
// (RTPDemuxContext), so this line is the only report of the loss. FFmpeg
// logs it only where it reorders packets, i.e. RTSP over UDP (a queue of
// 500 packets, 100 ms): over TCP, where the network loses nothing but a
// camera might skip sequence numbers, FFmpeg 5.1 accepts gaps under 3,000
// silently (rtp_valid_packet_in_sequence) and they show only as decode
// errors and corrupt frames.
const rtpMissedFormat = "RTP: missed %d packets\n"

// onFFmpegLine counts the faults FFmpeg reports only in its log.
func (s *Source) onFFmpegLine(format, msg string) {
	if format != rtpMissedFormat {
		return
	}
	var n int64
	if _, err := fmt.Sscanf(msg, "RTP: missed %d packets", &n); err == nil && n > 0 && n < 1<<16 {
		s.faults.packetsLost(uint64(n))
	}
}

// frameCorrupt reports whether FFmpeg marked f damaged (see
// vigil_frame_corrupt in fflog.h).
func frameCorrupt(f *astiav.Frame) bool {
	return C.vigil_frame_corrupt((*C.AVFrame)(f.UnsafePointer())) != 0
}
