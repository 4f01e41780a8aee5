package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decodeOrder returns the display indices of n frames in decode order for
// a GOP structure with bf B-frames between references and b-pyramid (the
// middle B-frame is a reference, decoded first), as libx264 -bf 3 codes
// them: 0, 4, 2, 1, 3, 8, 6, 5, 7, ...
func decodeOrder(n, bf int) []int {
	order := []int{0}
	for ref := bf + 1; ref < n; ref += bf + 1 {
		order = append(order, ref)
		if bf == 3 {
			order = append(order, ref-2, ref-3, ref-1)
		} else {
			for b := ref - bf; b < ref; b++ {
				order = append(order, b)
			}
		}
	}
	return order
}

// decoded simulates a decoder with reorder depth depth fed one packet per
// step: packet i is read at t0 + Σ step(j<i); decoding it takes dec; after
// each packet, while it holds more than depth frames, it returns the one
// to be shown first. Frames come back in display order, with Arrival the
// time their own packet was read and Decoded the time they were returned,
// at 25 fps (PTS 0.04 s apart).
func decoded(order []int, depth int, step func(i int) time.Duration, dec time.Duration) []*Frame {
	t := time.Unix(1000, 0)
	arrival := map[int]time.Time{}
	var held []int
	var out []*Frame
	for i, idx := range order {
		arrival[idx] = t
		held = append(held, idx)
		at := t.Add(dec)
		for len(held) > depth {
			slices.Sort(held)
			f := held[0]
			held = held[1:]
			out = append(out, &Frame{Seq: uint64(f), PTS: float64(f) * 0.04, Arrival: arrival[f], Decoded: at})
			at = at.Add(time.Microsecond)
		}
		t = t.Add(step(i))
	}
	return out
}

func every(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

const frame25 = 40 * time.Millisecond

func TestReorderDelay(t *testing.T) {
	measure := func(fs []*Frame) (*reorderDelay, []time.Duration) {
		var r reorderDelay
		var credits []time.Duration
		for _, f := range fs {
			n, _ := r.observe(f)
			credits = append(credits, r.credit(f, n))
		}
		return &r, credits
	}

	t.Run("3 B-frames, idle: the P-frame waits 5 intervals", func(t *testing.T) {
		fs := decoded(decodeOrder(200, 3), 2, every(frame25), 2*time.Millisecond)
		r, credits := measure(fs)
		require.Equal(t, 5*frame25, r.delay())
		// Every frame's credit is its hold less its decode time: 200 ms
		// for P-frames, none for the B-frame returned at once.
		for i, f := range fs[8:] {
			hold := f.Decoded.Sub(f.Arrival)
			require.InDelta(t, float64(hold-2*time.Millisecond), float64(credits[i+8]), float64(time.Millisecond), "frame %d", f.Seq)
		}
	})

	t.Run("from the first reordered frame of a connection on", func(t *testing.T) {
		fs := decoded(decodeOrder(40, 3), 2, every(frame25), 2*time.Millisecond)
		var r reorderDelay
		for _, f := range fs {
			n, _ := r.observe(f)
			if f.Seq == 4 { // the first P-frame
				// Held 5 intervals, but while the decoder's pipeline
				// filled it returned nothing for one packet: 4 frames
				// came back meanwhile. One interval less credit costs
				// the first group 40 ms of its budget, no more.
				require.Equal(t, 4*frame25, r.credit(f, n))
				return
			}
		}
		t.Fatal("no frame 4")
	})

	t.Run("no B-frames: 0, however slowly I-frames decode", func(t *testing.T) {
		fs := decoded(decodeOrder(100, 0), 0, every(frame25), 25*time.Millisecond)
		r, credits := measure(fs)
		require.Zero(t, r.delay())
		require.Equal(t, make([]time.Duration, len(fs)), credits)
	})

	t.Run("a starved CPU: holds double, the delay does not", func(t *testing.T) {
		// Each packet takes two frame intervals to be read and decoded:
		// the P-frame is held 400 ms, of which 200 ms are reordering.
		fs := decoded(decodeOrder(200, 3), 2, every(2*frame25), 2*time.Millisecond)
		r, credits := measure(fs)
		require.Equal(t, 5*frame25, r.delay())
		require.Equal(t, 5*frame25, slices.Max(credits), "the rest counts against the budget")
	})

	t.Run("the connect burst: short holds, same delay", func(t *testing.T) {
		// The buffered second read at once, then frames as they come.
		fs := decoded(decodeOrder(200, 3), 2, func(i int) time.Duration {
			if i < 25 {
				return time.Millisecond
			}
			return frame25
		}, 500*time.Microsecond)
		var r reorderDelay
		for _, f := range fs {
			n, _ := r.observe(f)
			require.LessOrEqual(t, r.credit(f, n), max(f.Decoded.Sub(f.Arrival), 0), "never more than the hold")
		}
		require.Equal(t, 5*frame25, r.delay())
	})

	t.Run("robust to a window of anomalous counts", func(t *testing.T) {
		var r reorderDelay
		fs := decoded(decodeOrder(3*reorderWindow, 3), 2, every(frame25), 2*time.Millisecond)
		for _, f := range fs {
			r.observe(f)
		}
		require.Equal(t, 5*frame25, r.delay())
		r.done[r.n-1] = 40 // as if a window had seen a frame held for 40
		require.Equal(t, 5*frame25, r.delay(), "the median of the windows")
	})
}

// A B-frame stream on an idle pipeline: no deadline drop, the reorder delay
// in its status, and one warning (event) when the delay is more than half
// the budget.
func TestReorderDelayInStream(t *testing.T) {
	var events []Event
	processed := 0
	s, released := policyStream(StreamConfig{Budget: 200 * time.Millisecond, OnEvent: func(e Event) { events = append(events, e) }})
	s.service.Add(5 * time.Millisecond) // an engine that takes 5 ms a frame
	s.lastServe.Store(time.Now().UnixNano())
	// A little over one window at 25 fps, paced in real time: the deadline
	// check reads the clock.
	fs := decoded(decodeOrder(reorderWindow+12, 3), 2, every(frame25), 2*time.Millisecond)
	start, sim0 := time.Now(), fs[0].Decoded
	for _, f := range fs {
		time.Sleep(time.Until(start.Add(f.Decoded.Sub(sim0))))
		// Leaving the decoder now, as long after its packet as the
		// decoder held it.
		now := time.Now()
		f.Arrival, f.Decoded = now.Add(f.Arrival.Sub(f.Decoded)), now
		f.Image = fakeImage{released}
		s.emit(f)
		for _, f := range s.q.Drain() { // an idle engine takes each at once
			f.Image.Release()
			processed++
		}
	}
	require.Equal(t, len(fs), processed, "no frame dropped")
	drops, _ := s.c.Status.TakeAlert()
	require.Empty(t, drops)
	require.Equal(t, 200.0, s.c.Status.Snapshot().ReorderDelayMS)
	var warnings []Event
	for _, e := range events {
		if e.Type == EventReorderDelay {
			warnings = append(warnings, e)
		}
	}
	require.Len(t, warnings, 1, "warned once: %v", events)
	require.Contains(t, warnings[0].Reason, "reorder delay 200ms")
}
