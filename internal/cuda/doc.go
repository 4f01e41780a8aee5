// Package cuda is a small binding of the CUDA driver API and NVRTC, both
// loaded at run time with dlopen: it builds without CUDA headers or
// libraries, and on a machine without an NVIDIA driver every constructor
// returns an error wrapping ErrNoDriver instead of failing to start.
//
// It works in the device's primary context (Primary), the one the CUDA
// runtime uses, so buffers and streams can be handed to libraries built on
// the runtime such as ONNX Runtime's CUDA execution provider. Every call
// makes the context current on the OS thread it runs on, so objects may be
// used from any goroutine.
//
// What it wraps: streams and events (Stream, Event, Elapsed), device and
// pinned host memory and copies between them (DeviceBuffer, HostBuffer,
// Context.Copy*), kernels compiled from source at run time (CompileModule,
// Function.Launch), CUDA graphs captured from a stream (Stream.Capture,
// GraphExec.Launch) and NVDEC, NVIDIA's video decoder, driven directly
// through libnvcuvid.so.1, loaded with dlopen too (VideoDecoder: the cuvid
// parser and a decoder per stream, in the primary context, with no
// cuvidCtxLock; LoadNVDEC, ErrNoNVDEC). Sizes are in bytes.
//
// Errors: a failed driver call is an *Error (CUresult, with the driver's
// name and description for it), a failed NVRTC call an *NVRTCError (with
// the compile log); a method on a released or destroyed object returns an
// error wrapping ErrClosed. Release, Destroy, Free and Unload are
// idempotent and nil-safe; nothing is released by finalizers.
//
// Where a method takes a *Stream, nil means the legacy default stream.
//
// The tests that need a GPU are behind the "gpu" build tag:
//
//	go test -tags gpu ./internal/cuda
package cuda
