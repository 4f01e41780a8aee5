package cuda

import (
	"errors"
	"strconv"
	"strings"
)

// ErrNoDriver is wrapped by the error of Init (and so of every constructor)
// when libcuda.so.1 cannot be loaded, lacks a function this package needs,
// or cuInit reports that there is no usable device (CUDA_ERROR_NO_DEVICE,
// CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_SYSTEM_NOT_READY,
// CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE).
// Test with errors.Is; the caller is expected to fall back to the CPU.
var ErrNoDriver = errors.New("cuda: no NVIDIA driver found")

// ErrNoNVRTC is wrapped by the error of CompileModule and NVRTCVersion when
// no NVRTC library could be loaded; the message lists the names tried.
var ErrNoNVRTC = errors.New("cuda: no NVRTC library found")

// ErrClosed is wrapped by the error of a method called on a nil or zero
// object, or on one already released, destroyed, freed or unloaded.
var ErrClosed = errors.New("cuda: object is nil, released or destroyed")

// Error is a failed CUDA driver API call: CUresult Code != 0 returned by
// the function named in Op.
type Error struct {
	// Op is the driver function, by its cuda.h name (e.g. "cuMemAlloc").
	// When making the context current failed first, Op is
	// "cuCtxSetCurrent (before cuMemAlloc)".
	Op string
	// Code is the CUresult (e.g. 2).
	Code int
	// Name is cuGetErrorName's text (e.g. "CUDA_ERROR_OUT_OF_MEMORY").
	Name string
	// Desc is cuGetErrorString's text (e.g. "out of memory").
	Desc string
}

// Error formats e as "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
func (e *Error) Error() string { return "cuda: " + e.detail() }

// detail is Error without the "cuda: " prefix.
func (e *Error) detail() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	name := e.Name
	if name == "" {
		name = "CUresult"
	}
	b.WriteString(name)
	b.WriteString(" (")
	b.WriteString(strconv.Itoa(e.Code))
	b.WriteString(")")
	if e.Desc != "" {
		b.WriteString(": ")
		b.WriteString(e.Desc)
	}
	return b.String()
}

// NVRTCError is a failed NVRTC call: nvrtcResult Code != 0 returned by the
// function named in Op (e.g. "nvrtcCompileProgram").
type NVRTCError struct {
	// Op is the NVRTC function.
	Op string
	// Code is the nvrtcResult (e.g. 6).
	Code int
	// Name is nvrtcGetErrorString's text (e.g. "NVRTC_ERROR_COMPILATION").
	Name string
	// Log is the program's compile log (nvrtcGetProgramLog), empty when
	// the failure came before compiling. Its lines name the program and the
	// source line: "kernels.cu(12): error: ...".
	Log string
}

// Error formats e as "cuda: nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6)"
// followed, when there is a log, by a colon, a newline and the log.
func (e *NVRTCError) Error() string {
	name := e.Name
	if name == "" {
		name = "nvrtcResult"
	}
	s := "cuda: " + e.Op + ": " + name + " (" + strconv.Itoa(e.Code) + ")"
	if log := strings.TrimSpace(e.Log); log != "" {
		s += ":\n" + log
	}
	return s
}

// newError builds the *Error for a driver call that returned code.
func newError(op string, code int) *Error {
	name, desc := cErrorText(code)
	return &Error{Op: op, Code: code, Name: name, Desc: desc}
}

// check turns a wrapper's return into nil or an *Error. A negative value is
// the CUresult of cuCtxSetCurrent, which the wrapper calls before op.
func check(op string, r cResult) error {
	switch {
	case r == 0:
		return nil
	case r < 0:
		return newError("cuCtxSetCurrent (before "+op+")", int(-r))
	default:
		return newError(op, int(r))
	}
}

// nvrtcError builds the *NVRTCError for an NVRTC call that returned code.
func nvrtcError(op string, code cResult, log string) *NVRTCError {
	return &NVRTCError{Op: op, Code: int(code), Name: cNVRTCErrorString(int(code)), Log: log}
}

// closedError wraps ErrClosed with what was used.
func closedError(what string) error {
	return &wrapped{msg: "cuda: " + what + " is nil, released or destroyed", errs: []error{ErrClosed}}
}

// wrapped is an error with its own message that wraps several errors
// (errors.Is and errors.As see each).
type wrapped struct {
	msg  string
	errs []error
}

func (w *wrapped) Error() string   { return w.msg }
func (w *wrapped) Unwrap() []error { return w.errs }
