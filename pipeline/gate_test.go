package pipeline

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
)

// Waiters are served earliest deadline first (no deadline last, FIFO among
// equals), and a frame that cannot finish by its deadline is refused when
// its turn comes, without running.
func TestGateEDF(t *testing.T) {
	g := NewGate()
	g.per.Add(time.Millisecond)
	hold := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_ = g.Do(context.Background(), time.Time{}, 0, func() { close(started); <-hold })
	}()
	<-started
	now := time.Now()
	deadlines := []time.Duration{5 * time.Second, 0, 1 * time.Second, 3 * time.Second, 2 * time.Second, -time.Second}
	var mu sync.Mutex
	var order []time.Duration
	errs := map[time.Duration]error{}
	var wg sync.WaitGroup
	for i, d := range deadlines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dl time.Time
			if d != 0 {
				dl = now.Add(d)
			}
			err := g.Do(context.Background(), dl, 0, func() {
				mu.Lock()
				order = append(order, d)
				mu.Unlock()
			})
			mu.Lock()
			errs[d] = err
			mu.Unlock()
		}()
		testenv.Eventually(t, func() bool { n, _ := g.Load(); return n == i+1 }, time.Second, time.Millisecond, "%d waiting at the gate", i+1)
	}
	close(hold)
	wg.Wait()
	require.Equal(t, []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 0}, order)
	require.ErrorIs(t, errs[-time.Second], ErrLate, "already past its deadline: refused")
	n, _ := g.Load()
	require.Zero(t, n)
	require.False(t, g.busy)
}

func TestGateCancelWhileWaiting(t *testing.T) {
	g := NewGate()
	hold := make(chan struct{})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Do(context.Background(), time.Time{}, 0, func() { close(started); <-hold })
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error)
	go func() { res <- g.Do(ctx, time.Time{}, 0, func() { t.Error("must not run") }) }()
	testenv.Eventually(t, func() bool { n, _ := g.Load(); return n == 1 }, time.Second, time.Millisecond, "one waiting at the gate")
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)
	close(hold)
	<-done
	ran := false
	require.NoError(t, g.Do(context.Background(), time.Time{}, 0, func() { ran = true }))
	require.True(t, ran, "the gate is free again")
}

// A slow spell must not lock the gate: with an estimate inflated far past
// the budget, frames are refused only while the engine ran recently; after
// StaleEstimate of idleness a frame runs and re-measures, and the
// estimate comes back down.
func TestGateEstimateRecovers(t *testing.T) {
	g := NewGate()
	g.per.Add(10 * time.Second) // one pathological sample (a paused host)
	g.lastRun.Store(time.Now().UnixNano())
	deadline := time.Now().Add(100 * time.Millisecond)
	require.ErrorIs(t, g.Do(context.Background(), deadline, 0, func() {}), ErrLate, "recent estimate: refused")
	_, per := g.Load()
	require.Equal(t, 10*time.Second, per)

	g.lastRun.Store(time.Now().Add(-2 * StaleEstimate).UnixNano()) // idle since
	_, per = g.Load()
	require.Zero(t, per, "a stale estimate predicts nothing")
	ran := false
	require.NoError(t, g.Do(context.Background(), time.Now().Add(100*time.Millisecond), 0, func() { ran = true }))
	require.True(t, ran, "a probe runs and re-measures")
	_, per = g.Load()
	require.Less(t, per, 100*time.Millisecond, "the fresh measurement replaced the stale estimate")
	require.NoError(t, g.Do(context.Background(), time.Now().Add(100*time.Millisecond), 0, func() {}), "and frames flow again")
}

// The first frame through a new engine is slow (first-use costs at its
// resolution); taken as a sample, it would inflate the deviation so that
// the frames after it are refused although the engine serves them in a
// fraction of their budget. It is a warm-up, not a sample; and the first
// sample seeds the deviation, so that one contended run after it is
// averaged in rather than taken whole.
func TestGateFirstRunIsWarmUp(t *testing.T) {
	g := NewGate()
	err := g.Do(context.Background(), time.Now().Add(200*time.Millisecond), 0, func() { time.Sleep(90 * time.Millisecond) })
	require.NoError(t, err, "nothing measured yet: not refused")
	_, per := g.Load()
	require.Zero(t, per, "the warm-up is not a sample")

	// Exact samples (Do measures wall time, which a loaded machine
	// stretches): 10 ms, then one contended 60 ms run. Mean 16.25 ms,
	// deviation 2.5 + (50 − 2.5)/8 = 8.4 ms: bound 50 ms. Taken whole,
	// the deviation would be 50 ms and the bound 216 ms.
	g.record(10*time.Millisecond, false)
	g.record(60*time.Millisecond, false)
	require.InDelta(t, 50, g.bound().Seconds()*1000, 1, "bound %s", g.bound())
	ran := false
	require.NoError(t, g.Do(context.Background(), time.Now().Add(200*time.Millisecond), 0, func() { ran = true }))
	require.True(t, ran, "a frame with 200 ms left is served")
}
