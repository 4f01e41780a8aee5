package cli_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
)

func TestBadInput(t *testing.T) {
	require.NoError(t, cli.BadInput(nil))
	err := fmt.Errorf("streams[cam]: %w", cli.BadInput(errors.New("no such model")))
	require.True(t, cli.IsBadInput(err))
	require.EqualError(t, err, "streams[cam]: no such model")
	require.False(t, cli.IsBadInput(errors.New("disk full")))
}

// Interrupted names the step only for a cancellation that a signal (the
// context ending) caused, and never wraps twice.
func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	other := errors.New("ffmpeg failed")
	require.Equal(t, context.Canceled, cli.Interrupted(ctx, context.Canceled, "x"), "ctx has not ended")
	cancel()
	require.NoError(t, cli.Interrupted(ctx, nil, "x"))
	require.Equal(t, other, cli.Interrupted(ctx, other, "x"))
	err := cli.Interrupted(ctx, fmt.Errorf("opening: %w", context.Canceled), "while opening")
	require.EqualError(t, err, "interrupted while opening")
	require.ErrorIs(t, err, context.Canceled)
	require.Same(t, err, cli.Interrupted(ctx, err, "again"))
}

func TestUnits(t *testing.T) {
	for b, want := range map[int]string{0: "0 KiB", 1: "1 KiB", 310 * 1024: "310 KiB", 8 << 20: "8.0 MiB", 1<<20 + 1<<19: "1.5 MiB"} {
		require.Equal(t, want, cli.HumanBytes(b), "%d bytes", b)
	}
	for d, want := range map[time.Duration]string{12 * time.Second: "12 s", 4 * time.Minute: "4 min", 210 * time.Minute: "3.5 h"} {
		require.Equal(t, want, cli.RoughDuration(d), "%s", d)
	}
	require.Equal(t, "first", cli.OneLine("first\nsecond"))
}

func TestNewLogger(t *testing.T) {
	_, err := cli.NewLogger(config.Log{Level: "loud"}, nil)
	require.Error(t, err)
	log, err := cli.NewLogger(config.Log{Level: "info", Format: "json"}, nil)
	require.NoError(t, err)
	require.NotNil(t, log)
}
