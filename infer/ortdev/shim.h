// A thin C layer over ONNX Runtime's C API (OrtApi, version 24): sessions
// with an execution-provider chain and I/O bound to caller-owned memory.
// Every function returns NULL on success or a malloc'd error message that
// the caller frees.
#ifndef VIGIL_ORTDEV_SHIM_H
#define VIGIL_ORTDEV_SHIM_H
#include <stddef.h>
#include <stdint.h>

typedef struct vg_session vg_session;

char *vg_init(const char *lib_path);
// provider: 0 cpu, 1 cuda, 2 tensorrt. keys/vals: provider options.
// provider 2 (tensorrt) also appends the CUDA provider with ckeys/cvals,
// for the nodes TensorRT does not take.
char *vg_open(const char *model, int provider, const char **keys, const char **vals, int nopts,
              const char **ckeys, const char **cvals, int ncopts,
              const char **skeys, const char **svals, int nsopts, int intra_threads, vg_session **out);
char *vg_bind(vg_session *s, int output, const char *name, int on_device, int device_id, uintptr_t ptr,
              size_t bytes, const int64_t *shape, size_t ndim, int elem_type);
char *vg_run(vg_session *s);
char *vg_set_run_config(vg_session *s, const char *key, const char *val);
void vg_close(vg_session *s);
char *vg_io_count(vg_session *s, size_t *nin, size_t *nout);
char *vg_io_name(vg_session *s, int output, size_t i, char **out); // out: malloc'd
#endif
