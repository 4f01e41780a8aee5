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

	u0 := runLock(0, false)
	u1, ok := wait(try(1, false), long)
	if !ok {
		t.Fatal("a run on GPU 1 waited for one on GPU 0")
	}
	second := try(0, false)
	if _, ok := wait(second, short); ok {
		t.Fatal("two runs on GPU 0 at once")
	}
	u0()
	u, ok := wait(second, long)
	if !ok {
		t.Fatal("the second run on GPU 0 did not start when the first ended")
	}
	u()
	u1()

	ug := runLock(0, true)
	plain := try(1, false)
	if _, ok := wait(plain, short); ok {
		t.Fatal("a run beside one with CUDA graphs")
	}
	ug()
	u, ok = wait(plain, long)
	if !ok {
		t.Fatal("the run did not start when the one with CUDA graphs ended")
	}
	graph := try(1, true)
	if _, ok := wait(graph, short); ok {
		t.Fatal("a run with CUDA graphs beside another run")
	}
	u()
	if u, ok = wait(graph, long); !ok {
		t.Fatal("the run with CUDA graphs did not start when the other ended")
	}
	u()
}
