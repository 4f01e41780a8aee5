package bench_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every benchmark stops its streams, decoders, batchers and ffmpeg
// readers before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
