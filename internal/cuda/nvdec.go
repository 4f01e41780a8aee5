package cuda

/*
#include <stdint.h>
#include <stdlib.h>
#include "nvdec.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"time"
	"unsafe"
)

// ErrNoNVDEC is wrapped by the error of LoadNVDEC (and so of
// NewVideoDecoder) when the driver loads but NVIDIA's video decoder
// library, libnvcuvid.so.1, does not, or lacks a function vigil needs.
// The driver installs it beside libcuda.so.1; a container gets it only
// with the "video" driver capability (NVIDIA_DRIVER_CAPABILITIES). Test
// with errors.Is; the caller is expected to fall back (to FFmpeg or the
// CPU).
var ErrNoNVDEC = errors.New("cuda: no NVIDIA video decoder library found")

// nvdecLibrary is the decoder library's soname, as the driver installs
// it. Tests point it at a fake.
var nvdecLibrary = "libnvcuvid.so.1"

var (
	nvdecOnce sync.Once
	nvdecErr  error
)

// LoadNVDEC loads the driver (Init) and then libnvcuvid.so.1 (dlopen, and
// dlsym of every NVDEC function used). It runs once per process; later
// calls return the first result. The error is Init's (wrapping
// ErrNoDriver without a driver) or wraps ErrNoNVDEC.
func LoadNVDEC() error {
	if err := Init(); err != nil {
		return err
	}
	nvdecOnce.Do(func() { nvdecErr = openNVDEC(nvdecLibrary) })
	return nvdecErr
}

// openNVDEC does LoadNVDEC's work for the library lib.
func openNVDEC(lib string) error {
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	buf := (*C.char)(C.calloc(errBufLen, 1))
	defer C.free(unsafe.Pointer(buf))
	switch st := C.vigil_nv_open(clib, buf, errBufLen); st {
	case 0:
		return nil
	case 1:
		return &wrapped{
			msg: fmt.Sprintf("%v (%s); direct NVDEC decoding needs the NVIDIA driver's %s (in a container: NVIDIA_DRIVER_CAPABILITIES must include video)",
				ErrNoNVDEC, withLib(lib, C.GoString(buf)), lib),
			errs: []error{ErrNoNVDEC},
		}
	default:
		return &wrapped{
			msg:  fmt.Sprintf("%v (%s has no %s: the driver is too old)", ErrNoNVDEC, lib, C.GoString(buf)),
			errs: []error{ErrNoNVDEC},
		}
	}
}

// VideoCodec is a cudaVideoCodec value (cuviddec.h).
type VideoCodec int

// The codecs vigil decodes with NVDEC directly.
const (
	CodecH264 VideoCodec = C.VIGIL_CODEC_H264 // cudaVideoCodec_H264
	CodecHEVC VideoCodec = C.VIGIL_CODEC_HEVC // cudaVideoCodec_HEVC
)

// String is the codec's name: "h264", "hevc", or "codec(N)".
func (c VideoCodec) String() string {
	switch c {
	case CodecH264:
		return "h264"
	case CodecHEVC:
		return "hevc"
	}
	return fmt.Sprintf("codec(%d)", int(c))
}

// ChromaFormat is a cudaVideoChromaFormat value (cuviddec.h).
type ChromaFormat int

// Chroma formats (cudaVideoChromaFormat_Monochrome, _420, _422, _444).
const (
	ChromaMonochrome ChromaFormat = 0
	Chroma420        ChromaFormat = 1
	Chroma422        ChromaFormat = 2
	Chroma444        ChromaFormat = 3
)

// String is the format's usual name, e.g. "4:2:0".
func (c ChromaFormat) String() string {
	switch c {
	case ChromaMonochrome:
		return "4:0:0"
	case Chroma420:
		return "4:2:0"
	case Chroma422:
		return "4:2:2"
	case Chroma444:
		return "4:4:4"
	}
	return fmt.Sprintf("chroma(%d)", int(c))
}

// VideoFormat is a sequence's format as the parser reports it
// (CUVIDEOFORMAT, nvcuvid.h). Sizes are in pixels.
type VideoFormat struct {
	Codec VideoCodec
	// CodedWidth and CodedHeight are the decoded picture's size, in whole
	// macroblocks or coding units (1920×1088 for 1080p H.264).
	CodedWidth, CodedHeight int
	// Left, Top, Right, Bottom are the display area (the crop) inside the
	// coded picture; Width and Height give its size.
	Left, Top, Right, Bottom int
	// BitDepth is the luma bit depth (8, 10, 12).
	BitDepth int
	Chroma   ChromaFormat
	// MinSurfaces is the fewest decode surfaces the stream needs
	// (min_num_decode_surfaces).
	MinSurfaces int
	Progressive bool
	// FullRange is the VUI's video_full_range_flag; ColourPrimaries,
	// Transfer and Matrix are the VUI's colour_primaries,
	// transfer_characteristics and matrix_coefficients (ITU-T H.273 code
	// points; 2 is unspecified, also when the stream has no VUI).
	FullRange                         bool
	ColourPrimaries, Transfer, Matrix int
	// FrameRateNum / FrameRateDen is the frame rate the stream declares
	// (0 when it declares none).
	FrameRateNum, FrameRateDen int
}

// Width is the display width (Right − Left).
func (f VideoFormat) Width() int { return f.Right - f.Left }

// Height is the display height (Bottom − Top).
func (f VideoFormat) Height() int { return f.Bottom - f.Top }

// BytesPerSample is 1 for 8-bit pictures (NV12 surfaces) and 2 for deeper
// ones (P016 surfaces: the sample in the high bits of 16, the low bits 0).
func (f VideoFormat) BytesPerSample() int {
	if f.BitDepth > 8 {
		return 2
	}
	return 1
}

// String describes the format, e.g. "h264 1920x1080 8-bit 4:2:0".
func (f VideoFormat) String() string {
	return fmt.Sprintf("%s %dx%d %d-bit %s", f.Codec, f.Width(), f.Height(), f.BitDepth, f.Chroma)
}

func formatOf(f *C.CUVIDEOFORMAT) VideoFormat {
	v := VideoFormat{
		Codec:      VideoCodec(f.codec),
		CodedWidth: int(f.coded_width), CodedHeight: int(f.coded_height),
		Left: int(f.display_area.left), Top: int(f.display_area.top),
		Right: int(f.display_area.right), Bottom: int(f.display_area.bottom),
		BitDepth:        8 + int(f.bit_depth_luma_minus8),
		Chroma:          ChromaFormat(f.chroma_format),
		MinSurfaces:     int(f.min_num_decode_surfaces),
		Progressive:     f.progressive_sequence != 0,
		FullRange:       f.video_format_bits>>C.VIGIL_FULL_RANGE_BIT&1 == 1,
		ColourPrimaries: int(f.color_primaries), Transfer: int(f.transfer_characteristics), Matrix: int(f.matrix_coefficients),
		FrameRateNum: int(f.frame_rate.numerator), FrameRateDen: int(f.frame_rate.denominator),
	}
	if v.Right <= v.Left || v.Right > v.CodedWidth {
		v.Left, v.Right = 0, v.CodedWidth
	}
	if v.Bottom <= v.Top || v.Bottom > v.CodedHeight {
		v.Top, v.Bottom = 0, v.CodedHeight
	}
	return v
}

// DecodeStatus is a picture's decode status: a cuvidDecodeStatus value
// (cuviddec.h), or DecodeCallFailed.
type DecodeStatus int

// Decode statuses. DecodeUnknown is also reported when the driver has no
// cuvidGetDecodeStatus (before Video Codec SDK 9.0).
const (
	DecodeUnknown    DecodeStatus = 0 // cuvidDecodeStatus_Invalid
	DecodeInProgress DecodeStatus = 1 // cuvidDecodeStatus_InProgress
	DecodeSuccess    DecodeStatus = 2 // cuvidDecodeStatus_Success
	DecodeError      DecodeStatus = 8 // cuvidDecodeStatus_Error: not concealed
	DecodeConcealed  DecodeStatus = 9 // cuvidDecodeStatus_Error_Concealed
	// DecodeCallFailed (vigil's own value): cuvidDecodePicture refused the
	// picture, so the surface holds no decoded picture.
	DecodeCallFailed DecodeStatus = -1
)

// String names the status as a metric label or log field would:
// "unknown", "in_progress", "success", "error", "concealed",
// "decode_call_failed".
func (s DecodeStatus) String() string {
	switch s {
	case DecodeUnknown:
		return "unknown"
	case DecodeInProgress:
		return "in_progress"
	case DecodeSuccess:
		return "success"
	case DecodeError:
		return "error"
	case DecodeConcealed:
		return "concealed"
	case DecodeCallFailed:
		return "decode_call_failed"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// VideoDecoderConfig configures NewVideoDecoder.
type VideoDecoderConfig struct {
	// Codec of the bitstream: CodecH264 or CodecHEVC.
	Codec VideoCodec
	// ExtraSurfaces are decode surfaces beyond the stream's minimum
	// (VideoFormat.MinSurfaces), up to 64 in all.
	ExtraSurfaces int
	// DisplayDelay is how many decoded pictures the parser holds before
	// handing the oldest to Output (ulMaxDisplayDelay): 0 gives each
	// picture as soon as the stream's reordering allows; more lets the
	// decoding of later pictures overlap the copy of earlier ones, at that
	// many frames of latency.
	DisplayDelay int
	// Stream is where pictures are post-processed (mapped) and copied out
	// (required).
	Stream *Stream
	// PollDecode, when positive, makes CopyTo sleep until the picture is
	// decoded, checking cuvidGetDecodeStatus at this interval (after a
	// first sleep of 3/4 of the recent mean wait), before it maps the
	// picture, instead of letting cuvidMapVideoFrame64 wait inside the
	// driver. Zero (or a driver without cuvidGetDecodeStatus): the map
	// waits. Rounded down to whole µs.
	PollDecode time.Duration
	// Output receives each decoded picture, in display order, during Parse,
	// Discontinuity and Flush. The picture is valid only during the call;
	// nothing stays mapped after it. An error is returned by that Parse
	// (the first one; later pictures of the same call are dropped).
	Output func(*DecodedPicture) error
}

// VideoDecoderStats counts a VideoDecoder's work since it was made.
type VideoDecoderStats struct {
	// Created and Reconfigured count cuvidCreateDecoder and
	// cuvidReconfigureDecoder calls that succeeded; Reused counts sequence
	// headers (a new parser's first, a repeated one) that needed neither.
	Created, Reconfigured, Reused int
	// Polled counts the pictures CopyTo found still being decoded and slept
	// for (VideoDecoderConfig.PollDecode); Polls the status checks that
	// found a picture in progress, each followed by a sleep.
	Polled, Polls uint64
}

// VideoDecoder is one stream's NVDEC session: the cuvid parser, which
// finds pictures and their parameters in an Annex B bitstream, and the
// decoder, made (or reconfigured, or made again) for each format the
// parser reports. It runs in its Context (the device's primary context),
// with no cuvidCtxLock, as FFmpeg's NVDEC hwaccel: sessions never wait for
// each other, not even while one makes its decoder. It is not safe for
// concurrent use. Close it when done.
type VideoDecoder struct {
	c     *Context
	cfg   VideoDecoderConfig
	s     *C.vigil_nvdec
	h     cgo.Handle
	ctx   uintptr // CUcontext
	geom  C.vigil_nv_geometry
	has   bool // a decoder exists (geom, format describe it)
	fmt   VideoFormat
	stats VideoDecoderStats
	// During a Parse: the first error from a callback, and a recovered
	// panic to raise again once out of C.
	err      error
	panicked any
	closed   bool
	// During an Output call: the picture index whose cuvidDecodePicture
	// failure was taken (failedIdx, -1 for none yet) and its answer.
	failedIdx int
	failedVal bool
}

// NewVideoDecoder makes a stream's NVDEC session (LoadNVDEC first). The
// parser is made at the first Parse and the decoder at the first sequence
// header. Errors: LoadNVDEC's, an unsupported codec, a missing Stream or
// Output, ErrClosed after Release, or an *Error.
func (c *Context) NewVideoDecoder(cfg VideoDecoderConfig) (*VideoDecoder, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if err := LoadNVDEC(); err != nil {
		return nil, err
	}
	if cfg.Codec != CodecH264 && cfg.Codec != CodecHEVC {
		return nil, fmt.Errorf("cuda: NewVideoDecoder: %s, want h264 or hevc", cfg.Codec)
	}
	if cfg.Output == nil {
		return nil, errors.New("cuda: NewVideoDecoder: no Output")
	}
	if _, err := cfg.Stream.handle(); err != nil {
		return nil, fmt.Errorf("cuda: NewVideoDecoder: %w", err)
	}
	d := &VideoDecoder{c: c, cfg: cfg, ctx: h}
	d.h = cgo.NewHandle(d)
	d.s = C.vigil_nv_new(C.uintptr_t(d.h), C.uintptr_t(h))
	if d.s == nil {
		d.h.Delete()
		return nil, errors.New("cuda: NewVideoDecoder: out of memory")
	}
	if cfg.PollDecode > 0 {
		d.s.poll_us = C.uint(max(cfg.PollDecode/time.Microsecond, 1))
	}
	return d, nil
}

// Pictures returns how many pictures the parser has handed to decoding
// (its decode callback) since the VideoDecoder was made, whether the
// decode then succeeded or not: a picture the parser drops (a slice header
// it cannot read, a picture before the stream's first keyframe) never
// gets there. 0 after Close.
func (d *VideoDecoder) Pictures() uint64 {
	if d.s == nil {
		return 0
	}
	return uint64(d.s.pictures)
}

// Format returns the format of the current decoder, and false before the
// first sequence header.
func (d *VideoDecoder) Format() (VideoFormat, bool) { return d.fmt, d.has }

// Stats returns the decoder's counts so far.
func (d *VideoDecoder) Stats() VideoDecoderStats {
	st := d.stats
	if d.s != nil {
		st.Polled, st.Polls = uint64(d.s.polled), uint64(d.s.polls)
	}
	return st
}

// maxSurfaces is VIGIL_MAX_SURFACES, the SDK's limit on decode surfaces.
const maxSurfaces = C.VIGIL_MAX_SURFACES

// Parse hands the parser one access unit (a whole picture, Annex B, as
// h264_mp4toannexb or hevc_mp4toannexb give it; CUVID_PKT_ENDOFPICTURE)
// or, with endOfPicture false, any part of a bitstream (codec headers).
// ts is the access unit's presentation timestamp. The parser does not hand
// each picture its own packet's ts: it hands out the timestamps it was
// given in increasing order, one per picture in display order (seen on the
// H200, driver 580: decode-order serial numbers came back sorted, so that
// a B-frame got its successor's). With PTS, that is each picture's own
// PTS, for a stream whose PTS follow display order. Output is called for
// every picture that becomes ready. Errors: ErrClosed, the first error of
// Output, a format the GPU cannot decode or a decoder the driver does not
// make (from the sequence header), or an *Error from cuvidParseVideoData
// (a bitstream the parser rejects).
func (d *VideoDecoder) Parse(data []byte, ts int64, endOfPicture bool) error {
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	return d.ParseC(p, len(data), ts, endOfPicture)
}

// ParseC is Parse for n bytes at data in C memory (an FFmpeg packet's
// buffer), which must stay valid during the call: no copy into Go memory.
func (d *VideoDecoder) ParseC(data unsafe.Pointer, n int, ts int64, endOfPicture bool) error {
	flags := C.uint(C.VIGIL_PKT_TIMESTAMP)
	if endOfPicture {
		flags |= C.VIGIL_PKT_ENDOFPICTURE
	}
	return d.parse(data, n, ts, flags)
}

// Discontinuity tells the parser that the bitstream jumps (a file rewound
// to its start): an empty packet with CUVID_PKT_DISCONTINUITY. Pictures
// still held are handed to Output. The flag must never travel on a packet
// that carries data: on the packet of an IDR picture with its parameter
// sets it made NVDEC decode every later picture wrongly while reporting
// success (measured with the probe in ../shared/tools/nvdec-direct).
func (d *VideoDecoder) Discontinuity() error {
	return d.parse(nil, 0, 0, C.VIGIL_PKT_DISCONTINUITY)
}

// Flush ends the bitstream (CUVID_PKT_ENDOFSTREAM): every picture the
// parser still holds is handed to Output. The parser is then destroyed;
// the decoder is kept, so that the next Parse (a reconnect, a new file)
// makes a new parser and reuses the decoder when the format is the same.
func (d *VideoDecoder) Flush() error {
	if d.closed {
		return closedError("video decoder")
	}
	if d.s.parser == nil {
		return nil
	}
	err := d.parse(nil, 0, 0, C.VIGIL_PKT_ENDOFSTREAM)
	if r := C.vigil_nv_parser_destroy(d.s); r != 0 && err == nil {
		err = check("cuvidDestroyVideoParser", r)
	}
	return err
}

func (d *VideoDecoder) parse(data unsafe.Pointer, n int, ts int64, flags C.uint) error {
	if d.closed {
		return closedError("video decoder")
	}
	if d.s.parser == nil {
		if flags&C.VIGIL_PKT_ENDOFSTREAM != 0 {
			return nil
		}
		// The sequence callback's answer overrides this; until then the
		// parser assumes the current decoder's count, or one.
		surfaces := C.uint(1)
		if d.has {
			surfaces = d.geom.surfaces
		}
		if err := check("cuvidCreateVideoParser", C.vigil_nv_parser_create(d.s, C.int(d.cfg.Codec), surfaces, C.uint(max(d.cfg.DisplayDelay, 0)))); err != nil {
			return err
		}
	}
	d.err = nil
	r := C.vigil_nv_parse(d.s, (*C.uchar)(data), C.size_t(n), C.longlong(ts), flags)
	if v := d.panicked; v != nil {
		d.panicked = nil
		panic(v)
	}
	if err := d.err; err != nil {
		d.err = nil
		return err
	}
	return check("cuvidParseVideoData", r)
}

// Close destroys the parser and the decoder and frees the session. It is
// idempotent and nil-safe; it returns an *Error if the driver refuses.
func (d *VideoDecoder) Close() error {
	if d == nil || d.closed {
		return nil
	}
	d.closed = true
	err := check("cuvidDestroyVideoParser", C.vigil_nv_parser_destroy(d.s))
	if e := check("cuvidDestroyDecoder", C.vigil_nv_decoder_destroy(d.s)); err == nil {
		err = e
	}
	C.vigil_nv_free(d.s)
	d.s = nil
	d.h.Delete()
	return err
}

// geometry is the decoder for format f with n decode surfaces: the display
// area cropped, at its own size (no scaling), NV12 or P016.
func geometry(f VideoFormat, n int) C.vigil_nv_geometry {
	g := C.vigil_nv_geometry{
		codec: C.int(f.Codec), chroma_format: C.int(f.Chroma), bit_depth_minus8: C.int(f.BitDepth - 8),
		surface_format: C.VIGIL_SURFACE_NV12,
		coded_width:    C.uint(f.CodedWidth), coded_height: C.uint(f.CodedHeight),
		max_width: C.uint(f.CodedWidth), max_height: C.uint(f.CodedHeight),
		left: C.int(f.Left), top: C.int(f.Top), right: C.int(f.Right), bottom: C.int(f.Bottom),
		// The SDK wants even target sizes; an odd display size keeps one
		// more column or row, which Output's copy leaves out.
		target_width: C.uint((f.Width() + 1) &^ 1), target_height: C.uint((f.Height() + 1) &^ 1),
		surfaces: C.uint(n),
	}
	if f.BitDepth > 8 {
		g.surface_format = C.VIGIL_SURFACE_P016
	}
	return g
}

// sequence handles a sequence header of format f and returns the number
// of decode surfaces for the parser: the current decoder's when it can
// take f as it is or reconfigured, else a new decoder's.
func (d *VideoDecoder) sequence(f VideoFormat) (int, error) {
	if f.Chroma != Chroma420 {
		return 0, fmt.Errorf("cuda: NVDEC: %s: vigil decodes 4:2:0 pictures only", f)
	}
	if f.Width() <= 0 || f.Height() <= 0 {
		return 0, fmt.Errorf("cuda: NVDEC: %s: empty picture", f)
	}
	n := min(f.MinSurfaces+max(d.cfg.ExtraSurfaces, 0), maxSurfaces)
	g := geometry(f, n)
	if d.has {
		old := d.geom
		sameKind := old.codec == g.codec && old.chroma_format == g.chroma_format && old.bit_depth_minus8 == g.bit_depth_minus8
		if sameKind && old.coded_width == g.coded_width && old.coded_height == g.coded_height &&
			old.left == g.left && old.top == g.top && old.right == g.right && old.bottom == g.bottom && n <= int(old.surfaces) {
			d.stats.Reused++
			return int(old.surfaces), nil
		}
		if sameKind && g.coded_width <= old.max_width && g.coded_height <= old.max_height && n <= int(old.surfaces) &&
			C.vigil_nv_has_reconfigure() != 0 {
			g.surfaces, g.max_width, g.max_height = old.surfaces, old.max_width, old.max_height
			if err := check("cuvidReconfigureDecoder", C.vigil_nv_decoder_reconfigure(d.s, &g)); err == nil {
				d.geom, d.fmt = g, f
				d.stats.Reconfigured++
				return int(g.surfaces), nil
			}
			// Not reconfigurable after all: make a new decoder.
		}
		if err := check("cuvidDestroyDecoder", C.vigil_nv_decoder_destroy(d.s)); err != nil {
			d.has = false
			return 0, err
		}
		d.has = false
	}
	if err := d.checkCaps(f); err != nil {
		return 0, err
	}
	if err := check("cuvidCreateDecoder", C.vigil_nv_decoder_create(d.s, &g)); err != nil {
		return 0, fmt.Errorf("%w (for %s)", err, f)
	}
	d.geom, d.fmt, d.has = g, f, true
	d.stats.Created++
	return n, nil
}

// checkCaps asks the driver whether it decodes f (cuvidGetDecoderCaps),
// so that an unsupported stream fails with a reason rather than a bare
// cuvidCreateDecoder error. Drivers without the call are not asked.
func (d *VideoDecoder) checkCaps(f VideoFormat) error {
	if C.vigil_nv_has_caps() == 0 {
		return nil
	}
	var caps C.CUVIDDECODECAPS
	if err := check("cuvidGetDecoderCaps", C.vigil_nv_caps(C.uintptr_t(d.ctx), C.int(f.Codec), C.int(f.Chroma), C.int(f.BitDepth-8), &caps)); err != nil {
		return err
	}
	switch {
	case caps.bIsSupported == 0:
		return fmt.Errorf("cuda: NVDEC on this GPU cannot decode %s", f)
	case f.CodedWidth > int(caps.nMaxWidth) || f.CodedHeight > int(caps.nMaxHeight) ||
		f.CodedWidth < int(caps.nMinWidth) || f.CodedHeight < int(caps.nMinHeight):
		return fmt.Errorf("cuda: NVDEC on this GPU cannot decode %s: coded size %dx%d outside %dx%d to %dx%d",
			f, f.CodedWidth, f.CodedHeight, caps.nMinWidth, caps.nMinHeight, caps.nMaxWidth, caps.nMaxHeight)
	case caps.nMaxMBCount > 0 && (f.CodedWidth/16)*(f.CodedHeight/16) > int(caps.nMaxMBCount):
		return fmt.Errorf("cuda: NVDEC on this GPU cannot decode %s: more than %d macroblocks", f, caps.nMaxMBCount)
	}
	return nil
}

// DecodedPicture is a picture ready for display, handed to
// VideoDecoderConfig.Output; it is valid only during that call.
type DecodedPicture struct {
	d      *VideoDecoder
	info   *C.CUVIDPARSERDISPINFO
	copied bool // CopyTo succeeded; status is the decode status it read
	status DecodeStatus
	// Timestamp is the next of the timestamps given to Parse, in
	// increasing order (see Parse): the picture's PTS.
	Timestamp int64
	// Format is the format of the sequence the picture belongs to.
	Format VideoFormat
}

// Status returns the picture's decode status (cuvidGetDecodeStatus):
// DecodeCallFailed when cuvidDecodePicture refused it, DecodeUnknown when
// the driver cannot say. Ask after CopyTo, which waits for the decode and
// reads the status in the same C call: before it, a picture just decoded
// may still be DecodeInProgress. It returns an *Error if the query fails.
func (p *DecodedPicture) Status() (DecodeStatus, error) {
	if p.info == nil {
		return DecodeUnknown, closedError("decoded picture")
	}
	if p.d.failed(int(p.info.picture_index)) {
		return DecodeCallFailed, nil
	}
	if p.copied {
		return p.status, nil
	}
	if C.vigil_nv_has_status() == 0 {
		return DecodeUnknown, nil
	}
	var st C.int
	if err := check("cuvidGetDecodeStatus", C.vigil_nv_status(p.d.s, p.info.picture_index, &st)); err != nil {
		return DecodeUnknown, err
	}
	return DecodeStatus(st), nil
}

// failed reports whether cuvidDecodePicture refused picture idx. The
// answer stays the same for the rest of the Output call.
func (d *VideoDecoder) failed(idx int) bool {
	if d.failedIdx == idx {
		return d.failedVal
	}
	d.failedIdx, d.failedVal = idx, C.vigil_nv_take_failed(d.s, C.int(idx)) != 0
	return d.failedVal
}

// CopyTo copies the picture into device memory at dst: Height rows of
// luma, then (Height+1)/2 rows of interleaved Cb,Cr, each pitch bytes
// apart and Width×BytesPerSample bytes long (rounded up to even), as NV12
// or, for BitDepth > 8, P016. It maps the picture on the decoder's stream
// (cuvidMapVideoFrame64), copies (cuMemcpy2DAsync), waits for the stream
// and unmaps, in one C call: the pixels are complete and nothing is mapped
// when it returns. pitch must be at least the row length. It returns an
// *Error naming the step that failed.
func (p *DecodedPicture) CopyTo(dst DevicePtr, pitch int) error {
	if p.info == nil {
		return closedError("decoded picture")
	}
	d := p.d
	if p.d.failed(int(p.info.picture_index)) {
		return fmt.Errorf("cuda: NVDEC picture %d: cuvidDecodePicture failed for it", int(p.info.picture_index))
	}
	st, err := d.cfg.Stream.handle()
	if err != nil {
		return err
	}
	row := ((p.Format.Width() + 1) &^ 1) * p.Format.BytesPerSample()
	if pitch < row {
		return fmt.Errorf("cuda: CopyTo: pitch %d < row of %d bytes", pitch, row)
	}
	h := p.Format.Height()
	var stage, status C.int
	r := C.vigil_nv_copy(d.s, p.info, C.uintptr_t(st), d.geom.target_height, C.ulonglong(dst), C.size_t(pitch),
		C.size_t(row), C.uint(h), C.uint((h+1)/2), &stage, &status)
	if err := check([...]string{"cuvidMapVideoFrame64", "cuvidMapVideoFrame64", "cuMemcpy2DAsync", "cuStreamSynchronize", "cuvidUnmapVideoFrame64"}[min(int(stage), 4)], r); err != nil {
		return err
	}
	p.copied = true
	p.status = DecodeUnknown
	if status >= 0 {
		p.status = DecodeStatus(status)
	}
	return nil
}

// The parser's callbacks (nvdec.c calls them from cuvidParseVideoData).
// A panic is recovered here, since it cannot unwind through the parser,
// and raised again by parse once out of C.

//export vigilNVDECSequence
func vigilNVDECSequence(h C.uintptr_t, f *C.CUVIDEOFORMAT) (ret C.int) {
	d := cgo.Handle(h).Value().(*VideoDecoder)
	defer func() {
		if v := recover(); v != nil {
			d.panicked, ret = v, 0
		}
	}()
	if d.err != nil {
		return 0
	}
	n, err := d.sequence(formatOf(f))
	if err != nil {
		d.err = err
		return 0
	}
	return C.int(n)
}

//export vigilNVDECDisplay
func vigilNVDECDisplay(h C.uintptr_t, info *C.CUVIDPARSERDISPINFO) C.int {
	d := cgo.Handle(h).Value().(*VideoDecoder)
	defer func() {
		if v := recover(); v != nil {
			d.panicked = v
		}
	}()
	if d.err != nil || !d.has || d.panicked != nil {
		return 1
	}
	d.failedIdx = -1
	p := &DecodedPicture{d: d, info: info, Timestamp: int64(info.timestamp), Format: d.fmt}
	defer func() { p.info = nil }()
	if err := d.cfg.Output(p); err != nil {
		d.err = err
	}
	return 1
}
