// C side of vigil's FFmpeg log routing (log.go). Definitions are in fflog.c
// because log.go exports a Go function to C, and cgo then allows only
// declarations in its preamble.
#ifndef VIGIL_DECODE_FFLOG_H
#define VIGIL_DECODE_FFLOG_H

#include <stdint.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>

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

#endif
