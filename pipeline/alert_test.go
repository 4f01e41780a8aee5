package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAlerterRateLimits(t *testing.T) {
	a := NewAlerter(10 * time.Second)
	t0 := time.Unix(5000, 0)
	require.Empty(t, a.Due(t0))
	a.Add(t0, "cam", map[DropReason]int{DropDeadline: 3}, 0)
	got := a.Due(t0)
	require.Len(t, got, 1, "the first problem is reported at once")
	require.Equal(t, Alert{StreamID: "cam", Type: AlertFrameDrop, Time: t0, Since: t0, Count: 3, Reasons: map[DropReason]int{DropDeadline: 3}}, got[0])

	// More drops and a budget miss within the interval: the drop alert
	// waits, the first budget-miss alert goes at once.
	a.Add(t0.Add(time.Second), "cam", map[DropReason]int{DropQueueFull: 2, DropDeadline: 1}, 4)
	got = a.Due(t0.Add(2 * time.Second))
	require.Len(t, got, 1)
	require.Equal(t, AlertBudgetMiss, got[0].Type)
	require.Equal(t, 4, got[0].Count)
	require.Empty(t, a.Due(t0.Add(9*time.Second)))

	got = a.Due(t0.Add(10 * time.Second))
	require.Len(t, got, 1)
	require.Equal(t, 3, got[0].Count, "accumulated since the previous alert")
	require.Equal(t, map[DropReason]int{DropQueueFull: 2, DropDeadline: 1}, got[0].Reasons)
	require.Equal(t, t0.Add(time.Second), got[0].Since)

	require.Empty(t, a.Due(t0.Add(time.Hour)), "nothing new, nothing sent")
	a.Forget("cam")
	require.Empty(t, a.state)
}
