//go:build linux

package cuda

// The device test suite: run against a real GPU by TestGPU (build tag
// gpu, cuda_gpu_test.go) and against the fake driver of testdata/ by
// TestFakeDriver (fake_test.go), so the C plumbing runs in CI too.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const testKernels = `
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void add(float* y, float v, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] += v;
}

extern "C" __global__ void empty() {}

extern "C" __global__ void spin(long long cycles) {
	long long start = clock64();
	while (clock64() - start < cycles) {
	}
}
`

// deviceTests is the suite, in order.
var deviceTests = []struct {
	name string
	fn   func(*testing.T)
}{
	{"Device", testDevice},
	{"ContextRelease", testContextRelease},
	{"MemInfo", testMemInfo},
	{"AllocFree", testAllocFree},
	{"PinnedRoundTrip", testPinnedRoundTrip},
	{"PageableRoundTrip", testPageableRoundTrip},
	{"MemsetD8Async", testMemsetD8Async},
	{"CompileAndLaunch", testCompileAndLaunch},
	{"CompileError", testCompileError},
	{"MissingFunction", testMissingFunction},
	{"Events", testEvents},
	{"GraphCapture", testGraphCapture},
	{"CaptureFnError", testCaptureFnError},
	{"CaptureFnPanic", testCaptureFnPanic},
	{"StreamDestroy", testStreamDestroy},
	{"ConcurrentGoroutines", testConcurrentGoroutines},
}

// gpuContext retains device 0's primary context for the test.
func gpuContext(tb testing.TB) *Context {
	tb.Helper()
	c, err := Primary(0)
	if err != nil {
		tb.Fatalf("Primary(0): %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Release(); err != nil {
			tb.Errorf("Release: %v", err)
		}
	})
	return c
}

func gpuStream(tb testing.TB, c *Context) *Stream {
	tb.Helper()
	s, err := c.NewStream()
	if err != nil {
		tb.Fatalf("NewStream: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			tb.Errorf("Stream.Destroy: %v", err)
		}
	})
	return s
}

func gpuAlloc(tb testing.TB, c *Context, n int) *DeviceBuffer {
	tb.Helper()
	b, err := c.Alloc(n)
	if err != nil {
		tb.Fatalf("Alloc(%d): %v", n, err)
	}
	tb.Cleanup(func() {
		if err := b.Free(); err != nil {
			tb.Errorf("Free: %v", err)
		}
	})
	return b
}

func gpuAllocHost(tb testing.TB, c *Context, n int) *HostBuffer {
	tb.Helper()
	h, err := c.AllocHost(n)
	if err != nil {
		tb.Fatalf("AllocHost(%d): %v", n, err)
	}
	tb.Cleanup(func() {
		if err := h.Free(); err != nil {
			tb.Errorf("HostBuffer.Free: %v", err)
		}
	})
	return h
}

// gpuKernels compiles testKernels and returns the named functions.
func gpuKernels(tb testing.TB, c *Context, names ...string) []*Function {
	tb.Helper()
	m, err := c.CompileModule(testKernels, "test_kernels.cu")
	if err != nil {
		tb.Fatalf("CompileModule: %v", err)
	}
	tb.Cleanup(func() {
		if err := m.Unload(); err != nil {
			tb.Errorf("Unload: %v", err)
		}
	})
	fs := make([]*Function, len(names))
	for i, n := range names {
		if fs[i], err = m.Function(n); err != nil {
			tb.Fatalf("Function(%q): %v", n, err)
		}
	}
	return fs
}

func float32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func bytesFloat32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// grid1D is the launch shape covering n elements with 256-thread blocks.
func grid1D(n int) (grid, block [3]uint32) {
	return [3]uint32{uint32((n + 255) / 256), 1, 1}, [3]uint32{256, 1, 1}
}

func testDevice(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	v, err := DriverVersion()
	if err != nil || v < 12000 {
		t.Fatalf("DriverVersion() = %d, %v; want >= 12000", v, err)
	}
	n, err := DeviceCount()
	if err != nil || n < 1 {
		t.Fatalf("DeviceCount() = %d, %v", n, err)
	}
	d, err := GetDevice(0)
	if err != nil {
		t.Fatalf("GetDevice(0): %v", err)
	}
	t.Logf("driver CUDA %d.%d, %d device(s); 0: %s, sm_%d%d, %.1f GiB",
		v/1000, v%1000/10, n, d.Name, d.Major, d.Minor, float64(d.TotalMem)/(1<<30))
	if d.Ordinal != 0 || d.Name == "" || d.Major < 7 || d.TotalMem < 1<<30 {
		t.Errorf("GetDevice(0) = %+v", d)
	}
	if maj, mnr, err := NVRTCVersion(); err != nil {
		t.Errorf("NVRTCVersion: %v", err)
	} else {
		t.Logf("NVRTC %d.%d", maj, mnr)
	}

	_, err = GetDevice(n)
	var e *Error
	if !errors.As(err, &e) || e.Name != "CUDA_ERROR_INVALID_DEVICE" || e.Code != 101 || e.Op != "cuDeviceGet" {
		t.Errorf("GetDevice(%d) = %v, want cuDeviceGet's CUDA_ERROR_INVALID_DEVICE", n, err)
	}

	c := gpuContext(t)
	if c.Device() != d {
		t.Errorf("Context.Device() = %+v, want %+v", c.Device(), d)
	}
}

func testContextRelease(t *testing.T) {
	c := gpuContext(t)
	c2, err := Primary(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := c2.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	if _, err := c2.Alloc(16); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Release = %v, want ErrClosed", err)
	}
	// c still holds the primary context.
	b := gpuAlloc(t, c, 16)
	if b.Ptr() == 0 {
		t.Error("Alloc through the other reference failed")
	}
}

func testMemInfo(t *testing.T) {
	c := gpuContext(t)
	free, total, err := c.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("free %.1f GiB of %.1f GiB", float64(free)/(1<<30), float64(total)/(1<<30))
	if free == 0 || free > total || total > c.Device().TotalMem {
		t.Errorf("MemInfo() = %d free, %d total; device has %d", free, total, c.Device().TotalMem)
	}
}

func testAllocFree(t *testing.T) {
	c := gpuContext(t)
	b, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if b.Ptr() == 0 || b.Len() != 1<<20 {
		t.Errorf("Ptr() = %#x, Len() = %d", b.Ptr(), b.Len())
	}
	if err := b.Free(); err != nil {
		t.Fatalf("Free: %v", err)
	}
	if err := b.Free(); err != nil || b.Ptr() != 0 {
		t.Errorf("second Free = %v, Ptr() = %#x", err, b.Ptr())
	}
	for _, n := range []int{0, -1} {
		if _, err := c.Alloc(n); err == nil {
			t.Errorf("Alloc(%d) accepted", n)
		}
	}

	// A typed driver error: 1 PiB is more than any GPU has.
	_, err = c.Alloc(1 << 50)
	var e *Error
	if !errors.As(err, &e) || e.Name != "CUDA_ERROR_OUT_OF_MEMORY" || e.Code != 2 {
		t.Fatalf("Alloc(1 PiB) = %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if want := "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): "; !strings.HasPrefix(err.Error(), want) || e.Desc == "" {
		t.Errorf("error %q, want prefix %q and a description", err, want)
	}
}

func testPinnedRoundTrip(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	const n = 1<<20 + 3
	in := gpuAllocHost(t, c, n)
	out := gpuAllocHost(t, c, n)
	d1 := gpuAlloc(t, c, n)
	d2 := gpuAlloc(t, c, n)
	rng := rand.New(rand.NewPCG(1, 2))
	src := in.Bytes()
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	if err := c.CopyHtoDAsync(d1.Ptr(), in, 0, n, s); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoDAsync(d2.Ptr(), d1.Ptr(), n, s); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoHAsync(out, 0, d2.Ptr(), n, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !equalBytes(out.Bytes(), src) {
		t.Fatal("pinned HtoD, DtoD, DtoH round trip differs from the input")
	}

	// Offsets: in[100:300] to the device, back to out[1000:1200].
	clear(out.Bytes())
	if err := c.CopyHtoDAsync(d1.Ptr(), in, 100, 200, s); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoHAsync(out, 1000, d1.Ptr(), 200, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !equalBytes(out.Bytes()[1000:1200], src[100:300]) {
		t.Error("offset round trip differs")
	}
	if err := c.CopyHtoDAsync(d1.Ptr(), in, n-1, 2, s); err == nil {
		t.Error("copy past the host buffer's end accepted")
	}
}

func testPageableRoundTrip(t *testing.T) {
	c := gpuContext(t)
	const n = 3<<20 + 1
	d := gpuAlloc(t, c, n)
	src := make([]byte, n)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	if err := c.CopyHtoD(d.Ptr(), src); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	if err := c.CopyDtoH(dst, d.Ptr()); err != nil {
		t.Fatal(err)
	}
	if !equalBytes(dst, src) {
		t.Fatal("pageable round trip differs from the input")
	}
}

func testMemsetD8Async(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	const n = 4096
	d := gpuAlloc(t, c, n)
	if err := c.MemsetD8Async(d.Ptr(), 0xAB, n, s); err != nil {
		t.Fatal(err)
	}
	if err := c.MemsetD8Async(d.Ptr()+100, 0x01, 10, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := c.CopyDtoH(got, d.Ptr()); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		want := byte(0xAB)
		if i >= 100 && i < 110 {
			want = 0x01
		}
		if b != want {
			t.Fatalf("byte %d = %#x, want %#x", i, b, want)
		}
	}

	// A nil stream is the legacy default stream, which synchronous copies
	// wait for.
	if err := c.MemsetD8Async(d.Ptr(), 7, n, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoH(got, d.Ptr()); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		if b != 7 {
			t.Fatalf("after a memset on the default stream, byte %d = %#x", i, b)
		}
	}
}

func testCompileAndLaunch(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	fs := gpuKernels(t, c, "saxpy")
	saxpy := fs[0]
	const n = 10000
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), float32(2*i)
	}
	dx, dy := gpuAlloc(t, c, 4*n), gpuAlloc(t, c, 4*n)
	if err := c.CopyHtoD(dx.Ptr(), float32Bytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyHtoD(dy.Ptr(), float32Bytes(y)); err != nil {
		t.Fatal(err)
	}
	grid, block := grid1D(n)
	if err := saxpy.Launch(s, grid, block, 0, float32(3), dx.Ptr(), dy.Ptr(), n); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := c.CopyDtoH(out, dy.Ptr()); err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesFloat32(out) {
		if v != float32(5*i) {
			t.Fatalf("y[%d] = %v, want %v", i, v, 5*i)
		}
	}

	err := saxpy.Launch(s, grid, block, 0, float32(3), dx.Ptr(), "y", n)
	if err == nil || !strings.Contains(err.Error(), "argument 2") || !strings.Contains(err.Error(), "string") {
		t.Errorf("launch with a string argument = %v", err)
	}
}

func testCompileError(t *testing.T) {
	c := gpuContext(t)
	src := "extern \"C\" __global__ void broken(float* y) {\n" +
		"\tint i = threadIdx.x;\n" +
		"\ty[i] = undefined_thing;\n" +
		"}\n"
	_, err := c.CompileModule(src, "broken.cu")
	var e *NVRTCError
	if !errors.As(err, &e) {
		t.Fatalf("CompileModule = %v, want an *NVRTCError", err)
	}
	t.Logf("%v", err)
	if e.Op != "nvrtcCompileProgram" || e.Code != 6 || e.Name != "NVRTC_ERROR_COMPILATION" {
		t.Errorf("NVRTCError = {%q %d %q}", e.Op, e.Code, e.Name)
	}
	if !strings.Contains(e.Log, "broken.cu(3)") || !strings.Contains(e.Log, "undefined_thing") {
		t.Errorf("log does not point at line 3's undefined_thing:\n%s", e.Log)
	}
}

func testMissingFunction(t *testing.T) {
	c := gpuContext(t)
	m, err := c.CompileModule(testKernels, "test_kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	empty, err := m.Function("empty")
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Function("no_such_kernel")
	var e *Error
	if !errors.As(err, &e) || e.Name != "CUDA_ERROR_NOT_FOUND" || e.Code != 500 || e.Op != "cuModuleGetFunction" {
		t.Fatalf("Function(no_such_kernel) = %v, want cuModuleGetFunction's CUDA_ERROR_NOT_FOUND", err)
	}
	if err := m.Unload(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Function("saxpy"); !errors.Is(err, ErrClosed) {
		t.Errorf("Function after Unload = %v, want ErrClosed", err)
	}
	if err := empty.Launch(nil, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Launch after Unload = %v, want ErrClosed", err)
	}
}

func testEvents(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	s2 := gpuStream(t, c)
	spin := gpuKernels(t, c, "spin")[0]
	start, err := c.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	end, err := c.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	defer end.Destroy()
	quick, err := c.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer quick.Destroy()

	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	// About 5 ms at 2 GHz.
	if err := spin.Launch(s, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, int64(10_000_000)); err != nil {
		t.Fatal(err)
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := quick.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := s2.WaitEvent(quick); err != nil {
		t.Fatal(err)
	}
	if done, err := end.Done(); err != nil {
		t.Fatalf("Done: %v", err)
	} else if done {
		t.Log("the spin kernel finished before Done was asked (unexpected, not an error)")
	}
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := end.Done(); !done || err != nil {
		t.Errorf("Done after Synchronize = %v, %v", done, err)
	}
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	d, err := Elapsed(start, end)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spin kernel: %v", d)
	if d <= 0 || d > 10*time.Second {
		t.Errorf("Elapsed = %v", d)
	}
	if _, err := Elapsed(start, quick); err == nil {
		t.Error("Elapsed accepted an event without timing")
	}
}

func testGraphCapture(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	fs := gpuKernels(t, c, "saxpy", "add")
	saxpy, add := fs[0], fs[1]
	const n = 5000
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%100), 1
	}
	dx, dy := gpuAlloc(t, c, 4*n), gpuAlloc(t, c, 4*n)
	if err := c.CopyHtoD(dx.Ptr(), float32Bytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyHtoD(dy.Ptr(), float32Bytes(y)); err != nil {
		t.Fatal(err)
	}
	grid, block := grid1D(n)

	// Capture from another goroutine, parking inside the capture so it
	// would most likely change threads if Capture did not lock it.
	type result struct {
		x   *GraphExec
		err error
	}
	ch := make(chan result)
	go func() {
		g, err := s.Capture(CaptureThreadLocal, func() error {
			unsettle()
			if err := saxpy.Launch(s, grid, block, 0, float32(2), dx.Ptr(), dy.Ptr(), n); err != nil {
				return err
			}
			unsettle()
			return add.Launch(s, grid, block, 0, dy.Ptr(), float32(1), n)
		})
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer g.Destroy()
		x, err := g.Instantiate()
		ch <- result{x, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("capture: %v", r.err)
	}
	exec := r.x
	defer exec.Destroy()

	out := make([]byte, 4*n)
	if err := c.CopyDtoH(out, dy.Ptr()); err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesFloat32(out) {
		if v != 1 {
			t.Fatalf("after capture y[%d] = %v: the captured kernels ran", i, v)
		}
	}

	for i := 0; i < 3; i++ {
		if err := exec.Launch(s); err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := c.CopyDtoH(out, dy.Ptr()); err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesFloat32(out) {
		if want := 1 + 3*(2*x[i]+1); v != want {
			t.Fatalf("after 3 graph launches y[%d] = %v, want %v", i, v, want)
		}
	}
}

// unsettle parks the calling goroutine while other goroutines keep every
// P busy, until it resumes on another OS thread or 200 times: an unlocked
// goroutine almost surely changes threads; a locked one never does.
func unsettle() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	tid := syscall.Gettid()
	for i := 0; i < 200 && syscall.Gettid() == tid; i++ {
		time.Sleep(20 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
}

func testCaptureFnError(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	empty := gpuKernels(t, c, "empty")[0]
	boom := errors.New("boom")
	g, err := s.Capture(CaptureGlobal, func() error {
		if err := empty.Launch(s, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0); err != nil {
			return err
		}
		return boom
	})
	if g != nil || err != boom {
		t.Fatalf("Capture with failing fn = %v, %v; want nil, fn's error", g, err)
	}
	// The capture has ended: the stream runs work again.
	if err := empty.Launch(s, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// testCaptureFnPanic checks that a panic in fn still ends the capture.
func testCaptureFnPanic(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	empty := gpuKernels(t, c, "empty")[0]
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic of fn", r)
			}
		}()
		s.Capture(CaptureThreadLocal, func() error {
			if err := empty.Launch(s, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0); err != nil {
				return err
			}
			panic("boom")
		})
		t.Error("Capture returned after fn panicked")
	}()
	if err := empty.Launch(s, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("stream after a panicking capture: %v", err)
	}
}

func testStreamDestroy(t *testing.T) {
	c := gpuContext(t)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if s.Handle() == 0 {
		t.Fatal("Handle() = 0")
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(); err != nil || s.Handle() != 0 {
		t.Errorf("second Destroy = %v, Handle() = %#x", err, s.Handle())
	}
	if err := s.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Errorf("Synchronize after Destroy = %v, want ErrClosed", err)
	}
}

// testConcurrentGoroutines uses one context from many goroutines, which
// run on many OS threads: every call must make the context current itself.
func testConcurrentGoroutines(t *testing.T) {
	c := gpuContext(t)
	const workers, rounds, n = 8, 20, 64 << 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				s, err := c.NewStream()
				if err != nil {
					return err
				}
				defer s.Destroy()
				in, err := c.AllocHost(n)
				if err != nil {
					return err
				}
				defer in.Free()
				out, err := c.AllocHost(n)
				if err != nil {
					return err
				}
				defer out.Free()
				d, err := c.Alloc(n)
				if err != nil {
					return err
				}
				defer d.Free()
				for r := range rounds {
					b := in.Bytes()
					for i := range b {
						b[i] = byte(w*31 + r + i)
					}
					if err := c.CopyHtoDAsync(d.Ptr(), in, 0, n, s); err != nil {
						return err
					}
					if err := c.CopyDtoHAsync(out, 0, d.Ptr(), n, s); err != nil {
						return err
					}
					if err := s.Synchronize(); err != nil {
						return err
					}
					if !equalBytes(out.Bytes(), b) {
						return fmt.Errorf("worker %d round %d: data differs", w, r)
					}
					runtime.Gosched()
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func equalBytes(a, b []byte) bool {
	return len(a) == len(b) && string(a) == string(b)
}
