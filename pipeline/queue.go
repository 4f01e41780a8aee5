package pipeline

import (
	"context"
	"sync"
)

// Queue is a bounded FIFO of frames between two stages that never blocks its
// producer: when it is full, Push evicts and returns the oldest frame, so a
// slow consumer sees the newest frames rather than a growing backlog (the
// drop-oldest policy; see mediamtx internal/stream/reader.go for the same
// idea). It is safe for one or more producers and consumers.
type Queue struct {
	mu     sync.Mutex
	buf    []*Frame
	head   int
	n      int
	closed bool
	notify chan struct{} // capacity 1: "a frame was pushed or the queue closed"
	space  chan struct{} // capacity 1: "a frame was popped"
}

// NewQueue returns a queue holding at most capacity frames (minimum 1).
func NewQueue(capacity int) *Queue {
	if capacity < 1 {
		capacity = 1
	}
	return &Queue{buf: make([]*Frame, capacity), notify: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// Push appends f. When the queue is full it removes the oldest frame and
// returns it, so that the caller can count and release it; otherwise it
// returns nil. Pushing to a closed queue returns f itself.
func (q *Queue) Push(f *Frame) (dropped *Frame) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return f
	}
	if q.n == len(q.buf) {
		dropped = q.buf[q.head]
		q.buf[q.head] = nil
		q.head = (q.head + 1) % len(q.buf)
		q.n--
	}
	q.buf[(q.head+q.n)%len(q.buf)] = f
	q.n++
	q.mu.Unlock()
	q.signal()
	return dropped
}

// PushWait appends f, waiting for room instead of dropping (for offline
// processing, where every frame counts). It returns false, without taking
// f, when ctx ends or the queue is closed first.
func (q *Queue) PushWait(ctx context.Context, f *Frame) bool {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return false
		}
		if q.n < len(q.buf) {
			q.buf[(q.head+q.n)%len(q.buf)] = f
			q.n++
			q.mu.Unlock()
			q.signal()
			return true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-q.space:
		}
	}
}

// Pop removes and returns the oldest frame, waiting for one if the queue is
// empty. It returns false when ctx is done, or when the queue is closed and
// empty (frames pushed before Close are still delivered).
func (q *Queue) Pop(ctx context.Context) (*Frame, bool) {
	for {
		q.mu.Lock()
		if q.n > 0 {
			f := q.buf[q.head]
			q.buf[q.head] = nil
			q.head = (q.head + 1) % len(q.buf)
			q.n--
			q.mu.Unlock()
			select {
			case q.space <- struct{}{}:
			default:
			}
			return f, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-q.notify:
		}
	}
}

// Len returns the number of queued frames.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Close stops further pushes and wakes waiting consumers; queued frames can
// still be popped. It is idempotent.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// Drain removes and returns every queued frame (for release on shutdown).
func (q *Queue) Drain() []*Frame {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]*Frame, 0, q.n)
	for q.n > 0 {
		out = append(out, q.buf[q.head])
		q.buf[q.head] = nil
		q.head = (q.head + 1) % len(q.buf)
		q.n--
	}
	return out
}

func (q *Queue) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}
