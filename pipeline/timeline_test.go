package pipeline

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// A camera at 10 fps resets its PTS to 0 after 5 s. The first frame after
// the reset carries Discontinuity (the decoder's verdict) and re-anchors
// the staleness check at once: no on-time frame is stale. (Without the
// flag, up to StaleAfter of frames would be: see TestStaleness.)
func TestStalenessReanchorsAtDiscontinuity(t *testing.T) {
	var st staleness
	t0 := time.Now()
	for i := 0; i < 50; i++ {
		require.False(t, st.isStale(&Frame{PTS: float64(i) / 10, Arrival: t0.Add(time.Duration(i) * 100 * time.Millisecond)}, 2*time.Second))
	}
	for i := 0; i < 50; i++ {
		f := &Frame{PTS: float64(i) / 10, Arrival: t0.Add(5*time.Second + time.Duration(i)*100*time.Millisecond), Discontinuity: i == 0}
		require.False(t, st.isStale(f, 2*time.Second), "frame %d after the reset", i)
	}
	// The new anchor still catches a burst after a network cut.
	require.True(t, st.isStale(&Frame{PTS: 5, Arrival: t0.Add(20 * time.Second)}, 2*time.Second))
}

// Ingest counts each frame that starts a new timeline, and the break
// reaches the next published message even when its own frame is dropped.
func TestDiscontinuityCountedAndCarried(t *testing.T) {
	s, _ := policyStream(StreamConfig{ID: "p"})
	released := new(int)
	s.emit(&Frame{Seq: 0, Arrival: time.Now(), Image: fakeImage{released}})
	s.emit(&Frame{Seq: 1, Arrival: time.Now(), Image: fakeImage{released}, Discontinuity: true})
	require.Equal(t, 1.0, testutil.ToFloat64(s.m.discontinuities))

	var b breaks
	b.add(5)
	require.False(t, b.upTo(4), "a message before the break")
	require.True(t, b.upTo(7), "the first message after it, although frame 5 itself was dropped")
	b.reported(7)
	require.False(t, b.upTo(8), "reported once")
	b.add(9)
	b.add(12)
	require.True(t, b.upTo(10))
	b.reported(10)
	require.True(t, b.upTo(12), "each break is reported")
	b.reported(12)
	// Bounded while nothing is published; the next message still says so.
	for i := uint64(100); i < 100+2*maxBreaks; i++ {
		b.add(i)
	}
	require.Len(t, b.seqs, maxBreaks)
	require.True(t, b.upTo(100))
}
