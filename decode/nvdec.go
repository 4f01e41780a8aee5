package decode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/asticode/go-astiav"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/pipeline"
)

// NVDECMode chooses how NVDEC decodes when decode.hwaccel asks for it
// (decode.nvdec in the config).
type NVDECMode string

// The NVDEC modes.
const (
	// NVDECDirect drives NVIDIA's decoder directly (internal/cuda's
	// VideoDecoder over libnvcuvid.so.1) for H.264 and HEVC: FFmpeg
	// demuxes, its h264_mp4toannexb or hevc_mp4toannexb bitstream filter
	// gives the parser Annex B access units, and each decoded picture is
	// copied into the stream's pool of device frames. Other codecs take
	// FFmpeg's cuda hwaccel (NVDECFFmpeg).
	NVDECDirect NVDECMode = "direct"
	// NVDECFFmpeg decodes through FFmpeg 5.1's cuda hwaccel, as vigil did
	// before NVDECDirect.
	NVDECFFmpeg NVDECMode = "ffmpeg"
)

// DefaultNVDEC is the mode of an empty Options.NVDEC: direct. Decode-only
// on an H200 (docs/performance.md, "Direct NVDEC"), direct gave 23 % more
// frames per second than FFmpeg's hwaccel at 7 sessions and the same at 14
// and 28 (the engines' ceiling, reached by both); end to end with
// YOLOX-Nano it carried 96 streams as FFmpeg's hwaccel did, with the same
// P99 and cores, once its late start was fixed ("Direct NVDEC's late start,
// found and fixed").
const DefaultNVDEC = NVDECDirect

// ParseNVDECMode checks a decode.nvdec value; "" means DefaultNVDEC.
func ParseNVDECMode(s string) (NVDECMode, error) {
	switch m := NVDECMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return DefaultNVDEC, nil
	case NVDECDirect, NVDECFFmpeg:
		return m, nil
	}
	return "", fmt.Errorf("decode.nvdec %q: want direct or ffmpeg", s)
}

// nvdecCodec is the NVDEC codec for FFmpeg's codec id, and the bitstream
// filter that turns its packets into Annex B; false for codecs vigil does
// not decode with NVDEC directly.
func nvdecCodec(id astiav.CodecID) (cuda.VideoCodec, string, bool) {
	switch id {
	case astiav.CodecIDH264:
		return cuda.CodecH264, "h264_mp4toannexb", true
	case astiav.CodecIDHevc:
		return cuda.CodecHEVC, "hevc_mp4toannexb", true
	}
	return 0, "", false
}

// Display delays of the NVDEC parser (cuda.VideoDecoderConfig): live and
// real-time streams get each picture as soon as the stream's reordering
// allows (a frame of delay is 33 ms at 30 fps, taken from the latency
// budget); a file read as fast as it decodes lets the decoding of later
// pictures overlap the copy of earlier ones. The probe in
// ../shared/tools/nvdec-direct measured delay 4 at 8 % more frames per
// second than delay 0 for one session, and the same from 14 sessions on.
const (
	nvdecDelayLive = 0
	nvdecDelayFile = 4
)

// nvdecExtraSurfaces are decode surfaces beyond the stream's minimum, so
// that decoding can run ahead of display (FFmpeg's NVDEC hwaccel adds a
// few too).
const nvdecExtraSurfaces = 2

// nvSession is a Source's NVDEC session: the decoder (internal/cuda's
// VideoDecoder, kept across Runs so that a reconnect reuses it when the
// format is the same), the stream its copies run on and the pool of device
// frames they go to. One goroutine uses it at a time (the Source's Run).
type nvSession struct {
	ctx    *cuda.Context
	stream *cuda.Stream
	dec    *cuda.VideoDecoder
	pool   *devicePool
	codec  astiav.CodecID
	device string
	log    *zap.Logger

	cur *decoder // the open feeding the session; its frames are emitted there
	// Per packet handed to the parser, by the timestamp given with it (its
	// PTS, else DTS, else one more than the last): the packet's own
	// timestamps and flags, which the picture of that PTS gets back (the
	// parser hands out timestamps in increasing order, one per picture in
	// display order: cuda.VideoDecoder.Parse).
	meta   map[int64]pktMeta
	lastTS int64
	// dts is the DTS of the packet being parsed (NoPtsValue while
	// flushing): the packet DTS a picture that leaves the parser then
	// carries, as FFmpeg's AVFrame.pkt_dts does.
	dts int64
	// The format of the last picture, for logging format changes.
	last cuda.VideoFormat
	// Faults logged so far (the first few of each kind are).
	logged map[string]int
	// unshare releases cuda.Shared while a parse holds it (nil outside
	// parse calls); see share.
	unshare func()
	// counted: the session is in liveNVSessions.
	counted bool
}

// share takes cuda.Shared for the session's CUDA work: a parse call's
// decoding (cuvidCreateDecoder, cuvidDecodePicture in the parser's
// callbacks), its copies and allocations, so that an engine capturing a
// CUDA graph in global mode (infer/gpu's warm-up, under cuda.Exclusive)
// never sees them. The lock is dropped while output waits for a free pool
// frame (frames come back only after engine runs, which a waiting
// Exclusive holds back).
func (s *nvSession) share() { s.unshare = cuda.Shared() }

// unshared releases what share took.
func (s *nvSession) unshared() {
	if s.unshare != nil {
		s.unshare()
		s.unshare = nil
	}
}

// pktMeta is what a picture needs of the packet that carried it.
type pktMeta struct {
	pts, dts     int64
	arrival      time.Time
	key, corrupt bool
}

// nvdecOrdinal parses Options.HWDevice ("" is 0).
func nvdecOrdinal(device string) (int, error) {
	if device == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(device)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("CUDA device %q: want a GPU ordinal (0, 1, ...)", device)
	}
	return n, nil
}

// newNVSession opens an NVDEC session for codec on GPU device, with a pool
// of surfaces device frames and the parser's display delay. Errors: no
// driver or no libnvcuvid.so.1 (wrapping cuda.ErrNoDriver or
// cuda.ErrNoNVDEC), a bad device, CUDA failures.
func newNVSession(codec astiav.CodecID, device string, surfaces, delay int, poll time.Duration, log *zap.Logger) (*nvSession, error) {
	vc, _, ok := nvdecCodec(codec)
	if !ok {
		return nil, fmt.Errorf("no direct NVDEC for %s", codec)
	}
	if err := cuda.LoadNVDEC(); err != nil {
		return nil, err
	}
	ord, err := nvdecOrdinal(device)
	if err != nil {
		return nil, err
	}
	ctx, err := cuda.Primary(ord)
	if err != nil {
		return nil, fmt.Errorf("opening CUDA device %d for NVDEC: %w", ord, err)
	}
	s := &nvSession{ctx: ctx, codec: codec, device: device, log: log, dts: astiav.NoPtsValue, logged: map[string]int{}}
	unlock := cuda.Shared()
	if s.stream, err = ctx.NewStream(); err != nil {
		unlock()
		_ = ctx.Release()
		return nil, fmt.Errorf("CUDA stream for NVDEC: %w", err)
	}
	if s.pool, err = newDevicePool(ord, surfaces, log); err == nil {
		s.dec, err = ctx.NewVideoDecoder(cuda.VideoDecoderConfig{
			Codec: vc, ExtraSurfaces: nvdecExtraSurfaces, DisplayDelay: delay, Stream: s.stream, Output: s.output, PollDecode: poll,
		})
	}
	unlock()
	if err != nil {
		s.close()
		return nil, err
	}
	liveNVSessions.Add(1)
	s.counted = true
	return s, nil
}

// liveNVSessions counts the direct NVDEC sessions open in the process.
var liveNVSessions atomic.Int64

// DirectNVDECSessions is the number of direct NVDEC sessions (decode.nvdec
// direct) open in the process now, on any device. An engine that would
// capture CUDA graphs beside them opens without graphs
// (internal/engines): on the H200 on 2026-12-01 a capture while four
// sessions decoded failed in cuDNN and left their copies failing with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// (docs/h200-runs/2026-12-01-acceptance/gpu-tests.txt).
func DirectNVDECSessions() int64 { return liveNVSessions.Load() }

// close frees the session; frames still out keep their pool until they
// are released. It is idempotent.
func (s *nvSession) close() {
	if s == nil || s.ctx == nil {
		return
	}
	if s.counted {
		liveNVSessions.Add(-1)
		s.counted = false
	}
	unlock := cuda.Shared()
	_ = s.dec.Close()
	_ = s.stream.Destroy()
	s.pool.close()
	unlock()
	_ = s.ctx.Release()
	s.ctx = nil
}

// parse hands the parser one Annex B access unit, n bytes at data (an
// FFmpeg packet's buffer), remembering the packet's metadata m for the
// picture that gets its timestamp back. dropped reports an access unit
// with a picture that the parser did not hand to decoding (a damaged
// slice header; a picture before the stream's first keyframe): lost,
// for the caller to count.
func (s *nvSession) parse(data unsafe.Pointer, n int, m pktMeta) (dropped bool, err error) {
	ts := m.pts
	if ts == astiav.NoPtsValue {
		ts = m.dts
	}
	if ts == astiav.NoPtsValue {
		ts = s.lastTS + 1
	}
	s.lastTS = ts
	if s.meta == nil || len(s.meta) >= 256 {
		// Entries leave as their pictures come out; a stream whose packets
		// never give pictures would otherwise grow the map for ever.
		s.meta = map[int64]pktMeta{}
	}
	s.meta[ts] = m
	s.dts = m.dts
	defer func() { s.dts = astiav.NoPtsValue }()
	s.share()
	defer s.unshared()
	before := s.dec.Pictures()
	if err := s.dec.ParseC(data, n, ts, true); err != nil {
		return false, err
	}
	// An access unit is parsed with CUVID_PKT_ENDOFPICTURE, so its picture
	// reaches the decode callback during this call, or never.
	return s.dec.Pictures() == before && hasPicture(s.codec, unsafe.Slice((*byte)(data), n)), nil
}

// errParserDropped is the error logged for a picture the parser dropped.
var errParserDropped = errors.New("the NVDEC parser dropped an access unit's picture without decoding it")

// hasPicture reports whether the Annex B access unit b holds a coded
// picture: a VCL NAL unit (H.264 nal_unit_type 1 to 5, ITU-T H.264
// Table 7-1; HEVC 0 to 31, ITU-T H.265 Table 7-1).
func hasPicture(codec astiav.CodecID, b []byte) bool {
	for i := 0; i+3 < len(b); i++ {
		if b[i] != 0 || b[i+1] != 0 || b[i+2] != 1 {
			continue
		}
		h := b[i+3]
		switch codec {
		case astiav.CodecIDH264:
			if t := h & 0x1f; t >= 1 && t <= 5 {
				return true
			}
		case astiav.CodecIDHevc:
			if t := (h >> 1) & 0x3f; t <= 31 {
				return true
			}
		}
		i += 2
	}
	return false
}

// header hands the parser codec headers outside any picture (an Annex B
// extradata: SPS/PPS, VPS/SPS/PPS).
func (s *nvSession) header(data []byte) error {
	s.share()
	defer s.unshared()
	return s.dec.Parse(data, 0, false)
}

// outputError is an error of the session's Output that ends the open: the
// context ended, or CUDA failed on a copy.
type outputError struct{ err error }

func (e *outputError) Error() string { return e.err.Error() }
func (e *outputError) Unwrap() error { return e.err }

// output is the VideoDecoder's Output: it copies the picture into a frame
// of the pool and emits it through the current open, with its packet's
// timestamps, arrival time and flags. A picture NVDEC failed to decode is
// counted as a decode error and not emitted; one it concealed errors in is
// emitted flagged corrupt.
func (s *nvSession) output(p *cuda.DecodedPicture) error {
	d := s.cur
	m, ok := s.meta[p.Timestamp]
	delete(s.meta, p.Timestamp)
	if !ok {
		m = pktMeta{pts: astiav.NoPtsValue, dts: astiav.NoPtsValue, arrival: time.Now()}
	}
	f := p.Format
	if f != s.last {
		if s.last.Codec != 0 {
			s.log.Info("NVDEC: the stream's format changed", zap.Stringer("from", s.last), zap.Stringer("to", f),
				zap.Int("decoders_made", s.dec.Stats().Created), zap.Int("reconfigured", s.dec.Stats().Reconfigured))
		}
		s.last = f
	}
	w, h, bps := f.Width(), f.Height(), f.BytesPerSample()
	pitch := (((w+1)&^1)*bps + nvdecPitchAlign - 1) &^ (nvdecPitchAlign - 1)
	if !s.pool.tryReserve() {
		held := s.unshare != nil
		s.unshared() // see share
		err := s.pool.reserve(d.ctx)
		if held {
			s.share()
		}
		if err != nil {
			return &outputError{err}
		}
	}
	buf, err := s.pool.take(pitch * (h + (h+1)/2))
	if err != nil {
		return &outputError{err}
	}
	if err := p.CopyTo(buf.Ptr(), pitch); err != nil {
		s.pool.putShared(buf)
		if st, _ := p.Status(); st == cuda.DecodeCallFailed {
			s.fault(d, ErrNVDECRefused, err)
			return nil
		}
		if isMapError(err) {
			s.fault(d, ErrNVDECMap, err)
			return nil
		}
		return &outputError{fmt.Errorf("copying an NVDEC picture: %w", err)}
	}
	st, err := p.Status()
	if err != nil {
		// Not knowing is no reason to lose the picture.
		s.note("NVDEC could not say how a picture decoded (published as decoded)", "status_unavailable", err)
		st = cuda.DecodeUnknown
	}
	if st == cuda.DecodeError {
		s.pool.putShared(buf)
		s.fault(d, ErrNVDECStatus, nil)
		return nil
	}
	corrupt := m.corrupt || st == cuda.DecodeConcealed
	if st == cuda.DecodeConcealed {
		s.note("NVDEC concealed errors in a picture (published with corrupt=true)", st.String(), nil)
	}
	pic := &Picture{nv: &nvFrame{buf: buf, pool: s.pool, w: w, h: h, pitch: pitch, bps: bps, col: colourOfFormat(f, d.cs)}}
	d.deliver(pic, m.pts, s.dts, m.key, corrupt, m.arrival)
	return nil
}

// isMapError reports whether err is cuvidMapVideoFrame64's: the picture
// could not be had (a decode that failed), not a broken device.
func isMapError(err error) bool {
	var e *cuda.Error
	return errors.As(err, &e) && e.Op == "cuvidMapVideoFrame64"
}

// fault counts a picture NVDEC failed on as a decode error for reason r
// (its picture is lost), logging the first few of each reason.
func (s *nvSession) fault(d *decoder, r DecodeErrorReason, err error) {
	d.s.faults.decodeError(r)
	d.decodeErrs++
	s.note("NVDEC failed to decode a picture (not published)", string(r), err)
}

// note logs msg the first 3 times for each reason, as decode errors are.
func (s *nvSession) note(msg, reason string, err error) {
	if s.logged[reason]++; s.logged[reason] <= 3 {
		fields := []zap.Field{zap.String("reason", reason)}
		if err != nil {
			fields = append(fields, zap.Error(err))
		}
		s.log.Warn(msg, fields...)
	}
}

// nvdecPitchAlign is the byte alignment of a pool frame's rows: 128, a
// multiple of the GPU's memory transaction size, so that every row of a
// frame starts aligned for the preprocessing kernel.
const nvdecPitchAlign = 128

// colourOfFormat is the Colour of pictures of format f, by colourOf's
// rules: the matrix the bitstream's VUI names, else the one the codec
// parameters name (cs), else MatrixFor's; full range when the VUI says so.
func colourOfFormat(f cuda.VideoFormat, cs astiav.ColorSpace) Colour {
	var c Colour
	// ITU-T H.273's matrix_coefficients code points are FFmpeg's
	// AVColorSpace values.
	if c.Matrix, c.Signalled = signalledMatrix(astiav.ColorSpace(f.Matrix)); !c.Signalled {
		c.Matrix, c.Signalled = signalledMatrix(cs)
	}
	if !c.Signalled {
		c.Matrix = MatrixFor(f.Width(), f.Height())
	}
	c.FullRange = f.FullRange
	return c
}

// nvFrame is a picture NVDEC decoded directly, in a frame of its stream's
// pool: Height rows of luma, then (Height+1)/2 rows of interleaved Cb,Cr,
// pitch bytes apart; 8-bit (NV12) or, with bps 2, 16-bit samples holding
// the value in their high bits (P016).
type nvFrame struct {
	buf   *cuda.DeviceBuffer
	pool  *devicePool
	w, h  int
	pitch int
	bps   int
	col   Colour
}

// release gives the frame back to its pool.
func (f *nvFrame) release() { f.pool.put(f.buf) }

// copyPicture copies the frame out of device memory (one synchronous
// cuMemcpyDtoH of its NV12 or P016 buffer: 3.1 MB at 1080p) and into a
// pipeline.Picture (semiPlanarPicture). It runs only for a watched frame
// (pipeline.Tap), on the stream's worker, before the frame is released.
// Errors wrap pipeline.ErrNoPicture.
func (f *nvFrame) copyPicture() (*pipeline.Picture, error) {
	host := make([]byte, f.pitch*(f.h+(f.h+1)/2))
	if err := f.pool.ctx.CopyDtoH(host, f.buf.Ptr()); err != nil {
		return nil, fmt.Errorf("%w: copying the NVDEC frame to the host: %v", pipeline.ErrNoPicture, err)
	}
	pic := semiPlanarPicture(host, host[f.pitch*f.h:], f.pitch, f.pitch, f.w, f.h, f.bps)
	pic.FullRange = f.col.FullRange
	return pic, nil
}

// devicePool is one NVDEC session's frames in device memory: buffers of
// one size (the current picture format's), reused once released, at most
// max out at a time (decode.hw_surfaces): the decoder waits for one to be
// released beyond that, as FFmpeg's NVDEC path does (hwFrames). It holds a
// reference to the primary context until it is closed and the last frame
// out is back.
type devicePool struct {
	ctx *cuda.Context
	sem chan struct{} // one token per frame out
	log *zap.Logger

	mu     sync.Mutex
	free   []*cuda.DeviceBuffer
	size   int // bytes per buffer now
	out    int
	closed bool
}

func newDevicePool(ordinal, n int, log *zap.Logger) (*devicePool, error) {
	ctx, err := cuda.Primary(ordinal)
	if err != nil {
		return nil, err
	}
	return &devicePool{ctx: ctx, sem: make(chan struct{}, max(n, 1)), log: log}, nil
}

// get returns a buffer of size bytes, waiting while max frames are out.
// Errors: ctx ending, or cuMemAlloc's.
func (p *devicePool) get(ctx context.Context, size int) (*cuda.DeviceBuffer, error) {
	if !p.tryReserve() {
		if err := p.reserve(ctx); err != nil {
			return nil, err
		}
	}
	return p.take(size)
}

// tryReserve takes a frame's token if one is free at once.
func (p *devicePool) tryReserve() bool {
	select {
	case p.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

// reserve waits for a frame's token, warning once a second. Errors: ctx
// ending.
func (p *devicePool) reserve(ctx context.Context) error {
	select {
	case p.sem <- struct{}{}:
	default:
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case p.sem <- struct{}{}:
		case <-t.C:
			p.log.Warn("NVDEC frames all held downstream: decoding waits", zap.Int("decode.hw_surfaces", cap(p.sem)))
			select {
			case p.sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// take returns a buffer of size bytes for a reserved token (given back
// with the buffer by put, or at once when allocating fails). Errors:
// cuMemAlloc's.
func (p *devicePool) take(size int) (*cuda.DeviceBuffer, error) {
	p.mu.Lock()
	if size != p.size {
		for _, b := range p.free {
			_ = b.Free()
		}
		p.free, p.size = p.free[:0], size
	}
	var b *cuda.DeviceBuffer
	if n := len(p.free); n > 0 {
		b, p.free = p.free[n-1], p.free[:n-1]
	}
	p.out++
	p.mu.Unlock()
	if b != nil {
		return b, nil
	}
	b, err := p.ctx.Alloc(size)
	if err != nil {
		p.putShared(nil)
		return nil, fmt.Errorf("NVDEC frame of %d bytes: %w", size, err)
	}
	return b, nil
}

// put gives back a buffer from get (nil: only the token), freeing it
// when it is of an old size or the pool is closed, under cuda.Shared.
func (p *devicePool) put(b *cuda.DeviceBuffer) { p.give(b, false) }

// putShared is put for a caller that holds cuda.Shared (RWMutex read
// locks must not nest).
func (p *devicePool) putShared(b *cuda.DeviceBuffer) { p.give(b, true) }

func (p *devicePool) give(b *cuda.DeviceBuffer, shared bool) {
	var drop *cuda.DeviceBuffer
	p.mu.Lock()
	if b != nil {
		if p.closed || b.Len() != p.size || len(p.free) >= cap(p.sem) {
			drop = b
		} else {
			p.free = append(p.free, b)
		}
	}
	p.out--
	last := p.closed && p.out == 0
	p.mu.Unlock()
	// Freed outside p.mu: waiting for cuda.Shared while holding it could
	// deadlock with a decoder that holds Shared and wants p.mu.
	if drop != nil {
		if !shared {
			defer cuda.Shared()()
		}
		_ = drop.Free()
	}
	<-p.sem
	if last {
		_ = p.ctx.Release()
	}
}

// close frees the idle buffers; those out are freed as they come back,
// and the context is released with the last. It is idempotent.
func (p *devicePool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for _, b := range p.free {
		_ = b.Free()
	}
	p.free = nil
	last := p.out == 0
	p.mu.Unlock()
	if last {
		_ = p.ctx.Release()
	}
}

// openDirect readies direct NVDEC for an open of stream st (codec
// parameters cp; bsfName its Annex B filter): the Source's session,
// reused when the codec and device are the same (a reconnect), else made,
// and a bitstream filter for this open. Errors: newNVSession's, or the
// filter's.
func (s *Source) openDirect(cp *astiav.CodecParameters, st *astiav.Stream, bsfName string) (*astiav.BitStreamFilterContext, error) {
	h := s.nv
	if h.s != nil && (h.s.codec != cp.CodecID() || h.s.device != s.o.HWDevice) {
		h.close()
	}
	if h.s == nil {
		surfaces := s.o.HWSurfaces
		if surfaces <= 0 {
			surfaces = 8
		}
		delay := nvdecDelayFile
		if s.o.Realtime || s.kind != KindFile {
			delay = nvdecDelayLive
		}
		sess, err := newNVSession(cp.CodecID(), s.o.HWDevice, surfaces, delay, s.o.NVDECPoll, s.o.Logger)
		if err != nil {
			return nil, err
		}
		h.s = sess
	}
	return newAnnexB(bsfName, cp, st.TimeBase())
}

// newAnnexB makes the bitstream filter name (h264_mp4toannexb,
// hevc_mp4toannexb) for a stream of parameters cp and time base tb: it
// turns length-prefixed packets (MP4, MKV) into Annex B access units and
// puts the parameter sets from the extradata in front of each keyframe
// that lacks them; Annex B input (MPEG-TS, RTSP, raw files) passes
// unchanged. Errors: FFmpeg's (no such filter, a malformed avcC/hvcC).
func newAnnexB(name string, cp *astiav.CodecParameters, tb astiav.Rational) (*astiav.BitStreamFilterContext, error) {
	f := astiav.FindBitStreamFilterByName(name)
	if f == nil {
		return nil, fmt.Errorf("FFmpeg has no %s bitstream filter", name)
	}
	bsf, err := astiav.AllocBitStreamFilterContext(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := cp.Copy(bsf.InputCodecParameters()); err != nil {
		bsf.Free()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	bsf.SetInputTimeBase(tb)
	if err := bsf.Initialize(); err != nil {
		bsf.Free()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return bsf, nil
}

// isAnnexB reports whether b starts with an Annex B start code (00 00 01
// or 00 00 00 01), as an Annex B extradata does; an avcC or hvcC record
// starts with its version, 1.
func isAnnexB(b []byte) bool {
	return len(b) >= 4 && b[0] == 0 && b[1] == 0 && (b[2] == 1 || b[2] == 0 && b[3] == 1)
}

// directHeader gives the parser the stream's parameter sets when the
// extradata holds them in Annex B form (an RTSP camera's SDP
// sprop-parameter-sets, which it may never repeat in band). Length-prefixed
// extradata (avcC, hvcC) needs nothing: the filter puts it in front of
// keyframes.
func (d *decoder) directHeader(cp *astiav.CodecParameters) error {
	if x := cp.ExtraData(); isAnnexB(x) {
		return d.directErr(d.nv.header(x))
	}
	return nil
}

// sendDirect passes the current packet (timestamps already on the clock's
// timeline) through the Annex B filter to the NVDEC parser; the pictures
// that become ready are emitted from the session's output.
func (d *decoder) sendDirect(arrival time.Time) error {
	m := pktMeta{pts: d.pkt.Pts(), dts: d.pkt.Dts(), arrival: arrival,
		key: d.pkt.Flags().Has(astiav.PacketFlagKey), corrupt: d.lastCorrupt}
	if err := d.bsf.SendPacket(d.pkt); err != nil {
		return &bitstreamError{fmt.Errorf("Annex B filter: %w", err)}
	}
	for {
		err := d.bsf.ReceivePacket(d.bsfOut)
		if errors.Is(err, astiav.ErrEagain) || errors.Is(err, astiav.ErrEof) {
			return nil
		}
		if err != nil {
			return &bitstreamError{fmt.Errorf("Annex B filter: %w", err)}
		}
		data, n := packetData(d.bsfOut)
		dropped, err := d.nv.parse(data, n, m)
		d.bsfOut.Unref()
		if err != nil {
			return err
		}
		if dropped {
			// Lost like a packet FFmpeg's decoder rejects: counted, so
			// that decoded frames plus decode errors account for every
			// coded picture. Not in the open's decodeErrs, which decide
			// whether NVDEC failed on a stream's first packets: a camera
			// joined mid-GOP loses its pictures before the first
			// keyframe this way, and that is no reason to leave NVDEC.
			d.s.faults.decodeError(ErrBitstream)
			d.nv.note("NVDEC failed to decode a picture (not published)", string(ErrBitstream), errParserDropped)
		}
	}
}

// discontinuity tells the parser that the bitstream jumps; pictures still
// held come out with no packet DTS.
func (s *nvSession) discontinuity() error {
	s.share()
	defer s.unshared()
	return s.dec.Discontinuity()
}

// flush ends the open's bitstream: every picture the parser holds comes
// out; the decoder stays for the next open.
func (s *nvSession) flush() error { return s.dec.Flush() }

// bitstreamError is a packet the filter or parser rejected: a decode
// error, as a corrupt packet is for FFmpeg.
type bitstreamError struct{ err error }

func (e *bitstreamError) Error() string { return e.err.Error() }
func (e *bitstreamError) Unwrap() error { return e.err }

// directErr sorts an error of the direct NVDEC path: nil to go on (a
// packet the parser rejected: a decode error, counted), errRetrySoftware
// (under HWAuto, when the stream's format is one NVDEC cannot take, or the
// first packets all fail), or an error that ends the open (the context,
// CUDA failing, or under HWCUDA a format NVDEC cannot take).
func (d *decoder) directErr(err error) error {
	if err == nil {
		return nil
	}
	s := d.s
	var oe *outputError
	var be *bitstreamError
	var ce *cuda.Error
	switch {
	case errors.As(err, &oe):
		return oe.err
	case errors.As(err, &be) || errors.As(err, &ce) && ce.Op == "cuvidParseVideoData":
		if d.frames == 0 && d.decodeErrs >= 2 && s.o.HWAccel == HWAuto {
			s.noNVDEC(fmt.Errorf("NVDEC failed on the first packets: %w", err))
			return errRetrySoftware
		}
		d.decodeErrs++
		s.faults.decodeError(ErrBitstream)
		if d.decodeErrs <= 3 {
			s.o.Logger.Warn("decode error", zap.Error(err))
		}
		return nil
	case s.o.HWAccel == HWAuto:
		s.noNVDEC(err)
		return errRetrySoftware
	}
	return fmt.Errorf("decode.hwaccel cuda: %w", err)
}

// download copies the frame into host memory as dst's picture: NV12, or
// P010LE for 16-bit samples (the same layout: the value in the high bits),
// reallocating dst's buffers when its size or format differs. Errors:
// FFmpeg's allocation, or CUDA's copy.
func (f *nvFrame) download(dst *astiav.Frame) error {
	pf := astiav.PixelFormatNv12
	if f.bps == 2 {
		pf = astiav.PixelFormatP010Le
	}
	if dst.Width() != f.w || dst.Height() != f.h || dst.PixelFormat() != pf {
		dst.Unref()
		dst.SetWidth(f.w)
		dst.SetHeight(f.h)
		dst.SetPixelFormat(pf)
		if err := dst.AllocBuffer(0); err != nil {
			return err
		}
	}
	ch := (f.h + 1) / 2
	host := make([]byte, f.pitch*(f.h+ch))
	unlock := cuda.Shared() // a synchronous copy: not during a capture
	err := f.pool.ctx.CopyDtoH(host, f.buf.Ptr())
	unlock()
	if err != nil {
		return err
	}
	ls := dst.Linesize()
	row := ((f.w + 1) &^ 1) * f.bps
	y, uv := planeView(dst, 0, ls[0]*f.h), planeView(dst, 1, ls[1]*ch)
	for r := range f.h {
		copy(y[r*ls[0]:r*ls[0]+min(row, ls[0])], host[r*f.pitch:])
	}
	for r := range ch {
		copy(uv[r*ls[1]:r*ls[1]+min(row, ls[1])], host[(f.h+r)*f.pitch:])
	}
	return nil
}
