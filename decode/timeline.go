package decode

import (
	"math"
	"slices"
	"time"

	"github.com/asticode/go-astiav"
	"go.uber.org/zap"
)

// StallIntervals is how many of a stream's own frame intervals may pass
// without a packet before the stream counts as stalled, when that is longer
// than Options.StallTimeout: a camera that sends one frame every 15 s is
// judged stalled after 45 s, not after the 10 s default. Three intervals
// let one frame be lost (a gap of two intervals) and the next one arrive up
// to a whole interval late before the stream is given up; fewer would fail a
// slow camera on a single lost packet, more would only delay noticing a
// real stall.
const StallIntervals = 3

// intervalWindow is how many recent timestamp steps the frame interval is
// the median of: enough to ignore one odd step (a lost frame, a
// discontinuity), few enough to follow a camera that changes its rate
// within a second or two.
const intervalWindow = 16

// breakLogEvery is the least time between two log lines about
// discontinuities of one stream: a source whose timestamps are garbage must
// not log one line per frame (the metric counts each one).
const breakLogEvery = 10 * time.Second

// maxReorder is the largest number of frames a decoder may hold for
// reordering (H.264 and HEVC allow up to 16 in the DPB): packets without a
// DTS may step back by that many frames in decode order without a
// discontinuity.
const maxReorder = 16

// clock follows one open input's packet timestamps in decode order. It
// finds timestamp discontinuities and shifts every later timestamp so that
// the decoder, the pacer and the published PTS see one continuous timeline;
// a looping file's passes are joined the same way, without a discontinuity.
//
// A discontinuity is a DTS (else PTS) that steps back (by more than the
// reordering a decoder may do, for packets without DTS), or jumps forward
// by more than the stream's stall limit: packets that far apart in real time
// would have failed the stream as stalled, so such a gap is not real time
// (an MPEG-TS timestamp reset that the demuxer "unwraps" into a +26 h jump,
// concatenated recordings). The new timeline starts one frame after the
// furthest timestamp seen so far, plus, for a live input, the wall time that
// passed beyond one frame interval.
type clock struct {
	tb      float64 // seconds per tick of the stream time base
	nominal float64 // seconds per frame from the container's frame rate, 0 when unknown
	live    bool    // a network input: gaps in wall time are real time

	shift   int64 // ticks added to every packet's timestamps
	last    int64 // the last packet's DTS (else PTS), shifted
	lastDTS bool  // last was a DTS
	sawDTS  bool  // a packet of this open had a DTS
	// reorders: packets of this open showed B-frame reordering (PTS !=
	// DTS, or PTS stepping back in decode order), so a frame's packet DTS
	// from the decoder is not its own time.
	reorders bool
	hasLast  bool
	lastWall time.Time // when the last packet was read
	end      int64     // the furthest shifted timestamp + duration so far
	hasEnd   bool

	steps [intervalWindow]float64 // recent positive timestamp steps, seconds (a ring)
	nStep int

	// pending holds, in order, the shifted timestamp at which each new
	// timeline starts until its first frame comes out of the decoder.
	pending []int64
	breaks  int // discontinuities in this open
	// logged is when a discontinuity was last logged; quiet counts those
	// not logged since (at most one line per breakLogEvery).
	logged time.Time
	quiet  int

	// Looping: passShift is shift at the start of this pass, passMin and
	// passEnd this pass's smallest shifted PTS and furthest shifted
	// PTS + duration; rebase makes the next packet start the next pass.
	passShift, passMin, passEnd int64
	passSeen, rebase            bool
}

// interval is the current frame interval estimate in seconds: the median of
// recent timestamp steps, else the container's nominal frame duration, else
// 0.
func (c *clock) interval() float64 {
	n := min(c.nStep, intervalWindow)
	if n == 0 {
		return c.nominal
	}
	s := c.steps // a copy, on the stack
	slices.Sort(s[:n])
	return s[n/2]
}

// stallLimit is how long the next packet may take: the larger of stall and
// StallIntervals frame intervals.
func (c *clock) stallLimit(stall time.Duration) time.Duration {
	return max(stall, time.Duration(StallIntervals*c.interval()*float64(time.Second)))
}

// frameTicks is one frame's duration in ticks for packets that carry none:
// the frame interval, at least one tick.
func (c *clock) frameTicks() int64 {
	if c.tb <= 0 {
		return 1
	}
	return max(1, int64(math.Round(c.interval()/c.tb)))
}

// packet shifts pkt's timestamps onto the continuous timeline, first
// starting a new one when pkt is a discontinuity (or the first packet of a
// looping file's new pass). now is when pkt was read; stall is
// Options.StallTimeout. It reports whether pkt started a new timeline
// after a discontinuity.
func (c *clock) packet(pkt *astiav.Packet, now time.Time, stall time.Duration, log *zap.Logger) bool {
	pts, dts := pkt.Pts(), pkt.Dts()
	ts, isDTS := dts, true
	if ts == astiav.NoPtsValue {
		ts, isDTS = pts, false // AVI and raw streams often give only DTS; RTP only PTS
	}
	if ts == astiav.NoPtsValue {
		return false
	}
	first := pts // the packet's earliest timestamp
	if dts != astiav.NoPtsValue && (first == astiav.NoPtsValue || dts < first) {
		first = dts
	}
	broke := false
	switch {
	case c.rebase: // a looping file's next pass continues the last one
		c.shift = c.passShift + c.passEnd - c.passMin
		c.passShift, c.passSeen, c.rebase = c.shift, false, false
	case c.hasLast && c.tb > 0:
		step := ts + c.shift - c.last
		back := step < 0
		if !isDTS || !c.lastDTS {
			back = float64(-step)*c.tb > max(1, maxReorder*c.interval())
		}
		forward := float64(step)*c.tb > c.stallLimit(stall).Seconds()
		if back || forward {
			start := max(c.end, c.last+c.frameTicks())
			if gap := now.Sub(c.lastWall).Seconds() - c.interval(); c.live && gap > 0 {
				start += int64(gap / c.tb)
			}
			if now.Sub(c.logged) >= breakLogEvery {
				log.Info("timestamp discontinuity: starting a new timeline",
					zap.Float64("from_s", float64(c.last)*c.tb), zap.Float64("to_s", float64(ts+c.shift)*c.tb),
					zap.Float64("continues_at_s", float64(start)*c.tb), zap.Int("not_logged_since_last", c.quiet))
				c.logged, c.quiet = now, 0
			} else {
				c.quiet++
			}
			c.shift = start - first
			c.pending = append(c.pending, start)
			c.breaks++
			broke = true
		}
	}
	if pts != astiav.NoPtsValue {
		pkt.SetPts(pts + c.shift)
	}
	if dts != astiav.NoPtsValue {
		pkt.SetDts(dts + c.shift)
	}
	ts += c.shift
	if (pts != astiav.NoPtsValue && dts != astiav.NoPtsValue && pts != dts) || (!isDTS && !c.lastDTS && c.hasLast && ts < c.last && !broke) {
		c.reorders = true
	}
	// Steps between DTS values (PTS values only while the input gives no
	// DTS at all: in decode order they step back and forth with B-frames).
	c.sawDTS = c.sawDTS || isDTS
	if c.hasLast && ts > c.last && !broke && isDTS == c.lastDTS && isDTS == c.sawDTS {
		c.steps[c.nStep%intervalWindow] = float64(ts-c.last) * c.tb
		c.nStep++
	}
	c.last, c.lastDTS, c.hasLast, c.lastWall = ts, isDTS, true, now

	// The furthest point reached, and this pass's extent (by PTS, as a
	// pass's leading B-frames come before its first packet's PTS).
	dur := pkt.Duration()
	if dur <= 0 {
		dur = c.frameTicks()
	}
	p := pkt.Pts()
	if p == astiav.NoPtsValue {
		p = ts
	}
	if !c.hasEnd || max(p, ts)+dur > c.end {
		c.end, c.hasEnd = max(p, ts)+dur, true
	}
	if !c.passSeen || p < c.passMin {
		c.passMin = p
	}
	if !c.passSeen || p+dur > c.passEnd {
		c.passEnd = p + dur
	}
	c.passSeen = true
	return broke
}

// starts reports whether a frame with shifted timestamp ts is the first
// frame of a new timeline (it is at or past a pending start), and forgets
// the starts it reached.
func (c *clock) starts(ts int64) bool {
	n := 0
	for n < len(c.pending) && ts >= c.pending[n] {
		n++
	}
	c.pending = c.pending[n:]
	return n > 0
}

// timeline is a Source's published PTS, kept across Runs (reconnects) and
// a file's loops, so that PTS never goes back.
type timeline struct {
	last    float64   // the last emitted frame's PTS, seconds
	arrival time.Time // its Arrival
	step    float64   // the frame interval then, seconds
	has     bool      // a frame was emitted
	// seamless: the next open continues the timeline (a looping file
	// reopened at its end) rather than starting a new one.
	seamless bool
}

// next returns where the first frame of a new open goes on the published
// timeline and whether it starts a new one (Frame.Discontinuity): 0 for
// the very first frame; one frame after the last for a looping file's
// reopen; and after a reconnect one frame after the last, or, for a live
// input, the wall time between the two frames' arrivals when that is
// longer.
func (tl *timeline) next(arrival time.Time, live bool) (float64, bool) {
	switch {
	case !tl.has:
		return 0, false
	case tl.seamless:
		tl.seamless = false
		return tl.last + tl.step, false
	}
	gap := tl.step
	if live {
		gap = max(gap, arrival.Sub(tl.arrival).Seconds())
	}
	return tl.last + gap, true
}
