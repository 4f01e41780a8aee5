package gpu

import (
	"errors"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-video/vigil/internal/cuda"
)

// Runs overlap each other (instances and engines on one GPU run at once);
// a section that may capture a CUDA graph (cuda.Exclusive: session
// creation and warm-up) and any run exclude each other.
func TestRunLock(t *testing.T) {
	try := func(lock func() func()) <-chan func() {
		c := make(chan func(), 1)
		go func() { c <- lock() }()
		return c
	}
	wait := func(c <-chan func(), d time.Duration) (func(), bool) {
		select {
		case u := <-c:
			return u, true
		case <-time.After(d):
			return nil, false
		}
	}
	// long bounds a wait that must end (generous for a loaded CI machine);
	// short is how long a wait that must not end is watched.
	const long, short = 10 * time.Second, 100 * time.Millisecond
	waitsFor := func(c <-chan func(), release func(), what string) func() {
		t.Helper()
		if _, ok := wait(c, short); ok {
			t.Fatalf("%s: ran beside the other", what)
		}
		release()
		u, ok := wait(c, long)
		if !ok {
			t.Fatalf("%s: did not start when the other ended", what)
		}
		return u
	}

	u0 := runLock()
	u1, ok := wait(try(runLock), long)
	if !ok {
		t.Fatal("a second run waited for the first")
	}
	u1()
	u := waitsFor(try(cuda.Exclusive), u0, "a capture beside a run")
	u = waitsFor(try(runLock), u, "a run beside a capture")
	u()
}

// Every call through a lane runs on the same OS thread, whichever
// goroutine (and so thread) makes it: ONNX Runtime keeps a session's CUDA
// graph per thread, and a run on another thread would capture again.
func TestLaneThread(t *testing.T) {
	l := &lane{}
	l.startThread()
	defer l.stopThread()
	tids := map[int]bool{}
	callers := map[int]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each caller on a thread of its own, as goroutines calling
			// the engine may be.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range 50 {
				mu.Lock() // one holder of the lane at a time, as the engine's free list ensures
				callers[syscall.Gettid()] = true
				_ = l.do(func() error { tids[syscall.Gettid()] = true; return nil })
				mu.Unlock()
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	if len(tids) != 1 {
		t.Fatalf("calls ran on %d threads, want 1", len(tids))
	}
	if len(callers) < 2 {
		t.Fatalf("callers ran on %d threads: the test shows nothing", len(callers))
	}
	l.stopThread()
	l.stopThread() // idempotent
}

// The choice line's reason for a provider that did not open names it once.
func TestUnavailable(t *testing.T) {
	err := errors.New("model /m.onnx: no execution provider works (tensorrt unavailable: Failed to load library x.so)")
	if got := unavailable("tensorrt", "/m.onnx", err); got != "tensorrt unavailable: Failed to load library x.so" {
		t.Fatalf("got %q", got)
	}
	if got := unavailable("cuda", "/m.onnx", errors.New("warm-up run: boom")); got != "cuda unavailable: warm-up run: boom" {
		t.Fatalf("got %q", got)
	}
}
