package pipeline

import (
	"fmt"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"
)

// A stream's reorder delay is the time its decoder inherently holds frames
// before it may return them: with B-frames, frames leave the decoder in
// display order, so a reference frame whose packet comes before the
// B-frames it follows in display order waits for them. With 3 B-frames
// (b-pyramid) and a reorder depth of 2 the P-frame waits 5 frame intervals,
// 200 ms at 25 fps, on an idle machine. That wait is a property of the
// camera's encoding, not an overload: a frame's latency budget starts when
// it could first leave the decoder (see reorderDelay.credit).
//
// It is counted in frames, not read from hold times: a frame's reorder
// count is the number of frames the decoder returned after the frame's own
// packet was read (Frame.Arrival) and before the frame itself. A decoder
// returns one frame per packet once its pipeline is full, so a frame held
// for k of them waited k packets, k frame intervals on a live stream: 5 for
// the P-frame above, 0 for a stream without B-frames (and threads-1 with
// frame threads). Counts do not depend on how fast the machine decodes: a
// starved CPU that decodes slower than real time, or the burst after a
// connect that decodes faster, change the hold times but not the counts.
// The stream's reorder delay is the lower median of the last
// reorderWindows windows' largest counts (windows of reorderWindow frames;
// before the first is complete, the window being filled), times the frame
// interval (the smallest PTS step).
const (
	reorderWindow  = 25 // frames per window: several B-frame groups
	reorderWindows = 5  // windows kept: about 5 s at 25 fps
	reorderRing    = 64 // frames remembered for counting: more than any decoder holds (H.264 keeps at most 16)
)

// reorderDelay measures one connection's reorder delay; the ingest
// goroutine owns it.
type reorderDelay struct {
	out           [reorderRing]time.Time // Decoded of the latest frames, a ring
	nOut, nextOut int
	done          [reorderWindows]int // completed windows' largest counts, a ring
	n, next       int                 // completed windows kept; next slot
	cur, curN     int                 // the window being filled: largest count, frames
	step          float64             // smallest positive PTS step seen, s; 0: none yet
	prevPTS       float64
	hasPrev       bool
}

// observe records f and returns its reorder count, and whether f completed
// a window.
func (r *reorderDelay) observe(f *Frame) (count int, window bool) {
	if r.hasPrev {
		if d := f.PTS - r.prevPTS; d > 0 && (r.step == 0 || d < r.step) {
			r.step = d
		}
	}
	r.prevPTS, r.hasPrev = f.PTS, true
	for i := 0; i < r.nOut; i++ {
		if r.out[i].After(f.Arrival) {
			count++
		}
	}
	r.out[r.nextOut] = f.Decoded
	r.nextOut = (r.nextOut + 1) % reorderRing
	r.nOut = min(r.nOut+1, reorderRing)
	r.cur = max(r.cur, count)
	if r.curN++; r.curN < reorderWindow {
		return count, false
	}
	r.done[r.next] = r.cur
	r.next = (r.next + 1) % reorderWindows
	r.n = min(r.n+1, reorderWindows)
	r.cur, r.curN = 0, 0
	return count, true
}

// frames returns the stream's reorder delay in frames.
func (r *reorderDelay) frames() int {
	if r.n == 0 {
		return r.cur // the window being filled, this frame included
	}
	counts := make([]int, 0, reorderWindows)
	counts = append(counts, r.done[:r.n]...)
	slices.Sort(counts)
	return counts[(r.n-1)/2]
}

// interval returns the frame interval (0 while unknown).
func (r *reorderDelay) interval() time.Duration {
	return time.Duration(math.Round(r.step * 1e9))
}

// delay returns the stream's reorder delay (0 while the frame interval is
// unknown).
func (r *reorderDelay) delay() time.Duration {
	return time.Duration(r.frames()) * r.interval()
}

// credit returns the part of f's decoder hold that is reordering, not
// counted against its budget: count frame intervals (its own reorder
// count from observe), at most its hold and the stream's reorder delay.
// Decode time, and a hold longer than the frames it waited for would take
// in real time (a decoder slower than real time), count against the
// budget.
func (r *reorderDelay) credit(f *Frame, count int) time.Duration {
	return min(time.Duration(count)*r.interval(), max(f.Decoded.Sub(f.Arrival), 0), r.delay())
}

// observeReorder counts f, gives f its budget credit (Frame.wait) and
// keeps the stream's status; once per stream it warns, with a log line and
// a reorder_delay event, when the delay is more than half the budget.
func (s *stream) observeReorder(f *Frame) {
	count, window := s.reorder.observe(f)
	d := s.reorder.delay()
	f.wait = s.reorder.credit(f, count)
	s.c.Status.reorder.Store(int64(d))
	if !window || s.reorderWarned || s.c.Budget <= 0 || d <= s.c.Budget/2 {
		return
	}
	s.reorderWarned = true
	reason := fmt.Sprintf("reorder delay %s (B-frames) is more than half of the %s budget: the budget counts from when a frame can leave the decoder, so frames are published up to %s after their packet arrived",
		d.Round(time.Millisecond), s.c.Budget, (d + s.c.Budget).Round(time.Millisecond))
	s.log.Warn("stream reorder delay", zap.Duration("reorder_delay", d), zap.Duration("budget", s.c.Budget), zap.String("reason", reason))
	if s.c.OnEvent != nil {
		s.c.OnEvent(Event{StreamID: s.c.ID, Epoch: s.c.Epoch, Type: EventReorderDelay, Time: time.Now(), Reason: reason})
	}
}
