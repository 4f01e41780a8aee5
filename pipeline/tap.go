package pipeline

import (
	"errors"
	"image"
	"slices"
	"sync"
	"sync/atomic"
)

// Picture is a decoded frame's pixels copied into Go memory, at the
// frame's own size (before any letterbox): whoever receives it owns it,
// and no decoder buffer stays behind it.
type Picture struct {
	// Image holds 8-bit 4:2:0 YCbCr planes (image.YCbCrSubsampleRatio420);
	// Image.Rect is (0,0)-(width,height).
	Image *image.YCbCr
	// FullRange: samples use 0..255 (JPEG/"full" range); otherwise luma
	// is 16..235 and chroma 16..240 (MPEG/"limited" range), which an
	// encoder for JPEG expands first.
	FullRange bool
}

// pictures recycles picture buffers: a watched stream copies a frame
// every few hundred milliseconds, and fresh half-megabyte buffers would
// keep the garbage collector busy (its assists slow every goroutine).
var pictures sync.Pool

// NewPicture returns a picture of w×h pixels (4:2:0) whose samples are to
// be overwritten: a buffer given back with Free when one of that size is
// at hand, else a new one.
func NewPicture(w, h int) *Picture {
	if p, _ := pictures.Get().(*Picture); p != nil && p.Image.Rect.Dx() == w && p.Image.Rect.Dy() == h {
		p.FullRange = false
		return p
	}
	return &Picture{Image: image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)}
}

// Free gives p's buffer back for another NewPicture; p must not be used
// after it.
func (p *Picture) Free() { pictures.Put(p) }

// Copier is implemented by images whose pixels can be copied out
// (decode.Picture of a frame decoded on the CPU). CopyPicture returns a
// copy the caller owns; an error wrapping ErrNoPicture when the frame
// cannot be copied here (it is in GPU memory, or in a pixel format other
// than 8-bit 4:2:0).
type Copier interface {
	CopyPicture() (*Picture, error)
}

// ErrNoPicture is wrapped by Copier errors for frames that cannot be
// copied out (GPU frames, other pixel formats): a stream whose frames are
// such has no pictures, and the API answers 501 for it.
var ErrNoPicture = errors.New("no picture of this frame can be copied")

// TapFrame is one processed frame handed to a Tap's consumer: its picture
// (or why there is none) and its result.
type TapFrame struct {
	// Picture is the frame's pixels; nil when Err is set.
	Picture *Picture
	// Err says why there is no Picture (wraps ErrNoPicture when the image
	// is not a Copier or cannot be copied).
	Err error
	// Result is the frame's result as the sink published it; its
	// Detections are the tap's own copy (their Zones slices are shared
	// and read-only).
	Result Result
	// Message is the detections message of the frame exactly as the sink
	// sent it (Result.Message), nil when the sink does not say.
	Message []byte
	// Marks are what Tap.Mark added while this frame was analyzed, in
	// order; nil when the frame was only requested.
	Marks []any
}

// Tap hands copies of one stream's processed frames to a consumer,
// without ever blocking the stream: while nobody asks (Request, Mark), it
// costs the worker one atomic load per frame. When asked, the worker
// copies the next processed frame's pixels (before releasing its image)
// and, once the result is published, calls the deliver function given to
// NewTap with it. The consumer decides what to keep; deliver must not
// block (package live keeps a single slot, the newest frame, per stream).
//
// A Tap belongs to a stream id and outlives the stream's runs; it must
// be given to one running stream at a time (StreamConfig.Tap).
type Tap struct {
	want    atomic.Bool
	deliver func(*TapFrame)

	mu    sync.Mutex
	marks []any
}

// NewTap returns a tap that hands frames to deliver, which is called on
// the stream's worker goroutine and must return at once.
func NewTap(deliver func(*TapFrame)) *Tap { return &Tap{deliver: deliver} }

// Request asks for the next frame the stream processes (the worker takes
// it after the Analyzer, so a call from Analyze gets the frame being
// analyzed). Requests before that frame are one request; a frame lost after the copy (an engine or
// publish error) leaves the request standing. Safe from any goroutine.
func (t *Tap) Request() { t.want.Store(true) }

// Mark asks for the frame being analyzed now and hands v to the consumer
// with it (TapFrame.Marks). Call it only from Analyzer.Analyze, on the
// stream's worker goroutine, so that v goes with that very frame.
func (t *Tap) Mark(v any) {
	t.mu.Lock()
	t.marks = append(t.marks, v)
	t.mu.Unlock()
	t.want.Store(true)
}

// take reports whether the current frame is wanted, clearing the request
// (the worker's per-frame check: one atomic load when nobody asks).
func (t *Tap) take() bool {
	if t == nil || !t.want.Load() {
		return false
	}
	return t.want.Swap(false)
}

// copyOf copies img's pixels for the tap.
func copyOf(img Image) (*Picture, error) {
	c, ok := img.(Copier)
	if !ok {
		return nil, ErrNoPicture
	}
	return c.CopyPicture()
}

// hand gives the consumer a frame whose pixels were copied (pic, or err)
// and whose result r was published; the marks made while it was analyzed
// go with it.
func (t *Tap) hand(pic *Picture, err error, r *Result) {
	t.mu.Lock()
	marks := t.marks
	t.marks = nil
	t.mu.Unlock()
	tf := &TapFrame{Picture: pic, Err: err, Result: *r, Message: r.Message, Marks: marks}
	tf.Result.Detections = slices.Clone(r.Detections)
	tf.Result.Message = nil
	t.deliver(tf)
}

// rearm puts back the request of a frame lost after it was copied, so
// that the next frame is taken instead (its marks wait for it too).
func (t *Tap) rearm() { t.want.Store(true) }
