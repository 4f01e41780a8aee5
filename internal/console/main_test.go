package console_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/vigil-video/vigil/internal/testenv"
)

// Every goroutine but nats.go's known one (testenv.IgnoreNATSPutLeak) is
// checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreNATSPutLeak) }
