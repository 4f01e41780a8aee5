package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStaleness(t *testing.T) {
	var st staleness
	t0 := time.Now()
	at := func(pts float64, wall time.Duration) *Frame { return &Frame{PTS: pts, Arrival: t0.Add(wall)} }
	// 10 fps in real time, with ±20 ms jitter: never stale.
	for i := 0; i < 50; i++ {
		j := time.Duration((i%3)-1) * 20 * time.Millisecond
		require.False(t, st.isStale(at(float64(i)/10, time.Duration(i)*100*time.Millisecond+j), 2*time.Second))
	}
	// A 20 s cut: frames 5.0 s .. 25.0 s arrive in a 0.5 s burst at 25 s.
	stale := 0
	for i := 0; i <= 200; i++ {
		pts := 5 + float64(i)/10
		if st.isStale(at(pts, 25*time.Second+time.Duration(i)*2500*time.Microsecond), 2*time.Second) {
			stale++
		}
	}
	// Frame i lags 20.02 - 0.0975·i s behind the timeline: stale while > 2 s.
	require.InDelta(t, 185, stale, 2, "frames more than 2 s behind are stale; the last ~2 s are kept")
	// Afterwards, real time again: not stale.
	require.False(t, st.isStale(at(25.1, 25600*time.Millisecond), 2*time.Second))
	// The camera resets its PTS to 0: stale for at most 2 s of wall time,
	// then the timeline is re-anchored.
	var dropped, kept int
	for i := 0; i < 50; i++ {
		if st.isStale(at(float64(i)/10, 30*time.Second+time.Duration(i)*100*time.Millisecond), 2*time.Second) {
			dropped++
		} else {
			kept++
		}
	}
	require.LessOrEqual(t, dropped, 21)
	require.GreaterOrEqual(t, kept, 29)
}
