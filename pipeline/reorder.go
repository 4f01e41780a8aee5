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
// it could first leave the decoder, its arrival plus the part of its
// decoder hold that is the stream's reorder delay (see reorderDelay.credit).
//
// It is measured per connection from the frames' own holds, hold =
// Decoded − Arrival (Arrival is when the frame's own packet was read),
// robustly: over windows of reorderWindow frames, the reorder delay is the
// lower median of the last reorderWindows windows' largest holds less the
// smallest hold seen (the decode time of a frame that leaves the decoder at
// once), in whole frame intervals (the smallest PTS step). One window with a
// decode-time spike (a starved CPU) or without reordered frames (a burst
// after a network cut) does not move it; rounding to frame intervals keeps a
// stream without B-frames at 0 although its I-frames take longer to decode
// than the rest (less than 3/4 of an interval). Frames of the connect burst
// (catchUp, up to 300 ms after it) are not measured: their packets come out
// of the demuxer at once, so they are held for less time than the same
// frames when live, and a window of them would understate the delay. Until
// the burst is over they keep their whole hold as credit: they leave the
// decoder sooner than live frames do, never later.
const (
	reorderWindow  = 25 // frames per window: several B-frame groups
	reorderWindows = 5  // windows kept: about 5 s at 25 fps
	reorderRound   = 0.25
)

// reorderDelay measures one connection's reorder delay; the ingest
// goroutine owns it.
type reorderDelay struct {
	done    [reorderWindows]holdStats // completed windows, a ring
	n, next int                       // completed windows kept; next slot
	cur     holdStats                 // the window being filled
	minHold time.Duration             // smallest hold of the connection
	held    bool                      // minHold is set
	step    float64                   // smallest positive PTS step seen, s; 0: none yet
	prevPTS float64
	hasPrev bool
}

// holdStats is one window's largest hold.
type holdStats struct {
	frames int
	max    time.Duration
}

// observe records f. Frames of the connect burst count for the frame
// interval and the smallest hold only. It reports whether f completed a
// window.
func (r *reorderDelay) observe(f *Frame, burst bool) bool {
	if r.hasPrev {
		if d := f.PTS - r.prevPTS; d > 0 && (r.step == 0 || d < r.step) {
			r.step = d
		}
	}
	r.prevPTS, r.hasPrev = f.PTS, true
	hold := max(f.Decoded.Sub(f.Arrival), 0)
	if !r.held || hold < r.minHold {
		r.minHold, r.held = hold, true
	}
	if burst {
		return false
	}
	r.cur.frames++
	r.cur.max = max(r.cur.max, hold)
	if r.cur.frames < reorderWindow {
		return false
	}
	r.done[r.next] = r.cur
	r.next = (r.next + 1) % reorderWindows
	r.n = min(r.n+1, reorderWindows)
	r.cur = holdStats{}
	return true
}

// delay returns the reorder delay: from the completed windows, or from the
// window being filled before the first one is complete (so that the first
// reordered frames of a connection are not refused). 0 before any frame or
// frame interval is known.
func (r *reorderDelay) delay() time.Duration {
	var top time.Duration
	switch {
	case r.n > 0:
		maxima := make([]time.Duration, 0, reorderWindows)
		for i := 0; i < r.n; i++ {
			maxima = append(maxima, r.done[i].max)
		}
		slices.Sort(maxima)
		top = maxima[(r.n-1)/2]
	case r.cur.frames > 0:
		top = r.cur.max
	default:
		return 0
	}
	if r.step <= 0 {
		return 0
	}
	x := (top - r.minHold).Seconds()
	return time.Duration(math.Round(math.Floor(x/r.step+reorderRound) * r.step * 1e9))
}

// credit returns the part of f's decoder hold that the reorder delay
// explains, not counted against its budget: its hold beyond the decode time
// of a frame that leaves at once, up to the reorder delay; all of it for a
// frame of the connect burst (see above). f must have been observed.
func (r *reorderDelay) credit(f *Frame, burst bool) time.Duration {
	own := max(f.Decoded.Sub(f.Arrival)-r.minHold, 0)
	if burst {
		return own
	}
	return min(own, r.delay())
}

// observeReorder measures f's hold, gives f its budget credit (Frame.wait)
// and keeps the stream's status; once per stream it warns, with a log line
// and a reorder_delay event, when the delay is more than half the budget.
func (s *stream) observeReorder(f *Frame, burst bool) {
	window := s.reorder.observe(f, burst)
	d := s.reorder.delay()
	f.wait = s.reorder.credit(f, burst)
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
