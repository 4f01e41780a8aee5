package decode_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// logCount is what one logged line accounts for: 1, or its "repeated".
func logCount(e observer.LoggedEntry) int {
	if n, ok := e.ContextMap()["repeated"].(int64); ok {
		return int(n)
	}
	return 1
}

// A stream without SPS/PPS makes FFmpeg log several errors for each of its
// slices, in the probe and again in the decoder. They are the stream's
// lines, not anonymous process-wide ones, and each kind is logged once with
// its count instead of once per slice.
func TestFFmpegLogPerStreamAggregated(t *testing.T) {
	full := makeMedia(t, "full.h264", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-frames:v", "100",
		"-c:v", "libx264", "-bf", "0", "-g", "250", "-pix_fmt", "yuv420p")
	nosps := testenv.RewriteH264(t, full, "nosps.h264", func(typ, _ int) bool { return typ != testenv.NALSPS && typ != testenv.NALPPS })

	gcore, global := observer.New(zapcore.DebugLevel)
	decode.SetLogger(zap.New(gcore))
	t.Cleanup(func() { decode.SetLogger(nil) })
	core, logs := observer.New(zapcore.DebugLevel)
	m := decode.NewMetrics(prometheus.NewRegistry())
	src, err := decode.New(decode.Options{URL: nosps, StreamID: "nosps", Logger: zap.New(core), Metrics: m,
		// Longer than this test: each kind is logged at once, then its
		// count when Run returns.
		LogInterval: time.Minute})
	require.NoError(t, err)
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release() })
	require.ErrorContains(t, err, "no frame could be decoded")

	ff := logs.Filter(func(e observer.LoggedEntry) bool { return e.LoggerName == "ffmpeg" }).All()
	perKind := map[string]int{}
	counts := map[string]int{}
	for _, e := range ff {
		perKind[e.Message]++
		counts[e.Message] += logCount(e)
	}
	t.Logf("%d lines: %v", len(ff), counts)
	// Every one of the 100 slices refers to a PPS that never came.
	require.GreaterOrEqual(t, counts["non-existing PPS 0 referenced"], 100)
	for msg, n := range perKind {
		require.LessOrEqual(t, n, 2, "%q: logged at once, then once with the count", msg)
	}
	require.Zero(t, global.FilterMessage("non-existing PPS 0 referenced").Len(), "no line of the stream's goes to the process-wide log")

	// Each packet the decoder failed on is counted once, in the error,
	// Faults and the metric alike.
	n := src.Faults().DecodeErrors
	require.NotZero(t, n)
	require.Contains(t, err.Error(), "("+strconv.FormatUint(n, 10)+" decode errors)")
	require.Equal(t, float64(n), testutil.ToFloat64(m.DecodeErrors.WithLabelValues("nosps", "decoder")))
	require.Equal(t, map[decode.DecodeErrorReason]uint64{decode.ErrDecoder: n}, src.Faults().DecodeErrorsByReason)
}
