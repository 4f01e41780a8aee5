package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

// What each priority runs at each degradation level: high never changes;
// normal only switches model; low switches model first and slows down at
// the next level, or slows down at once when it has no lighter model.
func TestDegradationSteps(t *testing.T) {
	for _, tc := range []struct {
		priority    string
		hasLight    bool
		level       int
		light, slow bool
	}{
		{"high", true, 2, false, false},
		{"", true, 0, false, false},
		{"normal", true, 1, true, false},
		{"normal", true, 2, true, false},
		{"normal", false, 2, false, false},
		{"low", true, 1, true, false},
		{"low", true, 2, true, true},
		{"low", false, 1, false, true},
		{"low", false, 0, false, false},
	} {
		light, slow := degradation(tc.priority, tc.hasLight, tc.level)
		require.Equal(t, [2]bool{tc.light, tc.slow}, [2]bool{light, slow}, "%+v", tc)
	}
}

// Hybrid decoding weighs a stream by the larger of its declared frame rate
// and what it decoded: a stream that falls behind keeps its weight (else
// the overloaded side would look lighter and get more), a camera sending
// more than it declares is weighed by what it sends, and an implausible
// declared rate (FFmpeg's 90,000 guess for some RTSP streams) is ignored.
func TestReweighFPS(t *testing.T) {
	for _, tc := range []struct{ nominal, decoded, want float64 }{
		{30, 12, 30},
		{30, 45, 45},
		{90000, 25, 25},
		{0, 25, 25},
	} {
		got := reweighFPS(pipeline.StatusSnapshot{FPSNominal: tc.nominal, FPSIn: tc.decoded})
		require.Equal(t, tc.want, got, "nominal %v, decoded %v", tc.nominal, tc.decoded)
	}
}
