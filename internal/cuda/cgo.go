package cuda

// This file and nvdec.go are the package's cgo files (nvdec.c holds the
// C side of NVDEC, see nvdec.h). Nothing here includes a CUDA header
// (CI and developer machines have none): the few driver API and NVRTC types
// and prototypes used are declared by hand below, with the values and
// signatures of NVIDIA's cuda.h and nvrtc.h, and every function is reached
// through a pointer that dlsym found in libcuda.so.1 or libnvrtc at run
// time. The symbol names are the ones cuda.h maps its API names to (the
// _v2 versions), since dlsym bypasses those #defines.
//
// Goroutines move between OS threads and the current CUDA context is per
// thread, so every wrapper that needs a context takes it and makes it
// current at the start of the same C call. A failure of that
// cuCtxSetCurrent comes back negated, so check can name it.
//
// Handles cross the boundary as uintptr_t and are cast in C; Go never
// turns an integer into a pointer.

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE // dladdr
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef int CUdevice_attribute;
typedef int CUstreamCaptureMode;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

// CUDA_MEMCPY2D (cuda.h; CUmemorytype is a C enum).
typedef struct {
	size_t srcXInBytes, srcY;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	void *srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	void *dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
} vigil_memcpy2d;
_Static_assert(sizeof(vigil_memcpy2d) == 128, "CUDA_MEMCPY2D");
#define VIGIL_MEMORYTYPE_DEVICE 2 // CU_MEMORYTYPE_DEVICE

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef struct {
	CUresult (*Init)(unsigned int flags);
	CUresult (*DriverGetVersion)(int *version);
	CUresult (*GetErrorName)(CUresult error, const char **str);
	CUresult (*GetErrorString)(CUresult error, const char **str);
	CUresult (*DeviceGetCount)(int *count);
	CUresult (*DeviceGet)(CUdevice *device, int ordinal);
	CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
	CUresult (*DeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);
	CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice dev);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev);
	CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
	CUresult (*DevicePrimaryCtxGetState)(CUdevice dev, unsigned int *flags, int *active);
	CUresult (*DevicePrimaryCtxSetFlags)(CUdevice dev, unsigned int flags);
	CUresult (*CtxSetCurrent)(CUcontext ctx);
	CUresult (*MemGetInfo)(size_t *free, size_t *total);
	CUresult (*MemAlloc)(CUdeviceptr *dptr, size_t bytesize);
	CUresult (*MemFree)(CUdeviceptr dptr);
	CUresult (*MemHostAlloc)(void **pp, size_t bytesize, unsigned int flags);
	CUresult (*MemFreeHost)(void *p);
	CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void *src, size_t n);
	CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t n);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n, CUstream s);
	CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n, CUstream s);
	CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
	CUresult (*MemsetD8Async)(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s);
	CUresult (*Memcpy2DAsync)(const vigil_memcpy2d *p, CUstream s);
	CUresult (*StreamCreate)(CUstream *ps, unsigned int flags);
	CUresult (*StreamDestroy)(CUstream s);
	CUresult (*StreamSynchronize)(CUstream s);
	CUresult (*StreamWaitEvent)(CUstream s, CUevent e, unsigned int flags);
	CUresult (*StreamBeginCapture)(CUstream s, CUstreamCaptureMode mode);
	CUresult (*StreamEndCapture)(CUstream s, CUgraph *pg);
	CUresult (*GraphInstantiateWithFlags)(CUgraphExec *pe, CUgraph g, unsigned long long flags);
	CUresult (*GraphLaunch)(CUgraphExec e, CUstream s);
	CUresult (*GraphDestroy)(CUgraph g);
	CUresult (*GraphExecDestroy)(CUgraphExec e);
	CUresult (*EventCreate)(CUevent *pe, unsigned int flags);
	CUresult (*EventDestroy)(CUevent e);
	CUresult (*EventRecord)(CUevent e, CUstream s);
	CUresult (*EventSynchronize)(CUevent e);
	CUresult (*EventQuery)(CUevent e);
	CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);
	CUresult (*ModuleLoadData)(CUmodule *pm, const void *image);
	CUresult (*ModuleUnload)(CUmodule m);
	CUresult (*ModuleGetFunction)(CUfunction *pf, CUmodule m, const char *name);
	CUresult (*LaunchKernel)(CUfunction f,
		unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz,
		unsigned int sharedMemBytes, CUstream s, void **params, void **extra);
} vigil_cu_api;

static vigil_cu_api vcu;

// Loads lib and every symbol into a local table, and publishes it only when
// all were found. Returns 0, 1 (dlopen failed; err has dlerror's text) or
// 2 (a symbol is missing; err has its name).
static int vigil_cu_open(const char *lib, char *err, size_t errlen) {
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	vigil_cu_api a;
	memset(&a, 0, sizeof a);
#define VIGIL_SYM(field, name) \
	if (!(a.field = (__typeof__(a.field))dlsym(h, name))) { \
		snprintf(err, errlen, "%s", name); dlclose(h); return 2; }
	VIGIL_SYM(Init, "cuInit")
	VIGIL_SYM(DriverGetVersion, "cuDriverGetVersion")
	VIGIL_SYM(GetErrorName, "cuGetErrorName")
	VIGIL_SYM(GetErrorString, "cuGetErrorString")
	VIGIL_SYM(DeviceGetCount, "cuDeviceGetCount")
	VIGIL_SYM(DeviceGet, "cuDeviceGet")
	VIGIL_SYM(DeviceGetName, "cuDeviceGetName")
	VIGIL_SYM(DeviceGetAttribute, "cuDeviceGetAttribute")
	VIGIL_SYM(DeviceTotalMem, "cuDeviceTotalMem_v2")
	VIGIL_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	VIGIL_SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	VIGIL_SYM(DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState")
	VIGIL_SYM(DevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags_v2")
	VIGIL_SYM(CtxSetCurrent, "cuCtxSetCurrent")
	VIGIL_SYM(MemGetInfo, "cuMemGetInfo_v2")
	VIGIL_SYM(MemAlloc, "cuMemAlloc_v2")
	VIGIL_SYM(MemFree, "cuMemFree_v2")
	VIGIL_SYM(MemHostAlloc, "cuMemHostAlloc")
	VIGIL_SYM(MemFreeHost, "cuMemFreeHost")
	VIGIL_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2")
	VIGIL_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2")
	VIGIL_SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	VIGIL_SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	VIGIL_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
	VIGIL_SYM(MemsetD8Async, "cuMemsetD8Async")
	VIGIL_SYM(Memcpy2DAsync, "cuMemcpy2DAsync_v2")
	VIGIL_SYM(StreamCreate, "cuStreamCreate")
	VIGIL_SYM(StreamDestroy, "cuStreamDestroy_v2")
	VIGIL_SYM(StreamSynchronize, "cuStreamSynchronize")
	VIGIL_SYM(StreamWaitEvent, "cuStreamWaitEvent")
	VIGIL_SYM(StreamBeginCapture, "cuStreamBeginCapture_v2")
	VIGIL_SYM(StreamEndCapture, "cuStreamEndCapture")
	VIGIL_SYM(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")
	VIGIL_SYM(GraphLaunch, "cuGraphLaunch")
	VIGIL_SYM(GraphDestroy, "cuGraphDestroy")
	VIGIL_SYM(GraphExecDestroy, "cuGraphExecDestroy")
	VIGIL_SYM(EventCreate, "cuEventCreate")
	VIGIL_SYM(EventDestroy, "cuEventDestroy_v2")
	VIGIL_SYM(EventRecord, "cuEventRecord")
	VIGIL_SYM(EventSynchronize, "cuEventSynchronize")
	VIGIL_SYM(EventQuery, "cuEventQuery")
	VIGIL_SYM(ModuleLoadData, "cuModuleLoadData")
	VIGIL_SYM(ModuleUnload, "cuModuleUnload")
	VIGIL_SYM(ModuleGetFunction, "cuModuleGetFunction")
	VIGIL_SYM(LaunchKernel, "cuLaunchKernel")
#undef VIGIL_SYM
	// CUDA 12.8+ headers map cuEventElapsedTime to _v2 (same signature);
	// older drivers export only the first name.
	a.EventElapsedTime = (__typeof__(a.EventElapsedTime))dlsym(h, "cuEventElapsedTime_v2");
	if (!a.EventElapsedTime)
		a.EventElapsedTime = (__typeof__(a.EventElapsedTime))dlsym(h, "cuEventElapsedTime");
	if (!a.EventElapsedTime) {
		snprintf(err, errlen, "%s", "cuEventElapsedTime_v2 or cuEventElapsedTime");
		dlclose(h);
		return 2;
	}
	vcu = a;
	return 0;
}

#define VIGIL_CTX(ctx) do { \
	CUresult r_ = vcu.CtxSetCurrent((CUcontext)(ctx)); \
	if (r_ != 0) return -r_; } while (0)

static int vigil_cuInit(void) { return vcu.Init(0); }
static int vigil_cuDriverGetVersion(int *v) { return vcu.DriverGetVersion(v); }

static void vigil_cuErrorText(int code, const char **name, const char **desc) {
	*name = NULL;
	*desc = NULL;
	if (vcu.GetErrorName) vcu.GetErrorName(code, name);
	if (vcu.GetErrorString) vcu.GetErrorString(code, desc);
}

static int vigil_cuDeviceGetCount(int *n) { return vcu.DeviceGetCount(n); }
static int vigil_cuDeviceGet(int *dev, int ordinal) { return vcu.DeviceGet(dev, ordinal); }
static int vigil_cuDeviceGetName(int dev, char *name, int len) { return vcu.DeviceGetName(name, len, dev); }
static int vigil_cuDeviceGetAttribute(int dev, int attr, int *v) { return vcu.DeviceGetAttribute(v, attr, dev); }
static int vigil_cuDeviceTotalMem(int dev, size_t *bytes) { return vcu.DeviceTotalMem(bytes, dev); }

// CU_CTX_SCHED_BLOCKING_SYNC: the flags FFmpeg's CUDA device context
// (NVDEC) insists on for a primary context it shares (FFmpeg 5.1,
// libavutil/hwcontext_cuda.c refuses an active one with other flags).
#define VIGIL_CTX_FLAGS 0x04

static int vigil_cuDevicePrimaryCtxRetain(int dev, uintptr_t *ctx) {
	CUcontext c = NULL;
	unsigned int flags = 0;
	int active = 0;
	CUresult r = vcu.DevicePrimaryCtxGetState(dev, &flags, &active);
	if (r != 0) return r;
	if (!active && flags != VIGIL_CTX_FLAGS) {
		r = vcu.DevicePrimaryCtxSetFlags(dev, VIGIL_CTX_FLAGS);
		if (r != 0) return r;
	}
	r = vcu.DevicePrimaryCtxRetain(&c, dev);
	*ctx = (uintptr_t)c;
	return r;
}
static int vigil_cuDevicePrimaryCtxRelease(int dev) { return vcu.DevicePrimaryCtxRelease(dev); }

static int vigil_cuMemGetInfo(uintptr_t ctx, size_t *free, size_t *total) {
	VIGIL_CTX(ctx);
	return vcu.MemGetInfo(free, total);
}
static int vigil_cuMemAlloc(uintptr_t ctx, CUdeviceptr *p, size_t n) {
	VIGIL_CTX(ctx);
	return vcu.MemAlloc(p, n);
}
static int vigil_cuMemFree(uintptr_t ctx, CUdeviceptr p) {
	VIGIL_CTX(ctx);
	return vcu.MemFree(p);
}
static int vigil_cuMemHostAlloc(uintptr_t ctx, void **p, size_t n, unsigned int flags) {
	VIGIL_CTX(ctx);
	return vcu.MemHostAlloc(p, n, flags);
}
static int vigil_cuMemFreeHost(uintptr_t ctx, void *p) {
	VIGIL_CTX(ctx);
	return vcu.MemFreeHost(p);
}
static int vigil_cuMemcpyHtoD(uintptr_t ctx, CUdeviceptr dst, const void *src, size_t n) {
	VIGIL_CTX(ctx);
	return vcu.MemcpyHtoD(dst, src, n);
}
static int vigil_cuMemcpyDtoH(uintptr_t ctx, void *dst, CUdeviceptr src, size_t n) {
	VIGIL_CTX(ctx);
	return vcu.MemcpyDtoH(dst, src, n);
}
static int vigil_cuMemcpyHtoDAsync(uintptr_t ctx, CUdeviceptr dst, const void *src, size_t n, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.MemcpyHtoDAsync(dst, src, n, (CUstream)s);
}
static int vigil_cuMemcpyDtoHAsync(uintptr_t ctx, void *dst, CUdeviceptr src, size_t n, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.MemcpyDtoHAsync(dst, src, n, (CUstream)s);
}
static int vigil_cuMemcpyDtoDAsync(uintptr_t ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.MemcpyDtoDAsync(dst, src, n, (CUstream)s);
}
static int vigil_cuMemsetD8Async(uintptr_t ctx, CUdeviceptr dst, unsigned char v, size_t n, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.MemsetD8Async(dst, v, n, (CUstream)s);
}

// For nvdec.c, the package's other C file, hence not static. The caller
// makes the context current before each call.
int vigil_cu_set_current(uintptr_t ctx) { return vcu.CtxSetCurrent((CUcontext)ctx); }
int vigil_cu_copy2d(uintptr_t stream, unsigned long long src, size_t src_pitch, unsigned long long dst,
		size_t dst_pitch, size_t row_bytes, size_t rows) {
	vigil_memcpy2d c;
	memset(&c, 0, sizeof c);
	c.srcMemoryType = VIGIL_MEMORYTYPE_DEVICE;
	c.srcDevice = src;
	c.srcPitch = src_pitch;
	c.dstMemoryType = VIGIL_MEMORYTYPE_DEVICE;
	c.dstDevice = dst;
	c.dstPitch = dst_pitch;
	c.WidthInBytes = row_bytes;
	c.Height = rows;
	return vcu.Memcpy2DAsync(&c, (CUstream)stream);
}
int vigil_cu_stream_sync(uintptr_t stream) { return vcu.StreamSynchronize((CUstream)stream); }

static int vigil_cuStreamCreate(uintptr_t ctx, unsigned int flags, uintptr_t *s) {
	VIGIL_CTX(ctx);
	CUstream st = NULL;
	CUresult r = vcu.StreamCreate(&st, flags);
	*s = (uintptr_t)st;
	return r;
}
static int vigil_cuStreamDestroy(uintptr_t ctx, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.StreamDestroy((CUstream)s);
}
static int vigil_cuStreamSynchronize(uintptr_t ctx, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.StreamSynchronize((CUstream)s);
}
static int vigil_cuStreamWaitEvent(uintptr_t ctx, uintptr_t s, uintptr_t e) {
	VIGIL_CTX(ctx);
	return vcu.StreamWaitEvent((CUstream)s, (CUevent)e, 0);
}
static int vigil_cuStreamBeginCapture(uintptr_t ctx, uintptr_t s, int mode) {
	VIGIL_CTX(ctx);
	return vcu.StreamBeginCapture((CUstream)s, mode);
}
static int vigil_cuStreamEndCapture(uintptr_t ctx, uintptr_t s, uintptr_t *g) {
	VIGIL_CTX(ctx);
	CUgraph gr = NULL;
	CUresult r = vcu.StreamEndCapture((CUstream)s, &gr);
	*g = (uintptr_t)gr;
	return r;
}

static int vigil_cuGraphInstantiate(uintptr_t ctx, uintptr_t g, uintptr_t *x) {
	VIGIL_CTX(ctx);
	CUgraphExec e = NULL;
	CUresult r = vcu.GraphInstantiateWithFlags(&e, (CUgraph)g, 0);
	*x = (uintptr_t)e;
	return r;
}
static int vigil_cuGraphLaunch(uintptr_t ctx, uintptr_t x, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.GraphLaunch((CUgraphExec)x, (CUstream)s);
}
static int vigil_cuGraphDestroy(uintptr_t ctx, uintptr_t g) {
	VIGIL_CTX(ctx);
	return vcu.GraphDestroy((CUgraph)g);
}
static int vigil_cuGraphExecDestroy(uintptr_t ctx, uintptr_t x) {
	VIGIL_CTX(ctx);
	return vcu.GraphExecDestroy((CUgraphExec)x);
}

static int vigil_cuEventCreate(uintptr_t ctx, unsigned int flags, uintptr_t *e) {
	VIGIL_CTX(ctx);
	CUevent ev = NULL;
	CUresult r = vcu.EventCreate(&ev, flags);
	*e = (uintptr_t)ev;
	return r;
}
static int vigil_cuEventDestroy(uintptr_t ctx, uintptr_t e) {
	VIGIL_CTX(ctx);
	return vcu.EventDestroy((CUevent)e);
}
static int vigil_cuEventRecord(uintptr_t ctx, uintptr_t e, uintptr_t s) {
	VIGIL_CTX(ctx);
	return vcu.EventRecord((CUevent)e, (CUstream)s);
}
static int vigil_cuEventSynchronize(uintptr_t ctx, uintptr_t e) {
	VIGIL_CTX(ctx);
	return vcu.EventSynchronize((CUevent)e);
}
static int vigil_cuEventQuery(uintptr_t ctx, uintptr_t e) {
	VIGIL_CTX(ctx);
	return vcu.EventQuery((CUevent)e);
}
static int vigil_cuEventElapsedTime(uintptr_t ctx, float *ms, uintptr_t a, uintptr_t b) {
	VIGIL_CTX(ctx);
	return vcu.EventElapsedTime(ms, (CUevent)a, (CUevent)b);
}

static int vigil_cuModuleLoadData(uintptr_t ctx, const void *image, uintptr_t *m) {
	VIGIL_CTX(ctx);
	CUmodule mod = NULL;
	CUresult r = vcu.ModuleLoadData(&mod, image);
	*m = (uintptr_t)mod;
	return r;
}
static int vigil_cuModuleUnload(uintptr_t ctx, uintptr_t m) {
	VIGIL_CTX(ctx);
	return vcu.ModuleUnload((CUmodule)m);
}
static int vigil_cuModuleGetFunction(uintptr_t ctx, uintptr_t m, const char *name, uintptr_t *f) {
	VIGIL_CTX(ctx);
	CUfunction fn = NULL;
	CUresult r = vcu.ModuleGetFunction(&fn, (CUmodule)m, name);
	*f = (uintptr_t)fn;
	return r;
}

#define VIGIL_MAX_LAUNCH_ARGS 256

// The kernel parameters are copied into C memory (this frame): one 8-byte
// slot per argument, little-endian, so a 4-byte parameter reads the low
// half, and an array of pointers to the slots. cuLaunchKernel copies the
// values before it returns.
static int vigil_cuLaunchKernel(uintptr_t ctx, uintptr_t f,
		unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz,
		unsigned int shared, uintptr_t s,
		const unsigned long long *args, int n) {
	unsigned long long slots[VIGIL_MAX_LAUNCH_ARGS];
	void *ptrs[VIGIL_MAX_LAUNCH_ARGS];
	if (n < 0 || n > VIGIL_MAX_LAUNCH_ARGS) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < n; i++) {
		slots[i] = args[i];
		ptrs[i] = &slots[i];
	}
	VIGIL_CTX(ctx);
	return vcu.LaunchKernel((CUfunction)f, gx, gy, gz, bx, by, bz, shared,
		(CUstream)s, n > 0 ? ptrs : NULL, NULL);
}

// NVRTC.

typedef struct {
	const char *(*GetErrorString)(nvrtcResult r);
	nvrtcResult (*Version)(int *major, int *minor);
	nvrtcResult (*CreateProgram)(nvrtcProgram *prog, const char *src, const char *name,
		int numHeaders, const char *const *headers, const char *const *includeNames);
	nvrtcResult (*DestroyProgram)(nvrtcProgram *prog);
	nvrtcResult (*CompileProgram)(nvrtcProgram prog, int numOptions, const char *const *options);
	nvrtcResult (*GetProgramLogSize)(nvrtcProgram prog, size_t *size);
	nvrtcResult (*GetProgramLog)(nvrtcProgram prog, char *log);
	nvrtcResult (*GetPTXSize)(nvrtcProgram prog, size_t *size);
	nvrtcResult (*GetPTX)(nvrtcProgram prog, char *ptx);
	nvrtcResult (*GetCUBINSize)(nvrtcProgram prog, size_t *size); // optional (NVRTC 11.1+)
	nvrtcResult (*GetCUBIN)(nvrtcProgram prog, char *cubin);      // optional (NVRTC 11.1+)
} vigil_nvrtc_api;

static vigil_nvrtc_api vnv;

// NVRTC dlopens libnvrtc-builtins.so.<major>.<minor> by name when it
// compiles, through the loader's search path only: with NVRTC loaded by
// absolute path from a directory not on that path, compiling fails with
// NVRTC_ERROR_BUILTIN_OPERATION_FAILURE. Loading the builtins from NVRTC's
// own directory first makes that dlopen find them by soname. Best effort:
// failures are left for the compile to report.
static void vigil_nvrtc_preload_builtins(void) {
	Dl_info info;
	int major = 0, minor = 0;
	char path[4096];
	if (vnv.Version(&major, &minor) != 0) return;
	if (!dladdr((void *)vnv.Version, &info) || !info.dli_fname) return;
	const char *slash = strrchr(info.dli_fname, '/');
	if (!slash) return;
	snprintf(path, sizeof path, "%.*s/libnvrtc-builtins.so.%d.%d",
		(int)(slash - info.dli_fname), info.dli_fname, major, minor);
	if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) dlerror();
}

// As vigil_cu_open, for one NVRTC library candidate.
static int vigil_nvrtc_open(const char *lib, char *err, size_t errlen) {
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return 1;
	}
	vigil_nvrtc_api a;
	memset(&a, 0, sizeof a);
#define VIGIL_SYM(field, name) \
	if (!(a.field = (__typeof__(a.field))dlsym(h, name))) { \
		snprintf(err, errlen, "%s: no symbol %s", lib, name); dlclose(h); return 2; }
	VIGIL_SYM(GetErrorString, "nvrtcGetErrorString")
	VIGIL_SYM(Version, "nvrtcVersion")
	VIGIL_SYM(CreateProgram, "nvrtcCreateProgram")
	VIGIL_SYM(DestroyProgram, "nvrtcDestroyProgram")
	VIGIL_SYM(CompileProgram, "nvrtcCompileProgram")
	VIGIL_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize")
	VIGIL_SYM(GetProgramLog, "nvrtcGetProgramLog")
	VIGIL_SYM(GetPTXSize, "nvrtcGetPTXSize")
	VIGIL_SYM(GetPTX, "nvrtcGetPTX")
#undef VIGIL_SYM
	a.GetCUBINSize = (__typeof__(a.GetCUBINSize))dlsym(h, "nvrtcGetCUBINSize");
	a.GetCUBIN = (__typeof__(a.GetCUBIN))dlsym(h, "nvrtcGetCUBIN");
	if (!a.GetCUBINSize || !a.GetCUBIN) {
		a.GetCUBINSize = NULL;
		a.GetCUBIN = NULL;
	}
	vnv = a;
	vigil_nvrtc_preload_builtins();
	return 0;
}

static int vigil_nvrtcHasCUBIN(void) { return vnv.GetCUBIN != NULL; }
static const char *vigil_nvrtcGetErrorString(int r) { return vnv.GetErrorString(r); }
static int vigil_nvrtcVersion(int *major, int *minor) { return vnv.Version(major, minor); }
static int vigil_nvrtcCreateProgram(uintptr_t *prog, const char *src, const char *name) {
	nvrtcProgram p = NULL;
	nvrtcResult r = vnv.CreateProgram(&p, src, name, 0, NULL, NULL);
	*prog = (uintptr_t)p;
	return r;
}
static int vigil_nvrtcDestroyProgram(uintptr_t prog) {
	nvrtcProgram p = (nvrtcProgram)prog;
	return vnv.DestroyProgram(&p);
}
static int vigil_nvrtcCompileProgram(uintptr_t prog, int n, char **opts) {
	return vnv.CompileProgram((nvrtcProgram)prog, n, (const char *const *)opts);
}
static int vigil_nvrtcGetProgramLogSize(uintptr_t prog, size_t *n) { return vnv.GetProgramLogSize((nvrtcProgram)prog, n); }
static int vigil_nvrtcGetProgramLog(uintptr_t prog, char *buf) { return vnv.GetProgramLog((nvrtcProgram)prog, buf); }
static int vigil_nvrtcGetPTXSize(uintptr_t prog, size_t *n) { return vnv.GetPTXSize((nvrtcProgram)prog, n); }
static int vigil_nvrtcGetPTX(uintptr_t prog, char *buf) { return vnv.GetPTX((nvrtcProgram)prog, buf); }
static int vigil_nvrtcGetCUBINSize(uintptr_t prog, size_t *n) { return vnv.GetCUBINSize((nvrtcProgram)prog, n); }
static int vigil_nvrtcGetCUBIN(uintptr_t prog, char *buf) { return vnv.GetCUBIN((nvrtcProgram)prog, buf); }
*/
import "C"

import (
	"unsafe"
)

// cResult is what the C wrappers return: a CUresult or nvrtcResult, or a
// negated CUresult of cuCtxSetCurrent (see check).
type cResult = C.int

// maxLaunchArgs is VIGIL_MAX_LAUNCH_ARGS: 256 8-byte slots, well past
// what a kernel's 4 KiB (32 KiB on newer drivers) parameter space holds.
const maxLaunchArgs = C.VIGIL_MAX_LAUNCH_ARGS

// Values from cuda.h.
const (
	cuStreamNonBlocking     = 0x1 // CU_STREAM_NON_BLOCKING
	cuEventDisableTiming    = 0x2 // CU_EVENT_DISABLE_TIMING
	cuMemHostAllocPortable  = 0x1 // CU_MEMHOSTALLOC_PORTABLE
	cuAttrComputeCapMajor   = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	cuAttrComputeCapMinor   = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	cudaErrorInvalidValue   = 1   // CUDA_ERROR_INVALID_VALUE
	cudaErrorStubLibrary    = 34  // CUDA_ERROR_STUB_LIBRARY
	cudaErrorNoDevice       = 100 // CUDA_ERROR_NO_DEVICE
	cudaErrorNotFound       = 500 // CUDA_ERROR_NOT_FOUND
	cudaErrorNotReady       = 600 // CUDA_ERROR_NOT_READY
	cudaErrorSystemNotReady = 802 // CUDA_ERROR_SYSTEM_NOT_READY
	cudaErrorDriverMismatch = 803 // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
	cudaErrorCompatNotSupp  = 804 // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
)

// Values from nvrtc.h.
const (
	nvrtcErrorInvalidOption = 5 // NVRTC_ERROR_INVALID_OPTION
)

// errBufLen is the size of the buffers that receive dlerror's text.
const errBufLen = 1024

// cOpenDriver dlopens lib and resolves the driver symbols. status is 0 on
// success, 1 when dlopen failed and 2 when a symbol is missing; msg is
// dlerror's text or the missing symbol's name.
func cOpenDriver(lib string) (status int, msg string) {
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	buf := (*C.char)(C.calloc(errBufLen, 1))
	defer C.free(unsafe.Pointer(buf))
	st := C.vigil_cu_open(clib, buf, errBufLen)
	return int(st), C.GoString(buf)
}

// cOpenNVRTC is cOpenDriver for an NVRTC library candidate.
func cOpenNVRTC(lib string) (status int, msg string) {
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	buf := (*C.char)(C.calloc(errBufLen, 1))
	defer C.free(unsafe.Pointer(buf))
	st := C.vigil_nvrtc_open(clib, buf, errBufLen)
	return int(st), C.GoString(buf)
}

// cErrorText returns cuGetErrorName's and cuGetErrorString's text for
// code, or empty strings where the driver has none.
func cErrorText(code int) (name, desc string) {
	var n, d *C.char
	C.vigil_cuErrorText(C.int(code), &n, &d)
	if n != nil {
		name = C.GoString(n)
	}
	if d != nil {
		desc = C.GoString(d)
	}
	return name, desc
}

func cInit() C.int { return C.vigil_cuInit() }

func cDriverGetVersion() (int, C.int) {
	var v C.int
	r := C.vigil_cuDriverGetVersion(&v)
	return int(v), r
}

func cDeviceGetCount() (int, C.int) {
	var n C.int
	r := C.vigil_cuDeviceGetCount(&n)
	return int(n), r
}

func cDeviceGet(ordinal int) (int32, C.int) {
	var d C.int
	r := C.vigil_cuDeviceGet(&d, C.int(ordinal))
	return int32(d), r
}

func cDeviceGetName(dev int32) (string, C.int) {
	const n = 256
	buf := (*C.char)(C.calloc(n, 1))
	defer C.free(unsafe.Pointer(buf))
	r := C.vigil_cuDeviceGetName(C.int(dev), buf, n)
	return C.GoString(buf), r
}

func cDeviceGetAttribute(dev int32, attr int) (int, C.int) {
	var v C.int
	r := C.vigil_cuDeviceGetAttribute(C.int(dev), C.int(attr), &v)
	return int(v), r
}

func cDeviceTotalMem(dev int32) (uint64, C.int) {
	var v C.size_t
	r := C.vigil_cuDeviceTotalMem(C.int(dev), &v)
	return uint64(v), r
}

func cPrimaryCtxRetain(dev int32) (uintptr, C.int) {
	var c C.uintptr_t
	r := C.vigil_cuDevicePrimaryCtxRetain(C.int(dev), &c)
	return uintptr(c), r
}

func cPrimaryCtxRelease(dev int32) C.int {
	return C.vigil_cuDevicePrimaryCtxRelease(C.int(dev))
}

func cMemGetInfo(ctx uintptr) (free, total uint64, r C.int) {
	var f, t C.size_t
	r = C.vigil_cuMemGetInfo(C.uintptr_t(ctx), &f, &t)
	return uint64(f), uint64(t), r
}

func cMemAlloc(ctx uintptr, n int) (DevicePtr, C.int) {
	var p C.CUdeviceptr
	r := C.vigil_cuMemAlloc(C.uintptr_t(ctx), &p, C.size_t(n))
	return DevicePtr(p), r
}

func cMemFree(ctx uintptr, p DevicePtr) C.int {
	return C.vigil_cuMemFree(C.uintptr_t(ctx), C.CUdeviceptr(p))
}

func cMemHostAlloc(ctx uintptr, n int) (*byte, C.int) {
	var p unsafe.Pointer
	r := C.vigil_cuMemHostAlloc(C.uintptr_t(ctx), &p, C.size_t(n), cuMemHostAllocPortable)
	return (*byte)(p), r
}

func cMemFreeHost(ctx uintptr, p *byte) C.int {
	return C.vigil_cuMemFreeHost(C.uintptr_t(ctx), unsafe.Pointer(p))
}

// cMemcpyHtoD copies from Go memory; the driver has finished reading src
// when the call returns (pageable copies are staged synchronously).
func cMemcpyHtoD(ctx uintptr, dst DevicePtr, src []byte) C.int {
	return C.vigil_cuMemcpyHtoD(C.uintptr_t(ctx), C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)))
}

func cMemcpyDtoH(ctx uintptr, dst []byte, src DevicePtr) C.int {
	return C.vigil_cuMemcpyDtoH(C.uintptr_t(ctx), unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)))
}

// cMemcpyHtoDAsync and cMemcpyDtoHAsync take host pointers into pinned C
// memory (HostBuffer), never Go memory: the copy outlives the call.
func cMemcpyHtoDAsync(ctx uintptr, dst DevicePtr, src unsafe.Pointer, n int, s uintptr) C.int {
	return C.vigil_cuMemcpyHtoDAsync(C.uintptr_t(ctx), C.CUdeviceptr(dst), src, C.size_t(n), C.uintptr_t(s))
}

func cMemcpyDtoHAsync(ctx uintptr, dst unsafe.Pointer, src DevicePtr, n int, s uintptr) C.int {
	return C.vigil_cuMemcpyDtoHAsync(C.uintptr_t(ctx), dst, C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(s))
}

func cMemcpyDtoDAsync(ctx uintptr, dst, src DevicePtr, n int, s uintptr) C.int {
	return C.vigil_cuMemcpyDtoDAsync(C.uintptr_t(ctx), C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(s))
}

func cMemsetD8Async(ctx uintptr, dst DevicePtr, v byte, n int, s uintptr) C.int {
	return C.vigil_cuMemsetD8Async(C.uintptr_t(ctx), C.CUdeviceptr(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s))
}

func cStreamCreate(ctx uintptr, flags uint) (uintptr, C.int) {
	var s C.uintptr_t
	r := C.vigil_cuStreamCreate(C.uintptr_t(ctx), C.uint(flags), &s)
	return uintptr(s), r
}

func cStreamDestroy(ctx, s uintptr) C.int {
	return C.vigil_cuStreamDestroy(C.uintptr_t(ctx), C.uintptr_t(s))
}

func cStreamSynchronize(ctx, s uintptr) C.int {
	return C.vigil_cuStreamSynchronize(C.uintptr_t(ctx), C.uintptr_t(s))
}

func cStreamWaitEvent(ctx, s, e uintptr) C.int {
	return C.vigil_cuStreamWaitEvent(C.uintptr_t(ctx), C.uintptr_t(s), C.uintptr_t(e))
}

func cStreamBeginCapture(ctx, s uintptr, mode int) C.int {
	return C.vigil_cuStreamBeginCapture(C.uintptr_t(ctx), C.uintptr_t(s), C.int(mode))
}

func cStreamEndCapture(ctx, s uintptr) (uintptr, C.int) {
	var g C.uintptr_t
	r := C.vigil_cuStreamEndCapture(C.uintptr_t(ctx), C.uintptr_t(s), &g)
	return uintptr(g), r
}

func cGraphInstantiate(ctx, g uintptr) (uintptr, C.int) {
	var x C.uintptr_t
	r := C.vigil_cuGraphInstantiate(C.uintptr_t(ctx), C.uintptr_t(g), &x)
	return uintptr(x), r
}

func cGraphLaunch(ctx, x, s uintptr) C.int {
	return C.vigil_cuGraphLaunch(C.uintptr_t(ctx), C.uintptr_t(x), C.uintptr_t(s))
}

func cGraphDestroy(ctx, g uintptr) C.int {
	return C.vigil_cuGraphDestroy(C.uintptr_t(ctx), C.uintptr_t(g))
}

func cGraphExecDestroy(ctx, x uintptr) C.int {
	return C.vigil_cuGraphExecDestroy(C.uintptr_t(ctx), C.uintptr_t(x))
}

func cEventCreate(ctx uintptr, flags uint) (uintptr, C.int) {
	var e C.uintptr_t
	r := C.vigil_cuEventCreate(C.uintptr_t(ctx), C.uint(flags), &e)
	return uintptr(e), r
}

func cEventDestroy(ctx, e uintptr) C.int {
	return C.vigil_cuEventDestroy(C.uintptr_t(ctx), C.uintptr_t(e))
}

func cEventRecord(ctx, e, s uintptr) C.int {
	return C.vigil_cuEventRecord(C.uintptr_t(ctx), C.uintptr_t(e), C.uintptr_t(s))
}

func cEventSynchronize(ctx, e uintptr) C.int {
	return C.vigil_cuEventSynchronize(C.uintptr_t(ctx), C.uintptr_t(e))
}

func cEventQuery(ctx, e uintptr) C.int {
	return C.vigil_cuEventQuery(C.uintptr_t(ctx), C.uintptr_t(e))
}

func cEventElapsedTime(ctx, a, b uintptr) (float32, C.int) {
	var ms C.float
	r := C.vigil_cuEventElapsedTime(C.uintptr_t(ctx), &ms, C.uintptr_t(a), C.uintptr_t(b))
	return float32(ms), r
}

// cModuleLoadData copies image into C memory for the call.
func cModuleLoadData(ctx uintptr, image []byte) (uintptr, C.int) {
	img := C.CBytes(image)
	defer C.free(img)
	var m C.uintptr_t
	r := C.vigil_cuModuleLoadData(C.uintptr_t(ctx), img, &m)
	return uintptr(m), r
}

func cModuleUnload(ctx, m uintptr) C.int {
	return C.vigil_cuModuleUnload(C.uintptr_t(ctx), C.uintptr_t(m))
}

func cModuleGetFunction(ctx, m uintptr, name string) (uintptr, C.int) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	r := C.vigil_cuModuleGetFunction(C.uintptr_t(ctx), C.uintptr_t(m), cname, &f)
	return uintptr(f), r
}

// cLaunchKernel passes slots (Go memory, no pointers in it) for the
// duration of the call; the C side copies them before launching.
func cLaunchKernel(ctx, f uintptr, grid, block [3]uint32, shared uint32, s uintptr, slots []uint64) C.int {
	var p *C.ulonglong
	if len(slots) > 0 {
		p = (*C.ulonglong)(unsafe.Pointer(&slots[0]))
	}
	return C.vigil_cuLaunchKernel(C.uintptr_t(ctx), C.uintptr_t(f),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shared), C.uintptr_t(s), p, C.int(len(slots)))
}

func cNVRTCHasCUBIN() bool { return C.vigil_nvrtcHasCUBIN() != 0 }

func cNVRTCErrorString(code int) string {
	p := C.vigil_nvrtcGetErrorString(C.int(code))
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

func cNVRTCVersion() (major, minor int, r C.int) {
	var ma, mi C.int
	r = C.vigil_nvrtcVersion(&ma, &mi)
	return int(ma), int(mi), r
}

func cNVRTCCreateProgram(src, name string) (uintptr, C.int) {
	csrc := C.CString(src)
	defer C.free(unsafe.Pointer(csrc))
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p C.uintptr_t
	r := C.vigil_nvrtcCreateProgram(&p, csrc, cname)
	return uintptr(p), r
}

func cNVRTCDestroyProgram(p uintptr) C.int {
	return C.vigil_nvrtcDestroyProgram(C.uintptr_t(p))
}

// cNVRTCCompileProgram builds the option array in C memory.
func cNVRTCCompileProgram(p uintptr, opts []string) C.int {
	if len(opts) == 0 {
		return C.vigil_nvrtcCompileProgram(C.uintptr_t(p), 0, nil)
	}
	arr := (**C.char)(C.calloc(C.size_t(len(opts)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	defer C.free(unsafe.Pointer(arr))
	cs := unsafe.Slice(arr, len(opts))
	for i, o := range opts {
		cs[i] = C.CString(o)
	}
	defer func() {
		for _, c := range cs {
			C.free(unsafe.Pointer(c))
		}
	}()
	return C.vigil_nvrtcCompileProgram(C.uintptr_t(p), C.int(len(opts)), arr)
}

// cNVRTCBytes reads one of a program's outputs (log, PTX, CUBIN) through
// its size and get functions.
func cNVRTCBytes(p uintptr, which nvrtcOutput) ([]byte, C.int) {
	var n C.size_t
	var r C.int
	switch which {
	case outLog:
		r = C.vigil_nvrtcGetProgramLogSize(C.uintptr_t(p), &n)
	case outPTX:
		r = C.vigil_nvrtcGetPTXSize(C.uintptr_t(p), &n)
	case outCUBIN:
		r = C.vigil_nvrtcGetCUBINSize(C.uintptr_t(p), &n)
	}
	if r != 0 || n == 0 {
		return nil, r
	}
	buf := C.calloc(n, 1)
	defer C.free(buf)
	switch which {
	case outLog:
		r = C.vigil_nvrtcGetProgramLog(C.uintptr_t(p), (*C.char)(buf))
	case outPTX:
		r = C.vigil_nvrtcGetPTX(C.uintptr_t(p), (*C.char)(buf))
	case outCUBIN:
		r = C.vigil_nvrtcGetCUBIN(C.uintptr_t(p), (*C.char)(buf))
	}
	if r != 0 {
		return nil, r
	}
	return C.GoBytes(buf, C.int(n)), 0
}

type nvrtcOutput int

const (
	outLog nvrtcOutput = iota
	outPTX
	outCUBIN
)
