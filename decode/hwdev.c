// C helpers for NVDEC decoding; see hw.go.
#include "hwdev.h"

#include <libavutil/hwcontext.h>
#include <libavutil/pixfmt.h>

// libavutil/hwcontext_cuda.h includes the CUDA toolkit's cuda.h unless
// CUDA_VERSION is defined; it needs only the two handle types, declared
// here as cuda.h does, so vigil builds without a toolkit.
#ifndef CUDA_VERSION
#define CUDA_VERSION 12000
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
#endif
#include <libavutil/hwcontext_cuda.h>

void vigilCUDADeviceFree(uintptr_t opaque); // hw.go

int vigil_hw_sw_format(const AVFrame *f) {
	if (f->hw_frames_ctx == NULL) return -1;
	return ((AVHWFramesContext *)f->hw_frames_ctx->data)->sw_format;
}

static void vigil_cuda_device_free(AVHWDeviceContext *d) { vigilCUDADeviceFree((uintptr_t)d->user_opaque); }

// vigil_cuda_device_new makes an FFmpeg CUDA device context over an
// existing context and stream (vigil's: the primary context and a
// non-blocking stream of this decoder's own), instead of
// av_hwdevice_ctx_create's context and the legacy default stream. When
// the device context is freed, hw.go's vigilCUDADeviceFree gets opaque.
// *owned says whether that callback is armed (it has then run if NULL is
// returned); *err is the AVERROR on failure.
AVBufferRef *vigil_cuda_device_new(uintptr_t cuctx, uintptr_t stream, uintptr_t opaque, int *err, int *owned) {
	*owned = 0;
	AVBufferRef *r = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
	if (r == NULL) {
		*err = AVERROR(ENOMEM);
		return NULL;
	}
	AVHWDeviceContext *d = (AVHWDeviceContext *)r->data;
	AVCUDADeviceContext *h = d->hwctx;
	h->cuda_ctx = (CUcontext)cuctx;
	h->stream = (CUstream)stream;
	d->user_opaque = (void *)opaque;
	d->free = vigil_cuda_device_free;
	*owned = 1;
	*err = av_hwdevice_ctx_init(r);
	if (*err < 0) {
		av_buffer_unref(&r);
		return NULL;
	}
	return r;
}

// vigil_hw_copy copies the hardware frame src (an NVDEC output surface)
// into a new frame dst from *pool, a CUDA frames pool of src's size and
// software format on src's device, made or remade as needed; the copy is
// queued on that device context's stream (the caller synchronises it).
// Frame properties (PTS, colour) are copied too. Returns 0 or an AVERROR.
int vigil_hw_copy(AVBufferRef **pool, const AVFrame *src, AVFrame *dst) {
	if (src->hw_frames_ctx == NULL) return AVERROR(EINVAL);
	AVHWFramesContext *sf = (AVHWFramesContext *)src->hw_frames_ctx->data;
	if (*pool != NULL) {
		AVHWFramesContext *pf = (AVHWFramesContext *)(*pool)->data;
		if (pf->width != src->width || pf->height != src->height || pf->sw_format != sf->sw_format ||
		    pf->device_ref->data != sf->device_ref->data)
			av_buffer_unref(pool);
	}
	if (*pool == NULL) {
		AVBufferRef *r = av_hwframe_ctx_alloc(sf->device_ref);
		if (r == NULL) return AVERROR(ENOMEM);
		AVHWFramesContext *f = (AVHWFramesContext *)r->data;
		f->format = AV_PIX_FMT_CUDA;
		f->sw_format = sf->sw_format;
		f->width = src->width;
		f->height = src->height;
		int ret = av_hwframe_ctx_init(r);
		if (ret < 0) {
			av_buffer_unref(&r);
			return ret;
		}
		*pool = r;
	}
	int ret = av_hwframe_get_buffer(*pool, dst, 0);
	if (ret < 0) return ret;
	ret = av_hwframe_transfer_data(dst, src, 0);
	if (ret >= 0) ret = av_frame_copy_props(dst, src);
	if (ret < 0) av_frame_unref(dst);
	return ret;
}
