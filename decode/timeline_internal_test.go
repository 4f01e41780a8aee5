package decode

import (
	"math"
	"testing"
	"time"

	"github.com/asticode/go-astiav"
	"github.com/stretchr/testify/require"
)

// ptsCorrection follows FFmpeg's guess_correct_pts: the frame PTS while it
// is monotonic, the packet DTS once the PTS has gone back more often, the
// DTS for a frame without PTS.
func TestPTSCorrection(t *testing.T) {
	const none = astiav.NoPtsValue
	c := ptsCorrection{lastPTS: math.MinInt64, lastDTS: math.MinInt64}
	// In order: the PTS.
	require.Equal(t, int64(10), c.bestEffort(10, 8))
	require.Equal(t, int64(11), c.bestEffort(11, 9))
	// No PTS: the DTS.
	require.Equal(t, int64(10), c.bestEffort(none, 10))
	// PTS stamped in decode order: a reordered frame's PTS goes back
	// while the DTS the frames come out with increases; from then on the
	// DTS.
	require.Equal(t, int64(12), c.bestEffort(9, 12))
	require.Equal(t, int64(13), c.bestEffort(14, 13))
	// No DTS at all: the PTS whatever its faults.
	require.Equal(t, int64(20), c.bestEffort(20, none))
	require.Equal(t, none, c.bestEffort(none, none))
}

// A pause in the pacer never exceeds its limit: a packet due an hour later
// (a timestamp jump) re-anchors the pacer instead of sleeping.
func TestPacerNeverWaitsPastLimit(t *testing.T) {
	var p pacer
	require.NoError(t, p.wait(t.Context(), 0, 0))
	done := make(chan error, 1)
	go func() { done <- p.wait(t.Context(), 3600, 100*time.Millisecond) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second): // an hour's sleep would end here
		t.Fatal("the pacer slept past its limit")
	}
	// Re-anchored at the late packet: the next one, 40 ms later, waits
	// about 40 ms, not an hour.
	go func() { done <- p.wait(t.Context(), 3600.04, 100*time.Millisecond) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the pacer did not re-anchor")
	}
}
