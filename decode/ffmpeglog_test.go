package decode_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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
	"github.com/vigil-video/vigil/pipeline"
)

// annexB splits an H.264 Annex-B stream into NAL units, each with its
// start code.
func annexB(data []byte) [][]byte {
	var starts []int
	for i := 0; i+3 <= len(data); i++ {
		if data[i] == 0 && data[i+1] == 0 && data[i+2] == 1 {
			s := i
			if s > 0 && data[s-1] == 0 {
				s-- // a 4-byte start code
			}
			starts = append(starts, s)
			i += 2
		}
	}
	nals := make([][]byte, len(starts))
	for i, s := range starts {
		end := len(data)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		nals[i] = data[s:end]
	}
	return nals
}

// nalType is the type of a NAL unit with its start code.
func nalType(nal []byte) int {
	i := bytes.Index(nal, []byte{0, 0, 1})
	return int(nal[i+3] & 0x1f)
}

// rewriteH264 writes, next to the Annex-B file in, the NAL units that keep
// accepts (by type and index among units of that type).
func rewriteH264(t *testing.T, in, name string, keep func(typ, nth int) bool) string {
	t.Helper()
	data, err := os.ReadFile(in)
	require.NoError(t, err)
	var out []byte
	seen := map[int]int{}
	for _, nal := range annexB(data) {
		typ := nalType(nal)
		if keep(typ, seen[typ]) {
			out = append(out, nal...)
		}
		seen[typ]++
	}
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, out, 0o644))
	return p
}

// H.264 NAL unit types (ITU-T H.264 table 7-1).
const (
	nalIDR = 5
	nalSPS = 7
	nalPPS = 8
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
	nosps := rewriteH264(t, full, "nosps.h264", func(typ, _ int) bool { return typ != nalSPS && typ != nalPPS })

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
	require.Equal(t, float64(n), testutil.ToFloat64(m.DecodeErrors.WithLabelValues("nosps")))
}
