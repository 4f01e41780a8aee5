// A stand-in for libnvrtc-builtins.so.13.0 (see fakenvrtc.c): only its
// soname matters.
int fake_nvrtc_builtins(void) { return 13; }
