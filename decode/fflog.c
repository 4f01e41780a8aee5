// C side of vigil's FFmpeg log routing; see log.go and fflog.h.
#include "fflog.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <libavutil/log.h>

#include "_cgo_export.h"

// vigil_log_cb replaces av_log_default_callback. It formats the line with
// vsnprintf into a bounded buffer (longer lines are cut at 1023 bytes),
// finds the log token of the context that logged it (the opaque field of an
// AVFormatContext or AVCodecContext; 0 for other contexts) and hands the
// line to Go with the calling thread's id, which attributes lines of
// contexts vigil cannot tag (the codec contexts avformat_find_stream_info
// and the parsers use internally) when they run on a source's own thread.
static void vigil_log_cb(void *ptr, int level, const char *fmt, va_list vl) {
	if (level > av_log_get_level())
		return;
	char msg[1024];
	vsnprintf(msg, sizeof msg, fmt, vl);
	uintptr_t token = 0;
	const char *item = "";
	if (ptr != NULL) {
		const AVClass *avc = *(const AVClass **)ptr;
		if (avc == avcodec_get_class())
			token = (uintptr_t)((AVCodecContext *)ptr)->opaque;
		else if (avc == avformat_get_class())
			token = (uintptr_t)((AVFormatContext *)ptr)->opaque;
		if (avc != NULL && avc->item_name != NULL)
			item = avc->item_name(ptr);
		if (item == NULL)
			item = "";
	}
	vigilFFmpegLog(token, vigil_thread_id(), level, (char *)fmt, msg, (char *)item);
}

int vigil_thread_id(void) {
#ifdef SYS_gettid
	return (int)syscall(SYS_gettid);
#else
	return 0;
#endif
}

void vigil_log_install(void) { av_log_set_callback(vigil_log_cb); }

void vigil_set_opaque(AVFormatContext *fc, AVCodecContext *cc, uintptr_t token) {
	if (fc != NULL)
		fc->opaque = (void *)token;
	if (cc != NULL)
		cc->opaque = (void *)token;
}

int vigil_frame_corrupt(const AVFrame *f) {
	return (f->flags & AV_FRAME_FLAG_CORRUPT) != 0 || f->decode_error_flags != 0;
}
