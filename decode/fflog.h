// C side of vigil's FFmpeg log routing (log.go). Definitions are in fflog.c
// because log.go exports a Go function to C, and cgo then allows only
// declarations in its preamble.
#ifndef VIGIL_DECODE_FFLOG_H
#define VIGIL_DECODE_FFLOG_H

#include <stdint.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>

// vigil_log_install makes vigil_log_cb FFmpeg's log callback
// (av_log_set_callback, process-wide).
void vigil_log_install(void);

// vigil_thread_id is the calling OS thread's id (gettid), 0 where unknown.
int vigil_thread_id(void);

// vigil_set_opaque stores a source's log token in the opaque field of its
// format and codec contexts (either may be NULL). FFmpeg copies
// AVCodecContext.opaque into its frame-thread contexts, so their lines are
// attributed too.
void vigil_set_opaque(AVFormatContext *fc, AVCodecContext *cc, uintptr_t token);

// vigil_frame_corrupt reports whether FFmpeg marked a decoded frame damaged:
// AV_FRAME_FLAG_CORRUPT (decoded with missing references) or any
// decode_error_flags (FF_DECODE_ERROR_*: invalid bitstream, missing
// reference, concealment active, slices that failed to decode).
int vigil_frame_corrupt(const AVFrame *f);

#endif
