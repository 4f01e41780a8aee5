// A stand-in for libcuda.so.1, for testing package cuda's C plumbing on
// machines without a GPU (TestFakeDriver builds it with cc). "Device"
// memory is host memory and kernels run on the host at launch, but it keeps
// the rules the package must follow:
//   - the current context is per thread: every call but the device queries
//     fails with CUDA_ERROR_INVALID_CONTEXT unless cuCtxSetCurrent made the
//     primary context current on the calling thread, just before (see
//     NEED_CTX);
//   - a stream capture must end on the thread that began it (unless relaxed),
//     or cuStreamEndCapture fails with CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
//   - kernel parameters are read through the void* array, each with the size
//     of the kernel's parameter (4 or 8 bytes).
// It exports cuEventElapsedTime without _v2, as drivers before CUDA 12.8 do.
// Device-to-device cuMemcpy2DAsync_v2 is there for the fake NVDEC
// (fakenvcuvid.c), whose mapped pictures are host memory too.
// Built with -DFAKE_OMIT_LAUNCH it lacks cuLaunchKernel (a too-old driver).
// FAKE_CUDA_INIT_RESULT=<code> makes cuInit fail with that code.
// FAKE_CUDA_REQUIRE=CUBIN or PTX makes cuModuleLoadData refuse the other.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static char primary_ctx;
#define FAKE_CTX ((void *)&primary_ctx)
static __thread void *current;
static int retained;

// The current context is used up by the call that checks it, so a caller
// passes only if it set the context right before each call (as the
// package's wrappers do), never by relying on an earlier call's.
#define NEED_CTX() do { if (current != FAKE_CTX) return 201; current = NULL; } while (0)

static const struct { int code; const char *name, *desc; } errs[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	{908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
	 "attempt to terminate a thread-local capture sequence from another thread"},
};

static int find_err(int code) {
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
		if (errs[i].code == code) return (int)i;
	return -1;
}

CUresult cuGetErrorName(CUresult e, const char **s) {
	int i = find_err(e);
	if (i < 0) { *s = NULL; return 1; }
	*s = errs[i].name;
	return 0;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
	int i = find_err(e);
	if (i < 0) { *s = NULL; return 1; }
	*s = errs[i].desc;
	return 0;
}

CUresult cuInit(unsigned int flags) {
	const char *r = getenv("FAKE_CUDA_INIT_RESULT");
	if (flags != 0) return 1;
	return r ? atoi(r) : 0;
}

CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }

CUresult cuDeviceGet(int *d, int ordinal) {
	if (ordinal != 0) return 101;
	*d = 0;
	return 0;
}

CUresult cuDeviceGetName(char *name, int len, int dev) {
	if (dev != 0) return 101;
	snprintf(name, (size_t)len, "Fake GPU");
	return 0;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
	if (dev != 0) return 101;
	switch (attr) {
	case 75: *v = 9; return 0; // COMPUTE_CAPABILITY_MAJOR
	case 76: *v = 0; return 0; // COMPUTE_CAPABILITY_MINOR
	}
	return 1;
}

CUresult cuDeviceTotalMem_v2(size_t *b, int dev) {
	if (dev != 0) return 101;
	*b = (size_t)1 << 30;
	return 0;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
	if (dev != 0) return 101;
	__sync_fetch_and_add(&retained, 1);
	*ctx = FAKE_CTX;
	return 0;
}

static unsigned int ctx_flags;

CUresult cuDevicePrimaryCtxGetState(int dev, unsigned int *flags, int *active) {
	if (dev != 0) return 101;
	*flags = ctx_flags;
	*active = retained > 0;
	return 0;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(int dev, unsigned int flags) {
	if (dev != 0) return 101;
	if (retained > 0) return 708; /* CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, as old drivers did */
	ctx_flags = flags;
	return 0;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
	if (dev != 0) return 101;
	if (__sync_fetch_and_sub(&retained, 1) <= 0) return 201;
	return 0;
}

CUresult cuCtxSetCurrent(void *ctx) {
	if (ctx != NULL && ctx != FAKE_CTX) return 201;
	current = ctx;
	return 0;
}

CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
	NEED_CTX();
	*f = (size_t)512 << 20;
	*t = (size_t)1 << 30;
	return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	NEED_CTX();
	if (n == 0) return 1;
	if (n > ((size_t)1 << 30)) return 2;
	void *m = malloc(n);
	if (!m) return 2;
	*p = (CUdeviceptr)(uintptr_t)m;
	return 0;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	NEED_CTX();
	free((void *)(uintptr_t)p);
	return 0;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
	NEED_CTX();
	if (flags != 1) return 1; // the package asks for CU_MEMHOSTALLOC_PORTABLE
	*p = malloc(n);
	return *p ? 0 : 2;
}

CUresult cuMemFreeHost(void *p) {
	NEED_CTX();
	free(p);
	return 0;
}

#define MAX_ARGS 8
#define MAX_NODES 64

enum { K_SAXPY, K_ADD, K_EMPTY, K_SPIN };
static const struct { const char *name; int nargs; int sizes[MAX_ARGS]; } kernels[] = {
	[K_SAXPY] = {"saxpy", 4, {4, 8, 8, 4}}, // float, const float*, float*, int
	[K_ADD] = {"add", 3, {8, 4, 4}},        // float*, float, int
	[K_EMPTY] = {"empty", 0, {0}},
	[K_SPIN] = {"spin", 1, {8}},            // long long
};

typedef struct { int kind; } function;
typedef struct {
	int kind;
	unsigned threads;
	unsigned char args[MAX_ARGS][8];
} node;
typedef struct {
	int capturing, mode;
	pthread_t thread;
	int n;
	node nodes[MAX_NODES];
} stream;
typedef struct { int n; node nodes[MAX_NODES]; } graph;

static void run(const node *nd) {
	switch (nd->kind) {
	case K_SAXPY: {
		float a, *x, *y;
		int n;
		memcpy(&a, nd->args[0], 4);
		memcpy(&x, nd->args[1], 8);
		memcpy(&y, nd->args[2], 8);
		memcpy(&n, nd->args[3], 4);
		for (long i = 0; i < (long)nd->threads && i < n; i++) y[i] = a * x[i] + y[i];
		break;
	}
	case K_ADD: {
		float *y, v;
		int n;
		memcpy(&y, nd->args[0], 8);
		memcpy(&v, nd->args[1], 4);
		memcpy(&n, nd->args[2], 4);
		for (long i = 0; i < (long)nd->threads && i < n; i++) y[i] += v;
		break;
	}
	case K_SPIN: {
		struct timespec ts = {0, 1000000}; // 1 ms, whatever the cycles
		nanosleep(&ts, NULL);
		break;
	}
	}
}

CUresult cuStreamCreate(void **ps, unsigned int flags) {
	NEED_CTX();
	if (flags != 1) return 1; // the package asks for CU_STREAM_NON_BLOCKING
	*ps = calloc(1, sizeof(stream));
	return *ps ? 0 : 2;
}

CUresult cuStreamDestroy_v2(void *s) {
	NEED_CTX();
	if (!s) return 400;
	free(s);
	return 0;
}

CUresult cuStreamSynchronize(void *s) {
	NEED_CTX();
	if (s && ((stream *)s)->capturing) return 900;
	return 0;
}

CUresult cuStreamWaitEvent(void *s, void *e, unsigned int flags) {
	NEED_CTX();
	return (e && flags == 0) ? 0 : 1;
}

CUresult cuStreamBeginCapture_v2(void *hs, int mode) {
	NEED_CTX();
	stream *s = hs;
	if (!s) return 900; // the legacy stream cannot be captured
	if (s->capturing || mode < 0 || mode > 2) return 1;
	s->capturing = 1;
	s->mode = mode;
	s->thread = pthread_self();
	s->n = 0;
	return 0;
}

CUresult cuStreamEndCapture(void *hs, void **pg) {
	NEED_CTX();
	stream *s = hs;
	if (!s || !s->capturing) return 1;
	if (s->mode != 2 && !pthread_equal(s->thread, pthread_self())) return 908;
	graph *g = calloc(1, sizeof *g);
	if (!g) return 2;
	g->n = s->n;
	memcpy(g->nodes, s->nodes, sizeof(node) * (size_t)s->n);
	s->capturing = 0;
	*pg = g;
	return 0;
}

CUresult cuGraphInstantiateWithFlags(void **pe, void *g, unsigned long long flags) {
	NEED_CTX();
	if (!g || flags != 0) return 1;
	graph *x = malloc(sizeof *x);
	if (!x) return 2;
	memcpy(x, g, sizeof *x);
	*pe = x;
	return 0;
}

CUresult cuGraphLaunch(void *e, void *hs) {
	NEED_CTX();
	graph *x = e;
	stream *s = hs;
	if (!x) return 400;
	if (s && s->capturing) return 900;
	for (int i = 0; i < x->n; i++) run(&x->nodes[i]);
	return 0;
}

CUresult cuGraphDestroy(void *g) { NEED_CTX(); free(g); return 0; }
CUresult cuGraphExecDestroy(void *e) { NEED_CTX(); free(e); return 0; }

typedef struct {
	unsigned flags;
	int recorded, queried;
	struct timespec t;
} event;

CUresult cuEventCreate(void **pe, unsigned int flags) {
	NEED_CTX();
	if (flags & ~2u) return 1;
	event *e = calloc(1, sizeof *e);
	if (!e) return 2;
	e->flags = flags;
	*pe = e;
	return 0;
}

CUresult cuEventDestroy_v2(void *e) { NEED_CTX(); free(e); return 0; }

CUresult cuEventRecord(void *he, void *hs) {
	NEED_CTX();
	event *e = he;
	stream *s = hs;
	if (!e) return 400;
	if (s && s->capturing) return 900; // not modelled
	clock_gettime(CLOCK_MONOTONIC, &e->t);
	e->recorded = 1;
	e->queried = 0;
	return 0;
}

// The first query after a record says "not ready", later ones "done".
CUresult cuEventQuery(void *he) {
	NEED_CTX();
	event *e = he;
	if (e->recorded && !e->queried) {
		e->queried = 1;
		return 600;
	}
	return 0;
}

CUresult cuEventSynchronize(void *he) {
	NEED_CTX();
	((event *)he)->queried = 1;
	return 0;
}

CUresult cuEventElapsedTime(float *ms, void *ha, void *hb) {
	NEED_CTX();
	event *a = ha, *b = hb;
	if (!a || !b || ((a->flags | b->flags) & 2) || !a->recorded || !b->recorded) return 400;
	*ms = (float)((b->t.tv_sec - a->t.tv_sec) * 1e3 + (b->t.tv_nsec - a->t.tv_nsec) / 1e6);
	return 0;
}

typedef struct { char *image; } module;

CUresult cuModuleLoadData(void **pm, const void *image) {
	NEED_CTX();
	const char *s = image;
	const char *req = getenv("FAKE_CUDA_REQUIRE");
	int cubin = strncmp(s, "FAKECUBIN\n", 10) == 0;
	int ptx = strncmp(s, "FAKEPTX\n", 8) == 0;
	if (!cubin && !ptx) return 200;
	if (req && ((strcmp(req, "CUBIN") == 0 && !cubin) || (strcmp(req, "PTX") == 0 && !ptx))) return 200;
	module *m = malloc(sizeof *m);
	if (!m) return 2;
	m->image = strdup(s);
	*pm = m;
	return 0;
}

CUresult cuModuleUnload(void *hm) {
	NEED_CTX();
	module *m = hm;
	if (!m) return 400;
	free(m->image);
	free(m);
	return 0;
}

CUresult cuModuleGetFunction(void **pf, void *hm, const char *name) {
	NEED_CTX();
	module *m = hm;
	char decl[128];
	if (!m) return 400;
	snprintf(decl, sizeof decl, "void %s(", name);
	if (!strstr(m->image, decl)) return 500;
	for (int k = 0; k < (int)(sizeof kernels / sizeof kernels[0]); k++) {
		if (strcmp(kernels[k].name, name) == 0) {
			function *f = malloc(sizeof *f); // leaked with the module, as a test double may
			if (!f) return 2;
			f->kind = k;
			*pf = f;
			return 0;
		}
	}
	return 500;
}

#ifndef FAKE_OMIT_LAUNCH
CUresult cuLaunchKernel(void *hf, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shared,
		void *hs, void **params, void **extra) {
	NEED_CTX();
	function *f = hf;
	stream *s = hs;
	(void)shared;
	if (!f) return 400;
	if (!gx || !gy || !gz || !bx || !by || !bz || extra) return 1;
	node nd;
	memset(&nd, 0, sizeof nd);
	nd.kind = f->kind;
	nd.threads = gx * bx; // the test kernels index x only
	int nargs = kernels[f->kind].nargs;
	if (nargs > 0 && !params) return 1;
	for (int i = 0; i < nargs; i++) memcpy(nd.args[i], params[i], (size_t)kernels[f->kind].sizes[i]);
	if (s && s->capturing) {
		if (s->n == MAX_NODES) return 2;
		s->nodes[s->n++] = nd;
		return 0;
	}
	run(&nd);
	return 0;
}
#endif

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	NEED_CTX();
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	NEED_CTX();
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return 0;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
	NEED_CTX();
	(void)s;
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
	NEED_CTX();
	(void)s;
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return 0;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
	NEED_CTX();
	(void)s;
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return 0;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) {
	NEED_CTX();
	(void)s;
	memset((void *)(uintptr_t)dst, v, n);
	return 0;
}

// CUDA_MEMCPY2D, as cgo.go declares it; device to device only (NVDEC's
// copy-out is the only user).
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
} memcpy2d;

CUresult cuMemcpy2DAsync_v2(const memcpy2d *c, void *s) {
	NEED_CTX();
	(void)s;
	if (c->srcMemoryType != 2 || c->dstMemoryType != 2 || c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch)
		return 1;
	for (size_t y = 0; y < c->Height; y++)
		memmove((char *)(uintptr_t)c->dstDevice + y * c->dstPitch, (const char *)(uintptr_t)c->srcDevice + y * c->srcPitch,
			c->WidthInBytes);
	return 0;
}
