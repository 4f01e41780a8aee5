// A stand-in for libnvrtc, for testing package cuda without CUDA (see
// fakecuda.c). "Compiling" checks the options and copies the source into a
// fake image that fakecuda's cuModuleLoadData accepts:
//   "FAKECUBIN\narch=sm_XY\n<src>" or "FAKEPTX\narch=compute_XY\n<src>".
// Exactly one --gpu-architecture option is required. Source containing
// "undefined_thing" fails like NVRTC does, with a log naming its line.
// FAKE_NVRTC_NO_SM=1 rejects sm_XY architectures (an NVRTC older than the
// GPU), as NVRTC_ERROR_INVALID_OPTION.
// Like NVRTC, compiling dlopens libnvrtc-builtins.so.13.0 by name and fails
// with NVRTC_ERROR_BUILTIN_OPERATION_FAILURE when the loader cannot find it.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;

typedef struct {
	char *src, *name, *log, *image;
	int cubin;
} program;

const char *nvrtcGetErrorString(nvrtcResult r) {
	switch (r) {
	case 0: return "NVRTC_SUCCESS";
	case 3: return "NVRTC_ERROR_INVALID_INPUT";
	case 4: return "NVRTC_ERROR_INVALID_PROGRAM";
	case 5: return "NVRTC_ERROR_INVALID_OPTION";
	case 6: return "NVRTC_ERROR_COMPILATION";
	case 7: return "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE";
	}
	return "NVRTC_ERROR unknown";
}

nvrtcResult nvrtcVersion(int *major, int *minor) {
	*major = 13;
	*minor = 0;
	return 0;
}

nvrtcResult nvrtcCreateProgram(program **pp, const char *src, const char *name,
		int numHeaders, const char *const *headers, const char *const *includeNames) {
	(void)headers;
	(void)includeNames;
	if (!pp || !src || numHeaders != 0) return 3;
	program *p = calloc(1, sizeof *p);
	if (!p) return 1;
	p->src = strdup(src);
	p->name = strdup(name && *name ? name : "default_program");
	p->log = strdup("");
	*pp = p;
	return 0;
}

nvrtcResult nvrtcDestroyProgram(program **pp) {
	if (!pp || !*pp) return 4;
	program *p = *pp;
	free(p->src);
	free(p->name);
	free(p->log);
	free(p->image);
	free(p);
	*pp = NULL;
	return 0;
}

static void set_log(program *p, const char *s) {
	free(p->log);
	p->log = strdup(s);
}

nvrtcResult nvrtcCompileProgram(program *p, int n, const char *const *opts) {
	const char *arch = NULL;
	const char *prefix = "--gpu-architecture=";
	char buf[512];
	if (!p) return 4;
	if (!dlopen("libnvrtc-builtins.so.13.0", RTLD_NOW)) {
		set_log(p, "nvrtc: error: failed to open libnvrtc-builtins.so.13.0.\n"
			"  Make sure that libnvrtc-builtins.so.13.0 is installed correctly.\n");
		return 7;
	}
	for (int i = 0; i < n; i++) {
		if (strncmp(opts[i], prefix, strlen(prefix)) == 0) {
			if (arch) {
				set_log(p, "nvrtc: error: --gpu-architecture given twice\n");
				return 5;
			}
			arch = opts[i] + strlen(prefix);
		}
	}
	if (!arch) {
		set_log(p, "nvrtc: error: no --gpu-architecture\n");
		return 5;
	}
	if (strncmp(arch, "sm_", 3) == 0 && getenv("FAKE_NVRTC_NO_SM")) {
		snprintf(buf, sizeof buf, "nvrtc: error: invalid value for --gpu-architecture (-arch): %s\n", arch);
		set_log(p, buf);
		return 5;
	}
	const char *bad = strstr(p->src, "undefined_thing");
	if (bad) {
		int line = 1;
		for (const char *c = p->src; c < bad; c++) line += *c == '\n';
		snprintf(buf, sizeof buf,
			"%s(%d): error: identifier \"undefined_thing\" is undefined\n\n"
			"1 error detected in the compilation of \"%s\".\n",
			p->name, line, p->name);
		set_log(p, buf);
		return 6;
	}
	p->cubin = strncmp(arch, "sm_", 3) == 0;
	size_t len = strlen(p->src) + strlen(arch) + 32;
	free(p->image);
	p->image = malloc(len);
	if (!p->image) return 1;
	snprintf(p->image, len, "%s\narch=%s\n%s", p->cubin ? "FAKECUBIN" : "FAKEPTX", arch, p->src);
	return 0;
}

nvrtcResult nvrtcGetProgramLogSize(program *p, size_t *n) {
	if (!p) return 4;
	*n = strlen(p->log) + 1;
	return 0;
}

nvrtcResult nvrtcGetProgramLog(program *p, char *log) {
	if (!p) return 4;
	memcpy(log, p->log, strlen(p->log) + 1);
	return 0;
}

// The fake's PTX is its image relabelled; its size counts the NUL.
nvrtcResult nvrtcGetPTXSize(program *p, size_t *n) {
	if (!p || !p->image) return 4;
	*n = strlen(p->image) + 1;
	return 0;
}

nvrtcResult nvrtcGetPTX(program *p, char *out) {
	if (!p || !p->image) return 4;
	if (p->cubin) {
		// sm_XY compiles have PTX too; label it so.
		sprintf(out, "FAKEPTX\n%s", p->image + strlen("FAKECUBIN\n"));
		return 0;
	}
	memcpy(out, p->image, strlen(p->image) + 1);
	return 0;
}

// No CUBIN for a virtual architecture: size 0, as NVRTC documents.
nvrtcResult nvrtcGetCUBINSize(program *p, size_t *n) {
	if (!p || !p->image) return 4;
	*n = p->cubin ? strlen(p->image) + 1 : 0;
	return 0;
}

nvrtcResult nvrtcGetCUBIN(program *p, char *out) {
	if (!p || !p->image || !p->cubin) return 3;
	memcpy(out, p->image, strlen(p->image) + 1);
	return 0;
}
