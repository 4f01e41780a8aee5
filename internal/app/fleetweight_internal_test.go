package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/pipeline"
)

// TestFleetWeight checks the weight a node reports to the fleet's placer
// for a stream it runs: nothing before the stream has run one 5-s window;
// then its frame size × the larger of its declared and decoded rates (so a
// node that falls behind does not make its streams look lighter), read once
// per window and held with hybrid decoding's hysteresis (25 %, two readings),
// so that the jitter of a decoded rate on a loaded host never changes it.
// TestFleet (cmd/vigil) failed in CI when the placer moved one of 13 equal
// streams on raw decoded rates.
func TestFleetWeight(t *testing.T) {
	s := &service{fleetWeights: map[string]fleetWeightState{}, fleetReweigher: engines.NewReweigher()}
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	st := pipeline.StatusSnapshot{State: pipeline.StateRunning, Since: t0, Width: 128, Height: 96, FPSNominal: 10, FPSIn: 7}
	px := 128.0 * 96
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

	require.Zero(t, s.fleetWeight("cam", st, at(4.9)), "before one 5-s window")
	require.Equal(t, px*10, s.fleetWeight("cam", st, at(5)), "declared rate above the decoded one")
	st.FPSIn = 12 // +20 %: inside the band
	require.Equal(t, px*10, s.fleetWeight("cam", st, at(10)))
	st.FPSIn = 30
	require.Equal(t, px*10, s.fleetWeight("cam", st, at(12)), "no reading within 5 s of the last")
	require.Equal(t, px*10, s.fleetWeight("cam", st, at(15)), "first reading outside the band")
	require.Equal(t, px*10, s.fleetWeight("cam", st, at(18)), "second one too early")
	require.Equal(t, px*30, s.fleetWeight("cam", st, at(20)), "two readings in a row outside the band")

	restarting := st
	restarting.State = pipeline.StateStarting
	require.Equal(t, px*30, s.fleetWeight("cam", restarting, at(30)), "kept while the stream restarts")
}
