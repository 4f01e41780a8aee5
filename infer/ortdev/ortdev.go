// Package ortdev runs ONNX models through ONNX Runtime's C API with their
// inputs and outputs bound (OrtIoBinding) to memory the caller owns: CUDA
// device buffers for the GPU engine, C-heap buffers on the CPU. It chooses
// the execution provider from a fallback chain (TensorRT, then CUDA, then
// CPU by default) and says which one it took and why.
//
// onnxruntime_go, which vigil uses for the CPU engine, has no IoBinding and
// no way to hand ORT a CUDA stream, so this package is a small cgo shim over
// OrtApi (C API version 24, header vendored from onnxruntime_go v1.27.0, MIT,
// Microsoft). It opens the same library file as infer.InitRuntime, so both
// share one ORT instance and one OrtEnv.
package ortdev

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// Provider names an ONNX Runtime execution provider as vigil's configs
// spell it.
type Provider string

// The execution providers vigil can ask for.
const (
	CPU      Provider = "cpu"
	CUDA     Provider = "cuda"
	TensorRT Provider = "tensorrt"
)

// DefaultChain is the order tried when Options.Providers is empty.
var DefaultChain = []Provider{TensorRT, CUDA, CPU}

// ParseProvider checks a provider name from a config or flag. Errors name
// the value and the known names.
func ParseProvider(s string) (Provider, error) {
	switch p := Provider(strings.ToLower(strings.TrimSpace(s))); p {
	case CPU, CUDA, TensorRT:
		return p, nil
	}
	return "", fmt.Errorf("unknown execution provider %q (want tensorrt, cuda or cpu)", s)
}

// ElemType is an ONNX tensor element type (ONNXTensorElementDataType).
type ElemType int

// Element types vigil binds: 32-bit float (4 bytes) and IEEE half (2 bytes).
const (
	Float32 ElemType = 1
	Float16 ElemType = 10
)

// Size is the element size in bytes.
func (t ElemType) Size() int {
	if t == Float16 {
		return 2
	}
	return 4
}

// TensorRTOptions are the TensorRT execution provider's settings (keys of
// OrtTensorRTProviderOptionsV2, ORT's TensorRT EP documentation).
type TensorRTOptions struct {
	// FP16 lets TensorRT pick half-precision kernels (trt_fp16_enable).
	FP16 bool
	// INT8 enables 8-bit kernels (trt_int8_enable); it needs
	// INT8CalibrationTable, a calibration table file
	// (trt_int8_calibration_table_name, resolved inside EngineCacheDir by ORT).
	INT8                 bool
	INT8CalibrationTable string
	// EngineCacheDir keeps built engines between runs
	// (trt_engine_cache_enable, trt_engine_cache_path); building an engine
	// takes seconds to minutes, loading one from the cache milliseconds.
	EngineCacheDir string
	// TimingCacheDir keeps layer timings between builds
	// (trt_timing_cache_enable, trt_timing_cache_path).
	TimingCacheDir string
	// CUDAGraph captures each run into a CUDA graph (trt_cuda_graph_enable).
	CUDAGraph bool
	// ProfileShapes is a fixed optimisation profile, "input:8x3x416x416",
	// set as min, opt and max (trt_profile_{min,opt,max}_shapes); see
	// FixedProfile.
	ProfileShapes string
	// MaxWorkspaceBytes bounds TensorRT's build workspace
	// (trt_max_workspace_size); 0 leaves ORT's default.
	MaxWorkspaceBytes int64
}

// Options configure Open.
type Options struct {
	// Model is the .onnx file.
	Model string
	// Providers are tried in order until a session opens; nil means
	// DefaultChain.
	Providers []Provider
	// DeviceID is the CUDA device ordinal for the cuda and tensorrt providers.
	DeviceID int
	// ComputeStream, when non-zero, is a CUstream (cudaStream_t) that the
	// cuda and tensorrt providers run on (user_compute_stream), so that ORT's
	// kernels are ordered with the caller's own work on that stream.
	ComputeStream uintptr
	// CUDAGraph sets the CUDA EP's enable_cuda_graph: after warm-up each
	// Run replays one captured CUDA graph. Bound addresses must then stay
	// fixed for the life of the session.
	CUDAGraph bool
	// TF32 lets the CUDA EP use TF32 tensor-core maths (use_tf32): faster
	// convolutions, less precise results.
	TF32 bool
	// NHWC asks the CUDA EP to run convolutions and the ops around them in
	// channels-last layout (prefer_nhwc), which cuDNN's tensor-core kernels
	// prefer; ORT inserts the transposes. A build without NHWC kernels
	// ignores it.
	NHWC bool
	// ConvAlgoSearch is the CUDA EP's cudnn_conv_algo_search: how cuDNN
	// picks each convolution's algorithm, ConvSearchExhaustive (ORT's
	// default: time them all on the first run), ConvSearchHeuristic (its
	// heuristics, no timing) or ConvSearchDefault (the default algorithm);
	// "" leaves ORT's default.
	ConvAlgoSearch string
	// TensorRT are the TensorRT EP's settings.
	TensorRT TensorRTOptions
	// IntraOpThreads is ORT's CPU thread count (0: ORT's default).
	IntraOpThreads int
	// NoSync sets the run option disable_synchronize_execution_providers:
	// Run returns once the work is queued on the stream instead of waiting
	// for the GPU. The caller orders and waits with CUDA events.
	NoSync bool
	// SessionConfig are extra session config entries (AddSessionConfigEntry).
	SessionConfig map[string]string
}

// The values of Options.ConvAlgoSearch, as the CUDA EP spells them
// (OrtCudnnConvAlgoSearch in onnxruntime_c_api.h).
const (
	ConvSearchExhaustive = "EXHAUSTIVE"
	ConvSearchHeuristic  = "HEURISTIC"
	ConvSearchDefault    = "DEFAULT"
)

// ParseConvAlgoSearch checks a cudnn_conv_algo_search value from a config
// (any case; "" is ORT's default, exhaustive) and returns the CUDA EP's
// spelling. Errors name the value and the known ones.
func ParseConvAlgoSearch(s string) (string, error) {
	switch v := strings.ToUpper(strings.TrimSpace(s)); v {
	case "", ConvSearchExhaustive, ConvSearchHeuristic, ConvSearchDefault:
		return v, nil
	}
	return "", fmt.Errorf("cudnn_conv_algo_search %q: want exhaustive, heuristic or default", s)
}

// FixedProfile formats a TensorRT profile shape for one input,
// "name:d0xd1x...", e.g. FixedProfile("input", []int64{8,3,416,416}) =
// "input:8x3x416x416".
func FixedProfile(input string, shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return input + ":" + strings.Join(parts, "x")
}

var lib struct {
	mu   sync.Mutex
	path string
	err  error
}

// Init opens ONNX Runtime at libPath (normally the path infer.InitRuntime
// loaded) and takes its C API. It is idempotent for one path; a second,
// different path is an error. Errors name the path.
func Init(libPath string) error {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if lib.path != "" {
		if lib.path != libPath {
			return fmt.Errorf("ortdev: already using %s, cannot use %s too", lib.path, libPath)
		}
		return lib.err
	}
	lib.path = libPath
	cp := C.CString(libPath)
	defer C.free(unsafe.Pointer(cp))
	if e := C.vg_init(cp); e != nil {
		lib.err = fmt.Errorf("ortdev: loading onnxruntime %s: %s", libPath, takeMsg(e))
	}
	return lib.err
}

func takeMsg(e *C.char) string {
	s := C.GoString(e)
	C.free(unsafe.Pointer(e))
	return s
}

func cerr(op string, e *C.char) error {
	if e == nil {
		return nil
	}
	return fmt.Errorf("onnxruntime %s: %s", op, takeMsg(e))
}

// Session is one ONNX Runtime session with an IoBinding. It is not safe for
// concurrent use: the caller serialises Bind and Run.
type Session struct {
	s        *C.vg_session
	provider Provider
	choice   string
	inputs   []string
	outputs  []string
	device   int
}

// Open creates a session with the first provider of o.Providers that
// works, in order. A provider is skipped when ORT cannot append it (its
// provider library or a dependency such as libnvinfer or libcudart is
// missing) or cannot create the session with it (no GPU, a model the
// provider refuses). Choice then says which provider was taken and why
// the ones before it were not. The error, when none works, lists every
// provider's failure.
func Open(o Options) (*Session, error) {
	lib.mu.Lock()
	ok := lib.path != "" && lib.err == nil
	lib.mu.Unlock()
	if !ok {
		return nil, errors.New("ortdev: Init has not succeeded")
	}
	chain := o.Providers
	if len(chain) == 0 {
		chain = DefaultChain
	}
	var skipped []string
	for _, p := range chain {
		s, err := open(o, p)
		if err == nil {
			s.choice = choiceLine(p, skipped)
			return s, nil
		}
		skipped = append(skipped, fmt.Sprintf("%s unavailable: %s", p, firstLine(err.Error())))
	}
	return nil, fmt.Errorf("model %s: no execution provider works (%s)", o.Model, strings.Join(skipped, "; "))
}

func choiceLine(p Provider, skipped []string) string {
	if len(skipped) == 0 {
		return fmt.Sprintf("execution provider %s (first choice)", p)
	}
	return fmt.Sprintf("execution provider %s (%s)", p, strings.Join(skipped, "; "))
}

// firstLine keeps ORT's messages to one line: provider load errors carry
// the dlopen text, which is what an operator needs.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	// "<source>:<line> <function> [ONNXRuntimeError] : 1 : FAIL : <text>":
	// only <text> means anything to an operator.
	if i := strings.LastIndex(s, "[ONNXRuntimeError] : "); i >= 0 {
		rest := s[i+len("[ONNXRuntimeError] : "):]
		if j := strings.Index(rest, " : "); j >= 0 {
			if k := strings.Index(rest[j+3:], " : "); k >= 0 {
				rest = rest[j+3+k+3:]
			}
		}
		s = rest
	}
	return strings.TrimSpace(s)
}

// ProviderOptions returns the provider option keys and values Open passes
// for p (empty for the CPU provider); exported for tests and for `vigil
// doctor` to show.
func ProviderOptions(o Options, p Provider) map[string]string {
	m := map[string]string{}
	dev := strconv.Itoa(o.DeviceID)
	stream := func() {
		if o.ComputeStream != 0 {
			m["has_user_compute_stream"] = "1"
			m["user_compute_stream"] = strconv.FormatUint(uint64(o.ComputeStream), 10)
		}
	}
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	switch p {
	case CUDA:
		m["device_id"] = dev
		m["enable_cuda_graph"] = b(o.CUDAGraph)
		// TF32 tensor-core maths (the CUDA EP's default on Ampere and
		// later) rounds inputs to a 10-bit mantissa; detections then drift
		// from the CPU engine's. fp32 keeps the two engines in agreement.
		m["use_tf32"] = b(o.TF32)
		m["prefer_nhwc"] = b(o.NHWC)
		if o.ConvAlgoSearch != "" {
			m["cudnn_conv_algo_search"] = o.ConvAlgoSearch
		}
		stream()
	case TensorRT:
		t := o.TensorRT
		m["device_id"] = dev
		m["trt_fp16_enable"] = b(t.FP16)
		m["trt_int8_enable"] = b(t.INT8)
		if t.INT8CalibrationTable != "" {
			m["trt_int8_calibration_table_name"] = t.INT8CalibrationTable
		}
		if t.EngineCacheDir != "" {
			m["trt_engine_cache_enable"] = "1"
			m["trt_engine_cache_path"] = t.EngineCacheDir
		}
		if t.TimingCacheDir != "" {
			m["trt_timing_cache_enable"] = "1"
			m["trt_timing_cache_path"] = t.TimingCacheDir
		}
		m["trt_cuda_graph_enable"] = b(t.CUDAGraph)
		if t.ProfileShapes != "" {
			m["trt_profile_min_shapes"] = t.ProfileShapes
			m["trt_profile_opt_shapes"] = t.ProfileShapes
			m["trt_profile_max_shapes"] = t.ProfileShapes
		}
		if t.MaxWorkspaceBytes > 0 {
			m["trt_max_workspace_size"] = strconv.FormatInt(t.MaxWorkspaceBytes, 10)
		}
		stream()
	}
	return m
}

// cstrings is a NUL-terminated C string array owned by Go code, freed by free.
type cstrings []*C.char

func newCStrings(ss []string) cstrings {
	out := make(cstrings, len(ss))
	for i, s := range ss {
		out[i] = C.CString(s)
	}
	return out
}

// carray copies the pointers into a C array, which C may read freely.
func (c cstrings) carray() **C.char {
	if len(c) == 0 {
		return nil
	}
	a := (**C.char)(C.malloc(C.size_t(len(c)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
	copy(unsafe.Slice(a, len(c)), c)
	return a
}

func (c cstrings) free() {
	for _, p := range c {
		C.free(unsafe.Pointer(p))
	}
}

func open(o Options, p Provider) (*Session, error) {
	var code C.int
	switch p {
	case CPU:
		code = 0
	case CUDA:
		code = 1
	case TensorRT:
		code = 2
	default:
		return nil, fmt.Errorf("unknown execution provider %q", p)
	}
	if o.TensorRT.INT8 && o.TensorRT.INT8CalibrationTable == "" && p == TensorRT {
		return nil, errors.New("INT8 needs a calibration table (tensorrt.int8_calibration_table)")
	}
	kv := func(m map[string]string) (keys, vals []string) {
		for k, v := range m {
			keys = append(keys, k)
			vals = append(vals, v)
		}
		return keys, vals
	}
	keys, vals := kv(ProviderOptions(o, p))
	var ckeys, cvals []string
	if p == TensorRT { // the CUDA provider behind TensorRT gets the same stream and settings
		ckeys, cvals = kv(ProviderOptions(o, CUDA))
	}
	skeys, svals := kv(o.SessionConfig)
	ck, cv, csk, csv := newCStrings(keys), newCStrings(vals), newCStrings(skeys), newCStrings(svals)
	cck, ccv := newCStrings(ckeys), newCStrings(cvals)
	defer func() {
		ck.free()
		cv.free()
		csk.free()
		csv.free()
		cck.free()
		ccv.free()
	}()
	ak, av, ask, asv, ack, acv := ck.carray(), cv.carray(), csk.carray(), csv.carray(), cck.carray(), ccv.carray()
	defer func() {
		for _, a := range []**C.char{ak, av, ask, asv, ack, acv} {
			C.free(unsafe.Pointer(a))
		}
	}()
	cm := C.CString(o.Model)
	defer C.free(unsafe.Pointer(cm))
	s := &Session{provider: p, device: o.DeviceID}
	if e := C.vg_open(cm, code, ak, av, C.int(len(keys)), ack, acv, C.int(len(ckeys)), ask, asv, C.int(len(skeys)), C.int(o.IntraOpThreads), &s.s); e != nil {
		return nil, errors.New(takeMsg(e))
	}
	if o.NoSync && p != CPU {
		if err := s.runConfig("disable_synchronize_execution_providers", "1"); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.readNames(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Session) runConfig(k, v string) error {
	ck, cv := C.CString(k), C.CString(v)
	defer C.free(unsafe.Pointer(ck))
	defer C.free(unsafe.Pointer(cv))
	return cerr("run option "+k, C.vg_set_run_config(s.s, ck, cv))
}

func (s *Session) readNames() error {
	var nin, nout C.size_t
	if err := cerr("io count", C.vg_io_count(s.s, &nin, &nout)); err != nil {
		return err
	}
	name := func(out int, i C.size_t) (string, error) {
		var p *C.char
		if err := cerr("io name", C.vg_io_name(s.s, C.int(out), i, &p)); err != nil {
			return "", err
		}
		return takeMsg(p), nil
	}
	for i := C.size_t(0); i < nin; i++ {
		n, err := name(0, i)
		if err != nil {
			return err
		}
		s.inputs = append(s.inputs, n)
	}
	for i := C.size_t(0); i < nout; i++ {
		n, err := name(1, i)
		if err != nil {
			return err
		}
		s.outputs = append(s.outputs, n)
	}
	return nil
}

// Provider is the execution provider the session runs on.
func (s *Session) Provider() Provider { return s.provider }

// Choice is one line saying which provider was taken and why the ones
// before it in the chain were not, for the log.
func (s *Session) Choice() string { return s.choice }

// Inputs and Outputs are the model's tensor names in graph order.
func (s *Session) Inputs() []string  { return s.inputs }
func (s *Session) Outputs() []string { return s.outputs }

// BindDevice binds the named input (output=false) or output to bytes of
// CUDA device memory at ptr (a CUdeviceptr on Options.DeviceID), as a
// tensor of the given shape and element type. The memory must stay
// allocated, and for CUDA-graph sessions at the same address, until Close.
// Errors: a CPU session, a size that does not match the shape, or ORT's.
func (s *Session) BindDevice(name string, output bool, ptr uintptr, bytes int, shape []int64, t ElemType) error {
	if s.provider == CPU {
		return fmt.Errorf("ortdev: %s: cannot bind device memory to a cpu session", name)
	}
	return s.bind(name, output, true, ptr, bytes, shape, t)
}

// BindHost binds the named input or output to h, a C-heap buffer, as a
// tensor of the given shape and element type (for CPU sessions; ORT copies
// host tensors to the device for GPU sessions). h must outlive the session.
func (s *Session) BindHost(name string, output bool, h *HostMem, shape []int64, t ElemType) error {
	return s.bind(name, output, false, uintptr(h.p), h.n, shape, t)
}

func (s *Session) bind(name string, output, dev bool, p uintptr, bytes int, shape []int64, t ElemType) error {
	n := int64(t.Size())
	for _, d := range shape {
		n *= d
	}
	if n != int64(bytes) {
		return fmt.Errorf("ortdev: %s: shape %v of %d-byte elements needs %d bytes, buffer has %d", name, shape, t.Size(), n, bytes)
	}
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	cs := (*C.int64_t)(C.malloc(C.size_t(8 * max(len(shape), 1))))
	defer C.free(unsafe.Pointer(cs))
	for i, d := range shape {
		unsafe.Slice(cs, len(shape))[i] = C.int64_t(d)
	}
	out, onDev := C.int(0), C.int(0)
	if output {
		out = 1
	}
	if dev {
		onDev = 1
	}
	return cerr("bind "+name, C.vg_bind(s.s, out, cn, onDev, C.int(s.device), C.uintptr_t(p), C.size_t(bytes), cs, C.size_t(len(shape)), C.int(t)))
}

// Run executes the model on the bound tensors (OrtApi::RunWithBinding).
// With Options.NoSync on a GPU provider it returns once the work is queued
// on the compute stream.
func (s *Session) Run() error { return cerr("run", C.vg_run(s.s)) }

// Close releases the session, its binding and the bound OrtValues (not the
// memory they point to). It is idempotent.
func (s *Session) Close() {
	if s.s != nil {
		C.vg_close(s.s)
		s.s = nil
	}
}

// HostMem is a C-heap buffer for binding host tensors: cgo forbids C code
// from keeping pointers into Go memory, and a bound tensor is kept.
type HostMem struct {
	p unsafe.Pointer
	n int
}

// NewHostMem allocates n bytes (n > 0), zeroed.
func NewHostMem(n int) (*HostMem, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ortdev: host buffer of %d bytes", n)
	}
	p := C.calloc(C.size_t(n), 1)
	if p == nil {
		return nil, fmt.Errorf("ortdev: allocating %d bytes", n)
	}
	return &HostMem{p: p, n: n}, nil
}

// Float32s views the buffer as float32s (valid until Free).
func (h *HostMem) Float32s() []float32 { return unsafe.Slice((*float32)(h.p), h.n/4) }

// Len is the size in bytes.
func (h *HostMem) Len() int { return h.n }

// Free releases the buffer; it is idempotent.
func (h *HostMem) Free() {
	if h.p != nil {
		C.free(h.p)
		h.p = nil
	}
}
