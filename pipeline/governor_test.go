package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGovernorHysteresis(t *testing.T) {
	g := NewGovernor()
	t0 := time.Unix(100, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Above the threshold for less than 3 s, with a dip: no change.
	require.False(t, g.Observe(at(0), 12))
	require.False(t, g.Observe(at(2), 15))
	require.False(t, g.Observe(at(2.5), 9)) // dip resets the run
	require.False(t, g.Observe(at(4), 11))
	require.False(t, g.Observe(at(6.9), 11))
	require.True(t, g.Observe(at(7), 11), "3 s above 10: engage")
	require.True(t, g.Engaged())
	// Between half and the threshold: stays engaged (hysteresis band).
	require.False(t, g.Observe(at(10), 8))
	require.False(t, g.Observe(at(30), 7))
	// At or below 5 for 10 s releases; a bounce above 5 restarts the wait.
	require.False(t, g.Observe(at(31), 5))
	require.False(t, g.Observe(at(38), 6))
	require.False(t, g.Observe(at(39), 4))
	require.False(t, g.Observe(at(48.9), 3))
	require.True(t, g.Observe(at(49), 2), "10 s at or below half: release")
	require.False(t, g.Engaged())
}
