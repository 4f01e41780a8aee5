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
	// DecodeErrors: packets (or, with direct NVDEC, pictures) the decoder
	// failed on, all reasons together.
	DecodeErrors uint64
	// DecodeErrorsByReason splits DecodeErrors by DecodeErrorReason (only
	// the reasons that occurred).
	DecodeErrorsByReason map[DecodeErrorReason]uint64
	// CorruptFrames: frames emitted with pipeline.Frame.Corrupt.
	CorruptFrames uint64
}

// DecodeErrorReason says why a decode error was counted: the reason label
// of vigil_decode_errors_total.
type DecodeErrorReason string

// The reasons a decode error is counted for.
const (
	// ErrDecoder: FFmpeg's decoder failed on a packet (an error from
	// avcodec_send_packet or avcodec_receive_frame).
	ErrDecoder DecodeErrorReason = "decoder"
	// ErrBitstream: direct NVDEC's Annex B filter or cuvid parser rejected
	// a packet.
	ErrBitstream DecodeErrorReason = "bitstream"
	// ErrNVDECRefused: cuvidDecodePicture refused a picture.
	ErrNVDECRefused DecodeErrorReason = "nvdec_refused"
	// ErrNVDECStatus: cuvidGetDecodeStatus said the picture failed and was
	// not concealed (a concealed one is published as corrupt).
	ErrNVDECStatus DecodeErrorReason = "nvdec_error"
	// ErrNVDECMap: cuvidMapVideoFrame64 could not map the picture.
	ErrNVDECMap DecodeErrorReason = "nvdec_map"
)

// decodeErrorReasons are every DecodeErrorReason, in a fixed order.
var decodeErrorReasons = [...]DecodeErrorReason{ErrDecoder, ErrBitstream, ErrNVDECRefused, ErrNVDECStatus, ErrNVDECMap}

// faults counts a Source's faults, and exports them when it has counters.
type faults struct {
	lost, decodeErrors, corrupt atomic.Uint64
	byReason                    [len(decodeErrorReasons)]atomic.Uint64
	// The stream's series, nil without Options.Metrics.
	lostC, corruptC prometheus.Counter
	decodeErrorsC   [len(decodeErrorReasons)]prometheus.Counter
}

func newFaults(m *Metrics, stream string) *faults {
	f := &faults{}
	if m != nil {
		// Resolved once, so the series exist (at 0) from the start.
		f.lostC = m.PacketsLost.WithLabelValues(stream)
		for i, r := range decodeErrorReasons {
			f.decodeErrorsC[i] = m.DecodeErrors.WithLabelValues(stream, string(r))
		}
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
func (f *faults) corruptFrame()        { add(1, &f.corrupt, f.corruptC) }

// decodeError counts one decode error for reason r.
func (f *faults) decodeError(r DecodeErrorReason) {
	f.decodeErrors.Add(1)
	for i, x := range decodeErrorReasons {
		if x == r {
			add(1, &f.byReason[i], f.decodeErrorsC[i])
			return
		}
	}
	panic(fmt.Sprintf("decode: no decode error reason %q", r))
}

func (f *faults) snapshot() Faults {
	s := Faults{PacketsLost: f.lost.Load(), DecodeErrors: f.decodeErrors.Load(), CorruptFrames: f.corrupt.Load()}
	for i, r := range decodeErrorReasons {
		if n := f.byReason[i].Load(); n > 0 {
			if s.DecodeErrorsByReason == nil {
				s.DecodeErrorsByReason = map[DecodeErrorReason]uint64{}
			}
			s.DecodeErrorsByReason[r] = n
		}
	}
	return s
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
