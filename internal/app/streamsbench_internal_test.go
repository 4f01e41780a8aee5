package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A ceiling counts a process's frames from its first report after the
// start-up allowance to its last, so slow starts do not lower it.
func TestProgressRate(t *testing.T) {
	var p progressRate
	require.Zero(t, p.fps(), "no report")
	p.add(500*time.Millisecond, 10) // start-up: ignored
	p.add(ceilingSettle-time.Millisecond, 100)
	require.Zero(t, p.fps(), "only start-up reports")
	p.add(ceilingSettle+time.Second, 1000)
	require.Zero(t, p.fps(), "one steady report gives no rate")
	p.add(ceilingSettle+3*time.Second, 3000)
	require.InDelta(t, 1000.0, p.fps(), 1e-9, "(3000-1000) frames / 2 s")
}

// With hybrid decoding each point also reports the NVDEC and CPU streams
// apart, from the per-stream counters between two snapshots.
func TestSidesLine(t *testing.T) {
	side := map[string]int{"s0": sideNVDEC, "s1": sideNVDEC, "s2": sideCPU}
	a := map[string]float64{"stream decoded s0": 100, "stream decoded s1": 100, "stream decoded s2": 50, "stream dropped s2": 5}
	b := map[string]float64{"stream decoded s0": 160, "stream decoded s1": 160, "stream decoded s2": 110, "stream dropped s2": 20, "stream dropped s0": 3}
	ms := func(v ...int) (d []time.Duration) {
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	got := sidesLine(side, a, b, [2][]time.Duration{ms(10, 20, 30, 40), ms(90, 95)}, 2*time.Second)
	require.Equal(t, "by decoder: NVDEC 2 streams: offered 60.0, processed 2.0 fps, dropped 2.5%, P99 40.0 ms; "+
		"CPU 1 streams: offered 30.0, processed 1.0 fps, dropped 25.0%, P99 95.0 ms", got)
}
