// NVDEC through libnvcuvid.so.1, loaded at run time (see nvdec.h for the
// types and nvdec.go for the Go side). The parser's sequence and display
// callbacks go to Go (nvdec.go's exports); its decode callback stays in C,
// since it only hands the picture to cuvidDecodePicture.
//
// The CUDA driver calls (making the context current, the copy out of a
// mapped picture, the stream synchronisation) go through cgo.go's driver
// table, by the non-static helpers it defines for this file.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvdec.h"
#include "_cgo_export.h"

// cgo.go.
int vigil_cu_set_current(uintptr_t ctx);
int vigil_cu_copy2d(uintptr_t stream, unsigned long long src, size_t src_pitch, unsigned long long dst,
	size_t dst_pitch, size_t row_bytes, size_t rows);
int vigil_cu_stream_sync(uintptr_t stream);

typedef struct {
	CUresult (*GetDecoderCaps)(CUVIDDECODECAPS *caps); // optional (SDK 8.1+)
	CUresult (*CreateDecoder)(CUvideodecoder *dec, CUVIDDECODECREATEINFO *ci);
	CUresult (*DestroyDecoder)(CUvideodecoder dec);
	CUresult (*DecodePicture)(CUvideodecoder dec, CUVIDPICPARAMS *p);
	CUresult (*GetDecodeStatus)(CUvideodecoder dec, int idx, CUVIDGETDECODESTATUS *st); // optional (SDK 9.0+)
	CUresult (*ReconfigureDecoder)(CUvideodecoder dec, CUVIDRECONFIGUREDECODERINFO *ri); // optional (SDK 9.0+)
	CUresult (*MapVideoFrame64)(CUvideodecoder dec, int idx, unsigned long long *ptr, unsigned int *pitch,
		CUVIDPROCPARAMS *vpp);
	CUresult (*UnmapVideoFrame64)(CUvideodecoder dec, unsigned long long ptr);
	CUresult (*CreateVideoParser)(CUvideoparser *p, CUVIDPARSERPARAMS *pp);
	CUresult (*ParseVideoData)(CUvideoparser p, CUVIDSOURCEDATAPACKET *pkt);
	CUresult (*DestroyVideoParser)(CUvideoparser p);
} vigil_nv_api;

static vigil_nv_api vnd;

// As cgo.go's vigil_cu_open: 0, 1 (dlopen failed; err has dlerror's
// text) or 2 (a required symbol is missing; err has its name). The table
// is published only when every required symbol was found.
int vigil_nv_open(const char *lib, char *err, size_t errlen) {
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	vigil_nv_api a;
	memset(&a, 0, sizeof a);
#define VIGIL_SYM(field, name) \
	if (!(a.field = (__typeof__(a.field))dlsym(h, name))) { \
		snprintf(err, errlen, "%s", name); dlclose(h); return 2; }
	VIGIL_SYM(CreateDecoder, "cuvidCreateDecoder")
	VIGIL_SYM(DestroyDecoder, "cuvidDestroyDecoder")
	VIGIL_SYM(DecodePicture, "cuvidDecodePicture")
	VIGIL_SYM(MapVideoFrame64, "cuvidMapVideoFrame64")
	VIGIL_SYM(UnmapVideoFrame64, "cuvidUnmapVideoFrame64")
	VIGIL_SYM(CreateVideoParser, "cuvidCreateVideoParser")
	VIGIL_SYM(ParseVideoData, "cuvidParseVideoData")
	VIGIL_SYM(DestroyVideoParser, "cuvidDestroyVideoParser")
#undef VIGIL_SYM
	a.GetDecoderCaps = (__typeof__(a.GetDecoderCaps))dlsym(h, "cuvidGetDecoderCaps");
	a.GetDecodeStatus = (__typeof__(a.GetDecodeStatus))dlsym(h, "cuvidGetDecodeStatus");
	a.ReconfigureDecoder = (__typeof__(a.ReconfigureDecoder))dlsym(h, "cuvidReconfigureDecoder");
	vnd = a;
	return 0;
}

int vigil_nv_has_caps(void) { return vnd.GetDecoderCaps != NULL; }
int vigil_nv_has_status(void) { return vnd.GetDecodeStatus != NULL; }
int vigil_nv_has_reconfigure(void) { return vnd.ReconfigureDecoder != NULL; }

// A failure of cuCtxSetCurrent comes back negated, as in cgo.go.
#define VIGIL_CTX(ctx) do { \
	CUresult r_ = vigil_cu_set_current(ctx); \
	if (r_ != 0) return -r_; } while (0)

// vigil_nv_current is VIGIL_CTX for code that must not return early.
static CUresult vigil_nv_current(uintptr_t ctx) {
	CUresult r = vigil_cu_set_current(ctx);
	return r == 0 ? 0 : -r;
}

int vigil_nv_caps(uintptr_t ctx, int codec, int chroma, int depth_minus8, CUVIDDECODECAPS *caps) {
	memset(caps, 0, sizeof *caps);
	caps->eCodecType = codec;
	caps->eChromaFormat = chroma;
	caps->nBitDepthMinus8 = (unsigned int)depth_minus8;
	VIGIL_CTX(ctx);
	return vnd.GetDecoderCaps(caps);
}

// The parser's callbacks. The sequence and display callbacks return what
// Go decides; the decode callback always returns 1 (go on) and records a
// failed picture instead, so that one bad picture does not stop the parser.
static int vigil_nv_on_sequence(void *ud, CUVIDEOFORMAT *f) {
	return vigilNVDECSequence(((vigil_nvdec *)ud)->handle, f);
}

static int vigil_nv_on_decode(void *ud, CUVIDPICPARAMS *p) {
	vigil_nvdec *s = ud;
	int idx = p->CurrPicIdx;
	s->pictures++;
	if (!s->dec) {
		s->no_decoder++;
		return 1;
	}
	CUresult r = vnd.DecodePicture(s->dec, p);
	if (idx >= 0 && idx < VIGIL_MAX_SURFACES) s->failed[idx] = r != 0;
	if (r != 0) {
		s->decode_errors++;
		s->last_error = r;
	}
	return 1;
}

static int vigil_nv_on_display(void *ud, CUVIDPARSERDISPINFO *d) {
	if (d == NULL) return 1; // end of stream (CUVID_PKT_NOTIFY_EOS only)
	return vigilNVDECDisplay(((vigil_nvdec *)ud)->handle, d);
}

vigil_nvdec *vigil_nv_new(uintptr_t handle, uintptr_t ctx) {
	vigil_nvdec *s = calloc(1, sizeof *s);
	if (s) {
		s->handle = handle;
		s->ctx = ctx;
	}
	return s;
}

void vigil_nv_free(vigil_nvdec *s) { free(s); }

int vigil_nv_parser_create(vigil_nvdec *s, int codec, unsigned int surfaces, unsigned int delay) {
	CUVIDPARSERPARAMS pp;
	memset(&pp, 0, sizeof pp);
	pp.CodecType = codec;
	pp.ulMaxNumDecodeSurfaces = surfaces;
	pp.ulMaxDisplayDelay = delay;
	// Hand every picture to the decoder however damaged its bitstream:
	// NVDEC conceals what it can and says so in the decode status, and
	// vigil publishes such pictures flagged corrupt, as with FFmpeg.
	pp.ulErrorThreshold = 100;
	pp.pUserData = s;
	pp.pfnSequenceCallback = vigil_nv_on_sequence;
	pp.pfnDecodePicture = vigil_nv_on_decode;
	pp.pfnDisplayPicture = vigil_nv_on_display;
	CUvideoparser p = NULL;
	CUresult r = vnd.CreateVideoParser(&p, &pp);
	if (r == 0) s->parser = p;
	return r;
}

int vigil_nv_parser_destroy(vigil_nvdec *s) {
	if (!s->parser) return 0;
	CUresult r = vnd.DestroyVideoParser(s->parser);
	s->parser = NULL;
	return r;
}

int vigil_nv_parse(vigil_nvdec *s, const unsigned char *data, size_t n, long long ts, unsigned int flags) {
	CUVIDSOURCEDATAPACKET p;
	memset(&p, 0, sizeof p);
	p.flags = flags;
	p.payload_size = n;
	p.payload = n ? data : NULL;
	p.timestamp = ts;
	return vnd.ParseVideoData(s->parser, &p);
}

int vigil_nv_decoder_create(vigil_nvdec *s, const vigil_nv_geometry *g) {
	CUVIDDECODECREATEINFO ci;
	memset(&ci, 0, sizeof ci);
	ci.ulWidth = g->coded_width;
	ci.ulHeight = g->coded_height;
	ci.ulMaxWidth = g->max_width;
	ci.ulMaxHeight = g->max_height;
	ci.ulNumDecodeSurfaces = g->surfaces;
	ci.CodecType = g->codec;
	ci.ChromaFormat = g->chroma_format;
	ci.bitDepthMinus8 = (unsigned long)g->bit_depth_minus8;
	ci.ulCreationFlags = VIGIL_CREATE_PREFER_CUVID;
	ci.display_area.left = (short)g->left;
	ci.display_area.top = (short)g->top;
	ci.display_area.right = (short)g->right;
	ci.display_area.bottom = (short)g->bottom;
	ci.OutputFormat = g->surface_format;
	ci.DeinterlaceMode = 0; // cudaVideoDeinterlaceMode_Weave
	ci.ulTargetWidth = g->target_width;
	ci.ulTargetHeight = g->target_height;
	ci.ulNumOutputSurfaces = 1; // vigil maps one picture at a time
	// No cuvidCtxLock, as FFmpeg's NVDEC hwaccel: the SDK needs one only
	// for cudaVideoCreate_PreferCUDA, and every call here makes the
	// context current itself. A lock shared by the sessions serialised
	// them all behind each decoder's creation (about 47 ms: seconds for a
	// hundred streams starting at once) and made every
	// cuvidDecodePicture wait its turn (0.14 ms at 14 sessions, 2.3 ms at
	// 56, measured by ../shared/tools/nvdec-direct's probe).
	ci.vidLock = NULL;
	CUvideodecoder d = NULL;
	VIGIL_CTX(s->ctx);
	CUresult r = vnd.CreateDecoder(&d, &ci);
	if (r == 0) {
		s->dec = d;
		memset(s->failed, 0, sizeof s->failed);
	}
	return r;
}

int vigil_nv_decoder_reconfigure(vigil_nvdec *s, const vigil_nv_geometry *g) {
	CUVIDRECONFIGUREDECODERINFO ri;
	memset(&ri, 0, sizeof ri);
	ri.ulWidth = g->coded_width;
	ri.ulHeight = g->coded_height;
	ri.ulTargetWidth = g->target_width;
	ri.ulTargetHeight = g->target_height;
	ri.ulNumDecodeSurfaces = g->surfaces;
	ri.display_area.left = (short)g->left;
	ri.display_area.top = (short)g->top;
	ri.display_area.right = (short)g->right;
	ri.display_area.bottom = (short)g->bottom;
	VIGIL_CTX(s->ctx);
	CUresult r = vnd.ReconfigureDecoder(s->dec, &ri);
	if (r == 0) memset(s->failed, 0, sizeof s->failed);
	return r;
}

int vigil_nv_decoder_destroy(vigil_nvdec *s) {
	if (!s->dec) return 0;
	VIGIL_CTX(s->ctx);
	CUresult r = vnd.DestroyDecoder(s->dec);
	s->dec = NULL;
	return r;
}

// Reports and clears whether picture idx failed in cuvidDecodePicture.
int vigil_nv_take_failed(vigil_nvdec *s, int idx) {
	if (idx < 0 || idx >= VIGIL_MAX_SURFACES) return 0;
	int f = s->failed[idx];
	s->failed[idx] = 0;
	return f;
}

int vigil_nv_status(vigil_nvdec *s, int idx, int *status) {
	CUVIDGETDECODESTATUS st;
	memset(&st, 0, sizeof st);
	*status = 0;
	VIGIL_CTX(s->ctx);
	CUresult r = vnd.GetDecodeStatus(s->dec, idx, &st);
	*status = st.decodeStatus;
	return r;
}

static double vigil_now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

// vigil_nv_wait_decoded sleeps until picture idx is decoded by the
// decoder's own account (cuvidGetDecodeStatus no longer
// cuvidDecodeStatus_InProgress, 1), so that the map after it does not wait
// inside the driver: first for 3/4 of the recent mean wait, then every
// s->poll_us, for at most 100 ms (then the map waits as without it). The
// mean (wait_ewma_us, weight 1/8 for the newest) includes the last sleep's
// overshoot, so a wait that is always over before the first check shrinks
// it until a check finds the picture in progress again.
static void vigil_nv_wait_decoded(vigil_nvdec *s, int idx) {
	double t0 = vigil_now_us();
	int first = 1;
	for (;;) {
		CUVIDGETDECODESTATUS st;
		memset(&st, 0, sizeof st);
		if (vigil_nv_current(s->ctx) != 0 || vnd.GetDecodeStatus(s->dec, idx, &st) != 0) return;
		if (st.decodeStatus != 1) break;
		double waited = vigil_now_us() - t0;
		if (waited > 100000) return;
		double us = s->poll_us;
		if (first) {
			s->polled++;
			if (s->wait_ewma_us * 0.75 > us) us = s->wait_ewma_us * 0.75;
		}
		first = 0;
		s->polls++;
		struct timespec ts = {(time_t)(us / 1e6), (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3)};
		nanosleep(&ts, NULL);
	}
	double w = vigil_now_us() - t0;
	s->wait_ewma_us = s->wait_ewma_us > 0 ? s->wait_ewma_us + (w - s->wait_ewma_us) / 8 : w;
}

// vigil_nv_copy maps picture d (post-processed on stream), copies its
// luma_rows rows and then chroma_rows rows of interleaved chroma, each
// row_bytes long, to dst (rows dst_pitch apart, chroma right after the
// luma), waits for the copies and unmaps the picture: no picture stays
// mapped after the call. In the mapped frame the chroma starts
// src_height rows after the luma (the decoder's target height, rounded up
// to even). *stage says which step failed: 1 map, 2 copy, 3 synchronise,
// 4 unmap. On success *status is the picture's cuvidDecodeStatus, or -1
// when the driver cannot say.
int vigil_nv_copy(vigil_nvdec *s, const CUVIDPARSERDISPINFO *d, uintptr_t stream, unsigned int src_height,
		unsigned long long dst, size_t dst_pitch, size_t row_bytes, unsigned int luma_rows, unsigned int chroma_rows,
		int *stage, int *status) {
	CUVIDPROCPARAMS vpp;
	memset(&vpp, 0, sizeof vpp);
	vpp.progressive_frame = d->progressive_frame;
	vpp.top_field_first = d->top_field_first;
	vpp.unpaired_field = d->repeat_first_field < 0;
	vpp.output_stream = (CUstream)stream;
	unsigned long long src = 0;
	unsigned int pitch = 0;
	*stage = 1;
	if (s->poll_us > 0 && vnd.GetDecodeStatus) vigil_nv_wait_decoded(s, d->picture_index);
	VIGIL_CTX(s->ctx);
	CUresult r = vnd.MapVideoFrame64(s->dec, d->picture_index, &src, &pitch, &vpp);
	if (r != 0) return r;
	// From here on the picture is mapped: no early return.
	*stage = 2;
	r = vigil_nv_current(s->ctx);
	if (r == 0) r = vigil_cu_copy2d(stream, src, pitch, dst, dst_pitch, row_bytes, luma_rows);
	if (r == 0) r = vigil_nv_current(s->ctx);
	if (r == 0)
		r = vigil_cu_copy2d(stream, src + (unsigned long long)pitch * src_height, pitch,
			dst + (unsigned long long)dst_pitch * luma_rows, dst_pitch, row_bytes, chroma_rows);
	if (r == 0) {
		*stage = 3;
		r = vigil_nv_current(s->ctx);
		if (r == 0) r = vigil_cu_stream_sync(stream);
	}
	CUresult u = vigil_cu_set_current(s->ctx);
	if (u == 0) u = vnd.UnmapVideoFrame64(s->dec, src);
	if (r == 0 && u != 0) {
		*stage = 4;
		r = u;
	}
	// The decode is over once the picture could be mapped and copied.
	*status = -1;
	if (r == 0 && vnd.GetDecodeStatus) {
		CUVIDGETDECODESTATUS st;
		memset(&st, 0, sizeof st);
		if (vigil_nv_current(s->ctx) == 0 && vnd.GetDecodeStatus(s->dec, d->picture_index, &st) == 0)
			*status = st.decodeStatus;
	}
	return r;
}
