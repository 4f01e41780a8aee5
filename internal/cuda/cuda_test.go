package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// These tests need no GPU. Those about a failed Init skip where a driver
// loads (the gpu-tagged tests cover that machine).

func TestInitWithoutDriver(t *testing.T) {
	err := Init()
	if err == nil {
		t.Skip("a CUDA driver is present")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Init() = %v, want an error wrapping ErrNoDriver", err)
	}
	t.Log(err)
	for _, want := range []string{"no NVIDIA driver found", "libcuda.so.1", "GPU features need an NVIDIA driver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Init() error %q does not mention %q", err, want)
		}
	}
	if again := Init(); again != err {
		t.Errorf("second Init() = %v, want the first result %v", again, err)
	}
}

// constructors calls every package-level constructor and returns their
// errors by name.
func constructors() map[string]error {
	errs := map[string]error{}
	_, errs["DriverVersion"] = DriverVersion()
	_, errs["DeviceCount"] = DeviceCount()
	_, errs["GetDevice"] = GetDevice(0)
	_, errs["Primary"] = Primary(0)
	return errs
}

func TestConstructorsAfterFailedInit(t *testing.T) {
	initErr := Init()
	if initErr == nil {
		t.Skip("a CUDA driver is present")
	}
	for name, err := range constructors() {
		if err != initErr {
			t.Errorf("%s error = %v, want Init's %v", name, err, initErr)
		}
	}
}

// TestConstructorsBeforeInit runs each constructor first thing in a fresh
// process (this test binary, re-run), before anything called Init.
func TestConstructorsBeforeInit(t *testing.T) {
	if name := os.Getenv("VIGIL_CUDA_TEST_FIRST_CALL"); name != "" {
		err := constructors()[name]
		initErr := Init()
		switch {
		case initErr == nil:
			fmt.Println("SKIP: driver present")
		case err != initErr || !errors.Is(err, ErrNoDriver):
			fmt.Printf("FAIL: %s first: %v; Init then: %v\n", name, err, initErr)
		default:
			fmt.Println("OK")
		}
		return
	}
	for _, name := range []string{"DriverVersion", "DeviceCount", "GetDevice", "Primary"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConstructorsBeforeInit$", "-test.count=1")
		// GORACE: without it a -race child sleeps a second before exiting.
		cmd.Env = append(os.Environ(), "VIGIL_CUDA_TEST_FIRST_CALL="+name, "GORACE=atexit_sleep_ms=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: child process: %v\n%s", name, err, out)
		}
		switch s := string(out); {
		case strings.Contains(s, "SKIP: driver present"):
			t.Skip("a CUDA driver is present")
		case !strings.Contains(s, "OK"):
			t.Errorf("%s called before Init:\n%s", name, s)
		}
	}
}

func TestInitDriverMissingLibrary(t *testing.T) {
	const lib = "libvigil-test-no-such-driver.so.1"
	err := initDriver(lib)
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("initDriver(%q) = %v, want an error wrapping ErrNoDriver", lib, err)
	}
	for _, want := range []string{"cuda: no NVIDIA driver found (" + lib + ": ", "GPU features need an NVIDIA driver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestOpenNVRTCMissing(t *testing.T) {
	names := []string{"libvigil-test-no-nvrtc.so.99", "/nonexistent/libnvrtc.so.13"}
	err := openNVRTC(names)
	if !errors.Is(err, ErrNoNVRTC) {
		t.Fatalf("openNVRTC = %v, want an error wrapping ErrNoNVRTC", err)
	}
	for _, want := range append(names, "VIGIL_NVRTC_LIBRARY") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestNVRTCCandidates(t *testing.T) {
	t.Setenv("VIGIL_NVRTC_LIBRARY", "")
	got := nvrtcCandidates()
	want := []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
		"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("candidates = %q, want %q", got, want)
	}
	t.Setenv("VIGIL_NVRTC_LIBRARY", "/opt/cuda/libnvrtc.so.13.1")
	if got := nvrtcCandidates(); got[0] != "/opt/cuda/libnvrtc.so.13.1" || len(got) != len(want)+1 {
		t.Errorf("with VIGIL_NVRTC_LIBRARY, candidates = %q", got)
	}
}

func TestNVRTCVersion(t *testing.T) {
	major, minor, err := NVRTCVersion()
	if err != nil {
		if !errors.Is(err, ErrNoNVRTC) {
			t.Fatalf("NVRTCVersion() = %v, want nil or ErrNoNVRTC", err)
		}
		t.Logf("no NVRTC: %v", err)
		return
	}
	t.Logf("NVRTC %d.%d", major, minor)
	if major < 11 {
		t.Errorf("NVRTC %d.%d, want 11 or newer", major, minor)
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{Op: "cuMemAlloc", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	if got, want := e.Error(), "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	bare := &Error{Op: "cuInit", Code: 12345}
	if got, want := bare.Error(), "cuda: cuInit: CUresult (12345)"; got != want {
		t.Errorf("Error() without name = %q, want %q", got, want)
	}
	var target *Error
	if !errors.As(fmt.Errorf("loading: %w", e), &target) || target.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("errors.As did not find the *Error")
	}

	n := &NVRTCError{Op: "nvrtcCompileProgram", Code: 6, Name: "NVRTC_ERROR_COMPILATION",
		Log: "k.cu(3): error: identifier \"oops\" is undefined\n\n1 error detected\n"}
	want := "cuda: nvrtcCompileProgram: NVRTC_ERROR_COMPILATION (6):\nk.cu(3): error: identifier \"oops\" is undefined\n\n1 error detected"
	if got := n.Error(); got != want {
		t.Errorf("NVRTCError.Error() = %q, want %q", got, want)
	}
	if got, want := (&NVRTCError{Op: "nvrtcCreateProgram", Code: 1, Name: "NVRTC_ERROR_OUT_OF_MEMORY"}).Error(),
		"cuda: nvrtcCreateProgram: NVRTC_ERROR_OUT_OF_MEMORY (1)"; got != want {
		t.Errorf("NVRTCError.Error() without log = %q, want %q", got, want)
	}
}

func TestCheck(t *testing.T) {
	if err := check("cuMemAlloc", 0); err != nil {
		t.Errorf("check(0) = %v", err)
	}
	var e *Error
	if err := check("cuMemAlloc", 2); !errors.As(err, &e) || e.Op != "cuMemAlloc" || e.Code != 2 {
		t.Errorf("check(2) = %#v", err)
	}
	if err := check("cuMemAlloc", -201); !errors.As(err, &e) || e.Op != "cuCtxSetCurrent (before cuMemAlloc)" || e.Code != 201 {
		t.Errorf("check(-201) = %#v", err)
	}
}

func TestMarshalArgs(t *testing.T) {
	slots, err := marshalArgs([]any{
		DevicePtr(0x7f0000001000), uintptr(42), uint64(math.MaxUint64), int64(-2),
		int32(-1), uint32(7), int(-5), float32(1.5),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{
		0x7f0000001000, 42, math.MaxUint64, 0xfffffffffffffffe,
		0xffffffff, 7, 0xfffffffb, uint64(math.Float32bits(1.5)),
	}
	if len(slots) != len(want) {
		t.Fatalf("%d slots, want %d", len(slots), len(want))
	}
	for i := range want {
		if slots[i] != want[i] {
			t.Errorf("slot %d = %#x, want %#x", i, slots[i], want[i])
		}
	}
	if slots, err := marshalArgs(nil); err != nil || slots != nil {
		t.Errorf("no args: %v, %v", slots, err)
	}

	for _, c := range []struct {
		args []any
		want []string
	}{
		{[]any{int32(1), "x"}, []string{"argument 1", "string"}},
		{[]any{1.5}, []string{"argument 0", "float64"}},
		{[]any{nil}, []string{"argument 0", "<nil>"}},
		{[]any{int8(1)}, []string{"argument 0", "int8"}},
		{[]any{&DeviceBuffer{}}, []string{"argument 0", "*cuda.DeviceBuffer", "Ptr()"}},
		{[]any{uint32(0), math.MaxInt32 + 1}, []string{"argument 1", "overflows int32"}},
		{[]any{math.MinInt32 - 1}, []string{"argument 0", "overflows int32"}},
		{make([]any, maxLaunchArgs+1), []string{"at most 256"}},
	} {
		_, err := marshalArgs(c.args)
		if err == nil {
			t.Errorf("marshalArgs(%v) accepted", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("marshalArgs(%T...) error %q does not mention %q", c.args[0], err, w)
			}
		}
	}
	if _, err := marshalArgs([]any{math.MaxInt32, math.MinInt32}); err != nil {
		t.Errorf("int32 limits refused: %v", err)
	}
}

// TestNilAndClosedObjects checks that nil and zero objects fail with
// ErrClosed (or do nothing, for the idempotent releases) without reaching
// the driver.
func TestNilAndClosedObjects(t *testing.T) {
	var (
		nilCtx  *Context
		zeroCtx = &Context{}
		s       *Stream
		zs      = &Stream{}
		e       *Event
		g       *Graph
		x       *GraphExec
		m       *Module
		f       *Function
		db      *DeviceBuffer
		hb      *HostBuffer
	)
	for _, c := range []*Context{nilCtx, zeroCtx} {
		mustClosed(t, "Context.NewStream", func() error { _, err := c.NewStream(); return err })
		mustClosed(t, "Context.NewEvent", func() error { _, err := c.NewEvent(true); return err })
		mustClosed(t, "Context.Alloc", func() error { _, err := c.Alloc(16); return err })
		mustClosed(t, "Context.AllocHost", func() error { _, err := c.AllocHost(16); return err })
		mustClosed(t, "Context.MemInfo", func() error { _, _, err := c.MemInfo(); return err })
		mustClosed(t, "Context.CompileModule", func() error { _, err := c.CompileModule("", "x.cu"); return err })
		mustClosed(t, "Context.CopyHtoD", func() error { return c.CopyHtoD(0, []byte{1}) })
		mustClosed(t, "Context.CopyDtoH", func() error { return c.CopyDtoH([]byte{1}, 0) })
		mustClosed(t, "Context.CopyDtoDAsync", func() error { return c.CopyDtoDAsync(0, 0, 1, nil) })
		mustClosed(t, "Context.MemsetD8Async", func() error { return c.MemsetD8Async(0, 0, 1, nil) })
		mustClosed(t, "Context.CopyHtoDAsync", func() error { return c.CopyHtoDAsync(0, hb, 0, 1, nil) })
		mustClosed(t, "Context.CopyDtoHAsync", func() error { return c.CopyDtoHAsync(hb, 0, 0, 1, nil) })
		if err := c.Release(); err != nil {
			t.Errorf("Release: %v", err)
		}
		if d := c.Device(); c == nil && d != (Device{}) {
			t.Errorf("nil Context.Device() = %+v", d)
		}
	}
	for _, st := range []*Stream{s, zs} {
		mustClosed(t, "Stream.Synchronize", st.Synchronize)
		mustClosed(t, "Stream.WaitEvent", func() error { return st.WaitEvent(e) })
		mustClosed(t, "Stream.Capture", func() error {
			_, err := st.Capture(CaptureThreadLocal, func() error { return nil })
			return err
		})
		if st.Handle() != 0 {
			t.Errorf("Handle() = %#x", st.Handle())
		}
		if err := st.Destroy(); err != nil {
			t.Errorf("Stream.Destroy: %v", err)
		}
	}
	mustClosed(t, "Event.Record", func() error { return e.Record(nil) })
	mustClosed(t, "Event.Synchronize", e.Synchronize)
	mustClosed(t, "Event.Done", func() error { _, err := e.Done(); return err })
	mustClosed(t, "Elapsed", func() error { _, err := Elapsed(e, e); return err })
	mustClosed(t, "Graph.Instantiate", func() error { _, err := g.Instantiate(); return err })
	mustClosed(t, "GraphExec.Launch", func() error { return x.Launch(nil) })
	mustClosed(t, "Module.Function", func() error { _, err := m.Function("k"); return err })
	mustClosed(t, "Function.Launch", func() error { return f.Launch(nil, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0) })
	for name, release := range map[string]func() error{
		"Event.Destroy": e.Destroy, "Graph.Destroy": g.Destroy, "GraphExec.Destroy": x.Destroy,
		"Module.Unload": m.Unload, "DeviceBuffer.Free": db.Free, "HostBuffer.Free": hb.Free,
		"zero Event.Destroy": (&Event{}).Destroy, "zero DeviceBuffer.Free": (&DeviceBuffer{}).Free,
		"zero HostBuffer.Free": (&HostBuffer{}).Free,
	} {
		if err := release(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if db.Ptr() != 0 || db.Len() != 0 || hb.Bytes() != nil || hb.Len() != 0 {
		t.Errorf("nil buffers report memory")
	}
}

func mustClosed(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := f(); !errors.Is(err, ErrClosed) {
		t.Errorf("%s = %v, want an error wrapping ErrClosed", what, err)
	}
}

func TestHostBufferSpan(t *testing.T) {
	var mem [16]byte
	h := &HostBuffer{n: len(mem)}
	h.p.Store(&mem[0])
	for _, c := range []struct {
		off, n int
		ok     bool
	}{
		{0, 16, true}, {4, 12, true}, {16, 0, true}, {0, 0, true},
		{-1, 1, false}, {0, 17, false}, {8, 9, false}, {17, 0, false}, {1, -1, false},
		{1, math.MaxInt, false},
	} {
		p, err := h.span("test", c.off, c.n)
		if c.ok != (err == nil) {
			t.Errorf("span(%d, %d) error = %v, want ok=%v", c.off, c.n, err, c.ok)
		}
		if err == nil && c.n > 0 && (*byte)(p) != &mem[c.off] {
			t.Errorf("span(%d, %d) = %p, want %p", c.off, c.n, p, &mem[c.off])
		}
	}
	if got := h.Bytes(); len(got) != 16 || &got[0] != &mem[0] {
		t.Errorf("Bytes() does not view the buffer")
	}
}

func TestCompileHelpers(t *testing.T) {
	for opts, want := range map[string]bool{
		"":                                  false,
		"-lineinfo --use_fast_math":         false,
		"--gpu-architecture=compute_90":     true,
		"-arch=sm_90":                       true,
		"-lineinfo -arch sm_90":             true,
		"--std=c++17 --gpu-architecture=sm": true,
	} {
		if got := hasArchOption(strings.Fields(opts)); got != want {
			t.Errorf("hasArchOption(%q) = %v", opts, got)
		}
	}
	if got := cString([]byte("log\x00\x00")); got != "log" {
		t.Errorf("cString = %q", got)
	}
	if got := cString([]byte("no nul")); got != "no nul" {
		t.Errorf("cString = %q", got)
	}
}

func TestCaptureModeString(t *testing.T) {
	if CaptureGlobal != 0 || CaptureThreadLocal != 1 || CaptureRelaxed != 2 {
		t.Fatal("CaptureMode values differ from cuda.h's CUstreamCaptureMode")
	}
	if got := CaptureThreadLocal.String(); got != "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL" {
		t.Errorf("String() = %q", got)
	}
	if got := CaptureMode(7).String(); got != "CaptureMode(7)" {
		t.Errorf("String() = %q", got)
	}
}
