package cuda

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
)

// Module is device code loaded into a context (cuModuleLoadData), from
// CompileModule. Unload it after its functions' last use.
type Module struct {
	ctx  uintptr
	h    atomic.Uintptr // CUmodule
	name string
}

// CompileModule compiles CUDA C++ source with NVRTC and loads the result.
// name is the program name that the compile log's lines start with (e.g.
// "kernels.cu"). Kernels to look up with Function should be declared
// extern "C" so their names are not mangled.
//
// It compiles with --gpu-architecture=sm_<major><minor> of the context's
// device (unless opts already set the architecture) followed by opts, and
// loads the CUBIN (nvrtcGetCUBIN). Where the NVRTC library cannot produce
// a CUBIN (older than 11.1, no CUBIN for the architecture, or it rejects
// sm_XY) it compiles for compute_<major><minor> instead and loads PTX,
// which the driver compiles (JIT) on load.
//
// NVRTC is loaded on first use, trying $VIGIL_NVRTC_LIBRARY, then
// libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so and the same two versions
// under /usr/local/cuda/lib64. It returns an error wrapping ErrNoNVRTC when
// none loads, an *NVRTCError (with the compile log; Code 6,
// NVRTC_ERROR_COMPILATION, for errors in src), an ErrClosed error after
// Release, or an *Error from cuModuleLoadData.
func (c *Context) CompileModule(src, name string, opts ...string) (*Module, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if err := loadNVRTC(); err != nil {
		return nil, err
	}
	image, err := compile(src, name, c.dev.Major, c.dev.Minor, opts)
	if err != nil {
		return nil, err
	}
	m, r := cModuleLoadData(h, image)
	if err := check("cuModuleLoadData", r); err != nil {
		return nil, err
	}
	mod := &Module{ctx: h, name: name}
	mod.h.Store(m)
	return mod, nil
}

// hasArchOption reports whether opts choose the target architecture.
func hasArchOption(opts []string) bool {
	for _, o := range opts {
		if strings.HasPrefix(o, "--gpu-architecture") || strings.HasPrefix(o, "-arch") {
			return true
		}
	}
	return false
}

// compile runs NVRTC and returns a CUBIN, or NUL-terminated PTX, as
// CompileModule describes.
func compile(src, name string, major, minor int, opts []string) ([]byte, error) {
	userArch := hasArchOption(opts)
	cubin := cNVRTCHasCUBIN()
	for {
		all := opts
		if !userArch {
			arch := fmt.Sprintf("--gpu-architecture=compute_%d%d", major, minor)
			if cubin {
				arch = fmt.Sprintf("--gpu-architecture=sm_%d%d", major, minor)
			}
			all = append([]string{arch}, opts...)
		}
		image, code, err := compileOnce(src, name, all, cubin)
		if err != nil && cubin && !userArch && code == nvrtcErrorInvalidOption {
			cubin = false // this NVRTC does not know sm_XY: try PTX
			continue
		}
		return image, err
	}
}

// compileOnce is one NVRTC program's life: create, compile with opts, read
// the CUBIN (when wantCUBIN and there is one) or the PTX, destroy. code is
// the failing nvrtcResult.
func compileOnce(src, name string, opts []string, wantCUBIN bool) (image []byte, code cResult, err error) {
	prog, r := cNVRTCCreateProgram(src, name)
	if r != 0 {
		return nil, r, nvrtcError("nvrtcCreateProgram", r, "")
	}
	defer cNVRTCDestroyProgram(prog)
	if r := cNVRTCCompileProgram(prog, opts); r != 0 {
		log, _ := cNVRTCBytes(prog, outLog)
		return nil, r, nvrtcError("nvrtcCompileProgram", r, cString(log))
	}
	if wantCUBIN {
		b, r := cNVRTCBytes(prog, outCUBIN)
		if r != 0 {
			return nil, r, nvrtcError("nvrtcGetCUBIN", r, "")
		}
		if len(b) > 0 {
			return b, 0, nil
		}
		// A virtual architecture (compute_XY) in opts: no CUBIN, use PTX.
	}
	b, r := cNVRTCBytes(prog, outPTX)
	if r != 0 {
		return nil, r, nvrtcError("nvrtcGetPTX", r, "")
	}
	if len(b) == 0 || b[len(b)-1] != 0 {
		b = append(b, 0) // cuModuleLoadData reads PTX up to its NUL
	}
	return b, 0, nil
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Function returns the kernel of that name (cuModuleGetFunction; the
// extern "C" name, or the mangled one). It returns an ErrClosed error for
// an unloaded module, or an *Error (CUDA_ERROR_NOT_FOUND for an unknown
// name).
func (m *Module) Function(name string) (*Function, error) {
	if m == nil {
		return nil, closedError("module")
	}
	h := m.h.Load()
	if h == 0 {
		return nil, closedError("module")
	}
	f, r := cModuleGetFunction(m.ctx, h, name)
	if err := check("cuModuleGetFunction", r); err != nil {
		return nil, err
	}
	return &Function{ctx: m.ctx, h: f, name: name, mod: m}, nil
}

// Unload unloads the module (cuModuleUnload); its functions must not be
// launched afterwards. Calling it again, or on nil, does nothing and
// returns nil. It returns an *Error if the driver refuses.
func (m *Module) Unload() error {
	if m == nil {
		return nil
	}
	h := m.h.Swap(0)
	if h == 0 {
		return nil
	}
	return check("cuModuleUnload", cModuleUnload(m.ctx, h))
}

// Function is a kernel of a loaded Module, valid until the module is
// unloaded.
type Function struct {
	ctx  uintptr
	h    uintptr // CUfunction
	name string
	mod  *Module
}

// Launch queues the kernel on s (cuLaunchKernel) with grid blocks of block
// threads (x, y, z; no dimension may be 0) and sharedMem bytes of dynamic
// shared memory. args are the kernel's parameters in order, each one of:
// DevicePtr, uintptr, uint64, int64 (8 bytes); int32, uint32, float32 (4
// bytes); int (passed as int32; an error if it does not fit). Their Go
// types must match the kernel's parameter types: the driver reads each
// parameter's size from the kernel, not from args. Any other type is an
// error naming its index and type. At most 256 args.
//
// It returns such argument errors, an ErrClosed error for an unloaded
// module or destroyed stream, or an *Error (e.g. CUDA_ERROR_INVALID_VALUE for a bad
// configuration); errors inside the kernel surface later, at a
// synchronization.
func (f *Function) Launch(s *Stream, grid, block [3]uint32, sharedMem uint32, args ...any) error {
	if f == nil || f.h == 0 || f.mod == nil || f.mod.h.Load() == 0 {
		return closedError("function (or its module)")
	}
	sh, err := streamArg(s)
	if err != nil {
		return err
	}
	slots, err := marshalArgs(args)
	if err != nil {
		return fmt.Errorf("cuda: launch of %s: %w", f.name, err)
	}
	return check("cuLaunchKernel", cLaunchKernel(f.ctx, f.h, grid, block, sharedMem, sh, slots))
}

// marshalArgs turns kernel arguments into 8-byte slots holding each value
// little-endian in its low bytes, as cuLaunchKernel reads them through
// pointers.
func marshalArgs(args []any) ([]uint64, error) {
	if len(args) > maxLaunchArgs {
		return nil, fmt.Errorf("%d arguments, at most %d", len(args), maxLaunchArgs)
	}
	if len(args) == 0 {
		return nil, nil
	}
	slots := make([]uint64, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case DevicePtr:
			slots[i] = uint64(v)
		case uintptr:
			slots[i] = uint64(v)
		case uint64:
			slots[i] = v
		case int64:
			slots[i] = uint64(v)
		case int32:
			slots[i] = uint64(uint32(v))
		case uint32:
			slots[i] = uint64(v)
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("argument %d: int %d overflows int32", i, v)
			}
			slots[i] = uint64(uint32(int32(v)))
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		case *DeviceBuffer:
			return nil, fmt.Errorf("argument %d: unsupported type %T (pass its Ptr())", i, a)
		default:
			return nil, fmt.Errorf("argument %d: unsupported type %T (want DevicePtr, uintptr, uint64, int64, int32, uint32, int or float32)", i, a)
		}
	}
	return slots, nil
}
