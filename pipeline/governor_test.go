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

// Two steps: each needs its own EngageAfter of load, and each comes back
// down after its own ReleaseAfter of calm; the band between half and the
// threshold holds the level.
func TestGovernorSteps(t *testing.T) {
	g := NewGovernor()
	g.Steps = 2
	t0 := time.Unix(100, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	require.False(t, g.Observe(at(0), 12))
	require.True(t, g.Observe(at(3), 12), "3 s above 10: level 1")
	require.Equal(t, 1, g.Level())
	require.False(t, g.Observe(at(5.9), 12), "the wait starts again after a step")
	require.True(t, g.Observe(at(6), 12), "3 more s above 10: level 2")
	require.Equal(t, 2, g.Level())
	require.False(t, g.Observe(at(60), 40), "no level above Steps")
	require.False(t, g.Observe(at(61), 8), "hysteresis band: held")
	require.False(t, g.Observe(at(62), 5))
	require.True(t, g.Observe(at(72), 5), "10 s at or below half: level 1")
	require.Equal(t, 1, g.Level())
	require.False(t, g.Observe(at(73), 11), "load again: the release run ends")
	require.False(t, g.Observe(at(74), 5))
	require.False(t, g.Observe(at(83.9), 5))
	require.True(t, g.Observe(at(84), 5), "another 10 s of calm: released")
	require.False(t, g.Engaged())

	// Steps lowered below the level: down to it at the next reading.
	g = &Governor{Threshold: 10, EngageAfter: time.Second, ReleaseAfter: time.Second, Steps: 2}
	g.Observe(at(0), 20)
	g.Observe(at(1), 20)
	g.Observe(at(2), 20)
	require.Equal(t, 2, g.Level())
	g.Steps = 1
	require.Equal(t, 1, g.Level())
	require.True(t, g.Observe(at(3), 20))
	require.Equal(t, 1, g.Level())
}
