// See shim.h. ONNX Runtime is opened with dlopen on the same path that
// onnxruntime_go opened, so both share one library instance and one OrtEnv
// (OrtApi::CreateEnv returns the process's existing environment).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnxruntime_c_api.h"
#include "shim.h"

static const OrtApi *api;
static OrtEnv *env;

struct vg_session {
	OrtSession *sess;
	OrtIoBinding *bind;
	OrtRunOptions *run;
	OrtMemoryInfo *cpu_mem;
	OrtMemoryInfo *dev_mem;
	OrtValue *vals[64];
	int nvals;
};

static char *dupmsg(const char *m) {
	char *s = malloc(strlen(m) + 1);
	if (s) strcpy(s, m);
	return s;
}

static char *take(OrtStatus *st) {
	if (st == NULL) return NULL;
	char *m = dupmsg(api->GetErrorMessage(st));
	api->ReleaseStatus(st);
	return m;
}

#define TRY(call)                         \
	do {                              \
		char *e_ = take(call);    \
		if (e_ != NULL) return e_; \
	} while (0)

char *vg_init(const char *lib_path) {
	if (api != NULL) return NULL;
	void *h = dlopen(lib_path, RTLD_LAZY | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		return dupmsg(e ? e : "dlopen failed");
	}
	typedef const OrtApiBase *(*get_base_fn)(void);
	get_base_fn fn = (get_base_fn)dlsym(h, "OrtGetApiBase");
	if (fn == NULL) return dupmsg("OrtGetApiBase not found in the library");
	const OrtApi *a = fn()->GetApi(ORT_API_VERSION);
	if (a == NULL) {
		char buf[160];
		snprintf(buf, sizeof buf, "the library does not offer ORT C API version %d (it is %s)", ORT_API_VERSION,
		         fn()->GetVersionString());
		return dupmsg(buf);
	}
	api = a;
	char *e = take(api->CreateEnv(ORT_LOGGING_LEVEL_ERROR, "vigil", &env));
	if (e != NULL) api = NULL;
	return e;
}

static char *append_provider(OrtSessionOptions *so, int provider, const char **keys, const char **vals, int n) {
	if (provider == 1) {
		OrtCUDAProviderOptionsV2 *o = NULL;
		TRY(api->CreateCUDAProviderOptions(&o));
		char *e = take(api->UpdateCUDAProviderOptions(o, keys, vals, (size_t)n));
		if (e == NULL) e = take(api->SessionOptionsAppendExecutionProvider_CUDA_V2(so, o));
		api->ReleaseCUDAProviderOptions(o);
		return e;
	}
	if (provider == 2) {
		OrtTensorRTProviderOptionsV2 *o = NULL;
		TRY(api->CreateTensorRTProviderOptions(&o));
		char *e = take(api->UpdateTensorRTProviderOptions(o, keys, vals, (size_t)n));
		if (e == NULL) e = take(api->SessionOptionsAppendExecutionProvider_TensorRT_V2(so, o));
		api->ReleaseTensorRTProviderOptions(o);
		return e;
	}
	return NULL;
}

char *vg_open(const char *model, int provider, const char **keys, const char **vals, int nopts,
              const char **ckeys, const char **cvals, int ncopts,
              const char **skeys, const char **svals, int nsopts, int intra_threads, vg_session **out) {
	*out = NULL;
	if (api == NULL) return dupmsg("ortdev: Init has not succeeded");
	OrtSessionOptions *so = NULL;
	TRY(api->CreateSessionOptions(&so));
	char *e = NULL;
	if (intra_threads > 0) e = take(api->SetIntraOpNumThreads(so, intra_threads));
	for (int i = 0; e == NULL && i < nsopts; i++) e = take(api->AddSessionConfigEntry(so, skeys[i], svals[i]));
	if (e == NULL) e = append_provider(so, provider, keys, vals, nopts);
	// TensorRT takes what it can; the CUDA EP, appended after it, runs the
	// rest on the GPU rather than on the CPU.
	if (e == NULL && provider == 2) e = append_provider(so, 1, ckeys, cvals, ncopts);
	vg_session *s = NULL;
	if (e == NULL) {
		s = calloc(1, sizeof *s);
		if (s == NULL) e = dupmsg("out of memory");
	}
	if (e == NULL) e = take(api->CreateSession(env, model, so, &s->sess));
	api->ReleaseSessionOptions(so);
	if (e == NULL) e = take(api->CreateIoBinding(s->sess, &s->bind));
	if (e == NULL) e = take(api->CreateRunOptions(&s->run));
	if (e == NULL) e = take(api->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &s->cpu_mem));
	if (e != NULL) {
		vg_close(s);
		return e;
	}
	*out = s;
	return NULL;
}

char *vg_set_run_config(vg_session *s, const char *key, const char *val) {
	return take(api->AddRunConfigEntry(s->run, key, val));
}

char *vg_bind(vg_session *s, int output, const char *name, int on_device, int device_id, uintptr_t ptr,
              size_t bytes, const int64_t *shape, size_t ndim, int elem_type) {
	if (s->nvals >= (int)(sizeof s->vals / sizeof s->vals[0])) return dupmsg("too many bound values");
	OrtMemoryInfo *mi = s->cpu_mem;
	if (on_device) {
		if (s->dev_mem == NULL) TRY(api->CreateMemoryInfo("Cuda", OrtDeviceAllocator, device_id, OrtMemTypeDefault, &s->dev_mem));
		mi = s->dev_mem;
	}
	OrtValue *v = NULL;
	TRY(api->CreateTensorWithDataAsOrtValue(mi, (void *)ptr, bytes, shape, ndim, (ONNXTensorElementDataType)elem_type, &v));
	char *e = output ? take(api->BindOutput(s->bind, name, v)) : take(api->BindInput(s->bind, name, v));
	if (e != NULL) {
		api->ReleaseValue(v);
		return e;
	}
	s->vals[s->nvals++] = v;
	return NULL;
}

char *vg_run(vg_session *s) { return take(api->RunWithBinding(s->sess, s->run, s->bind)); }

char *vg_io_count(vg_session *s, size_t *nin, size_t *nout) {
	TRY(api->SessionGetInputCount(s->sess, nin));
	return take(api->SessionGetOutputCount(s->sess, nout));
}

char *vg_io_name(vg_session *s, int output, size_t i, char **out) {
	OrtAllocator *a = NULL;
	TRY(api->GetAllocatorWithDefaultOptions(&a));
	char *n = NULL;
	if (output)
		TRY(api->SessionGetOutputName(s->sess, i, a, &n));
	else
		TRY(api->SessionGetInputName(s->sess, i, a, &n));
	*out = dupmsg(n);
	char *e = take(api->AllocatorFree(a, n));
	if (e != NULL) free(e);
	return NULL;
}

void vg_close(vg_session *s) {
	if (s == NULL) return;
	if (s->bind) api->ReleaseIoBinding(s->bind);
	for (int i = 0; i < s->nvals; i++) api->ReleaseValue(s->vals[i]);
	if (s->sess) api->ReleaseSession(s->sess);
	if (s->run) api->ReleaseRunOptions(s->run);
	if (s->cpu_mem) api->ReleaseMemoryInfo(s->cpu_mem);
	if (s->dev_mem) api->ReleaseMemoryInfo(s->dev_mem);
	free(s);
}
