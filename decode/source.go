package decode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asticode/go-astiav"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/pipeline"
)

// Errors returned (wrapped) by Source.Run; test with errors.Is.
var (
	// ErrTimeout: opening the input and decoding its first frame took
	// longer than Options.OpenTimeout, or no packet arrived within
	// Options.StallTimeout afterwards (a stalled stream).
	ErrTimeout = errors.New("timed out")
	// ErrNoVideo: the input has no video stream.
	ErrNoVideo = errors.New("no video stream")
	// ErrNoDecoder: FFmpeg has no decoder for the video codec.
	ErrNoDecoder = errors.New("no decoder")
	// ErrTruncated: a file ended well before the duration its container
	// announces, i.e. it was cut short.
	ErrTruncated = errors.New("input truncated")
)

// Defaults for Options.
const (
	DefaultOpenTimeout  = 60 * time.Second
	DefaultStallTimeout = 10 * time.Second
)

// Options configure a Source. Zero values take the documented defaults.
type Options struct {
	// URL is rtsp://, rtsps://, http://, https://, file:// or a path.
	URL string
	// StreamID tags frames and log lines.
	StreamID string
	// Transport is the RTSP lower transport, "tcp" (default) or "udp".
	Transport string
	// Realtime paces a file at its native frame rate (by DTS), as a camera
	// would deliver it. Network inputs are always paced by the sender.
	Realtime bool
	// Loop restarts a file at its end; PTS keeps increasing across loops
	// (see Frame.PTS).
	Loop bool
	// OpenTimeout bounds everything up to the first decoded frame: opening
	// the input, probing its streams (avformat_open_input +
	// avformat_find_stream_info) and reading until a frame comes out; default
	// 60 s, so a camera that takes 40 s to send its first frame is not cut
	// off.
	OpenTimeout time.Duration
	// StallTimeout bounds the wait for one packet (av_read_frame) once
	// frames flow, and a real-time file's wait for its next packet's time;
	// default 10 s. The limit actually applied is the larger of StallTimeout
	// and StallIntervals times the stream's frame interval (the median of
	// its recent packet DTS steps, else its nominal frame rate), so that a
	// camera sending one frame every 15 s is not cut off. A stream that
	// stalls for longer fails with ErrTimeout. FFmpeg's own socket timeouts
	// are not used: in FFmpeg 5.1 they fire late or never on RTSP; the
	// watchdog enforces this one.
	StallTimeout time.Duration
	// Threads is FFmpeg's decoder thread count; 0 lets FFmpeg choose the
	// count, and for live and Realtime sources also limits the decoder to
	// slice threads (frame threads would delay every frame by threads-1
	// frames). A count > 0 keeps FFmpeg's frame and slice threads.
	Threads int
	// HWAccel: NVDEC decoding (see HWAccel); "" is HWNone.
	HWAccel HWAccel
	// NVDEC is how NVDEC decodes H.264 and HEVC when HWAccel asks for it:
	// NVDECDirect or NVDECFFmpeg; "" is DefaultNVDEC. Other codecs always
	// take FFmpeg's hwaccel.
	NVDEC NVDECMode
	// HWDevice is the CUDA device ordinal for NVDEC ("" is 0).
	HWDevice string
	// HWSurfaces bounds the NVDEC frames of this source held downstream
	// at once (queued, batched): each decoded surface is copied into a
	// device frame of a per-source pool and given back to NVDEC, and the
	// decoder waits while HWSurfaces frames are out. Default 8; 1080p NV12
	// frames are 3.1 MB each (3.3 MB in NVDECDirect's pool, whose rows are
	// aligned to 128 bytes; twice that for 10-bit streams).
	HWSurfaces int
	// NVDECPoll is cuda.VideoDecoderConfig.PollDecode of a direct NVDEC
	// session (decode.nvdec_poll): 0 lets the driver wait for each
	// picture as it maps it; a positive interval sleeps until the picture
	// is decoded, checking its status at that interval, then maps it.
	NVDECPoll time.Duration
	// CPUNice, when > 0, is the nice value (at most 19) of the threads
	// that decode this source in software: the source's own OS thread
	// while the input is open, and the decoder threads FFmpeg starts from
	// it, which inherit it (Linux keeps a nice value per thread). Hybrid
	// decoding sets it (decode.cpu_nice) so that software decoding takes
	// the cores the rest of the pipeline leaves. NVDEC sessions are not
	// affected. See niceThread for what happens to the thread afterwards.
	CPUNice int
	// Logger defaults to a no-op logger. FFmpeg's lines about this input
	// go to its child "ffmpeg", aggregated (see LogInterval).
	Logger *zap.Logger
	// LogInterval: FFmpeg log lines of one kind (level and printf format)
	// about this input are logged at most once per LogInterval: the first
	// at once, the rest counted and logged once when the interval ends,
	// the last of them with the count ("repeated") and the time they span
	// ("over"). Default DefaultLogInterval. For a network input the
	// windows outlive Run, so that a camera failing the same way on every
	// reconnect is logged once per interval too; counts still pending are
	// logged when Run returns because ctx ended, and for a file whenever
	// Run returns.
	LogInterval time.Duration
	// Metrics, when set, exports this source's fault counts (lost RTP
	// packets, decode errors, corrupt frames) labelled StreamID; Faults
	// returns them either way.
	Metrics *Metrics
}

// Info describes the opened video stream.
type Info struct {
	Codec         string  // FFmpeg decoder name, e.g. "h264"
	NVDEC         bool    // frames are decoded by NVDEC into GPU memory
	Direct        bool    // NVDEC is driven directly (NVDECDirect), not through FFmpeg
	Width, Height int     // pixels
	FPS           float64 // average frame rate, 0 when unknown
}

// Source reads one input; it implements pipeline.Source. Create it with New.
// Run may be called again after it returns (the caller's reconnect); calls
// must not overlap.
type Source struct {
	o    Options
	kind Kind
	path string // what FFmpeg opens

	seq   uint64   // next frame sequence number, kept across Runs
	tl    timeline // the published PTS, kept across Runs and loops
	opens int      // successful opens, for logging
	info  atomic.Pointer[Info]
	hwOff bool // NVDEC failed for this stream under HWAuto: decode on the CPU
	// nv is the direct NVDEC session, kept across Runs so that a reconnect
	// reuses its decoder; nil before the first direct open and after Run
	// returned for good (see Run). A cleanup closes it if the Source is
	// dropped while it is open (a live stream removed while reconnecting).
	nv *nvHolder

	logs   *logSink // this input's FFmpeg lines
	token  uintptr  // tags this input's FFmpeg contexts (logRouter)
	faults *faults

	// RTSP over UDP (udpbuf.go): the video bitrate (bits/s) measured over
	// the last long enough session, 0 before; whether the kernel's cap on
	// the receive buffer was logged.
	udpRate   float64
	udpCapped bool
}

// errRetrySoftware makes Run reopen at once on the CPU.
var errRetrySoftware = errors.New("retry with software decoding")

// noNVDEC records, under HWAuto, that this stream decodes on the CPU and
// says why, once.
func (s *Source) noNVDEC(err error) {
	s.hwOff = true
	s.o.Logger.Info("NVDEC unavailable for this stream; decoding on the CPU", zap.String("url", RedactURL(s.o.URL)), zap.Error(err))
}

var _ pipeline.Source = (*Source)(nil)

// New validates o and returns a Source; it does no I/O. It returns an error
// wrapping ErrUnsupportedScheme for an unsupported URL, and an error for a
// Transport other than "tcp" or "udp".
func New(o Options) (*Source, error) {
	kind, path, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	switch o.Transport {
	case "":
		o.Transport = "tcp"
	case "tcp", "udp":
	default:
		return nil, fmt.Errorf("transport %q: want tcp or udp", o.Transport)
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = DefaultOpenTimeout
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.HWAccel, err = ParseHWAccel(string(o.HWAccel)); err != nil {
		return nil, err
	}
	if o.NVDEC, err = ParseNVDECMode(string(o.NVDEC)); err != nil {
		return nil, err
	}
	s := &Source{o: o, kind: kind, path: path, token: router.token(), faults: newFaults(o.Metrics, o.StreamID), nv: &nvHolder{}}
	runtime.AddCleanup(s, func(h *nvHolder) { h.close() }, s.nv)
	s.logs = newLogSink(o.Logger.Named("ffmpeg"), o.LogInterval, s.onFFmpegLine)
	router.install()
	return s, nil
}

// Faults returns the source's fault counts so far.
func (s *Source) Faults() Faults { return s.faults.snapshot() }

// Live reports whether the input is a network stream (RTSP or HTTP), which
// a supervisor should reopen when it ends.
func (s *Source) Live() bool { return s.kind != KindFile }

// Codec returns the decoder name of the last successful open ("" before).
func (s *Source) Codec() string {
	if i := s.info.Load(); i != nil {
		return i.Codec
	}
	return ""
}

// NominalFPS returns the average frame rate of the last successful open's
// video stream in frames per second, 0 when unknown or before the first
// open (pipeline's status shows it as fps_nominal).
func (s *Source) NominalFPS() float64 {
	if i := s.info.Load(); i != nil {
		return i.FPS
	}
	return 0
}

// Info returns the video stream of the last successful open, or nil.
func (s *Source) Info() *Info { return s.info.Load() }

// Run implements pipeline.Source. It returns io.EOF when a non-looping file
// ends, ctx.Err() when ctx ends, and otherwise an error naming the
// (redacted) URL and the failing FFmpeg step.
//
// Frame.PTS never goes back across calls: the first frame of a later Run
// (the caller's reconnect) continues the previous Run's timeline and
// carries Frame.Discontinuity (see timeline.next).
//
// A direct NVDEC session (Options.NVDEC) outlives a Run that fails on a
// live input, so that the reconnect reuses its decoder; it is closed when
// Run returns because ctx ended or a file ended.
func (s *Source) Run(ctx context.Context, emit func(*pipeline.Frame)) error {
	err := s.run(ctx, emit)
	if ctx.Err() != nil || s.kind == KindFile {
		s.logs.flush(true) // the end: log the counts still pending
		s.nv.close()
	}
	return err
}

// nvHolder holds a Source's direct NVDEC session; the Source's cleanup
// closes it.
type nvHolder struct{ s *nvSession }

func (h *nvHolder) close() {
	h.s.close()
	h.s = nil
}

func (s *Source) run(ctx context.Context, emit func(*pipeline.Frame)) error {
	for {
		err := s.runOnce(ctx, emit)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errRetrySoftware) {
			continue
		}
		if err != nil {
			return fmt.Errorf("decode %s: %w", RedactURL(s.o.URL), err)
		}
		if !s.o.Loop || s.kind != KindFile {
			return io.EOF
		}
		s.tl.seamless = true // a loop, not a new timeline
	}
}

// watchdog is the only goroutine that flips the FFmpeg interrupt flag (the
// flag is a plain int read by C, so a single writer keeps it race-free; see
// docs/style notes on go-astiav v0.16.0). It fires on ctx end or when the
// current deadline passes, and never resumes: an interrupted input is
// closed.
type watchdog struct {
	deadline atomic.Int64 // unix ns; 0 = no deadline armed
	timedOut atomic.Bool
	stop     chan struct{}
	done     chan struct{}
}

func startWatchdog(ctx context.Context, intr astiav.IOInterrupter) *watchdog {
	w := &watchdog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				intr.Interrupt()
				return
			case <-w.stop:
				return
			case now := <-t.C:
				if d := w.deadline.Load(); d != 0 && now.UnixNano() > d {
					w.timedOut.Store(true)
					intr.Interrupt()
					return
				}
			}
		}
	}()
	return w
}

func (w *watchdog) arm(d time.Duration) { w.deadline.Store(time.Now().Add(d).UnixNano()) }
func (w *watchdog) armAt(t time.Time)   { w.deadline.Store(t.UnixNano()) }
func (w *watchdog) disarm()             { w.deadline.Store(0) }
func (w *watchdog) close()              { close(w.stop); <-w.done }

// ffErr turns an FFmpeg error after an interrupt into ErrTimeout or the
// context's error, and wraps others with the step name.
func (w *watchdog) ffErr(ctx context.Context, step string, err error, limit time.Duration) error {
	if errors.Is(err, astiav.ErrExit) || w.timedOut.Load() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if w.timedOut.Load() {
			return fmt.Errorf("%s: %w after %s", step, ErrTimeout, limit)
		}
	}
	return fmt.Errorf("%s: %w", step, err)
}

// runOnce opens the input, decodes it to its end and closes it.
func (s *Source) runOnce(ctx context.Context, emit func(*pipeline.Frame)) error {
	fc := astiav.AllocFormatContext()
	if fc == nil {
		return errors.New("avformat_alloc_context failed")
	}
	// The interrupter must stay referenced while fc lives: FFmpeg holds a
	// pointer into it.
	intr := fc.SetInterruptCallback()
	wd := startWatchdog(ctx, intr)
	defer wd.close()
	// Deferred first, so it runs last: after cc.Free has joined FFmpeg's
	// decoder threads, which log too.
	detach := router.attach(s.token, s.logs)
	defer detach()
	tagContexts(fc, nil, s.token)

	opts := astiav.NewDictionary()
	defer opts.Free()
	if s.kind == KindRTSP {
		_ = opts.Set("rtsp_transport", s.o.Transport, 0)
		if s.o.Transport == "udp" {
			_ = opts.Set("buffer_size", strconv.Itoa(s.udpBuffer(rmemMax())), 0)
		}
	}
	if s.kind != KindFile {
		// FFmpeg probes up to 5 s of a stream by default before the first
		// frame; 1 s is enough to find an H.264/HEVC camera's parameters
		// and cuts the start (and every reconnect) by ~4 s.
		_ = opts.Set("analyzeduration", "1000000", 0)
	}

	openDeadline := time.Now().Add(s.o.OpenTimeout)
	wd.armAt(openDeadline)
	if err := fc.OpenInput(s.path, nil, opts); err != nil {
		fc.Free() // avformat_open_input freed and nulled the context; Free(NULL) is a no-op
		return wd.ffErr(ctx, "open", err, s.o.OpenTimeout)
	}
	defer fc.CloseInput()
	if err := fc.FindStreamInfo(nil); err != nil {
		return wd.ffErr(ctx, "probe streams", err, s.o.OpenTimeout)
	}

	st := bestVideoStream(fc)
	if st == nil {
		return ErrNoVideo
	}
	cp := st.CodecParameters()
	codec := astiav.FindDecoder(cp.CodecID())
	if codec == nil {
		return fmt.Errorf("%w for codec %s", ErrNoDecoder, cp.CodecID())
	}
	cc := astiav.AllocCodecContext(codec)
	if cc == nil {
		return errors.New("avcodec_alloc_context3 failed")
	}
	defer cc.Free()
	if err := cc.FromCodecParameters(cp); err != nil {
		return fmt.Errorf("codec parameters: %w", err)
	}
	cc.SetThreadCount(s.o.Threads)
	if s.o.Threads == 0 && (s.o.Realtime || s.kind != KindFile) {
		// Live and real-time sources: slice threads only. Frame threads
		// hold threads-1 frames inside the decoder (16 frames, over 0.5 s
		// at 30 fps, with FFmpeg's automatic count on 16 cores), which a
		// frame's latency budget cannot absorb.
		cc.SetThreadType(astiav.ThreadTypeSlice)
	}
	// Before the decoder opens: FFmpeg copies both into frame threads.
	tagContexts(nil, cc, s.token)
	// Frames decoded before the stream's first keyframe (a camera joined
	// mid-GOP) have missing references; FFmpeg drops them silently unless
	// asked to output them, flagged AV_FRAME_FLAG_CORRUPT. vigil emits them
	// with Frame.Corrupt set, so that nothing vanishes without a trace.
	cc.SetFlags(cc.Flags().Add(astiav.CodecContextFlagOutputCorrupt))
	hw, direct := false, false
	var frames *hwFrames
	var bsf *astiav.BitStreamFilterContext
	if (s.o.HWAccel == HWAuto || s.o.HWAccel == HWCUDA) && !s.hwOff && s.o.NVDEC == NVDECDirect {
		if _, name, ok := nvdecCodec(cp.CodecID()); ok {
			var err error
			if bsf, err = s.openDirect(cp, st, name); err != nil {
				if s.o.HWAccel == HWCUDA {
					return fmt.Errorf("decode.hwaccel cuda: %w", err)
				}
				s.noNVDEC(err)
			} else {
				hw, direct = true, true
				defer bsf.Free()
			}
		}
	}
	if (s.o.HWAccel == HWAuto || s.o.HWAccel == HWCUDA) && !s.hwOff && !direct {
		dev, err := setupNVDEC(cc, codec, s.o.HWDevice)
		if err != nil {
			if s.o.HWAccel == HWCUDA {
				return fmt.Errorf("decode.hwaccel cuda: %w", err)
			}
			s.noNVDEC(err)
		} else {
			hw = true
			surfaces := s.o.HWSurfaces
			if surfaces <= 0 {
				surfaces = 8
			}
			frames = newHWFrames(dev, surfaces, s.o.Logger)
			defer frames.close() // frames still out keep the pool
			// go-astiav keeps get_format callbacks in a map keyed by the
			// context; drop ours before cc.Free (deferred earlier, run later).
			defer cc.SetPixelFormatCallback(nil)
		}
	}
	if !hw && s.o.CPUNice > 0 {
		// Before cc.Open, which starts FFmpeg's decoder threads: they
		// inherit the thread's nice value. Deferred after detach, so the
		// value is put back before the thread is unlocked.
		defer niceThread(s.o.CPUNice, s.o.Logger)()
	}
	// Direct NVDEC decodes without FFmpeg's decoder: cc only carries the
	// stream's parameters then.
	if !direct {
		if err := cc.Open(codec, nil); err != nil {
			if hw && s.o.HWAccel == HWAuto {
				s.noNVDEC(err)
				return errRetrySoftware
			}
			return fmt.Errorf("open decoder %s: %w", codec.Name(), err)
		}
	}
	fps := st.AvgFrameRate().Float64()
	if math.IsNaN(fps) || math.IsInf(fps, 0) {
		fps = 0
	}
	s.info.Store(&Info{Codec: codec.Name(), NVDEC: hw, Direct: direct, Width: cp.Width(), Height: cp.Height(), FPS: fps})
	logOpen := s.o.Logger.Info
	if s.opens++; s.opens > 1 && s.kind == KindFile {
		logOpen = s.o.Logger.Debug // a looping file reopens every pass
	}
	logOpen("opened", zap.String("url", RedactURL(s.o.URL)), zap.String("codec", codec.Name()), zap.Bool("nvdec", hw),
		zap.Bool("nvdec_direct", direct), zap.Int("width", cp.Width()), zap.Int("height", cp.Height()), zap.Float64("fps", fps))

	d := decoder{
		s: s, cc: cc, emit: emit, tb: st.TimeBase().Float64(), ctx: ctx, hw: frames,
		frameDur: 0, pkt: astiav.AllocPacket(), frame: astiav.AllocFrame(), cs: cp.ColorSpace(),
	}
	if direct {
		d.nv, d.bsf, d.bsfOut = s.nv.s, bsf, astiav.AllocPacket()
		defer d.bsfOut.Free()
		d.nv.cur = &d
		defer func() { d.nv.cur = nil }()
		if err := d.directHeader(cp); err != nil {
			return err
		}
	}
	if fps > 0 {
		d.frameDur = 1 / fps
	}
	d.clk = clock{tb: d.tb, nominal: d.frameDur, live: s.kind != KindFile}
	d.ptsFix = ptsCorrection{lastPTS: math.MinInt64, lastDTS: math.MinInt64}
	defer d.pkt.Free()
	defer d.frame.Free()
	defer func() { s.noteRate(d.bytes, d.firstRead, d.lastRead) }()

	var pace pacer
	for {
		// A looping file never ends, and reads from FFmpeg's buffer do not
		// always reach the interrupt callback: look at ctx every packet.
		if err := ctx.Err(); err != nil {
			return err
		}
		// Until the first frame the open deadline still runs; then each
		// packet must come within the stall limit (StallTimeout, or more
		// for a stream with long frame intervals).
		limit := d.clk.stallLimit(s.o.StallTimeout)
		if d.frames == 0 {
			wd.armAt(openDeadline)
			limit = s.o.OpenTimeout
		} else {
			wd.arm(limit)
		}
		err := fc.ReadFrame(d.pkt)
		wd.disarm()
		read := time.Now()
		if errors.Is(err, astiav.ErrEof) {
			if s.o.Loop && s.kind == KindFile && d.frames > 0 {
				if !d.looped { // the first pass: was the file whole?
					if err := d.checkComplete(fc, st); err != nil {
						return err
					}
				}
				if d.rewind(fc, st) {
					continue
				}
			}
			break
		}
		if err != nil {
			step := "read"
			if d.frames == 0 {
				step = "waiting for the first frame"
			}
			return wd.ffErr(ctx, step, err, limit)
		}
		if d.pkt.StreamIndex() != st.Index() {
			d.pkt.Unref()
			continue
		}
		if d.rewound {
			d.rewound = false
			if !d.pkt.Flags().Has(astiav.PacketFlagKey) {
				// The seek did not land on a keyframe: decoding on would
				// reference the previous pass. Drain and reopen instead.
				d.s.o.Logger.Debug("rewind did not land on a keyframe; reopening")
				d.pkt.Unref()
				break
			}
			if d.nv != nil {
				// The bitstream jumps back: tell the parser, with an empty
				// packet (never with the flag on this packet: see
				// cuda.VideoDecoder.Discontinuity).
				if err := d.directErr(d.nv.discontinuity()); err != nil {
					d.pkt.Unref()
					return err
				}
			}
		}
		d.lastCorrupt = d.pkt.Flags().Has(astiav.PacketFlagCorrupt)
		d.pkts++
		d.startPass()
		d.clk.packet(d.pkt, read, s.o.StallTimeout, s.o.Logger)
		if s.o.Realtime && s.kind == KindFile {
			// Never wait longer than a live stream's packet may take.
			if err := pace.wait(ctx, d.pktTime(), d.clk.stallLimit(s.o.StallTimeout)); err != nil {
				d.pkt.Unref()
				return err
			}
		}
		arrival := time.Now()
		d.noteArrival(arrival)
		d.noteCorrupt()
		d.noteBytes(arrival)
		if d.nv != nil {
			err = d.sendDirect(arrival)
			d.pkt.Unref()
			if err = d.directErr(err); err != nil {
				return err
			}
			continue
		}
		err = cc.SendPacket(d.pkt)
		d.pkt.Unref()
		if err != nil && !errors.Is(err, astiav.ErrEagain) {
			if hw && d.frames == 0 && d.decodeErrs >= 2 && s.o.HWAccel == HWAuto {
				s.noNVDEC(fmt.Errorf("NVDEC failed on the first packets: %w", err))
				return errRetrySoftware
			}
			// A corrupt packet: FFmpeg conceals what it can; count and go on.
			d.decodeErrs++
			s.faults.decodeError(ErrDecoder)
			if d.decodeErrs <= 3 {
				s.o.Logger.Warn("decode error", zap.Error(err))
			}
			continue
		}
		if err := d.receive(arrival); err != nil {
			if errors.Is(err, astiav.ErrInvaliddata) && !(hw && d.frames == 0) {
				// With frame threads the decoder reports a packet it
				// failed on here, a few packets later: counted, go on.
				d.decodeErrs++
				continue
			}
			if hw && d.frames == 0 && s.o.HWAccel == HWAuto {
				s.noNVDEC(err)
				return errRetrySoftware
			}
			return err
		}
	}
	// Drain the decoder's delayed frames (B-frame reordering, threads).
	if d.nv != nil {
		if err := d.directErr(d.nv.flush()); err != nil {
			return err
		}
	} else if err := cc.SendPacket(nil); err == nil {
		for {
			err := d.receive(time.Now())
			if err == nil {
				break
			}
			if !errors.Is(err, astiav.ErrInvaliddata) {
				return err
			}
			d.decodeErrs++
		}
	}
	if s.kind == KindFile {
		if err := d.checkComplete(fc, st); err != nil {
			return err
		}
	}
	if d.frames == 0 {
		return fmt.Errorf("no frame could be decoded (%d decode errors)", d.decodeErrs)
	}
	return nil
}

// bestVideoStream picks the video stream with the most pixels, skipping
// attached pictures (cover art); ties go to the lower index.
func bestVideoStream(fc *astiav.FormatContext) *astiav.Stream {
	var best *astiav.Stream
	bestPixels := -1
	for _, st := range fc.Streams() {
		cp := st.CodecParameters()
		if cp.MediaType() != astiav.MediaTypeVideo {
			continue
		}
		if px := cp.Width() * cp.Height(); px > bestPixels {
			best, bestPixels = st, px
		}
	}
	return best
}

// decoder holds one open input's per-frame state.
type decoder struct {
	s   *Source
	cc  *astiav.CodecContext // carries the parameters only when nv is set
	ctx context.Context
	hw  *hwFrames // NVDEC: the pool decoded surfaces are copied into
	// Direct NVDEC (nil otherwise): the session, the bitstream filter that
	// gives it Annex B, and the filter's output packet.
	nv     *nvSession
	bsf    *astiav.BitStreamFilterContext
	bsfOut *astiav.Packet
	// cs is the stream's colour space as its codec parameters give it.
	cs astiav.ColorSpace
	// decodeErrs counts this open's decode errors.
	decodeErrs int
	emit       func(*pipeline.Frame)
	tb         float64 // stream time base in seconds per tick
	frameDur   float64 // seconds, 0 when unknown
	pkt        *astiav.Packet
	frame      *astiav.Frame
	pkts       int // video packets read
	frames     int
	// clk shifts packet timestamps onto one continuous timeline, across
	// discontinuities and a looping file's passes.
	clk clock
	// Published PTS (s) of this open's first and last frames; start is
	// where this open's first frame goes (timeline.next), base maps a
	// frame's time on the clock's timeline to the published one, set by
	// the first frame that has a timestamp (anchored).
	firstPub, lastPub, start, base float64
	started, anchored              bool
	// ptsFix picks between a frame's PTS and its packet DTS.
	ptsFix ptsCorrection
	// reordered counts frames whose timestamp was not after the previous
	// frame's (published just after it instead).
	reordered int
	// lastCorrupt: the last video packet read carried AV_PKT_FLAG_CORRUPT.
	lastCorrupt bool

	// Looping without reopening (rewind). startDTS is the first pass's
	// first packet's DTS (hasStart), where rewind seeks: containers that
	// seek by DTS (MPEG-TS) would land on a packet before the first
	// keyframe if asked for the first PTS.
	looped   bool
	startDTS int64
	hasStart bool
	rewound  bool // the next packet is the first of a new pass
	// Video bytes read, and when the first and last packets came: the
	// session's bitrate (Source.noteRate).
	bytes               int64
	firstRead, lastRead time.Time
	// corruptPkts holds the (shifted) PTS, else DTS, of packets the
	// demuxer flagged AV_PKT_FLAG_CORRUPT whose frames have not come out.
	corruptPkts map[int64]bool
	// arrivals maps a packet's (shifted) PTS to when it was read, so that
	// a frame carries its own packet's arrival time however long the
	// decoder held it (B-frame reordering, frame threads).
	arrivals map[int64]time.Time
}

// startPass records where the first pass starts, for rewind.
func (d *decoder) startPass() {
	if !d.hasStart && !d.looped {
		d.startDTS, d.hasStart = d.pkt.Dts(), true
		if d.startDTS == astiav.NoPtsValue {
			d.startDTS = d.pkt.Pts()
		}
	}
}

// rewind seeks a looping file back to its start without closing the
// decoder, as a camera's stream would continue: no reopen (an NVDEC
// decoder takes tens of ms to create) and no drained burst of buffered
// frames at every pass. The clock shifts the next pass to follow this one.
// It reports false when the input cannot seek (the caller then drains and
// reopens, as before).
func (d *decoder) rewind(fc *astiav.FormatContext, st *astiav.Stream) bool {
	if !d.clk.passSeen || d.clk.passEnd <= d.clk.passMin {
		return false
	}
	start := d.startDTS
	if !d.hasStart || start == astiav.NoPtsValue {
		start = st.StartTime()
	}
	if start == astiav.NoPtsValue {
		start = 0
	}
	if err := fc.SeekFrame(st.Index(), start, astiav.NewSeekFlags(astiav.SeekFlagBackward)); err != nil {
		d.s.o.Logger.Debug("cannot rewind for looping; reopening", zap.Error(err))
		return false
	}
	d.clk.rebase = true
	d.looped, d.rewound = true, true
	return true
}

// noteArrival remembers when the current packet (timestamps already
// shifted) was read.
func (d *decoder) noteArrival(t time.Time) {
	pts := d.pkt.Pts()
	if pts == astiav.NoPtsValue {
		pts = d.pkt.Dts() // the frame will carry it as pkt_dts
	}
	if pts != astiav.NoPtsValue {
		if d.arrivals == nil || len(d.arrivals) >= 1024 {
			// Entries leave as frames come out; a stream whose packets
			// never decode would otherwise grow the map for ever.
			d.arrivals = map[int64]time.Time{}
		}
		d.arrivals[pts] = t
	}
}

// arrivalOf returns the arrival time of the packet a frame with PTS pts
// (else packet DTS pts) came from (fallback when unknown: the packet just
// sent), and forgets it and any older entries: frames leave the decoder
// in PTS order, so those will not be asked for.
func (d *decoder) arrivalOf(pts int64, fallback time.Time) time.Time {
	if pts == astiav.NoPtsValue || d.arrivals == nil {
		return fallback
	}
	t, ok := d.arrivals[pts]
	for k := range d.arrivals {
		if k <= pts {
			delete(d.arrivals, k)
		}
	}
	if !ok {
		return fallback
	}
	return t
}

// noteCorrupt remembers the current packet's PTS (else DTS) when the
// demuxer flagged it corrupt (AV_PKT_FLAG_CORRUPT: MPEG-TS continuity
// errors, a packet cut short), so that its frame is flagged.
func (d *decoder) noteCorrupt() {
	if !d.lastCorrupt {
		return
	}
	pts := d.pkt.Pts()
	if pts == astiav.NoPtsValue {
		pts = d.pkt.Dts()
	}
	if pts == astiav.NoPtsValue {
		return
	}
	if d.corruptPkts == nil || len(d.corruptPkts) >= 64 {
		d.corruptPkts = map[int64]bool{} // bounded, as arrivals is
	}
	d.corruptPkts[pts] = true
}

// noteBytes counts the current packet's size, read at t.
func (d *decoder) noteBytes(t time.Time) {
	if d.bytes == 0 {
		d.firstRead = t
	}
	d.bytes += int64(d.pkt.Size())
	d.lastRead = t
}

// corruptFrame reports whether the frame just received, of PTS (else
// packet DTS) ts, is damaged: FFmpeg marked it (concealed errors, missing
// references; see frameCorrupt) or its packet was flagged corrupt.
func (d *decoder) corruptFrame(ts int64) bool {
	bad := frameCorrupt(d.frame)
	if len(d.corruptPkts) > 0 && ts != astiav.NoPtsValue {
		bad = bad || d.corruptPkts[ts]
		for k := range d.corruptPkts {
			if k <= ts {
				delete(d.corruptPkts, k)
			}
		}
	}
	return bad
}

// pktTime is the current packet's DTS (else PTS) in seconds; for streams
// without timestamps (a raw H.264 elementary stream) it counts packets at
// the nominal frame rate, so that such files are still paced.
func (d *decoder) pktTime() float64 {
	ts := d.pkt.Dts()
	if ts == astiav.NoPtsValue {
		ts = d.pkt.Pts()
	}
	if ts == astiav.NoPtsValue {
		if d.frameDur > 0 {
			return float64(d.pkts-1) * d.frameDur
		}
		return math.NaN()
	}
	return float64(ts) * d.tb
}

// receive emits every frame the decoder has ready.
func (d *decoder) receive(arrival time.Time) error {
	for {
		err := d.cc.ReceiveFrame(d.frame)
		if errors.Is(err, astiav.ErrEagain) || errors.Is(err, astiav.ErrEof) {
			return nil
		}
		if err != nil {
			if errors.Is(err, astiav.ErrInvaliddata) {
				d.s.faults.decodeError(ErrDecoder)
			}
			return fmt.Errorf("receive frame: %w", err)
		}
		ts := d.frame.Pts()
		if ts == astiav.NoPtsValue {
			ts = d.frame.PktDts()
		}
		corrupt := d.corruptFrame(ts)
		arrival := d.arrivalOf(ts, arrival)
		pic := &Picture{cs: d.cc.ColorSpace()}
		if d.hw != nil && d.frame.PixelFormat() == astiav.PixelFormatCuda {
			pic.f, pic.sem, err = d.hw.copy(d.ctx, d.frame)
		} else {
			pic.f = d.frame.Clone()
		}
		key := d.frame.KeyFrame()
		pts, pktDTS := d.frame.Pts(), d.frame.PktDts()
		d.frame.Unref() // gives an NVDEC surface back to the decoder
		if err != nil {
			return err
		}
		d.deliver(pic, pts, pktDTS, key, corrupt, arrival)
	}
}

// deliver emits one decoded picture: pts is the frame's own PTS and pktDTS
// the DTS of the packet whose decoding gave it out (AVFrame.pkt_dts;
// either may be NoPtsValue), arrival when its own packet was read.
func (d *decoder) deliver(pic *Picture, pts, pktDTS int64, key, corrupt bool, arrival time.Time) {
	p, disc := d.framePTS(d.ptsFix.bestEffort(pts, pktDTS), pts != astiav.NoPtsValue, arrival)
	f := &pipeline.Frame{
		StreamID:      d.s.o.StreamID,
		Seq:           d.s.seq,
		PTS:           p,
		Discontinuity: disc,
		Keyframe:      key,
		Corrupt:       corrupt,
		Arrival:       arrival,
		Decoded:       time.Now(),
		Image:         pic,
	}
	if corrupt {
		d.s.faults.corruptFrame()
	}
	d.s.tl = timeline{last: p, arrival: arrival, step: d.clk.interval(), has: true}
	d.s.seq++
	d.frames++
	d.emit(f)
}

// framePTS returns the published PTS (s) of the frame with timestamp ts
// (shifted by the clock; see ptsCorrection) and whether the frame starts a
// new timeline: the first frame after a discontinuity the clock found, or
// the first frame of a reconnect (see timeline.next). own says whether ts
// is the frame's own PTS rather than a packet DTS. A frame without a
// timestamp, or whose timestamp is not after the previous frame's, is
// placed after the previous frame: one frame interval after it when the
// frame had no PTS of its own or the stream's PTS values are known to be
// faulty (it is the next frame, as far as can be told), else one time-base
// tick (a decoder returned it late: it was displayed at about that time).
func (d *decoder) framePTS(ts int64, own bool, arrival time.Time) (float64, bool) {
	disc := false
	if !d.started {
		d.start, disc = d.s.tl.next(arrival, d.s.kind != KindFile)
		d.started = true
	}
	next := d.start // where a frame without its own time goes
	if d.frames > 0 {
		next = d.lastPub + d.step()
	}
	p := next
	// Before the open is anchored, a reordering decoder's packet DTS is not
	// the frame's time (FFmpeg's RTSP demuxer leaves a session's first
	// access unit without PTS, and the decoder returns that frame with the
	// DTS of a later packet): such a frame is placed like one without a
	// timestamp, and the next frame with its own PTS anchors the open.
	if ts != astiav.NoPtsValue && (own || d.anchored || !d.clk.reorders) {
		t := float64(ts) * d.tb
		disc = d.clk.starts(ts) || disc
		if !d.anchored { // the first frame with a timestamp anchors the open
			d.base, d.anchored = next-t, true
		}
		p = t + d.base
		if d.frames > 0 && p <= d.lastPub {
			step := d.tb
			if !own || d.ptsFix.faulty() {
				step = d.step()
			}
			if d.reordered++; d.reordered == 1 {
				d.s.o.Logger.Info("a frame's timestamp is not after the previous frame's; publishing it just after (logged once per open)",
					zap.Float64("pts_s", p), zap.Float64("previous_s", d.lastPub), zap.Bool("own_pts", own))
			}
			p = d.lastPub + step
		}
	}
	if d.frames == 0 {
		d.firstPub = p
	}
	d.lastPub = p
	return p, disc
}

// step is one frame interval (s) for placing a frame after the previous
// one: the clock's estimate, else one time-base tick.
func (d *decoder) step() float64 {
	return max(d.clk.interval(), d.tb)
}

// ptsCorrection chooses a frame's timestamp as FFmpeg's
// AVFrame.best_effort_timestamp does (guess_correct_pts in
// libavcodec/decode.c; go-astiav v0.16.0 does not expose the field): the
// frame's PTS, unless frame PTS values have gone back (or repeated) more
// often than the DTS values of the packets the frames came out with; then
// that DTS. A sender that stamps packets in decode order (PTS = DTS, as
// GStreamer does for a raw H.265 stream whose parser cannot reorder) makes
// every reordered B-frame's PTS go back; its packet DTS values still
// increase. FFmpeg's own tools show the DTS then, and so does vigil.
type ptsCorrection struct {
	faultyPTS, faultyDTS int
	lastPTS, lastDTS     int64 // math.MinInt64 before the first frame
}

// faulty reports whether frame PTS values have gone back more often than
// packet DTS values, so that bestEffort uses the DTS.
func (c *ptsCorrection) faulty() bool { return c.faultyPTS > c.faultyDTS }

// bestEffort returns the timestamp to use for a frame with PTS pts and
// packet DTS dts (either may be NoPtsValue; NoPtsValue when both are).
func (c *ptsCorrection) bestEffort(pts, dts int64) int64 {
	if dts != astiav.NoPtsValue {
		if dts <= c.lastDTS {
			c.faultyDTS++
		}
		c.lastDTS = dts
	} else if pts != astiav.NoPtsValue {
		c.lastDTS = pts
	}
	if pts != astiav.NoPtsValue {
		if pts <= c.lastPTS {
			c.faultyPTS++
		}
		c.lastPTS = pts
	} else if dts != astiav.NoPtsValue {
		c.lastPTS = dts
	}
	if pts != astiav.NoPtsValue && (c.faultyPTS <= c.faultyDTS || dts == astiav.NoPtsValue) {
		return pts
	}
	return dts
}

// checkComplete reports ErrTruncated when a file stopped more than one
// second, and more than 5 %, short of the duration its container announces:
// the longest of AVFormatContext.duration, AVStream.duration and
// AVStream.nb_frames × frame duration (an AVI cut in half keeps nb_frames
// in its header while FFmpeg estimates the format duration from what is
// left), or when its last video packet was flagged corrupt (cut mid-packet).
// A file whose timestamps had a discontinuity is only checked for the
// latter: its container's duration is computed from those timestamps.
func (d *decoder) checkComplete(fc *astiav.FormatContext, st *astiav.Stream) error {
	want := 0.0
	if dur := fc.Duration(); dur > 0 && dur != astiav.NoPtsValue {
		want = float64(dur) / 1e6
	}
	if dur := st.Duration(); dur > 0 && dur != astiav.NoPtsValue {
		want = max(want, float64(dur)*d.tb)
	}
	if n := st.NbFrames(); n > 0 {
		want = max(want, float64(n)*d.frameDur)
	}
	got := d.lastPub - d.firstPub + d.frameDur
	if d.clk.passSeen && !d.looped && d.tb > 0 {
		// What was read, not only what the decoder has returned: before a
		// looping file's rewind the decoder still holds frames.
		got = max(got, float64(d.clk.passEnd-d.clk.passMin)*d.tb)
	}
	switch {
	case d.clk.breaks > 0 && !d.lastCorrupt:
		// The container's duration comes from timestamps that jump (first
		// to last PTS): it says nothing about what the file holds.
		return nil
	case want-got > 1 && got < 0.95*want:
		return fmt.Errorf("%w: stream ended at %.2f s of the %.2f s the container announces (%d frames decoded)", ErrTruncated, got, want, d.frames)
	case d.lastCorrupt:
		return fmt.Errorf("%w: the last packet is cut short (%d frames decoded)", ErrTruncated, d.frames)
	}
	return nil
}

// pacer sleeps so that packets are released at their DTS relative to the
// first one, as a camera would send them.
type pacer struct {
	start time.Time
	t0    float64
	set   bool
}

// paceCatchUp is how far behind its schedule a paced file may fall and
// still catch up by reading as fast as it decodes: a few frames at 30 fps,
// about what a camera's jitter releases at once. A source further behind
// (a decoder that took seconds to start, a consumer that held its first
// frame) starts its schedule again from the late packet instead: a late
// start must not become a burst of every frame it missed, which a camera
// would never send and which would overrun the detector (the direct NVDEC
// run of 2026-12-01 in docs/performance.md, "Direct NVDEC end to end").
const paceCatchUp = 100 * time.Millisecond

// wait sleeps until the packet at time t (s) is due, or ctx ends. A wait
// longer than limit (the stall limit, which bounds every other wait of a
// source) is not made: the pacer re-anchors at t instead. The clock has
// already removed timestamp discontinuities, so this is only a backstop.
// A packet more than paceCatchUp late re-anchors the pacer too, so that
// the packets after it keep their spacing rather than coming at once.
func (p *pacer) wait(ctx context.Context, t float64, limit time.Duration) error {
	if math.IsNaN(t) {
		return nil
	}
	if !p.set {
		p.start, p.t0, p.set = time.Now(), t, true
		return nil
	}
	d := time.Until(p.start.Add(time.Duration((t - p.t0) * float64(time.Second))))
	if d > limit || d < -paceCatchUp {
		p.start, p.t0 = time.Now(), t
		return nil
	}
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// Picture is a decoded frame owned by a pipeline.Frame; it implements
// pipeline.Image. It holds a reference to the decoder's buffer (no copy),
// or a frame of the stream's NVDEC pool; Release drops it.
type Picture struct {
	f   *astiav.Frame
	cs  astiav.ColorSpace // the decoder's AVCodecContext.colorspace
	sem chan struct{}     // NVDEC: the pool token this frame holds (hwFrames)
	nv  *nvFrame          // direct NVDEC: the picture (f is nil then)
}

// Width in pixels.
func (p *Picture) Width() int {
	if p.nv != nil {
		return p.nv.w
	}
	return p.f.Width()
}

// Height in pixels.
func (p *Picture) Height() int {
	if p.nv != nil {
		return p.nv.h
	}
	return p.f.Height()
}

// Release frees the frame reference. It is idempotent.
func (p *Picture) Release() {
	if p.nv != nil {
		p.nv.release()
		p.nv = nil
		return
	}
	if p.f != nil {
		p.f.Free()
		p.f = nil
		if p.sem != nil {
			<-p.sem
			p.sem = nil
		}
	}
}
