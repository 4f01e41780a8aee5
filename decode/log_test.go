package decode

import (
	"fmt"
	"testing"
	"time"

	"github.com/asticode/go-astiav"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// lineCount is what one logged line accounts for: 1, or its "repeated".
func lineCount(e observer.LoggedEntry) int {
	if n, ok := e.ContextMap()["repeated"].(int64); ok {
		return int(n)
	}
	return 1
}

// The aggregation of FFmpeg lines, driven with explicit times: per kind,
// the first line at once, then one line per interval with the count of
// what came meanwhile; every line is accounted for by a count.
func TestLogSinkAggregates(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	// An hour: the sink's timer never fires during this test; windows end
	// when a line comes after them (the path the timer would take first).
	s := newLogSink(zap.New(core), time.Hour, nil)
	feed := func(at time.Time, level astiav.LogLevel, format, msg string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.complete(logLine{level: level, format: format, msg: msg, item: "h264"}, at)
	}
	t0 := time.Now()
	for i := range 1000 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		feed(at, astiav.LogLevelError, "non-existing PPS %u referenced\n", "non-existing PPS 0 referenced\n")
		if i%10 == 0 {
			feed(at, astiav.LogLevelWarning, "Packet corrupt (stream = %d, dts = %s)", "Packet corrupt (stream = 0, dts = 10).\n")
		}
	}
	require.Equal(t, 2, logs.Len(), "the first line of each kind, at once")
	first := logs.All()
	require.Equal(t, zapcore.WarnLevel, first[0].Level, "FFmpeg errors are warnings")
	require.Equal(t, "non-existing PPS 0 referenced", first[0].Message)
	require.Equal(t, "h264", first[0].ContextMap()["ctx"])
	require.Equal(t, zapcore.DebugLevel, first[1].Level, "FFmpeg warnings are debug lines")

	// One more of the first kind after its window: one line for the 999
	// counted and this one.
	feed(t0.Add(time.Hour+time.Second), astiav.LogLevelError, "non-existing PPS %u referenced\n", "non-existing PPS 7 referenced\n")
	require.Equal(t, 3, logs.Len())
	last := logs.All()[2]
	require.Equal(t, "non-existing PPS 7 referenced", last.Message)
	require.EqualValues(t, 1000, last.ContextMap()["repeated"])

	// The end: the second kind's 99 pending lines are logged as one.
	s.flush(true)
	require.Equal(t, 4, logs.Len())
	require.EqualValues(t, 99, logs.All()[3].ContextMap()["repeated"])
	total := 0
	for _, e := range logs.All() {
		total += lineCount(e)
	}
	require.Equal(t, 1001+100, total, "every line is accounted for")

	// After a reset the next line of a kind is logged at once.
	feed(time.Now(), astiav.LogLevelError, "non-existing PPS %u referenced\n", "non-existing PPS 0 referenced\n")
	require.Equal(t, 5, logs.Len())
	s.flush(true)
}

// Lines FFmpeg writes in pieces are joined; kinds beyond maxLogKinds share
// one window, so text that never repeats cannot flood the log either.
func TestLogSinkPiecesAndManyKinds(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	s := newLogSink(zap.New(core), time.Hour, nil) // an hour: no timer during the test
	s.line(logLine{level: astiav.LogLevelWarning, format: "Packet corrupt (stream = %d, dts = %s)", msg: "Packet corrupt (stream = 0, dts = 10)"})
	require.Zero(t, logs.Len(), "waiting for the rest of the line")
	s.line(logLine{level: astiav.LogLevelWarning, format: ".\n", msg: ".\n"})
	require.Equal(t, 1, logs.Len())
	require.Equal(t, "Packet corrupt (stream = 0, dts = 10).", logs.All()[0].Message)
	s.flush(true)

	logs.TakeAll()
	const n = 3 * maxLogKinds
	for i := range n {
		f := fmt.Sprintf("unique message %d\n", i)
		s.line(logLine{level: astiav.LogLevelError, format: f, msg: f})
	}
	require.Equal(t, maxLogKinds+1, logs.Len(), "one line per kind up to the limit, then one for all the others")
	s.flush(true)
	require.Equal(t, maxLogKinds+2, logs.Len())
	total := 0
	for _, e := range logs.All() {
		total += lineCount(e)
	}
	require.Equal(t, n, total)
}
