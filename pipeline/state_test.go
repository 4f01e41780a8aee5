package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The status carries what the console's tiles and latency bar show: the
// P99 and mean stage times of the frames published in the last 5 s, the
// budget, and the drop rate by reason.
func TestStatusLatencyAndDrops(t *testing.T) {
	s := NewStatus(StateRunning)
	snap := s.Snapshot()
	require.Zero(t, snap.P99MS)
	require.Nil(t, snap.StagesMS)
	require.Nil(t, snap.FPSDroppedByReason)

	now := time.Now()
	// 100 frames published over the last 2 s: total i ms for frame i,
	// infer 2 ms and decode 1 ms each; one published 10 s ago, outside
	// the window, with a total that would be the P99 if it counted.
	old := Result{Published: now.Add(-10 * time.Second), Budget: time.Second, Stages: StageTimes{Total: time.Hour}}
	s.frameOut(&old)
	for i := 1; i <= 100; i++ {
		r := Result{Published: now.Add(-2*time.Second + time.Duration(i)*10*time.Millisecond), Budget: 200 * time.Millisecond,
			Stages: StageTimes{Decode: time.Millisecond, Infer: 2 * time.Millisecond, Total: time.Duration(i) * time.Millisecond}}
		s.frameOut(&r)
	}
	for range 10 {
		s.dropped(DropQueueFull)
	}
	s.dropped(DropDeadline)

	// The drops' rate counts complete seconds only: read it in the next.
	time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second)))
	snap = s.Snapshot()
	require.Equal(t, 99.0, snap.P99MS, "nearest rank of 1..100 ms")
	require.Equal(t, 200.0, snap.BudgetMS)
	require.Equal(t, 1.0, snap.StagesMS[StageDecode])
	require.Equal(t, 2.0, snap.StagesMS[StageInfer])
	require.Zero(t, snap.StagesMS[StageQueue])
	require.NotContains(t, snap.StagesMS, StageAnalytics, "no analytics, no analytics stage")
	require.Equal(t, map[DropReason]float64{DropQueueFull: 10.0 / rateWindow, DropDeadline: 1.0 / rateWindow}, snap.FPSDroppedByReason)
	require.Equal(t, 11.0/rateWindow, snap.FPSDropped)

	// The ring keeps the last recentFrames frames only.
	for range recentFrames {
		r := Result{Published: time.Now(), Stages: StageTimes{Analytics: time.Millisecond, Total: 5 * time.Millisecond}}
		s.frameOut(&r)
	}
	snap = s.Snapshot()
	require.Equal(t, 5.0, snap.P99MS)
	require.Equal(t, 1.0, snap.StagesMS[StageAnalytics])
	require.Zero(t, snap.BudgetMS, "the last frame's budget: none")
}
