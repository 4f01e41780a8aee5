package pipeline

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEpoch(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-z]{12}$`)
	prev := ""
	for range 1000 { // in a tight loop: many calls per millisecond
		e := NewEpoch()
		require.Regexp(t, re, e)
		require.Greater(t, e[:8], prev, "the time part strictly increases within a process")
		prev = e[:8]
	}
	// Fixed width: epochs sort by start time, to the millisecond.
	t0 := time.UnixMilli(1_700_000_000_000)
	a, b := epochAt(t0, 36*36*36*36-1), epochAt(t0.Add(time.Millisecond), 0)
	require.Less(t, a, b)
	require.Equal(t, "0000000000000", "0"+epochAt(time.UnixMilli(0), 0))
	require.Equal(t, "zzzzzzzzzzzz", epochAt(time.UnixMilli(36*36*36*36*36*36*36*36-1), 36*36*36*36-1))
}
