package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bframeHolds are the decoder holds of a 3-B-frame (b-pyramid) stream in
// frame intervals, in output order, as measured over RTSP from FFmpeg's
// H.264 decoder: P-frame 5, then B-frames 0, 2 and 1.
var bframeHolds = []float64{5, 0, 2, 1}

// frameAt makes frame i of a 25 fps stream held hold (plus decode time
// dec) in the decoder.
func frameAt(t0 time.Time, i int, hold float64, dec time.Duration) *Frame {
	const T = 40 * time.Millisecond
	arr := t0.Add(time.Duration(i) * T)
	return &Frame{Seq: uint64(i), PTS: float64(i) * 0.04, Arrival: arr, Decoded: arr.Add(time.Duration(hold*float64(T)) + dec)}
}

func TestReorderDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	dec := func(i int) time.Duration { return time.Duration(1+i%3) * time.Millisecond } // 1-3 ms

	t.Run("B-frames: 5 intervals, from the first reordered frame on", func(t *testing.T) {
		var r reorderDelay
		r.observe(frameAt(t0, 0, 0, dec(0)), false)
		f := frameAt(t0, 1, 5, dec(1))
		r.observe(f, false)
		require.Equal(t, 200*time.Millisecond, r.delay(), "the first P-frame credits itself")
		require.Equal(t, 200*time.Millisecond+time.Millisecond, r.credit(f, false)+r.minHold, "its hold beyond a frame that leaves at once")
		for i := 2; i < 5*reorderWindow; i++ {
			r.observe(frameAt(t0, i, bframeHolds[i%4], dec(i)), false)
		}
		require.Equal(t, 200*time.Millisecond, r.delay())
	})

	t.Run("no B-frames: 0, although I-frames decode slower", func(t *testing.T) {
		var r reorderDelay
		for i := 0; i < 3*reorderWindow; i++ {
			d := dec(i)
			if i%25 == 0 {
				d = 25 * time.Millisecond // an I-frame: under 3/4 of an interval more
			}
			r.observe(frameAt(t0, i, 0, d), false)
		}
		require.Zero(t, r.delay())
	})

	t.Run("robust to one window of decode spikes and one of bursts", func(t *testing.T) {
		var r reorderDelay
		i := 0
		feed := func(windows int, hold func(i int) float64) {
			for end := i + windows*reorderWindow; i < end; i++ {
				r.observe(frameAt(t0, i, hold(i), dec(i)), false)
			}
		}
		pattern := func(i int) float64 { return bframeHolds[i%4] }
		feed(2, pattern)
		feed(1, func(i int) float64 { return pattern(i) + 10 }) // a starved CPU: 400 ms more
		require.Equal(t, 200*time.Millisecond, r.delay(), "one window of spikes out of three")
		feed(1, func(int) float64 { return 0 }) // a burst after a network cut
		require.Equal(t, 200*time.Millisecond, r.delay(), "one window of bursts out of four")
		// A spike is credited up to the delay only: the rest counts
		// against the frame's budget.
		spike := frameAt(t0, i, 15, dec(i))
		r.observe(spike, false)
		require.Equal(t, 200*time.Millisecond, r.credit(spike, false))
	})

	t.Run("connect burst frames keep their hold and are not measured", func(t *testing.T) {
		var r reorderDelay
		for i := 0; i < 2*reorderWindow; i++ {
			f := frameAt(t0, i, 0.1, dec(i)) // read at once: short holds
			r.observe(f, true)
		}
		require.Zero(t, r.delay())
		late := frameAt(t0, 100, 4.9, dec(0)) // a live P-frame in the burst's tail
		r.observe(late, true)
		require.Equal(t, late.Decoded.Sub(late.Arrival)-r.minHold, r.credit(late, true))
		live := frameAt(t0, 101, 5, dec(1))
		r.observe(live, false)
		require.Equal(t, 200*time.Millisecond, r.delay(), "measured from the first live frame")
	})
}

// A B-frame stream: no deadline drop on an idle pipeline, the reorder
// delay in its status, and one warning (event) when the delay is more
// than half the budget.
func TestReorderDelayInStream(t *testing.T) {
	var events []Event
	processed := 0
	s, released := policyStream(StreamConfig{Budget: 200 * time.Millisecond, OnEvent: func(e Event) { events = append(events, e) }})
	s.service.Add(5 * time.Millisecond) // an engine that takes 5 ms a frame
	s.lastServe.Store(time.Now().UnixNano())
	now := time.Now()
	t0 := now.Add(-4 * reorderWindow * 40 * time.Millisecond)
	for i := 0; i < 4*reorderWindow; i++ {
		// Frames as they leave the decoder now, held as B-frames are,
		// after the IDR frame that starts the stream.
		hold := bframeHolds[(i+3)%4]
		if i == 0 {
			hold = 0
		}
		f := frameAt(t0, i, hold, 2*time.Millisecond)
		shift := now.Sub(f.Decoded)
		f.Arrival, f.Decoded = f.Arrival.Add(shift), now
		f.Image = fakeImage{released}
		s.emit(f)
		for _, f := range s.q.Drain() { // an idle engine takes each at once
			f.Image.Release()
			processed++
		}
	}
	require.Equal(t, 4*reorderWindow, processed, "no frame dropped")
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
