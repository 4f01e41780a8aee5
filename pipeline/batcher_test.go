package pipeline

import (
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
