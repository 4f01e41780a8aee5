package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Stream is a CUDA stream created with CU_STREAM_NON_BLOCKING: it does not
// synchronize with the legacy default stream. Work on one stream runs in
// order. A Stream may be used from several goroutines, but Destroy must not
// race with its other uses.
//
// Where a method takes a *Stream, nil means the legacy default stream
// (stream 0), which cannot be captured into a graph.
type Stream struct {
	ctx uintptr
	h   atomic.Uintptr // CUstream
}

// NewStream creates a stream (cuStreamCreate with CU_STREAM_NON_BLOCKING).
// It returns an ErrClosed error after Release, or an *Error.
func (c *Context) NewStream() (*Stream, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	s, r := cStreamCreate(h, cuStreamNonBlocking)
	if err := check("cuStreamCreate", r); err != nil {
		return nil, err
	}
	st := &Stream{ctx: h}
	st.h.Store(s)
	return st, nil
}

// Handle returns the CUstream as an integer, e.g. for ONNX Runtime's
// user_compute_stream option; 0 once destroyed (and for nil, which is the
// legacy default stream).
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	return s.h.Load()
}

// handle returns the CUstream, or an ErrClosed error.
func (s *Stream) handle() (uintptr, error) {
	if s == nil {
		return 0, closedError("stream")
	}
	h := s.h.Load()
	if h == 0 {
		return 0, closedError("stream")
	}
	return h, nil
}

// streamArg is the CUstream for a *Stream argument: 0 (the legacy default
// stream) for nil, an ErrClosed error for a destroyed stream.
func streamArg(s *Stream) (uintptr, error) {
	if s == nil {
		return 0, nil
	}
	return s.handle()
}

// Synchronize blocks until all work queued on the stream has finished
// (cuStreamSynchronize). It returns an ErrClosed error for a destroyed
// stream, or an *Error, which may report a failure of earlier
// asynchronous work.
func (s *Stream) Synchronize() error {
	h, err := s.handle()
	if err != nil {
		return err
	}
	return check("cuStreamSynchronize", cStreamSynchronize(s.ctx, h))
}

// WaitEvent makes later work on the stream wait until the work that e last
// recorded has finished, without blocking the host (cuStreamWaitEvent).
// It returns an ErrClosed error for a destroyed stream or event, or an
// *Error.
func (s *Stream) WaitEvent(e *Event) error {
	h, err := s.handle()
	if err != nil {
		return err
	}
	eh, err := e.handle()
	if err != nil {
		return err
	}
	return check("cuStreamWaitEvent", cStreamWaitEvent(s.ctx, h, eh))
}

// Destroy destroys the stream (cuStreamDestroy); work already queued still
// runs. Calling it again, or on nil, does nothing and returns nil. It
// returns an *Error if the driver refuses.
func (s *Stream) Destroy() error {
	if s == nil {
		return nil
	}
	h := s.h.Swap(0)
	if h == 0 {
		return nil
	}
	return check("cuStreamDestroy", cStreamDestroy(s.ctx, h))
}

// CaptureMode is a CUstreamCaptureMode: which CUDA calls that are unsafe
// during a capture (synchronous copies, allocations, ...) the driver
// forbids while it runs, and in which threads.
type CaptureMode int

const (
	// CaptureGlobal forbids unsafe calls in every thread of the process
	// (CU_STREAM_CAPTURE_MODE_GLOBAL).
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal forbids unsafe calls in the capturing thread only
	// (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed forbids nothing (CU_STREAM_CAPTURE_MODE_RELAXED).
	CaptureRelaxed CaptureMode = 2
)

// String names the mode as cuda.h does.
func (m CaptureMode) String() string {
	switch m {
	case CaptureGlobal:
		return "CU_STREAM_CAPTURE_MODE_GLOBAL"
	case CaptureThreadLocal:
		return "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL"
	case CaptureRelaxed:
		return "CU_STREAM_CAPTURE_MODE_RELAXED"
	}
	return fmt.Sprintf("CaptureMode(%d)", int(m))
}

// Capture records the work that fn queues on the stream into a graph
// instead of running it (cuStreamBeginCapture, fn, cuStreamEndCapture).
// The calling goroutine is locked to its OS thread from begin to end, as
// the driver requires the same thread to end a thread-local capture
// (otherwise CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, 908); fn must queue
// its work from that goroutine.
//
// If fn returns an error (or panics), the capture is ended, the partial
// graph destroyed and fn's error returned (or the panic continued). Other
// errors: ErrClosed for a nil or destroyed stream, or an *Error, e.g.
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED from cuStreamEndCapture when fn
// made a call that capture forbids.
func (s *Stream) Capture(mode CaptureMode, fn func() error) (*Graph, error) {
	h, err := s.handle()
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("cuda: Capture: fn is nil")
	}
	if mode < CaptureGlobal || mode > CaptureRelaxed {
		return nil, fmt.Errorf("cuda: Capture: unknown capture mode %d", int(mode))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuStreamBeginCapture", cStreamBeginCapture(s.ctx, h, int(mode))); err != nil {
		return nil, err
	}
	ended := false
	defer func() {
		if !ended { // fn panicked
			if g, _ := cStreamEndCapture(s.ctx, h); g != 0 {
				cGraphDestroy(s.ctx, g)
			}
		}
	}()
	fnErr := fn()
	g, r := cStreamEndCapture(s.ctx, h)
	ended = true
	if fnErr != nil {
		if g != 0 {
			cGraphDestroy(s.ctx, g)
		}
		return nil, fnErr
	}
	if err := check("cuStreamEndCapture", r); err != nil {
		if g != 0 {
			cGraphDestroy(s.ctx, g)
		}
		return nil, err
	}
	gr := &Graph{ctx: s.ctx}
	gr.h.Store(g)
	return gr, nil
}

// Graph is a captured CUDA graph: a template of work, run by
// instantiating it into a GraphExec.
type Graph struct {
	ctx uintptr
	h   atomic.Uintptr // CUgraph
}

// Instantiate makes an executable graph of g
// (cuGraphInstantiateWithFlags, flags 0). g may be destroyed afterwards.
// It returns an ErrClosed error for a destroyed graph, or an *Error.
func (g *Graph) Instantiate() (*GraphExec, error) {
	if g == nil {
		return nil, closedError("graph")
	}
	gh := g.h.Load()
	if gh == 0 {
		return nil, closedError("graph")
	}
	x, r := cGraphInstantiate(g.ctx, gh)
	if err := check("cuGraphInstantiateWithFlags", r); err != nil {
		return nil, err
	}
	ex := &GraphExec{ctx: g.ctx}
	ex.h.Store(x)
	return ex, nil
}

// Destroy destroys the graph (cuGraphDestroy); executable graphs made
// from it are not affected. Calling it again, or on nil, does nothing and
// returns nil. It returns an *Error if the driver refuses.
func (g *Graph) Destroy() error {
	if g == nil {
		return nil
	}
	h := g.h.Swap(0)
	if h == 0 {
		return nil
	}
	return check("cuGraphDestroy", cGraphDestroy(g.ctx, h))
}

// GraphExec is an executable graph, launched as one unit of work on a
// stream: one host call for all the kernels and copies it holds.
type GraphExec struct {
	ctx uintptr
	h   atomic.Uintptr // CUgraphExec
}

// Launch queues the whole graph on s (cuGraphLaunch); it runs after the
// work already on s. A graph runs one launch at a time. It returns an
// ErrClosed error for a destroyed graph or stream, or an *Error.
func (x *GraphExec) Launch(s *Stream) error {
	if x == nil {
		return closedError("graph exec")
	}
	xh := x.h.Load()
	if xh == 0 {
		return closedError("graph exec")
	}
	sh, err := streamArg(s)
	if err != nil {
		return err
	}
	return check("cuGraphLaunch", cGraphLaunch(x.ctx, xh, sh))
}

// Destroy destroys the executable graph (cuGraphExecDestroy). Calling it
// again, or on nil, does nothing and returns nil. It returns an *Error if
// the driver refuses.
func (x *GraphExec) Destroy() error {
	if x == nil {
		return nil
	}
	h := x.h.Swap(0)
	if h == 0 {
		return nil
	}
	return check("cuGraphExecDestroy", cGraphExecDestroy(x.ctx, h))
}

// Event is a CUDA event: a marker recorded in a stream's work, to wait on
// or to time between.
type Event struct {
	ctx    uintptr
	h      atomic.Uintptr // CUevent
	timing bool
}

// NewEvent creates an event (cuEventCreate); with timing false it is
// created with CU_EVENT_DISABLE_TIMING, which is cheaper to record and
// wait on but cannot be passed to Elapsed. It returns an ErrClosed error
// after Release, or an *Error.
func (c *Context) NewEvent(timing bool) (*Event, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	var flags uint
	if !timing {
		flags = cuEventDisableTiming
	}
	e, r := cEventCreate(h, flags)
	if err := check("cuEventCreate", r); err != nil {
		return nil, err
	}
	ev := &Event{ctx: h, timing: timing}
	ev.h.Store(e)
	return ev, nil
}

// handle returns the CUevent, or an ErrClosed error.
func (e *Event) handle() (uintptr, error) {
	if e == nil {
		return 0, closedError("event")
	}
	h := e.h.Load()
	if h == 0 {
		return 0, closedError("event")
	}
	return h, nil
}

// Record marks the current end of s's work (cuEventRecord); the event
// completes when that work has. Recording again moves the mark. It returns
// an ErrClosed error for a destroyed event or stream, or an *Error.
func (e *Event) Record(s *Stream) error {
	h, err := e.handle()
	if err != nil {
		return err
	}
	sh, err := streamArg(s)
	if err != nil {
		return err
	}
	return check("cuEventRecord", cEventRecord(e.ctx, h, sh))
}

// Synchronize blocks until the recorded work has finished
// (cuEventSynchronize); at once if the event was never recorded. It
// returns an ErrClosed error for a destroyed event, or an *Error.
func (e *Event) Synchronize() error {
	h, err := e.handle()
	if err != nil {
		return err
	}
	return check("cuEventSynchronize", cEventSynchronize(e.ctx, h))
}

// Done reports, without blocking, whether the recorded work has finished
// (cuEventQuery; CUDA_ERROR_NOT_READY is false, nil). It returns an
// ErrClosed error for a destroyed event, or an *Error.
func (e *Event) Done() (bool, error) {
	h, err := e.handle()
	if err != nil {
		return false, err
	}
	r := cEventQuery(e.ctx, h)
	if r == cudaErrorNotReady {
		return false, nil
	}
	if err := check("cuEventQuery", r); err != nil {
		return false, err
	}
	return true, nil
}

// Destroy destroys the event (cuEventDestroy). Calling it again, or on
// nil, does nothing and returns nil. It returns an *Error if the driver
// refuses.
func (e *Event) Destroy() error {
	if e == nil {
		return nil
	}
	h := e.h.Swap(0)
	if h == 0 {
		return nil
	}
	return check("cuEventDestroy", cEventDestroy(e.ctx, h))
}

// Elapsed returns the GPU time between two recorded, completed events
// (cuEventElapsedTime, whose float milliseconds have a resolution of about
// 0.5 µs). Both must have been created with timing (an error otherwise).
// It returns an ErrClosed error for a destroyed event, or an *Error
// (CUDA_ERROR_NOT_READY if end has not completed).
func Elapsed(start, end *Event) (time.Duration, error) {
	a, err := start.handle()
	if err != nil {
		return 0, err
	}
	b, err := end.handle()
	if err != nil {
		return 0, err
	}
	if !start.timing || !end.timing {
		return 0, errors.New("cuda: Elapsed: an event was created without timing (NewEvent(false))")
	}
	ms, r := cEventElapsedTime(start.ctx, a, b)
	if err := check("cuEventElapsedTime", r); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
