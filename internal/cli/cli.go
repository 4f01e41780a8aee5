// Package cli holds what vigil's commands share beyond their own packages:
// the errors whose kind sets the exit status (cmd/vigil exits 2 on a
// *BadInputError, 130 on an *InterruptedError, 1 on any other error), the
// logger, and the units of the lines written for a person (HumanBytes,
// RoughDuration). The service (internal/app), the tools (internal/bench,
// internal/doctor, internal/shapes, internal/client) and the engine glue
// (internal/engines) all use these one definitions.
package cli

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/vigil-video/vigil/internal/config"
)

// BadInputError marks an error caused by the user's input (config, flags,
// model file, URL) rather than by the environment; cmd/vigil exits with
// status 2 for it.
type BadInputError struct{ Err error }

func (e *BadInputError) Error() string { return e.Err.Error() }
func (e *BadInputError) Unwrap() error { return e.Err }

// BadInput wraps err in a *BadInputError; nil stays nil.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return &BadInputError{Err: err}
}

// IsBadInput reports whether err is (or wraps) a BadInputError.
func IsBadInput(err error) bool {
	var b *BadInputError
	return errors.As(err, &b)
}

// InterruptedError is returned by a tool (bench) stopped by SIGINT or
// SIGTERM before it finished: What names the step it was in. It wraps
// context.Canceled; cmd/vigil exits 130 on it (128 + SIGINT, the shell's
// convention).
type InterruptedError struct{ What string }

// Error is "interrupted " and What.
func (e *InterruptedError) Error() string { return "interrupted " + e.What }

// Unwrap returns context.Canceled, so errors.Is(err, context.Canceled)
// holds.
func (e *InterruptedError) Unwrap() error { return context.Canceled }

// Interrupted returns err as an *InterruptedError naming what when ctx
// ended (a signal) and err is that cancellation, e.g. a tool's "context
// canceled" from a step with no message of its own; any other err, and an
// err that already is an *InterruptedError, is returned as it is.
func Interrupted(ctx context.Context, err error, what string) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, context.Canceled) || errors.As(err, new(*InterruptedError)) {
		return err
	}
	return &InterruptedError{What: what}
}

// NewLogger builds the zap logger for a log config, writing to w. Errors:
// an unknown log.level.
func NewLogger(c config.Log, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	enc := zapcore.NewJSONEncoder(ec)
	if c.Format != "json" {
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

// HumanBytes writes b bytes as "310 KiB" (rounded up) or "8.0 MiB".
func HumanBytes(b int) string {
	if b < 1<<20 {
		return strconv.Itoa((b+1023)/1024) + " KiB"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
}

// RoughDuration writes d for a person: "12 s", "4 min", "3.5 h".
func RoughDuration(d time.Duration) string {
	switch {
	case d < 2*time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s"
	case d < 2*time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min"
	}
	return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " h"
}

// OneLine returns the first line of s (a multi-line message from a
// library or a tool, for a log field or a table cell).
func OneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
