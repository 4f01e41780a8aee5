package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// fakeImage stands in for decoded pixels in policy unit tests (no model
// runs here); it only records its release.
type fakeImage struct{ released *int }

func (f fakeImage) Width() int  { return 64 }
func (f fakeImage) Height() int { return 48 }
func (f fakeImage) Release()    { *f.released++ }

func policyStream(c StreamConfig) (*stream, *int) {
	c.Status = NewStatus(StateStarting)
	if c.QueueSize == 0 {
		c.QueueSize = 4
	}
	s := &stream{c: c, q: NewQueue(c.QueueSize), m: NewMetrics(nil).forStream("p"), log: zap.NewNop(), ctx: context.Background(),
		base: Route{Engine: c.Engine, Gate: c.Gate, Batcher: c.Batcher}}
	s.m.status = c.Status
	if c.FPSLimit > 0 {
		s.admit = rate.NewLimiter(rate.Limit(c.FPSLimit), max(c.FPSBurst, 1))
	}
	return s, new(int)
}

// The admission token bucket, driven by the frames' decode times (a fake
// clock; Decoded, which unlike Arrival never goes back with B-frames):
// 30 fps offered against 5 fps with a burst of 2 admits the burst, then 5/s.
func TestAdmissionTokenBucket(t *testing.T) {
	s, released := policyStream(StreamConfig{FPSLimit: 5, FPSBurst: 2, QueueSize: 1000})
	t0 := time.Unix(1000, 0)
	for i := 0; i < 60; i++ { // 2 s at 30 fps
		ti := t0.Add(time.Duration(i) * time.Second / 30)
		s.emit(&Frame{Seq: uint64(i), Arrival: ti, Decoded: ti, Image: fakeImage{released}})
	}
	admitted := s.q.Len()
	// The burst of 2 (frames at 0 and 33 ms), then one token per 200 ms
	// after that: frames at 233, 433, ..., 1833 ms.
	require.Equal(t, 2+9, admitted)
	require.Equal(t, 60-admitted, *released, "every refused frame is released")
	// Refused frames are skipped by policy, not lost: counted as skips,
	// never as drops, so they raise no frame_drop alert.
	drops, _ := s.c.Status.TakeAlert()
	require.Empty(t, drops)
	require.Zero(t, s.sinceLast.Load())
	require.Equal(t, int64(60-admitted), s.skippedSince.Load())
	require.Equal(t, float64(60-admitted), testutil.ToFloat64(s.m.m.Skipped.WithLabelValues("p", string(SkipRateLimit))))
	require.Zero(t, testutil.CollectAndCount(s.m.m.Dropped))
}

// Deadline prediction at ingest: with a measured service time of 30 ms and
// a 100 ms budget, a frame that would wait behind 3 others (120 ms) is
// dropped.
func TestDeadlineAtIngest(t *testing.T) {
	s, released := policyStream(StreamConfig{Budget: 100 * time.Millisecond, QueueSize: 8})
	s.service.Add(30 * time.Millisecond)
	now := time.Now()
	for i := 0; i < 3; i++ { // 30, 60, 90 ms: within budget
		s.emit(&Frame{Arrival: now, Image: fakeImage{released}})
	}
	require.Equal(t, 3, s.q.Len())
	s.emit(&Frame{Arrival: now, Image: fakeImage{released}}) // 120 ms: late
	require.Equal(t, 3, s.q.Len())
	require.Equal(t, 1, *released)
	drops, _ := s.c.Status.TakeAlert()
	require.Equal(t, 1, drops[DropDeadline])

	// Without a measured cost nothing is predicted.
	s2, rel2 := policyStream(StreamConfig{Budget: time.Millisecond})
	s2.emit(&Frame{Arrival: now.Add(-time.Second), Image: fakeImage{rel2}})
	require.Equal(t, 1, s2.q.Len())
}

func TestEWMA(t *testing.T) {
	var e EWMA
	require.Zero(t, e.Get())
	e.Add(80 * time.Millisecond)
	require.Equal(t, 80*time.Millisecond, e.Get())
	e.Add(0)
	require.Equal(t, 70*time.Millisecond, e.Get(), "weight 1/8 per sample")
}

// With a shared gate, other streams' waiting frames count: 5 waiting at
// 10 ms each plus this frame is 60 ms; a 50 ms budget drops it.
func TestDeadlineSharedGate(t *testing.T) {
	g := NewGate()
	g.per.Add(10 * time.Millisecond)
	for i := 0; i < 5; i++ {
		g.waiters = append(g.waiters, &waiter{})
	}
	s, released := policyStream(StreamConfig{Budget: 50 * time.Millisecond, Gate: g})
	s.emit(&Frame{Arrival: time.Now(), Image: fakeImage{released}})
	require.Zero(t, s.q.Len())
	g.waiters = g.waiters[:2]
	s.emit(&Frame{Arrival: time.Now(), Image: fakeImage{released}})
	require.Equal(t, 1, s.q.Len())
}
