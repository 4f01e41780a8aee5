package cuda

import "sync"

// captureMu orders, across the whole process, CUDA stream captures in
// global mode against the calls such a capture forbids on other threads.
//
// ONNX Runtime's CUDA and TensorRT providers capture their CUDA graph with
// cudaStreamCaptureModeGlobal, once per session, on one of the first runs
// (the GPU engine's warm-up). While a capture in global mode is under way,
// any thread of the process that makes a "potentially unsafe" call
// (cuMemAlloc, cuMemFree, a synchronising copy, cuvidMapVideoFrame's
// implicit work...) fails it and invalidates the capture (CUDA Programming
// Guide, "Prohibited and Unhandled Operations"; seen on the H200:
// cudaErrorStreamCaptureInvalidated, then illegal memory accesses). Code
// that may capture takes Exclusive; code that makes such calls beside a
// possible capture (NVDEC's sessions, engine runs, allocations) takes
// Shared. Replays of captured graphs capture nothing and take Shared.
var captureMu sync.RWMutex

// Exclusive takes the capture lock for a section that may begin a CUDA
// stream capture in global mode (an ONNX Runtime session's creation and
// warm-up with CUDA graphs on) and returns its unlock. No Shared section
// runs meanwhile.
func Exclusive() (unlock func()) {
	captureMu.Lock()
	return captureMu.Unlock
}

// Shared takes the capture lock shared, for CUDA calls that must not run
// during another thread's capture in global mode, and returns its unlock.
// Shared sections run beside each other. Hold it for short stretches of
// CUDA work only, never while waiting for something another Shared
// section must release: a waiting Exclusive holds back new Shared sections.
func Shared() (unlock func()) {
	captureMu.RLock()
	return captureMu.RUnlock
}
