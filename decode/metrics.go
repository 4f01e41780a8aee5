package decode

import "github.com/prometheus/client_golang/prometheus"

// Metrics holds the decode-side fault counters, labelled by stream id.
// Create one per registry with NewMetrics and give it to every Source
// through Options.Metrics.
type Metrics struct {
	// PacketsLost counts the RTP packets FFmpeg's RTP demuxer found
	// missing (sequence-number gaps it gave up waiting for; libavformat
	// rtpdec.c's "RTP: missed N packets"): vigil_rtp_packets_lost_total.
	PacketsLost *prometheus.CounterVec
	// DecodeErrors counts the packets the decoder failed on (an error from
	// avcodec_send_packet or avcodec_receive_frame) and, with direct NVDEC,
	// the packets its parser rejected and the pictures NVDEC failed on:
	// their pictures are lost. vigil_decode_errors_total, labelled by
	// stream and reason (DecodeErrorReason).
	DecodeErrors *prometheus.CounterVec
	// FramesCorrupt counts the frames emitted with pipeline.Frame.Corrupt
	// set: vigil_frames_corrupt_total.
	FramesCorrupt *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg (nil:
// unregistered). It panics if the names are already registered with reg,
// as prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		PacketsLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_rtp_packets_lost_total", Help: "RTP packets the stream's RTP demuxer found missing (sequence gaps; RTSP over UDP).",
		}, []string{"stream"}),
		DecodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_decode_errors_total", Help: "Packets (direct NVDEC: pictures) the decoder failed on, by reason (decoder, bitstream, nvdec_refused, nvdec_error, nvdec_map); their pictures are lost.",
		}, []string{"stream", "reason"}),
		FramesCorrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_frames_corrupt_total", Help: "Frames decoded with damage (concealed errors, missing references, corrupt packets): published with corrupt=true, or skipped before a live connection's first keyframe.",
		}, []string{"stream"}),
	}
	if reg != nil {
		reg.MustRegister(m.PacketsLost, m.DecodeErrors, m.FramesCorrupt)
	}
	return m
}

// Forget deletes a removed stream's series.
func (m *Metrics) Forget(stream string) {
	m.PacketsLost.DeleteLabelValues(stream)
	m.DecodeErrors.DeletePartialMatch(prometheus.Labels{"stream": stream})
	m.FramesCorrupt.DeleteLabelValues(stream)
}
