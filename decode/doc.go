// Package decode turns a camera URL or a file into decoded video frames with
// FFmpeg (libavformat/libavcodec 5.1 through go-astiav v0.16.0), and scales
// them with libswscale. It is the only vigil package that touches FFmpeg.
//
// A Source implements pipeline.Source: it opens rtsp:// (TCP by default,
// UDP on request), http(s):// or file inputs, picks the best video stream,
// decodes it in software with FFmpeg's threads and emits frames with PTS in
// seconds, a per-stream sequence number, the wall-clock arrival time and the
// keyframe flag. Every blocking FFmpeg call is cancellable: a watchdog
// goroutine raises FFmpeg's interrupt callback (AVIOInterruptCB) when the
// context ends or an open/read deadline passes.
//
// With Options.HWAccel, NVDEC decodes into GPU memory: H.264 and HEVC by
// default through NVIDIA's decoder driven directly (NVDECDirect: FFmpeg
// demuxes and its bitstream filters give internal/cuda's VideoDecoder
// Annex B), other codecs through FFmpeg's cuda hwaccel. Either way each
// picture is copied into a per-stream pool of device frames.
//
// Faults are counted per source (Faults, and Metrics when given): lost RTP
// packets, packets the decoder failed on, and frames emitted damaged,
// which carry pipeline.Frame.Corrupt. FFmpeg's log lines are attributed to
// the source whose contexts logged them and aggregated per kind
// (Options.LogInterval); SetLogger takes the rest.
//
// A Scaler resizes a decoded frame into packed 24-bit RGB or BGR with
// swscale (SWS_BILINEAR), which is how infer letterboxes model inputs. It
// converts with the frame's Colour: the matrix and range the stream names,
// or MatrixFor's rule for unmarked streams, the same the GPU engine uses.
package decode
