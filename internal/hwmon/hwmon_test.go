package hwmon

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// On a machine without an NVIDIA driver (CI, this one): one info line,
// nothing exported, no crash. On a GPU machine: the gauges appear and lint.
func TestStart(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := Start(zap.New(core))
	defer c.Close()
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		require.Nil(t, c)
		require.Equal(t, 1, logs.Len())
		require.Contains(t, logs.All()[0].Message, "no NVIDIA GPU metrics")
		return
	}
	require.NotNil(t, c, "an NVIDIA device node exists: NVML should start")
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Positive(t, n)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	t.Logf("%d GPU series", n)
}
