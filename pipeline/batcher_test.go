package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sizeEngine is a BatchEngine of a given size for plan tests (plan never
// runs an engine).
type sizeEngine int

func (e sizeEngine) Batch() int { return int(e) }
func (e sizeEngine) DetectBatch([]Image, []*StageTimes, [][]Detection) ([][]Detection, error) {
	panic("not run in plan tests")
}

// Dispatch decisions, with explicit times (a fake clock): on the largest
// preferred size, on the oldest request's max_queue_delay, and when waiting
// longer would break the earliest deadline.
func TestBatcherPlan(t *testing.T) {
	b := NewBatcher(BatcherConfig{Engines: []BatchEngine{sizeEngine(8), sizeEngine(1), sizeEngine(4)}, Preferred: []int{4, 8}, MaxQueueDelay: 5 * time.Millisecond})
	b.per[1].Add(2 * time.Millisecond)
	b.per[4].Add(4 * time.Millisecond)
	b.per[8].Add(6 * time.Millisecond)
	t0 := time.Unix(0, 0)
	req := func(enqMS, deadlineMS int) *batchReq {
		r := &batchReq{enq: t0.Add(time.Duration(enqMS) * time.Millisecond)}
		if deadlineMS > 0 {
			r.deadline = t0.Add(time.Duration(deadlineMS) * time.Millisecond)
		}
		return r
	}
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

	// Size: 8 requests reach the largest preferred size at once.
	var eight []*batchReq
	for i := 0; i < 9; i++ {
		eight = append(eight, req(0, 0))
	}
	n, _ := b.plan(at(0), eight)
	require.Equal(t, 8, n)

	// Delay: 3 requests without deadlines wait until the oldest has waited 5 ms.
	three := []*batchReq{req(0, 0), req(1, 0), req(2, 0)}
	n, until := b.plan(at(1), three)
	require.Zero(t, n)
	require.Equal(t, at(5), until)
	n, _ = b.plan(at(5), three)
	require.Equal(t, 3, n)

	// Deadline: 3 requests, the earliest due at 8 ms; a batch of 4 takes
	// 4 ms, so waiting past 4 ms would break it (before the 5 ms delay).
	dl := []*batchReq{req(0, 8), req(0, 50), req(0, 0)}
	n, until = b.plan(at(1), dl)
	require.Zero(t, n)
	require.Equal(t, at(4), until)
	n, _ = b.plan(at(4), dl)
	require.Equal(t, 3, n)

	require.Equal(t, 1, b.engineFor(1).Batch())
	require.Equal(t, 4, b.engineFor(3).Batch(), "a partial batch runs on the smallest engine that fits, padded")
	require.Equal(t, 8, b.engineFor(5).Batch())
	n, _ = b.plan(at(0), nil)
	require.Zero(t, n)
}

// While a batch runs, a partial batch is not sent on MaxQueueDelay: it
// would wait behind the running one for the device. It is held for about
// one batch time (its estimate), and its deadline counts two batch times
// (the running one, then its own); with no trusted estimate it is not held.
func TestBatcherPlanWhileRunning(t *testing.T) {
	b := NewBatcher(BatcherConfig{Engines: []BatchEngine{sizeEngine(8), sizeEngine(1), sizeEngine(4)}, MaxQueueDelay: time.Millisecond})
	t0 := time.Unix(0, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	req := func(enqMS, deadlineMS int) *batchReq {
		r := &batchReq{enq: at(float64(enqMS))}
		if deadlineMS > 0 {
			r.deadline = at(float64(deadlineMS))
		}
		return r
	}
	three := []*batchReq{req(0, 0), req(1, 0), req(2, 0)}
	b.running.Store(1)
	n, _ := b.plan(at(2), three)
	require.Equal(t, 3, n, "no trusted estimate: MaxQueueDelay as when nothing runs")

	b.per[4].Add(4 * time.Millisecond)
	b.running.Store(0)
	n, _ = b.plan(at(2), three)
	require.Equal(t, 3, n, "nothing running: MaxQueueDelay")
	b.running.Store(1)
	n, until := b.plan(at(2), three)
	require.Zero(t, n)
	require.Equal(t, at(4), until, "held one batch time (4 ms) from the oldest request")
	n, _ = b.plan(at(4), three)
	require.Equal(t, 3, n, "then sent, whether or not the running batch ended")

	dl := []*batchReq{req(0, 10), req(0, 50), req(0, 0)}
	n, until = b.plan(at(1), dl)
	require.Zero(t, n)
	require.Equal(t, at(2), until, "due at 10 ms: room for the running batch (4) and its own (4)")
	n, _ = b.plan(at(2), dl)
	require.Equal(t, 3, n)

	var eight []*batchReq
	for range 8 {
		eight = append(eight, req(0, 0))
	}
	n, _ = b.plan(at(0), eight)
	require.Equal(t, 8, n, "a full batch goes at once")
}

// Which pending requests are refused as late: judged by the measured time
// of the engine their batch would run on (at most the largest preferred
// size), each engine's estimate trusted only while that engine keeps
// running, and with no trusted estimate those already past their deadline.
func TestBatcherTakeLate(t *testing.T) {
	b := NewBatcher(BatcherConfig{Engines: []BatchEngine{sizeEngine(1), sizeEngine(4), sizeEngine(32)}, Preferred: []int{4}})
	now := time.Unix(1000, 0)
	b.per[1].Reset(2 * time.Millisecond)
	b.per[4].Reset(400 * time.Millisecond) // one stalled run
	b.lastRun[1].Store(now.UnixNano())
	pend := func(n int, deadline time.Time) {
		b.pending = nil
		for i := range n {
			b.pending = append(b.pending, &batchReq{deadline: deadline, seq: uint64(i)})
		}
	}

	b.lastRun[4].Store(now.Add(-100 * time.Millisecond).UnixNano())
	pend(4, now.Add(300*time.Millisecond))
	require.Len(t, b.takeLate(now), 4, "batch-4 estimate trusted: 400 ms > 300 ms left")

	pend(12, now.Add(300*time.Millisecond))
	require.Len(t, b.takeLate(now), 12, "12 pending run as batches of the preferred 4, not on the never-run batch-32 engine")

	b.lastRun[4].Store(now.Add(-StaleEstimate - time.Millisecond).UnixNano())
	pend(4, now.Add(300*time.Millisecond))
	require.Empty(t, b.takeLate(now), "the batch-4 engine has not run for StaleEstimate: its estimate is not trusted, though batch 1 ran")
	require.Len(t, b.pending, 4)

	b.pending = append(b.pending, &batchReq{deadline: now.Add(-time.Millisecond)}, &batchReq{})
	late := b.takeLate(now)
	require.Len(t, late, 1, "with no trusted estimate, only the request past its deadline")
	require.Len(t, b.pending, 5, "and never one without a deadline")

	pend(1, now.Add(5*time.Millisecond))
	require.Empty(t, b.takeLate(now), "alone it runs on the batch-1 engine: 2 ms fit in 5 ms")
	pend(1, now.Add(time.Millisecond))
	require.Len(t, b.takeLate(now), 1, "2 ms do not fit in 1 ms")
}

// gateEngine records each batch's size and runs it until released.
type gateEngine struct {
	size    int
	started chan int
	release chan struct{}
}

func (e *gateEngine) Batch() int { return e.size }
func (e *gateEngine) DetectBatch(imgs []Image, _ []*StageTimes, dsts [][]Detection) ([][]Detection, error) {
	e.started <- len(imgs)
	<-e.release
	return dsts, nil
}

// With two batches allowed in flight, a partial batch waits for the running
// ones to end rather than dispatching on MaxQueueDelay, while a full one
// goes at once and overlaps them.
func TestBatcherHoldsPartialWhileRunning(t *testing.T) {
	e := &gateEngine{size: 8, started: make(chan int, 8), release: make(chan struct{})}
	b := NewBatcher(BatcherConfig{Engines: []BatchEngine{e}, MaxQueueDelay: time.Millisecond, Concurrency: 2})
	// A trusted estimate far longer than the test: the hold's bound (one
	// batch time) never ends it here. Refreshed before each check, so that
	// it is not stale (StaleEstimate) on a slow machine.
	b.per[8].Reset(time.Hour)
	trust := func() { b.lastRun[8].Store(time.Now().UnixNano()) }
	ctx, cancel := context.WithCancel(context.Background())
	var run, reqs sync.WaitGroup
	run.Add(1)
	go func() { defer run.Done(); b.Run(ctx) }()
	send := func(k int) {
		for range k {
			reqs.Add(1)
			go func() {
				defer reqs.Done()
				if _, err := b.Do(ctx, time.Time{}, nil, &StageTimes{}, nil); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	started := func() int {
		select {
		case n := <-e.started:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no batch started")
			return 0
		}
	}
	none := func(why string) {
		trust()
		select {
		case n := <-e.started:
			t.Fatalf("a batch of %d started %s", n, why)
		case <-time.After(100 * time.Millisecond): // 100 × MaxQueueDelay
		}
	}

	send(1)
	require.Equal(t, 1, started(), "nothing running: the delay dispatches a batch of one")
	send(3)
	none("while another ran and it was not full")
	send(5)
	require.Equal(t, 8, started(), "a full batch goes at once, beside the running one")
	send(2)
	e.release <- struct{}{} // one of the two running batches ends
	none("while the other still ran")
	e.release <- struct{}{}
	require.Equal(t, 2, started(), "the end of the last running batch dispatches the partial one")
	close(e.release)
	reqs.Wait()
	cancel()
	run.Wait()
}

// A held partial batch is bounded: a request without a deadline, which
// every full batch of deadline requests passes over, still goes within
// about one batch time although batches keep running; and with no trusted
// estimate nothing is held (a request with a deadline goes on the free
// slot instead of waiting until it is late).
func TestBatcherHoldIsBounded(t *testing.T) {
	e := &gateEngine{size: 4, started: make(chan int, 64), release: make(chan struct{})}
	b := NewBatcher(BatcherConfig{Engines: []BatchEngine{e}, MaxQueueDelay: time.Millisecond, Concurrency: 2})
	ctx, cancel := context.WithCancel(context.Background())
	var run, reqs sync.WaitGroup
	run.Add(1)
	go func() { defer run.Done(); b.Run(ctx) }()
	defer func() {
		cancel()
		close(e.release)
		reqs.Wait()
		run.Wait()
	}()
	do := func(deadline time.Time, done chan<- error) {
		reqs.Add(1)
		go func() {
			defer reqs.Done()
			_, err := b.Do(ctx, deadline, nil, &StageTimes{}, nil)
			if done != nil {
				done <- err
			}
		}()
	}
	far := time.Now().Add(time.Hour)

	do(far, nil)
	<-e.started // a batch of one runs; no estimate yet
	late := make(chan error, 1)
	do(time.Now().Add(time.Second), late)
	select {
	case n := <-e.started:
		if n != 1 {
			t.Fatalf("a batch of %d", n)
		}
	case <-time.After(500 * time.Millisecond):
		t.Fatal("with no trusted estimate a request with a deadline was held while a slot was free")
	}
	e.release <- struct{}{}
	e.release <- struct{}{}
	if err := <-late; err != nil {
		t.Fatal(err)
	}

	// Now an estimate exists. Keep a batch running and put full batches
	// of deadline requests in the queue at once (so that each plan sees
	// all four), past a request without a deadline, which sorts last.
	burst := func() {
		b.mu.Lock()
		for range 4 {
			b.seq++
			b.pending = append(b.pending, &batchReq{deadline: far, enq: time.Now(), seq: b.seq, st: &StageTimes{}, done: make(chan struct{})})
		}
		b.mu.Unlock()
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	do(far, nil)
	<-e.started
	zero := make(chan error, 1)
	do(time.Time{}, zero)
	for round := 0; ; round++ {
		if round == 50 {
			t.Fatal("the request without a deadline waited 50 rounds while batches ran")
		}
		burst()
		got := <-e.started
		e.release <- struct{}{} // an older batch ends; one still runs
		if got < 4 {
			t.Logf("round %d: the request without a deadline went in a batch of %d", round, got)
			return
		}
		select {
		case err := <-zero:
			t.Fatalf("it went in a full batch of deadline requests (%v): the test is wrong", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
