package doctor_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/doctor"
)

// Health runs the report's checks on a registry in process: a first call
// waits HealthWindow between its two gathers, a later one compares with
// the previous call's gather, and counters that moved in between are
// measured over that window.
func TestHealthInProcess(t *testing.T) {
	reg := prometheus.NewRegistry()
	decoded := prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_frames_decoded_total"})
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_frames_dropped_total"})
	connected := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vigil_nats_connected"})
	reg.MustRegister(decoded, dropped, connected)
	connected.Set(1)
	h := doctor.NewHealth(reg)

	start := time.Now()
	rep, err := h.Report(context.Background())
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), doctor.HealthWindow, "a first call waits for its window")
	require.GreaterOrEqual(t, rep.WindowSeconds, doctor.HealthWindow.Seconds())
	byName := func(rep doctor.HealthReport) map[string]doctor.Check {
		m := map[string]doctor.Check{}
		for _, c := range rep.Checks {
			m[c.Name] = c
		}
		return m
	}
	require.Empty(t, byName(rep)["frames dropped"].Measured, "nothing decoded yet")
	require.Equal(t, "connected", byName(rep)["NATS connection"].Measured)

	decoded.Add(100)
	dropped.Add(50)
	rep, err = h.Report(context.Background())
	require.NoError(t, err)
	c := byName(rep)["frames dropped"]
	require.Equal(t, "50 %", c.Measured, "the counters' change since the previous call")
	require.False(t, c.OK)
	require.NotEmpty(t, c.Advice)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = doctor.NewHealth(reg).Report(ctx)
	require.ErrorIs(t, err, context.Canceled, "a first call's wait ends with its context")
}
