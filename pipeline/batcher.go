package pipeline

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// BatchEngine runs up to Batch() images in one fixed-shape execution
// (infer.Engine on a batch-N model).
type BatchEngine interface {
	Batch() int
	DetectBatch(imgs []Image, sts []*StageTimes, dsts [][]Detection) ([][]Detection, error)
}

// DetectOne runs one image through a batch engine (as a batch of one) and
// returns its detections, appended to dst[:0]; on error it returns dst.
// Engines use it to implement Engine.Detect with DetectBatch.
func DetectOne(e BatchEngine, img Image, st *StageTimes, dst []Detection) ([]Detection, error) {
	one, oneSt, oneDst := [1]Image{img}, [1]*StageTimes{st}, [1][]Detection{dst}
	out, err := e.DetectBatch(one[:], oneSt[:], oneDst[:])
	if err != nil {
		return dst, err
	}
	return out[0], nil
}

// BatcherConfig configures cross-stream dynamic batching.
type BatcherConfig struct {
	// Engines are one instance per batch size (e.g. 1, 4 and 8), all of the
	// same model. A batch runs on the smallest one that fits it, padded.
	Engines []BatchEngine
	// Preferred batch sizes: a batch is dispatched as soon as the largest
	// one is reached (default: the largest engine's size).
	Preferred []int
	// MaxQueueDelay is the longest a request waits for a batch to fill
	// while no batch is running (default 2 ms). While batches run
	// (Concurrency > 1), a partial batch waits instead for them to end, for
	// the largest preferred size, for its earliest deadline, or at most
	// about one batch time (see Batcher).
	MaxQueueDelay time.Duration
	// Metrics, when set, receives batch sizes, queue waits and engine
	// times (vigil_batch_*).
	Metrics *Metrics
	// Concurrency is how many batches may run at once (default 1: one
	// after the other, on the dispatcher's goroutine). Engines that keep
	// several batches in flight, such as the GPU engine with its pinned
	// slots (one batch uploads while another computes), set it to their
	// slot count; the engines must then accept concurrent DetectBatch calls.
	Concurrency int
}

// Batcher forms batches across streams, like Triton's dynamic batcher, for
// fixed-shape engines. It dispatches when the largest preferred size is
// reached, when the oldest request has waited MaxQueueDelay and no batch is
// running, or when waiting longer would break the earliest deadline in the
// queue (by the measured time of the engine that would run the batch).
// Requests are taken earliest deadline first; one that cannot finish in
// time is refused with ErrLate. Run the dispatcher with Run; Do is safe for
// concurrent use.
//
// With Concurrency > 1 a partial batch is not dispatched on MaxQueueDelay
// while another batch runs: it would only wait behind it for the device,
// and a fixed-shape engine runs a partial batch, padded, in about the time
// of a full one. It keeps filling until the running batches end, it is
// full, its oldest request has waited the measured time of its batch
// (max(MaxQueueDelay, estimate): a bound, so that requests every full
// batch passes over still go), or its earliest deadline leaves room for
// only two batch times (the running one ahead of it, then its own). With
// no trusted estimate it is not held. On the H200 the work-conserving
// order ran batches of 20 frames on the batch-32 engine back to back with
// the GPU 98 % busy, so that 96 streams (2,964 fps offered) dropped 5 %;
// held, batches filled to 31.5 frames and 112 streams passed. The cost: at
// moderate load a partial batch's staging no longer overlaps the running
// batch's compute.
type Batcher struct {
	cfg     BatcherConfig
	maxPref int
	mu      sync.Mutex
	pending []*batchReq
	seq     uint64
	wake    chan struct{}
	per     map[int]*EWMA // batch time per engine size
	// lastRun is, per engine size, the unix ns of its last execution's
	// end. An engine's estimate is trusted only while it keeps running
	// (StaleEstimate): it is refreshed only by that engine's batches, so a
	// stale high one that refused every batch needing that engine would
	// never be corrected.
	lastRun map[int]*atomic.Int64
	// With Concurrency > 1: a slot per running batch, and the running ones
	// (running counts them for plan).
	slots    chan struct{}
	inflight sync.WaitGroup
	running  atomic.Int32
}

type batchReq struct {
	deadline time.Time // zero: none
	enq      time.Time
	seq      uint64
	img      Image
	st       *StageTimes
	dst      []Detection
	done     chan struct{}
	err      error
}

// NewBatcher returns a batcher; it panics without engines.
func NewBatcher(cfg BatcherConfig) *Batcher {
	if len(cfg.Engines) == 0 {
		panic("pipeline: NewBatcher needs engines")
	}
	slices.SortFunc(cfg.Engines, func(a, b BatchEngine) int { return a.Batch() - b.Batch() })
	if cfg.MaxQueueDelay <= 0 {
		cfg.MaxQueueDelay = 2 * time.Millisecond
	}
	maxB := cfg.Engines[len(cfg.Engines)-1].Batch()
	b := &Batcher{cfg: cfg, maxPref: maxB, wake: make(chan struct{}, 1), per: map[int]*EWMA{}, lastRun: map[int]*atomic.Int64{}}
	if len(cfg.Preferred) > 0 {
		b.maxPref = min(slices.Max(cfg.Preferred), maxB)
	}
	for _, e := range cfg.Engines {
		b.per[e.Batch()] = &EWMA{}
		b.lastRun[e.Batch()] = &atomic.Int64{}
	}
	if cfg.Concurrency > 1 {
		b.slots = make(chan struct{}, cfg.Concurrency)
	}
	return b
}

// engineFor returns the smallest engine that fits n requests.
func (b *Batcher) engineFor(n int) BatchEngine {
	for _, e := range b.cfg.Engines {
		if e.Batch() >= n {
			return e
		}
	}
	return b.cfg.Engines[len(b.cfg.Engines)-1]
}

// Load returns the requests waiting and the measured time per request
// (an execution's time divided by its engine's batch size) of the engine
// that one more request would run in with them, for deadline prediction at
// ingest. perFrame is 0 (nothing predicted) when that engine has not run
// in the last StaleEstimate or never ran.
func (b *Batcher) Load() (waiting int, perFrame time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bs := b.engineFor(min(len(b.pending)+1, b.maxPref)).Batch()
	return len(b.pending), b.est(bs, time.Now()) / time.Duration(bs)
}

// Do queues one image and waits for its detections (appended to dst). It
// returns ErrLate when the image cannot be processed by deadline (zero: no
// deadline), or ctx.Err().
func (b *Batcher) Do(ctx context.Context, deadline time.Time, img Image, st *StageTimes, dst []Detection) ([]Detection, error) {
	r := &batchReq{deadline: deadline, enq: time.Now(), img: img, st: st, dst: dst, done: make(chan struct{})}
	b.mu.Lock()
	b.seq++
	r.seq = b.seq
	b.pending = append(b.pending, r)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return r.dst, r.err
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.pending, r); i >= 0 { // not dispatched: withdraw
			b.pending = slices.Delete(b.pending, i, i+1)
			b.mu.Unlock()
			return dst, ctx.Err()
		}
		b.mu.Unlock()
		<-r.done // in flight: the image is in use until the batch ends
		return r.dst, ctx.Err()
	}
}

// plan decides at now whether to dispatch the pending requests (sorted
// earliest deadline first): it returns how many to take (0: wait) and,
// when waiting, until when at the latest (a new request or the end of a
// running batch wakes the dispatcher sooner).
func (b *Batcher) plan(now time.Time, pend []*batchReq) (n int, until time.Time) {
	if len(pend) == 0 {
		return 0, time.Time{}
	}
	if len(pend) >= b.maxPref { // maxPref fits the largest engine (NewBatcher)
		return b.maxPref, time.Time{}
	}
	n = len(pend)
	oldest := pend[0].enq
	for _, r := range pend {
		if r.enq.Before(oldest) {
			oldest = r.enq
		}
	}
	// Waiting for one more request would make a batch of n+1.
	est := b.estimate(n+1, now)
	hold, ahead := b.cfg.MaxQueueDelay, time.Duration(0)
	if b.running.Load() > 0 {
		// A batch runs: this one would queue behind it. Hold it for about
		// one batch time (by then the running one has normally ended and
		// woken the dispatcher; the bound keeps requests that every full
		// batch passes over, those without a deadline, from waiting for
		// ever), and count one batch ahead of it against the deadline.
		// With no trusted estimate (0) that is MaxQueueDelay, no hold.
		hold, ahead = max(hold, est), est
	}
	until = oldest.Add(hold)
	if d := pend[0].deadline; !d.IsZero() {
		if lastStart := d.Add(-est - ahead); lastStart.Before(until) {
			until = lastStart
		}
	}
	if !now.Before(until) {
		return n, time.Time{}
	}
	return 0, until
}

func byDeadline(a, c *batchReq) int { return compareDeadlines(a.deadline, c.deadline, a.seq, c.seq) }

// Run dispatches batches until ctx ends; then it refuses what is pending.
//
// Requests that can no longer finish by their deadline, even if their
// batch started now, are refused as soon as that is known: with
// Concurrency > 1 also while every slot is busy, so that their streams
// move on to younger frames at once instead of holding a late request
// until a slot frees (with one slot the dispatcher runs the batch itself
// and judges the pending requests when it is done). (Refusing
// only when a slot freed, under overload most of the requests pending at
// that moment were late; the batch left was of one or two frames, which
// the batch-1 engine ran at a fraction of a full batch's throughput, and
// processing collapsed: 268 of 2,553 fps on the H200 with 80 streams.)
func (b *Batcher) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer b.inflight.Wait()
	for {
		// With concurrent batches, hold a slot before planning: while all
		// are busy, requests keep arriving and the next batch grows.
		if b.slots != nil && !b.acquire(ctx, timer) {
			b.refuseAll(ctx.Err())
			return
		}
		b.mu.Lock()
		slices.SortFunc(b.pending, byDeadline)
		now := time.Now()
		late := b.takeLate(now)
		n, until := b.plan(now, b.pending)
		var batch []*batchReq
		if n > 0 {
			batch = slices.Clone(b.pending[:n])
			b.pending = slices.Delete(b.pending, 0, n)
		}
		b.mu.Unlock()
		b.refuse(late)
		if len(batch) > 0 {
			if b.slots == nil {
				b.dispatch(batch)
				continue
			}
			b.inflight.Add(1)
			b.running.Add(1)
			go func() {
				defer b.inflight.Done()
				b.dispatch(batch)
				<-b.slots
				b.running.Add(-1)
				select { // a partial batch may have waited for this one
				case b.wake <- struct{}{}:
				default:
				}
			}()
			continue
		}
		if b.slots != nil {
			<-b.slots // nothing to run: give the slot back while waiting
		}
		wait := time.Hour
		if !until.IsZero() {
			wait = max(time.Until(until), 0)
		}
		if !b.sleep(ctx, timer, wait) {
			b.refuseAll(ctx.Err())
			return
		}
	}
}

// acquire takes a batch slot, refusing the requests that turn late
// meanwhile (checked at each new request and when the earliest deadline
// passes its last start); false when ctx ends first.
func (b *Batcher) acquire(ctx context.Context, timer *time.Timer) bool {
	for {
		b.mu.Lock()
		slices.SortFunc(b.pending, byDeadline)
		now := time.Now()
		late := b.takeLate(now)
		next := time.Hour // until the earliest pending deadline's last start
		if len(b.pending) > 0 && !b.pending[0].deadline.IsZero() {
			est := b.estimate(len(b.pending), now)
			next = max(b.pending[0].deadline.Sub(now)-est, 0) + time.Millisecond
		}
		b.mu.Unlock()
		b.refuse(late)
		timer.Reset(next)
		select {
		case b.slots <- struct{}{}:
			stopTimer(timer)
			return true
		case <-ctx.Done():
			stopTimer(timer)
			return false
		case <-b.wake:
			stopTimer(timer)
		case <-timer.C:
		}
	}
}

// sleep waits d, or less when a request arrives; false when ctx ends.
func (b *Batcher) sleep(ctx context.Context, timer *time.Timer, d time.Duration) bool {
	timer.Reset(d)
	defer stopTimer(timer)
	select {
	case <-ctx.Done():
		return false
	case <-b.wake:
	case <-timer.C:
	}
	return true
}

// stopTimer stops t and drains a fire that was not received.
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}

// estimate is the measured time of the batch that n pending requests
// would run in: plan takes at most the largest preferred size, on the
// smallest engine that fits it; see est.
func (b *Batcher) estimate(n int, now time.Time) time.Duration {
	return b.est(b.engineFor(min(max(n, 1), b.maxPref)).Batch(), now)
}

// est is the measured time of one execution of the engine of batch size
// bs; 0 (nothing predicted) before its first run and when it has not run
// for StaleEstimate: its next batch then measures afresh.
func (b *Batcher) est(bs int, now time.Time) time.Duration {
	if stale(b.lastRun[bs], now) {
		return 0
	}
	return b.per[bs].Get()
}

// takeLate removes and returns, under b.mu with b.pending sorted, the
// requests that would miss their deadline even if the batch they would
// run in (estimate of all pending) started at now; with no trusted
// estimate, those already past their deadline. Judging by the batch of
// all pending requests favours throughput under load: a request that only
// a smaller, faster batch would serve in time is refused rather than run
// in a batch of its own (batches of one frame are what collapsed vigil on
// the H200); when the refusals leave fewer requests, the batch that runs
// may be on a smaller engine than the one judged by.
func (b *Batcher) takeLate(now time.Time) []*batchReq {
	if len(b.pending) == 0 {
		return nil
	}
	est := b.estimate(len(b.pending), now)
	var late []*batchReq
	b.pending = slices.DeleteFunc(b.pending, func(r *batchReq) bool {
		if !r.deadline.IsZero() && now.Add(est).After(r.deadline) {
			late = append(late, r)
			return true
		}
		return false
	})
	return late
}

// refuse fails late requests with ErrLate and counts them.
func (b *Batcher) refuse(late []*batchReq) {
	if m := b.cfg.Metrics; m != nil && len(late) > 0 {
		m.BatchLate.Add(float64(len(late))) // before the callers see ErrLate
	}
	for _, r := range late {
		r.err = ErrLate
		close(r.done)
	}
}

// refuseAll fails every pending request with err (the dispatcher is
// stopping).
func (b *Batcher) refuseAll(err error) {
	b.mu.Lock()
	rest := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, r := range rest {
		r.err = err
		close(r.done)
	}
}

func (b *Batcher) dispatch(batch []*batchReq) {
	eng := b.engineFor(len(batch))
	wasStale := stale(b.lastRun[eng.Batch()], time.Now())
	imgs := make([]Image, len(batch))
	sts := make([]*StageTimes, len(batch))
	dsts := make([][]Detection, len(batch))
	now := time.Now()
	for i, r := range batch {
		imgs[i], sts[i], dsts[i] = r.img, r.st, r.dst
		r.st.Queue += now.Sub(r.enq)
		if m := b.cfg.Metrics; m != nil {
			m.BatchWait.Observe(now.Sub(r.enq).Seconds())
		}
	}
	t0 := time.Now()
	out, err := eng.DetectBatch(imgs, sts, dsts)
	d := time.Since(t0)
	if wasStale {
		b.per[eng.Batch()].Reset(d) // a fresh measurement replaces the stale one
	} else {
		b.per[eng.Batch()].Add(d)
	}
	b.lastRun[eng.Batch()].Store(time.Now().UnixNano())
	if m := b.cfg.Metrics; m != nil {
		m.BatchSize.Observe(float64(len(batch)))
		m.EngineBatch.WithLabelValues(strconv.Itoa(eng.Batch())).Observe(d.Seconds())
	}
	for i, r := range batch {
		if err != nil {
			r.err = err
		} else {
			r.dst = out[i]
		}
		close(r.done)
	}
}
