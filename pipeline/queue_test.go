package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func frame(seq uint64) *Frame { return &Frame{Seq: seq} }

func TestQueueDropsOldest(t *testing.T) {
	q := NewQueue(3)
	for i := uint64(0); i < 3; i++ {
		require.Nil(t, q.Push(frame(i)))
	}
	d := q.Push(frame(3))
	require.NotNil(t, d)
	require.Equal(t, uint64(0), d.Seq, "the oldest frame is dropped")
	require.Equal(t, 3, q.Len())
	ctx := context.Background()
	for _, want := range []uint64{1, 2, 3} {
		f, ok := q.Pop(ctx)
		require.True(t, ok)
		require.Equal(t, want, f.Seq)
	}
}

func TestQueueCloseDeliversThenEnds(t *testing.T) {
	q := NewQueue(2)
	q.Push(frame(7))
	q.Close()
	q.Close() // idempotent
	require.Equal(t, frame(8), q.Push(frame(8)), "a closed queue refuses frames")
	f, ok := q.Pop(context.Background())
	require.True(t, ok)
	require.Equal(t, uint64(7), f.Seq)
	_, ok = q.Pop(context.Background())
	require.False(t, ok)
}

func TestQueuePopCancel(t *testing.T) {
	q := NewQueue(1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, ok := q.Pop(ctx)
	require.False(t, ok)
}

func TestQueuePushWaitIsLossless(t *testing.T) {
	q := NewQueue(2)
	ctx := context.Background()
	const n = 1000
	var wg sync.WaitGroup
	var refused atomic.Int64 // pushes PushWait gave up on (checked on the test goroutine)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); i < n; i++ {
			if !q.PushWait(ctx, frame(i)) {
				refused.Add(1)
			}
		}
		q.Close()
	}()
	for want := uint64(0); ; want++ {
		f, ok := q.Pop(ctx)
		if !ok {
			require.Equal(t, uint64(n), want)
			break
		}
		require.Equal(t, want, f.Seq)
	}
	wg.Wait()
	require.Zero(t, refused.Load(), "PushWait with a live context never gives up")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	q2 := NewQueue(1)
	q2.Push(frame(0))
	require.False(t, q2.PushWait(cctx, frame(1)), "a cancelled wait gives up")
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, Percentile(d, 50))
	require.Equal(t, 99*time.Millisecond, Percentile(d, 99))
	require.Equal(t, 100*time.Millisecond, Percentile(d, 100))
	require.Zero(t, Percentile(nil, 99))
	require.Equal(t, time.Millisecond, d[0], "input not modified")
}
