// A stand-in for libnvcuvid.so.1, for testing package cuda's NVDEC plumbing
// on machines without a GPU (TestFakeDriver builds it with cc, beside the
// fake libcuda.so.1, whose "device" memory is host memory too). Its
// "bitstream" is text, one command per packet:
//
//	SEQ w h depth chroma min   a sequence header: w×h display size (coded
//	                           size rounded up to 16), bit depth, chroma
//	                           format (1 is 4:2:0), min decode surfaces
//	PIC v [ok|conceal|error|reject]
//	                           a picture of value v; its decode status, or
//	                           reject: cuvidDecodePicture fails
//
// An empty packet with CUVID_PKT_DISCONTINUITY or CUVID_PKT_ENDOFSTREAM
// flushes the pictures held for display (ulMaxDisplayDelay). As NVIDIA's
// parser does, it hands the packets' timestamps out in increasing order,
// one per picture displayed, not each picture its own packet's. A mapped
// picture's luma row r holds (v + r) & 255 in every byte (16-bit samples:
// ((v + r) & 1023) << 6), its chroma row r holds (v + 100 + r) & 255 (16-bit:
// ((v + 100 + r) & 1023) << 6), each row `pitch` bytes apart with
// pitch > the row. It enforces the rules vigil must follow: no
// cuvidCtxLock (sessions must not serialise on one), every decoder made
// without one and with one output surface, one picture mapped at a time,
// even target sizes, reconfiguring within the maximum size and surface
// count the decoder was made with.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nvdec.h"

#define MAXQ 32

typedef struct {
	CUVIDPARSERPARAMS p;
	int nsurf, next;
	int qidx[MAXQ];
	long long qts[MAXQ];
	int qn;
} parser;

// The fake's own picture parameters: CUVIDPICPARAMS's three leading ints,
// then what the fake decodes.
typedef struct {
	int w, h, CurrPicIdx;
	int value, status;
} picparams;

typedef struct {
	CUVIDDECODECREATEINFO ci;
	int value[VIGIL_MAX_SURFACES], status[VIGIL_MAX_SURFACES];
	unsigned long long mapped;
} decoder;

CUresult cuvidCtxLockCreate(CUvideoctxlock *l, void *ctx) {
	(void)l;
	(void)ctx;
	return 999; // vigil's sessions must not share a context lock
}

CUresult cuvidCtxLockDestroy(CUvideoctxlock l) {
	(void)l;
	return 400;
}

CUresult cuvidGetDecoderCaps(CUVIDDECODECAPS *c) {
	c->bIsSupported = c->eChromaFormat == 1 && c->nBitDepthMinus8 <= 2;
	c->nNumNVDECs = 7;
	c->nMaxWidth = c->nMaxHeight = 4096;
	c->nMinWidth = c->nMinHeight = 16;
	c->nMaxMBCount = 65536;
	return 0;
}

CUresult cuvidCreateDecoder(CUvideodecoder *pd, CUVIDDECODECREATEINFO *ci) {
	if (ci->vidLock || ci->ulNumOutputSurfaces != 1 || (ci->ulTargetWidth & 1) || (ci->ulTargetHeight & 1) ||
	    ci->ulNumDecodeSurfaces < 1 || ci->ulNumDecodeSurfaces > VIGIL_MAX_SURFACES ||
	    ci->ulMaxWidth < ci->ulWidth || ci->ulMaxHeight < ci->ulHeight ||
	    ci->OutputFormat != (ci->bitDepthMinus8 ? VIGIL_SURFACE_P016 : VIGIL_SURFACE_NV12))
		return 1;
	decoder *d = calloc(1, sizeof *d);
	if (!d) return 2;
	d->ci = *ci;
	*pd = d;
	return 0;
}

CUresult cuvidReconfigureDecoder(CUvideodecoder hd, CUVIDRECONFIGUREDECODERINFO *ri) {
	decoder *d = hd;
	if (!d || ri->ulWidth > d->ci.ulMaxWidth || ri->ulHeight > d->ci.ulMaxHeight ||
	    ri->ulNumDecodeSurfaces > d->ci.ulNumDecodeSurfaces || (ri->ulTargetWidth & 1) || (ri->ulTargetHeight & 1))
		return 1;
	d->ci.ulWidth = ri->ulWidth;
	d->ci.ulHeight = ri->ulHeight;
	d->ci.ulTargetWidth = ri->ulTargetWidth;
	d->ci.ulTargetHeight = ri->ulTargetHeight;
	return 0;
}

CUresult cuvidDestroyDecoder(CUvideodecoder hd) {
	decoder *d = hd;
	if (!d || d->mapped) return 400;
	free(d);
	return 0;
}

CUresult cuvidDecodePicture(CUvideodecoder hd, CUVIDPICPARAMS *hp) {
	decoder *d = hd;
	picparams *p = (picparams *)hp;
	if (!d || p->CurrPicIdx < 0 || p->CurrPicIdx >= (int)d->ci.ulNumDecodeSurfaces) return 1;
	if (p->status < 0) return 1; // reject
	d->value[p->CurrPicIdx] = p->value;
	d->status[p->CurrPicIdx] = p->status;
	return 0;
}

CUresult cuvidGetDecodeStatus(CUvideodecoder hd, int idx, CUVIDGETDECODESTATUS *st) {
	decoder *d = hd;
	if (!d || idx < 0 || idx >= (int)d->ci.ulNumDecodeSurfaces) return 1;
	st->decodeStatus = d->status[idx];
	return 0;
}

CUresult cuvidMapVideoFrame64(CUvideodecoder hd, int idx, unsigned long long *ptr, unsigned int *pitch,
		CUVIDPROCPARAMS *vpp) {
	decoder *d = hd;
	if (!d || d->mapped || !vpp->output_stream || idx < 0 || idx >= (int)d->ci.ulNumDecodeSurfaces) return 1;
	int bps = d->ci.bitDepthMinus8 ? 2 : 1;
	unsigned w = (unsigned)d->ci.ulTargetWidth, h = (unsigned)d->ci.ulTargetHeight;
	unsigned p = w * bps + 64, sh = (h + 1) & ~1u;
	unsigned char *f = calloc((size_t)p * (sh + sh / 2), 1);
	if (!f) return 2;
	int v = d->value[idx];
	for (unsigned r = 0; r < sh + sh / 2; r++) {
		int val = r < sh ? v + (int)r : v + 100 + (int)(r - sh);
		for (unsigned x = 0; x < p; x += bps) {
			if (bps == 1) {
				f[(size_t)r * p + x] = (unsigned char)val;
			} else {
				unsigned s = ((unsigned)val & 1023) << 6;
				f[(size_t)r * p + x] = (unsigned char)s;
				f[(size_t)r * p + x + 1] = (unsigned char)(s >> 8);
			}
		}
	}
	d->mapped = (unsigned long long)(uintptr_t)f;
	*ptr = d->mapped;
	*pitch = p;
	return 0;
}

CUresult cuvidUnmapVideoFrame64(CUvideodecoder hd, unsigned long long ptr) {
	decoder *d = hd;
	if (!d || !d->mapped || ptr != d->mapped) return 1;
	free((void *)(uintptr_t)ptr);
	d->mapped = 0;
	return 0;
}

CUresult cuvidCreateVideoParser(CUvideoparser *pp, CUVIDPARSERPARAMS *params) {
	if (!params->pfnSequenceCallback || !params->pfnDecodePicture || !params->pfnDisplayPicture) return 1;
	parser *p = calloc(1, sizeof *p);
	if (!p) return 2;
	p->p = *params;
	p->nsurf = (int)params->ulMaxNumDecodeSurfaces;
	*pp = p;
	return 0;
}

CUresult cuvidDestroyVideoParser(CUvideoparser hp) {
	free(hp);
	return 0;
}

static void display(parser *p, int keep) {
	while (p->qn > keep) {
		CUVIDPARSERDISPINFO di;
		memset(&di, 0, sizeof di);
		di.picture_index = p->qidx[0];
		di.progressive_frame = 1;
		int lo = 0; // the smallest timestamp pending, which goes first
		for (int i = 1; i < p->qn; i++)
			if (p->qts[i] < p->qts[lo]) lo = i;
		long long t = p->qts[lo];
		p->qts[lo] = p->qts[0];
		p->qts[0] = t;
		di.timestamp = p->qts[0];
		p->qn--;
		memmove(p->qidx, p->qidx + 1, sizeof p->qidx[0] * (size_t)p->qn);
		memmove(p->qts, p->qts + 1, sizeof p->qts[0] * (size_t)p->qn);
		p->p.pfnDisplayPicture(p->p.pUserData, &di);
	}
}

CUresult cuvidParseVideoData(CUvideoparser hp, CUVIDSOURCEDATAPACKET *pkt) {
	parser *p = hp;
	char buf[128] = {0}, word[16] = {0};
	if (pkt->payload_size == 0) {
		if (pkt->flags & (VIGIL_PKT_DISCONTINUITY | VIGIL_PKT_ENDOFSTREAM)) display(p, 0);
		return 0;
	}
	if (pkt->flags & VIGIL_PKT_DISCONTINUITY) return 1; // the trap: never on a packet with data
	memcpy(buf, pkt->payload, pkt->payload_size < sizeof buf - 1 ? pkt->payload_size : sizeof buf - 1);
	int w, h, depth, chroma, min, v;
	if (sscanf(buf, "SEQ %d %d %d %d %d", &w, &h, &depth, &chroma, &min) == 5) {
		CUVIDEOFORMAT f;
		memset(&f, 0, sizeof f);
		f.codec = p->p.CodecType;
		f.progressive_sequence = 1;
		f.bit_depth_luma_minus8 = f.bit_depth_chroma_minus8 = (unsigned char)(depth - 8);
		f.min_num_decode_surfaces = (unsigned char)min;
		f.coded_width = (unsigned)(w + 15) & ~15u;
		f.coded_height = (unsigned)(h + 15) & ~15u;
		f.display_area.right = w;
		f.display_area.bottom = h;
		f.chroma_format = chroma;
		f.video_format_bits = 5 | 1 << VIGIL_FULL_RANGE_BIT; // unspecified video format, full range
		f.color_primaries = f.transfer_characteristics = f.matrix_coefficients = 1;
		display(p, 0); // a new sequence: the old pictures go first
		int n = p->p.pfnSequenceCallback(p->p.pUserData, &f);
		if (n == 0) return 999; // CUDA_ERROR_UNKNOWN
		if (n > 1) p->nsurf = n;
		return 0;
	}
	if (sscanf(buf, "PIC %d %15s", &v, word) >= 1) {
		picparams pic;
		memset(&pic, 0, sizeof pic);
		pic.CurrPicIdx = p->next++ % p->nsurf;
		pic.value = v;
		pic.status = 2;
		if (strcmp(word, "conceal") == 0) pic.status = 9;
		if (strcmp(word, "error") == 0) pic.status = 8;
		if (strcmp(word, "reject") == 0) pic.status = -1;
		p->p.pfnDecodePicture(p->p.pUserData, (CUVIDPICPARAMS *)&pic);
		if (p->qn == MAXQ) return 2;
		p->qidx[p->qn] = pic.CurrPicIdx;
		p->qts[p->qn++] = pkt->timestamp;
		display(p, (int)p->p.ulMaxDisplayDelay);
		return 0;
	}
	return 1; // CUDA_ERROR_INVALID_VALUE: not a command
}
