package pipeline

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrLate is returned by Gate.Do when a frame reaches the engine too late
// to be published within its deadline; it was not processed.
var ErrLate = errors.New("deadline cannot be met")

// Gate serialises the use of one engine by many streams in earliest-
// deadline-first order (EDF), and refuses a frame at the moment it would
// start if the engine's measured time per frame plus its own margin would
// end past its deadline. A plain mutex would serve whoever barges in first
// and let a frame wait behind fifteen others for hundreds of ms after a
// prediction said it would make it; EDF with a check at start-of-service
// bounds every processed frame's lateness by one engine-time misestimate.
type Gate struct {
	mu      sync.Mutex
	busy    bool
	waiters waitHeap
	seq     uint64
	per     EWMA         // mean time fn holds the engine (SRTT-like)
	dev     EWMA         // mean absolute deviation from per (RTTVAR-like)
	lastRun atomic.Int64 // unix ns when fn last finished; 0: never
	// warmed: the first run was done (and, being a warm-up, not
	// measured; see Do). Only the caller holding the engine touches it.
	warmed bool
}

// StaleEstimate is how long an engine may sit idle before its measured
// time per frame stops being trusted. Costs are only measured when frames
// run; if a slow spell (a stalled host, a burst of other work) inflated the
// estimate past the budget, every frame would be refused and the estimate
// never corrected. After this much idleness frames are predicted free and
// let through again, so the estimate is measured afresh.
const StaleEstimate = 500 * time.Millisecond

// stale reports whether the engine has been idle longer than StaleEstimate.
func stale(lastRun *atomic.Int64, now time.Time) bool {
	t := lastRun.Load()
	return t != 0 && now.Sub(time.Unix(0, t)) > StaleEstimate
}

// NewGate returns an idle gate.
func NewGate() *Gate { return &Gate{} }

type waiter struct {
	deadline time.Time // zero: no deadline, served after all deadlines
	seq      uint64    // FIFO among equal deadlines
	ready    chan struct{}
	index    int
}

type waitHeap []*waiter

func (h waitHeap) Len() int { return len(h) }
func (h waitHeap) Less(i, j int) bool {
	return compareDeadlines(h[i].deadline, h[j].deadline, h[i].seq, h[j].seq) < 0
}

// compareDeadlines orders work earliest deadline first: a zero deadline
// (none) after every real one, and arrival order (seq) among equals. The
// Gate and the Batcher both serve in this order.
func compareDeadlines(a, b time.Time, aSeq, bSeq uint64) int {
	switch {
	case a.IsZero() != b.IsZero():
		if a.IsZero() {
			return 1
		}
		return -1
	case !a.Equal(b):
		return a.Compare(b)
	}
	return cmp.Compare(aSeq, bSeq)
}
func (h waitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *waitHeap) Push(x any)   { w := x.(*waiter); w.index = len(*h); *h = append(*h, w) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	w.index = -1
	return w
}

// Load returns how many calls wait for the engine and the mean time one
// call holds it (EWMA).
func (g *Gate) Load() (waiting int, perFrame time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if stale(&g.lastRun, time.Now()) {
		return len(g.waiters), 0 // see StaleEstimate
	}
	return len(g.waiters), g.per.Get()
}

// Do waits for the engine in deadline order, then runs fn unless
// now + a conservative per-frame time (see bound) + margin is past deadline (then it returns ErrLate
// without running fn). A zero deadline never expires. It returns
// ctx.Err() if ctx ends while waiting. The first run of a new gate is a
// warm-up: it is not refused (nothing is measured yet) and its time is not
// taken as a sample.
func (g *Gate) Do(ctx context.Context, deadline time.Time, margin time.Duration, fn func()) error {
	g.mu.Lock()
	if g.busy {
		g.seq++
		w := &waiter{deadline: deadline, seq: g.seq, ready: make(chan struct{})}
		heap.Push(&g.waiters, w)
		g.mu.Unlock()
		select {
		case <-w.ready: // the engine was handed to us
		case <-ctx.Done():
			g.mu.Lock()
			if w.index >= 0 {
				heap.Remove(&g.waiters, w.index)
				g.mu.Unlock()
				return ctx.Err()
			}
			g.mu.Unlock()
			<-w.ready // handed over meanwhile: pass it on below
			g.release()
			return ctx.Err()
		}
	} else {
		g.busy = true
		g.mu.Unlock()
	}
	defer g.release()
	now := time.Now()
	wasStale := stale(&g.lastRun, now)
	if !deadline.IsZero() && !wasStale && now.Add(g.bound()+margin).After(deadline) {
		return ErrLate
	}
	t0 := time.Now()
	fn()
	g.record(time.Since(t0), wasStale)
	g.lastRun.Store(time.Now().UnixNano())
	return nil
}

// record takes d, one run's time, into the estimate; the caller holds the
// engine.
func (g *Gate) record(d time.Duration, wasStale bool) {
	switch per := g.per.Get(); {
	case per == 0 && !g.warmed:
		// The first frame through an engine pays first-use costs that
		// later frames do not (its scaler context at the stream's
		// resolution, cold caches; measured 86 ms against 15 ms after,
		// for BlazeFace on 720×528). As a sample it would set the
		// deviation to 70 ms, the bound (mean + 4 × deviation) past a
		// 200 ms budget, and every frame of the first connect would be
		// refused until StaleEstimate had passed: a frame_drop alert at
		// every start. It is not measured.
		g.warmed = true
	case wasStale || per == 0:
		// A first measurement, or a fresh one replacing a stale
		// estimate, seeds the deviation with a quarter of it (RFC 6298
		// seeds RTTVAR with half the first round trip), so that the next
		// deviation is averaged in rather than taken whole: one
		// contended run after the first would otherwise set the bound
		// to several times the engine's time.
		g.per.Reset(d)
		g.dev.Reset(d / 4)
	default:
		g.dev.Add((d - per).Abs())
		g.per.Add(d)
	}
}

// bound is a conservative engine time for one frame: mean + 4 × mean
// deviation, as TCP bounds a round trip (RFC 6298: RTO = SRTT + 4·RTTVAR),
// so that a frame started on time rarely finishes late when the engine's
// time varies (CPU contention, GC).
func (g *Gate) bound() time.Duration { return g.per.Get() + 4*g.dev.Get() }

// release hands the engine to the earliest-deadline waiter, or frees it.
func (g *Gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) == 0 {
		g.busy = false
		return
	}
	w := heap.Pop(&g.waiters).(*waiter)
	close(w.ready)
}
