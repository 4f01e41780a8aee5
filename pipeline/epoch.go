package pipeline

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// EpochLen is the length of a run epoch in characters (see NewEpoch).
const EpochLen = 12

// NewEpoch returns a new run epoch: 12 base-36 digits [0-9a-z], the first 8
// the current Unix time in milliseconds (zero-padded; 36^8 ms reaches the
// year 5188, so epochs of one clock sort by start time) and the last 4
// random (36^4 = 1,679,616 values). Within one process the time part
// strictly increases from call to call (a call in the same millisecond as
// the last, or after the wall clock stepped back, takes the last one plus
// 1 ms), so a process never makes the same epoch twice; the random part
// keeps runs of different processes apart (two vigil nodes starting a
// stream in the same millisecond).
//
// A stream's epoch names one run of it (one RunStream call: a start, a
// restart of vigil, a reconfiguration); frame numbers (Frame.Seq) start at 0
// in every run, so the pair (epoch, seq) identifies a frame for good. The
// sinks put it in every message id (Nats-Msg-Id), so that a JetStream
// stream's duplicate window never mistakes a new run's frame for an old one.
func NewEpoch() string {
	for {
		last := lastEpochMS.Load()
		ms := max(time.Now().UnixMilli(), last+1)
		if lastEpochMS.CompareAndSwap(last, ms) {
			return epochAt(time.UnixMilli(ms), rand.Uint32N(36*36*36*36))
		}
	}
}

// lastEpochMS is the time part, in Unix ms, of the process's last epoch.
var lastEpochMS atomic.Int64

func epochAt(t time.Time, r uint32) string {
	var b strings.Builder
	b.Grow(EpochLen)
	pad(&b, strconv.FormatInt(max(t.UnixMilli(), 0), 36), 8)
	pad(&b, strconv.FormatUint(uint64(r), 36), 4)
	return b.String()
}

// pad writes s left-padded with zeros to n characters (s is never longer:
// the callers bound their values).
func pad(b *strings.Builder, s string, n int) {
	for i := len(s); i < n; i++ {
		b.WriteByte('0')
	}
	b.WriteString(s)
}
