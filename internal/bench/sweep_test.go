package bench_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/bench"
	"github.com/vigil-video/vigil/internal/config"
)

// The load sweep runs both modes at each load and writes its plot; the
// numbers themselves are for `vigil bench`, not for this test.
func TestSweepSmoke(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "sweep.png")
	var out bytes.Buffer
	policy, none, err := bench.Sweep(context.Background(), config.Default(), bench.SweepOptions{
		Streams: []int{1, 2}, Each: time.Second, Budget: 200 * time.Millisecond, Plot: plot,
	}, zap.NewNop(), &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	require.Len(t, policy, 2)
	require.Len(t, none, 2)
	for _, p := range append(policy, none...) {
		require.Positive(t, p.OfferedFPS)
		require.Positive(t, p.ProcessedFPS)
		require.Positive(t, p.P99)
	}
	require.Contains(t, out.String(), "first load with P99 over 200ms")
	b, err := os.ReadFile(plot)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "\x89PNG"), "a PNG")
}

// An interrupted sweep is an error, not a result: no rows of the cut-short
// point, no plot.
func TestSweepInterrupted(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "sweep.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out bytes.Buffer
	_, _, err := bench.Sweep(ctx, config.Default(), bench.SweepOptions{
		Streams: []int{1, 2, 3}, Each: time.Second, Budget: 200 * time.Millisecond, Plot: plot,
	}, zap.NewNop(), &out)
	require.ErrorIs(t, err, context.DeadlineExceeded, out.String())
	require.NotContains(t, out.String(), "first load with P99 over")
	require.NoFileExists(t, plot)
}
