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
