package gpu

import (
	"testing"
	"time"
)

// Runs without CUDA graphs overlap across GPUs and take turns on one GPU;
// a run with CUDA graphs (which may capture) and any other run exclude
// each other.
func TestRunLock(t *testing.T) {
	try := func(dev int, graphs bool) <-chan func() {
		c := make(chan func(), 1)
		go func() { c <- runLock(dev, graphs) }()
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
	const long, short = 10 * time.Second, 100 * time.Millisecond
	// waitsFor checks that the run trying in c does not start while the
	// one holding release runs, and starts once release is called; it
	// returns the run's unlock.
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

	u0 := runLock(0, false)
	u1, ok := wait(try(1, false), long)
	if !ok {
		t.Fatal("a run on GPU 1 waited for one on GPU 0")
	}
	u := waitsFor(try(0, false), u0, "a second run on GPU 0")
	u()
	u1()

	u = waitsFor(try(1, false), runLock(0, true), "a run after one with CUDA graphs")
	u = waitsFor(try(1, true), u, "a run with CUDA graphs after another run")
	u()
}
