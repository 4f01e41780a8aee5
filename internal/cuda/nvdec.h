// NVDEC (NVIDIA's video decoder, libnvcuvid.so.1) for nvdec.c and nvdec.go.
//
// No SDK header is included (CI and developer machines have none). The few
// types used are declared here by hand with the layouts of NVIDIA Video Codec
// SDK 13.0's nvcuvid.h and cuviddec.h (NVDECAPI 13.0; every struct used here
// has the same layout since SDK 11.1, whose copy FFmpeg's nv-codec-headers
// 11.1.5.2 ship). The names are the SDK's, so that they can be looked up
// there; fields vigil never reads or writes are folded into reserved arrays
// of the same size. The _Static_asserts hold the sizes and offsets that
// gcc gives the SDK's own declarations on x86-64 Linux (LP64), measured
// against those headers.
//
// Definitions live in nvdec.c: nvdec.go exports Go functions to C, and cgo
// then allows only declarations in its preamble.
#ifndef VIGIL_CUDA_NVDEC_H
#define VIGIL_CUDA_NVDEC_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef struct CUstream_st *CUstream;
typedef void *CUvideodecoder;
typedef struct _CUcontextlock_st *CUvideoctxlock;
typedef void *CUvideoparser;
typedef long long CUvideotimestamp;

// cudaVideoCodec, cudaVideoChromaFormat, cudaVideoSurfaceFormat,
// cudaVideoDeinterlaceMode and cuvidDecodeStatus are C enums (int).
#define VIGIL_CODEC_H264 4             // cudaVideoCodec_H264
#define VIGIL_CODEC_HEVC 8             // cudaVideoCodec_HEVC
#define VIGIL_SURFACE_NV12 0           // cudaVideoSurfaceFormat_NV12
#define VIGIL_SURFACE_P016 1           // cudaVideoSurfaceFormat_P016
#define VIGIL_CREATE_PREFER_CUVID 0x04 // cudaVideoCreate_PreferCUVID
#define VIGIL_PKT_ENDOFSTREAM 0x01     // CUVID_PKT_ENDOFSTREAM
#define VIGIL_PKT_TIMESTAMP 0x02       // CUVID_PKT_TIMESTAMP
#define VIGIL_PKT_DISCONTINUITY 0x04   // CUVID_PKT_DISCONTINUITY
#define VIGIL_PKT_ENDOFPICTURE 0x08    // CUVID_PKT_ENDOFPICTURE

// CUVIDEOFORMAT: what the parser found in a sequence header.
typedef struct {
	int codec;
	struct {
		unsigned int numerator, denominator;
	} frame_rate;
	unsigned char progressive_sequence;
	unsigned char bit_depth_luma_minus8;
	unsigned char bit_depth_chroma_minus8;
	unsigned char min_num_decode_surfaces;
	unsigned int coded_width, coded_height;
	struct {
		int left, top, right, bottom;
	} display_area;
	int chroma_format;
	unsigned int bitrate;
	struct {
		int x, y;
	} display_aspect_ratio;
	// video_signal_description: the SDK declares the first byte as the
	// bit-fields video_format:3, video_full_range_flag:1 and 4 reserved
	// bits, which gcc allocates from the least significant bit: the
	// full-range flag is bit 3 (VIGIL_FULL_RANGE_BIT).
	unsigned char video_format_bits;
	unsigned char color_primaries;
	unsigned char transfer_characteristics;
	unsigned char matrix_coefficients;
	unsigned int seqhdr_data_length;
} CUVIDEOFORMAT;
#define VIGIL_FULL_RANGE_BIT 3

// CUVIDPARSERDISPINFO: a picture ready for display.
typedef struct {
	int picture_index;
	int progressive_frame;
	int top_field_first;
	int repeat_first_field;
	CUvideotimestamp timestamp;
} CUVIDPARSERDISPINFO;

// CUVIDSOURCEDATAPACKET: bitstream handed to the parser.
typedef struct {
	unsigned long flags;
	unsigned long payload_size;
	const unsigned char *payload;
	CUvideotimestamp timestamp;
} CUVIDSOURCEDATAPACKET;

// CUVIDPICPARAMS: the parser's parameters for one picture. Only its
// leading fields are declared; the parser owns the structure and vigil
// passes the pointer on unchanged, so its full size is never needed.
typedef struct {
	int PicWidthInMbs;
	int FrameHeightInMbs;
	int CurrPicIdx;
} CUVIDPICPARAMS;

typedef int (*PFNVIDSEQUENCECALLBACK)(void *, CUVIDEOFORMAT *);
typedef int (*PFNVIDDECODECALLBACK)(void *, CUVIDPICPARAMS *);
typedef int (*PFNVIDDISPLAYCALLBACK)(void *, CUVIDPARSERDISPINFO *);

// CUVIDPARSERPARAMS. flag_bits holds the SDK's bit-fields bAnnexb:1,
// bMemoryOptimize:1 (SDK 12.2+) and 30 reserved bits, all zero here.
// reserved_ptrs covers pfnGetOperatingPoint, pfnGetSEIMsg (SDK 12.2+) and
// pvReserved2[5]: seven pointers vigil leaves NULL.
typedef struct {
	int CodecType;
	unsigned int ulMaxNumDecodeSurfaces;
	unsigned int ulClockRate;
	unsigned int ulErrorThreshold;
	unsigned int ulMaxDisplayDelay;
	unsigned int flag_bits;
	unsigned int uReserved1[4];
	void *pUserData;
	PFNVIDSEQUENCECALLBACK pfnSequenceCallback;
	PFNVIDDECODECALLBACK pfnDecodePicture;
	PFNVIDDISPLAYCALLBACK pfnDisplayPicture;
	void *reserved_ptrs[7];
	void *pExtVideoInfo;
} CUVIDPARSERPARAMS;

typedef struct {
	short left, top, right, bottom;
} vigil_rect16;

// CUVIDDECODECREATEINFO (the SDK's tcu_ulong is unsigned long on Linux).
typedef struct {
	unsigned long ulWidth;
	unsigned long ulHeight;
	unsigned long ulNumDecodeSurfaces;
	int CodecType;
	int ChromaFormat;
	unsigned long ulCreationFlags;
	unsigned long bitDepthMinus8;
	unsigned long ulIntraDecodeOnly;
	unsigned long ulMaxWidth;
	unsigned long ulMaxHeight;
	unsigned long Reserved1;
	vigil_rect16 display_area;
	int OutputFormat;
	int DeinterlaceMode;
	unsigned long ulTargetWidth;
	unsigned long ulTargetHeight;
	unsigned long ulNumOutputSurfaces;
	CUvideoctxlock vidLock;
	vigil_rect16 target_rect;
	unsigned long enableHistogram;
	unsigned long Reserved2[4];
} CUVIDDECODECREATEINFO;

// CUVIDRECONFIGUREDECODERINFO.
typedef struct {
	unsigned int ulWidth;
	unsigned int ulHeight;
	unsigned int ulTargetWidth;
	unsigned int ulTargetHeight;
	unsigned int ulNumDecodeSurfaces;
	unsigned int reserved1[12];
	vigil_rect16 display_area;
	vigil_rect16 target_rect;
	unsigned int reserved2[11];
} CUVIDRECONFIGUREDECODERINFO;

// CUVIDPROCPARAMS: how cuvidMapVideoFrame64 post-processes a picture.
// Fields from reserved_flags to Reserved1 (raw YUV extensions) are folded
// into reserved_a.
typedef struct {
	int progressive_frame;
	int second_field;
	int top_field_first;
	int unpaired_field;
	unsigned int reserved_a[10];
	CUstream output_stream;
	unsigned int Reserved[46];
	unsigned long long *histogram_dptr;
	void *Reserved2[1];
} CUVIDPROCPARAMS;

// CUVIDGETDECODESTATUS; decodeStatus is a cuvidDecodeStatus.
typedef struct {
	int decodeStatus;
	unsigned int reserved[31];
	void *pReserved[8];
} CUVIDGETDECODESTATUS;

// CUVIDDECODECAPS.
typedef struct {
	int eCodecType;
	int eChromaFormat;
	unsigned int nBitDepthMinus8;
	unsigned int reserved1[3];
	unsigned char bIsSupported;
	unsigned char nNumNVDECs;
	unsigned short nOutputFormatMask;
	unsigned int nMaxWidth;
	unsigned int nMaxHeight;
	unsigned int nMaxMBCount;
	unsigned short nMinWidth;
	unsigned short nMinHeight;
	unsigned char bIsHistogramSupported;
	unsigned char nCounterBitDepth;
	unsigned short nMaxHistogramBins;
	unsigned int reserved3[10];
} CUVIDDECODECAPS;

#if defined(__x86_64__) || defined(__aarch64__)
_Static_assert(sizeof(CUVIDEOFORMAT) == 64, "CUVIDEOFORMAT");
_Static_assert(offsetof(CUVIDEOFORMAT, coded_width) == 16, "CUVIDEOFORMAT.coded_width");
_Static_assert(offsetof(CUVIDEOFORMAT, chroma_format) == 40, "CUVIDEOFORMAT.chroma_format");
_Static_assert(offsetof(CUVIDEOFORMAT, video_format_bits) == 56, "CUVIDEOFORMAT.video_signal_description");
_Static_assert(sizeof(CUVIDPARSERDISPINFO) == 24, "CUVIDPARSERDISPINFO");
_Static_assert(sizeof(CUVIDSOURCEDATAPACKET) == 32, "CUVIDSOURCEDATAPACKET");
_Static_assert(offsetof(CUVIDSOURCEDATAPACKET, timestamp) == 24, "CUVIDSOURCEDATAPACKET.timestamp");
_Static_assert(offsetof(CUVIDPICPARAMS, CurrPicIdx) == 8, "CUVIDPICPARAMS.CurrPicIdx");
_Static_assert(sizeof(CUVIDPARSERPARAMS) == 136, "CUVIDPARSERPARAMS");
_Static_assert(offsetof(CUVIDPARSERPARAMS, pUserData) == 40, "CUVIDPARSERPARAMS.pUserData");
_Static_assert(offsetof(CUVIDPARSERPARAMS, pfnDisplayPicture) == 64, "CUVIDPARSERPARAMS.pfnDisplayPicture");
_Static_assert(offsetof(CUVIDPARSERPARAMS, pExtVideoInfo) == 128, "CUVIDPARSERPARAMS.pExtVideoInfo");
_Static_assert(sizeof(CUVIDDECODECREATEINFO) == 176, "CUVIDDECODECREATEINFO");
_Static_assert(offsetof(CUVIDDECODECREATEINFO, display_area) == 80, "CUVIDDECODECREATEINFO.display_area");
_Static_assert(offsetof(CUVIDDECODECREATEINFO, OutputFormat) == 88, "CUVIDDECODECREATEINFO.OutputFormat");
_Static_assert(offsetof(CUVIDDECODECREATEINFO, ulTargetWidth) == 96, "CUVIDDECODECREATEINFO.ulTargetWidth");
_Static_assert(offsetof(CUVIDDECODECREATEINFO, vidLock) == 120, "CUVIDDECODECREATEINFO.vidLock");
_Static_assert(offsetof(CUVIDDECODECREATEINFO, target_rect) == 128, "CUVIDDECODECREATEINFO.target_rect");
_Static_assert(sizeof(CUVIDRECONFIGUREDECODERINFO) == 128, "CUVIDRECONFIGUREDECODERINFO");
_Static_assert(offsetof(CUVIDRECONFIGUREDECODERINFO, display_area) == 68, "CUVIDRECONFIGUREDECODERINFO.display_area");
_Static_assert(offsetof(CUVIDRECONFIGUREDECODERINFO, target_rect) == 76, "CUVIDRECONFIGUREDECODERINFO.target_rect");
_Static_assert(sizeof(CUVIDPROCPARAMS) == 264, "CUVIDPROCPARAMS");
_Static_assert(offsetof(CUVIDPROCPARAMS, output_stream) == 56, "CUVIDPROCPARAMS.output_stream");
_Static_assert(offsetof(CUVIDPROCPARAMS, histogram_dptr) == 248, "CUVIDPROCPARAMS.histogram_dptr");
_Static_assert(sizeof(CUVIDGETDECODESTATUS) == 192, "CUVIDGETDECODESTATUS");
_Static_assert(sizeof(CUVIDDECODECAPS) == 88, "CUVIDDECODECAPS");
_Static_assert(offsetof(CUVIDDECODECAPS, nMaxWidth) == 28, "CUVIDDECODECAPS.nMaxWidth");
_Static_assert(offsetof(CUVIDDECODECAPS, nMinWidth) == 40, "CUVIDDECODECAPS.nMinWidth");
#endif

// The most decode surfaces a decoder may have (the SDK's limit for
// ulNumDecodeSurfaces).
#define VIGIL_MAX_SURFACES 64

// One stream's parser and decoder (nvdec.c). Go holds it by pointer; the
// parser's callbacks get it as their user data.
typedef struct vigil_nvdec {
	uintptr_t handle; // cgo.Handle of the Go VideoDecoder
	uintptr_t ctx;    // CUcontext (the device's primary context)
	CUvideoparser parser;
	CUvideodecoder dec;
	// Pictures whose cuvidDecodePicture failed, by picture index, until
	// their display; and the failures since vigil_nv_take_errors.
	unsigned char failed[VIGIL_MAX_SURFACES];
	int decode_errors, last_error;
	// Pictures the parser asked to decode before a decoder existed.
	int no_decoder;
	// poll_us > 0: before mapping a picture, sleep until
	// cuvidGetDecodeStatus says it is decoded (vigil_nv_copy), polling
	// every poll_us µs after a first sleep of 3/4 of wait_ewma_us, the
	// recent mean wait; polls and polled count the status checks that
	// found it still in progress and the pictures waited for.
	unsigned int poll_us;
	double wait_ewma_us;
	unsigned long long polls, polled;
	// Pictures the parser handed to the decode callback, since made.
	unsigned long long pictures;
} vigil_nvdec;

// Geometry of a decoder to create or reconfigure (from the sequence
// callback, decided in Go).
typedef struct {
	int codec, chroma_format, bit_depth_minus8, surface_format;
	unsigned int coded_width, coded_height, max_width, max_height;
	int left, top, right, bottom; // display area
	unsigned int target_width, target_height, surfaces;
} vigil_nv_geometry;

int vigil_nv_open(const char *lib, char *err, size_t errlen);
int vigil_nv_has_caps(void);
int vigil_nv_has_status(void);
int vigil_nv_has_reconfigure(void);
int vigil_nv_caps(uintptr_t ctx, int codec, int chroma, int depth_minus8, CUVIDDECODECAPS *caps);
vigil_nvdec *vigil_nv_new(uintptr_t handle, uintptr_t ctx);
void vigil_nv_free(vigil_nvdec *s);
int vigil_nv_parser_create(vigil_nvdec *s, int codec, unsigned int surfaces, unsigned int delay);
int vigil_nv_parser_destroy(vigil_nvdec *s);
int vigil_nv_parse(vigil_nvdec *s, const unsigned char *data, size_t n, long long ts, unsigned int flags);
int vigil_nv_decoder_create(vigil_nvdec *s, const vigil_nv_geometry *g);
int vigil_nv_decoder_reconfigure(vigil_nvdec *s, const vigil_nv_geometry *g);
int vigil_nv_decoder_destroy(vigil_nvdec *s);
int vigil_nv_take_failed(vigil_nvdec *s, int idx);
int vigil_nv_status(vigil_nvdec *s, int idx, int *status);
int vigil_nv_copy(vigil_nvdec *s, const CUVIDPARSERDISPINFO *d, uintptr_t stream, unsigned int src_height,
	unsigned long long dst, size_t dst_pitch, size_t row_bytes, unsigned int luma_rows, unsigned int chroma_rows,
	int *stage, int *status);

#endif
