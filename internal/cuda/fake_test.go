//go:build linux

package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFakeDriver runs the package against testdata's fake libcuda.so.1
// and libnvrtc, built here with the C compiler cgo uses, in child
// processes (this test binary again, running TestFakeDriverChild): the
// driver is loaded once per process, and a process of the gpu-tagged tests
// must keep the real one. It exercises every C wrapper, kernel argument
// passing, the per-thread current context and the thread rule of stream
// capture on machines without a GPU, and, with testdata's fake
// libnvcuvid.so.1, the NVDEC session (nvdec.go).
func TestFakeDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds C libraries")
	}
	cc := cCompiler(t)
	dir := t.TempDir()
	build := func(out, src string, flags ...string) string {
		t.Helper()
		path := filepath.Join(dir, out)
		args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-o", path, src, "-lpthread", "-ldl"}, flags...)
		if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
		}
		return path
	}
	cuda := build("libcuda.so.1", "testdata/fakecuda.c")
	oldCUDA := build("libcuda-old.so.1", "testdata/fakecuda.c", "-DFAKE_OMIT_LAUNCH")
	// Not on the loader's path: the package must preload the builtins from
	// NVRTC's directory for the fake NVRTC's dlopen by name to succeed.
	nvrtc := build("libnvrtc.so.13", "testdata/fakenvrtc.c")
	build("libnvrtc-builtins.so.13.0", "testdata/fakebuiltins.c", "-Wl,-soname,libnvrtc-builtins.so.13.0")
	nvcuvid := build("libnvcuvid.so.1", "testdata/fakenvcuvid.c")

	for _, c := range []struct {
		mode, lib string
		env       []string
	}{
		{"api", cuda, []string{"FAKE_CUDA_REQUIRE=CUBIN"}},
		{"nodevice", cuda, []string{"FAKE_CUDA_INIT_RESULT=100"}},
		{"initfails", cuda, []string{"FAKE_CUDA_INIT_RESULT=201"}},
		{"tooold", oldCUDA, nil},
		{"nvdec", cuda, []string{"VIGIL_CUDA_FAKE_NVDEC=" + nvcuvid}},
		{"nonvdec", cuda, []string{"VIGIL_CUDA_FAKE_NVDEC=" + filepath.Join(dir, "libnvcuvid-missing.so.1")}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestFakeDriverChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(),
				"VIGIL_CUDA_FAKE_DRIVER="+c.lib,
				"VIGIL_CUDA_FAKE_MODE="+c.mode,
				"VIGIL_NVRTC_LIBRARY="+nvrtc,
				"GORACE=atexit_sleep_ms=0")
			cmd.Env = append(cmd.Env, c.env...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestFakeDriverChild") {
				t.Fatalf("child (%v):\n%s", err, out)
			}
			if testing.Verbose() {
				t.Logf("child:\n%s", out)
			}
		})
	}
}

// cCompiler finds the C compiler: $CC, cc or gcc.
func cCompiler(t *testing.T) string {
	t.Helper()
	for _, c := range []string{os.Getenv("CC"), "cc", "gcc"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(strings.Fields(c)[0]); err == nil {
			return p
		}
	}
	t.Skip("no C compiler")
	return ""
}

// TestFakeDriverChild is TestFakeDriver's child; it does nothing on its own.
func TestFakeDriverChild(t *testing.T) {
	lib := os.Getenv("VIGIL_CUDA_FAKE_DRIVER")
	if lib == "" {
		t.Skip("run by TestFakeDriver")
	}
	driverLibrary = lib
	if nv := os.Getenv("VIGIL_CUDA_FAKE_NVDEC"); nv != "" {
		nvdecLibrary = nv
	}
	switch mode := os.Getenv("VIGIL_CUDA_FAKE_MODE"); mode {
	case "api":
		for _, c := range deviceTests {
			t.Run(c.name, c.fn)
		}
		t.Run("PTXFallback", testFakePTXFallback)
		t.Run("UserArch", testFakeUserArch)
		t.Run("EventDone", testFakeEventDone)
	case "nvdec":
		testFakeNVDEC(t)
	case "nonvdec":
		testFakeNoNVDEC(t)
	case "nodevice":
		err := Init()
		var e *Error
		if !errors.Is(err, ErrNoDriver) || !errors.As(err, &e) || e.Name != "CUDA_ERROR_NO_DEVICE" {
			t.Fatalf("Init() = %v, want ErrNoDriver and cuInit's CUDA_ERROR_NO_DEVICE", err)
		}
		t.Log(err)
		for _, want := range []string{"cuda: no NVIDIA driver found (cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected)", "GPU features need an NVIDIA driver and GPU"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
		for name, cerr := range constructors() {
			if cerr != err {
				t.Errorf("%s error = %v, want Init's", name, cerr)
			}
		}
	case "initfails":
		err := Init()
		var e *Error
		if errors.Is(err, ErrNoDriver) || !errors.As(err, &e) || e.Op != "cuInit" || e.Code != 201 {
			t.Fatalf("Init() = %v, want cuInit's *Error 201 without ErrNoDriver", err)
		}
		if got, want := err.Error(), "cuda: cuInit: CUDA_ERROR_INVALID_CONTEXT (201): invalid device context"; got != want {
			t.Errorf("Init() error %q, want %q", got, want)
		}
	case "tooold":
		err := Init()
		if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "cuLaunchKernel") {
			t.Fatalf("Init() = %v, want ErrNoDriver naming cuLaunchKernel", err)
		}
		t.Log(err)
	default:
		t.Fatalf("unknown VIGIL_CUDA_FAKE_MODE %q", mode)
	}
}

// testFakePTXFallback: an NVRTC that rejects sm_90 gets compute_90, and
// the PTX is loaded.
func testFakePTXFallback(t *testing.T) {
	t.Setenv("FAKE_NVRTC_NO_SM", "1")
	t.Setenv("FAKE_CUDA_REQUIRE", "PTX")
	c := gpuContext(t)
	saxpy := gpuKernels(t, c, "saxpy")[0]
	checkSaxpy(t, c, saxpy)
}

// testFakeUserArch: an architecture in opts replaces the package's (the
// fake refuses two), and compute_XY gives PTX.
func testFakeUserArch(t *testing.T) {
	t.Setenv("FAKE_CUDA_REQUIRE", "PTX")
	c := gpuContext(t)
	m, err := c.CompileModule(testKernels, "k.cu", "--gpu-architecture=compute_90", "-lineinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	saxpy, err := m.Function("saxpy")
	if err != nil {
		t.Fatal(err)
	}
	checkSaxpy(t, c, saxpy)
}

// checkSaxpy runs saxpy on 1000 elements and checks y = 3x + y.
func checkSaxpy(t *testing.T, c *Context, saxpy *Function) {
	t.Helper()
	const n = 1000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	dx, dy := gpuAlloc(t, c, 4*n), gpuAlloc(t, c, 4*n)
	if err := c.CopyHtoD(dx.Ptr(), float32Bytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyHtoD(dy.Ptr(), float32Bytes(x)); err != nil {
		t.Fatal(err)
	}
	grid, block := grid1D(n)
	if err := saxpy.Launch(nil, grid, block, 0, float32(3), dx.Ptr(), dy.Ptr(), n); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := c.CopyDtoH(out, dy.Ptr()); err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesFloat32(out) {
		if v != float32(4*i) {
			t.Fatalf("y[%d] = %v, want %v", i, v, 4*i)
		}
	}
}

// testFakeEventDone: the fake's first query after a record is not ready.
func testFakeEventDone(t *testing.T) {
	c := gpuContext(t)
	e, err := c.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	if err := e.Record(nil); err != nil {
		t.Fatal(err)
	}
	if done, err := e.Done(); done || err != nil {
		t.Errorf("first Done = %v, %v; want false, nil (CUDA_ERROR_NOT_READY)", done, err)
	}
	if done, err := e.Done(); !done || err != nil {
		t.Errorf("second Done = %v, %v; want true, nil", done, err)
	}
}
