package decode

/*
#cgo pkg-config: libavutil libavcodec libavformat
#include "fflog.h"
*/
import "C"

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/asticode/go-astiav"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/redact"
)

// DefaultLogInterval is Options.LogInterval's default: FFmpeg lines of one
// kind are logged at most once per 10 s per stream, with a count.
const DefaultLogInterval = 10 * time.Second

// maxLogKinds bounds the kinds of line one stream tracks at once; lines of
// further kinds share one window (a decoder that logs ever-new text must
// not grow memory or the log without bound).
const maxLogKinds = 64

// maxPartialLine bounds a log line FFmpeg writes in pieces (av_log calls
// without a final newline) before it is taken as complete.
const maxPartialLine = 4096

// router routes FFmpeg's log lines. FFmpeg has one log callback for the
// whole process (av_log_set_callback), so the router is process state.
var router = &logRouter{sinks: map[uintptr]*logSink{}, threads: map[int]uintptr{}}

// SetLogger routes the FFmpeg log lines that no open Source claims into l,
// named "ffmpeg"; lines of a Source's contexts go to its Options.Logger
// (see Options.LogInterval for how they are aggregated). FFmpeg errors
// become zap warnings and FFmpeg warnings zap debug lines, because FFmpeg
// warns about recoverable stream quirks (packed B-frames, a corrupt packet)
// on every open of a looping file; messages below AV_LOG_WARNING are not
// produced at all. A nil l drops the lines no Source claims. Lines still
// counted for l's predecessor are logged to it first. Call it at start-up,
// before opening sources, and again (nil) when l's owner is done with it.
func SetLogger(l *zap.Logger) {
	router.install()
	var g *logSink
	if l != nil {
		g = newLogSink(l.Named("ffmpeg"), DefaultLogInterval, nil)
	}
	router.mu.Lock()
	old := router.global
	router.global = g
	router.mu.Unlock()
	if old != nil {
		old.flush(true)
	}
}

// logRouter attributes each FFmpeg line to the Source whose context logged
// it and hands it to that Source's logSink; lines no Source claims go to
// the global sink (SetLogger). A line is attributed by its context's
// opaque field (the Source's token, set on its AVFormatContext and
// AVCodecContext, and copied by FFmpeg into frame-thread contexts), else by
// the OS thread it was logged on: a Source's goroutine is locked to its
// thread while its input is open, which catches the contexts vigil cannot
// tag (the codec contexts of avformat_find_stream_info and the parsers,
// the network protocols).
type logRouter struct {
	installOnce sync.Once

	mu      sync.Mutex
	sinks   map[uintptr]*logSink // by token, while a Source's input is open
	threads map[int]uintptr      // OS thread id to token, likewise
	global  *logSink             // nil: drop
	tokens  uintptr              // last token handed out
}

// install makes vigil's C callback FFmpeg's log callback, at
// AV_LOG_WARNING, once per process.
func (r *logRouter) install() {
	r.installOnce.Do(func() {
		astiav.SetLogLevel(astiav.LogLevelWarning)
		C.vigil_log_install()
	})
}

// token returns a new non-zero log token (0 is an untagged context).
func (r *logRouter) token() uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tokens++
	return r.tokens
}

// attach routes lines tagged token, and lines logged on the calling
// goroutine's OS thread, to s until the returned function is called. It
// locks the goroutine to its thread until then; call both on the same
// goroutine.
func (r *logRouter) attach(token uintptr, s *logSink) (detach func()) {
	runtime.LockOSThread()
	tid := int(C.vigil_thread_id())
	r.mu.Lock()
	r.sinks[token] = s
	if tid != 0 {
		r.threads[tid] = token
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.sinks, token)
		if r.threads[tid] == token {
			delete(r.threads, tid)
		}
		r.mu.Unlock()
		runtime.UnlockOSThread()
	}
}

// route returns the sink for a line, nil to drop it.
func (r *logRouter) route(token uintptr, tid int) *logSink {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.sinks[token]; s != nil && token != 0 {
		return s
	}
	if t, ok := r.threads[tid]; ok {
		if s := r.sinks[t]; s != nil {
			return s
		}
	}
	return r.global
}

//export vigilFFmpegLog
func vigilFFmpegLog(token C.uintptr_t, tid C.int, level C.int, format, msg, item *C.char) {
	s := router.route(uintptr(token), int(tid))
	if s == nil {
		return
	}
	s.line(logLine{level: astiav.LogLevel(level), format: C.GoString(format), msg: C.GoString(msg), item: C.GoString(item)})
}

// tagContexts sets the Source's log token as the opaque field of its
// format context and (when not nil) codec context. The codec context must
// be tagged before avcodec_open2, which copies it into frame threads.
func tagContexts(fc *astiav.FormatContext, cc *astiav.CodecContext, token uintptr) {
	var f *C.AVFormatContext
	var c *C.AVCodecContext
	if fc != nil {
		f = (*C.AVFormatContext)(cPointer(unsafe.Pointer(fc)))
	}
	if cc != nil {
		c = (*C.AVCodecContext)(cPointer(unsafe.Pointer(cc)))
	}
	C.vigil_set_opaque(f, c, C.uintptr_t(token))
}

// cPointer reads the C pointer a go-astiav FormatContext or CodecContext
// wraps. go-astiav v0.16.0 does not export it (no UnsafePointer, unlike
// Frame); it is the first field, c, of both structs, as
// TestContextLayouts checks. vigil only reads it, to set the contexts'
// opaque field, which go-astiav does not use.
func cPointer(goStruct unsafe.Pointer) unsafe.Pointer {
	return *(*unsafe.Pointer)(goStruct)
}

// logLine is one FFmpeg log line (or piece of one).
type logLine struct {
	level  astiav.LogLevel
	format string // the printf format: the line's kind
	msg    string
	item   string // the logging context's name, e.g. "h264", "rtsp"
}

// logSink aggregates one stream's FFmpeg lines (or the process-wide rest):
// the first line of a kind (same level and printf format) is logged at
// once; further lines of that kind within interval are only counted, and
// when the interval ends the last of them is logged once with the count
// (field "repeated") and the time they span ("over"). So a kind that keeps
// coming is logged once per interval, and no line is lost without a count.
// A logSink is safe for concurrent use (FFmpeg logs from its threads).
type logSink struct {
	log      *zap.Logger
	interval time.Duration
	// onLine, if set, sees every complete line before aggregation (fault
	// counting); it runs under mu and must be quick.
	onLine func(format, msg string)

	mu      sync.Mutex
	kinds   map[string]*logWindow
	partial *logLine // a line FFmpeg is still writing
	timer   *time.Timer
	gen     int // invalidates a timer that fired after flush stopped it
}

// logWindow is one kind's aggregation window.
type logWindow struct {
	until time.Time // the window ends
	since time.Time // the last line logged
	n     int       // lines counted since then
	last  logLine   // the latest of them
}

func newLogSink(l *zap.Logger, interval time.Duration, onLine func(format, msg string)) *logSink {
	if interval <= 0 {
		interval = DefaultLogInterval
	}
	return &logSink{log: l, interval: interval, onLine: onLine, kinds: map[string]*logWindow{}}
}

// line takes one av_log call's text. FFmpeg writes some lines in pieces
// (no trailing newline, e.g. "Packet corrupt (...)" then ".\n"); pieces
// are joined and the line is of the first piece's kind.
func (s *logSink) line(l logLine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.partial; p != nil {
		s.partial = nil
		p.msg += l.msg
		l = *p
	}
	if !strings.HasSuffix(l.msg, "\n") && len(l.msg) < maxPartialLine {
		s.partial = &l
		return
	}
	s.complete(l, time.Now())
}

// complete handles a whole line.
func (s *logSink) complete(l logLine, now time.Time) {
	// FFmpeg names URLs in some messages; they go through the same
	// redaction as everything else vigil prints.
	l.msg = redact.Text(strings.TrimSpace(l.msg))
	if l.msg == "" {
		return
	}
	if s.onLine != nil {
		s.onLine(l.format, l.msg)
	}
	key := kindOf(l)
	w := s.kinds[key]
	if w == nil && len(s.kinds) >= maxLogKinds {
		key = "\x00other"
		w = s.kinds[key]
	}
	switch {
	case w == nil:
		s.emit(l, 0, 0)
		s.kinds[key] = &logWindow{until: now.Add(s.interval), since: now}
	case !now.Before(w.until): // the timer has not run yet
		s.emit(l, w.n+1, now.Sub(w.since))
		w.until, w.since, w.n = now.Add(s.interval), now, 0
	default:
		w.n++
		w.last = l
	}
	s.arm(now)
}

// kindOf is a line's aggregation key: its level and printf format, or its
// text when the format is only verbs (e.g. "%s").
func kindOf(l logLine) string {
	k := l.format
	if f := strings.TrimSpace(l.format); f == "%s" || f == "" {
		k = l.msg
	}
	return strconv.Itoa(int(l.level)) + " " + k
}

// emit logs l; repeated > 0 marks a summary of that many lines over d.
func (s *logSink) emit(l logLine, repeated int, d time.Duration) {
	if s.log == nil {
		return
	}
	fields := []zap.Field{zap.String("ctx", l.item)}
	if repeated > 0 {
		fields = append(fields, zap.Int("repeated", repeated), zap.Duration("over", d.Round(time.Millisecond)))
	}
	if l.level <= astiav.LogLevelError {
		s.log.Warn(l.msg, fields...)
	} else {
		s.log.Debug(l.msg, fields...)
	}
}

// arm starts the timer that ends the earliest window, unless it runs.
func (s *logSink) arm(now time.Time) {
	if s.timer != nil || len(s.kinds) == 0 {
		return
	}
	next := now.Add(s.interval)
	for _, w := range s.kinds {
		if w.until.Before(next) {
			next = w.until
		}
	}
	gen := s.gen
	s.timer = time.AfterFunc(next.Sub(now), func() { s.tick(gen) })
}

// tick ends the windows that are over.
func (s *logSink) tick(gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	s.timer = nil
	now := time.Now()
	for k, w := range s.kinds {
		if now.Before(w.until) {
			continue
		}
		if w.n == 0 {
			delete(s.kinds, k)
			continue
		}
		s.emit(w.last, w.n, now.Sub(w.since))
		w.until, w.since, w.n = now.Add(s.interval), now, 0
	}
	s.arm(now)
}

// flush logs every count still pending and a line still being written,
// and stops the timer. With reset it also forgets the windows, so that the
// next line of each kind is logged at once.
func (s *logSink) flush(reset bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if p := s.partial; p != nil {
		s.partial = nil
		s.complete(*p, now)
	}
	for _, w := range s.kinds {
		if w.n > 0 {
			s.emit(w.last, w.n, now.Sub(w.since))
			w.since, w.n = now, 0
		}
	}
	if reset {
		clear(s.kinds)
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.gen++
}
