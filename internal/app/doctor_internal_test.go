package app

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

func parseFamilies(t *testing.T, text string) families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	return f
}

// The copy share is (h2d + d2h) / (h2d + preprocess + infer + d2h) of the
// seconds added in the window, over every model and batch size.
func TestCopyCheck(t *testing.T) {
	hist := func(model, stage string, sum float64) string {
		return `vigil_gpu_batch_stage_seconds_bucket{model="` + model + `",batch="8",stage="` + stage + `",le="+Inf"} 10
vigil_gpu_batch_stage_seconds_sum{model="` + model + `",batch="8",stage="` + stage + `"} ` + strconv.FormatFloat(sum, 'f', -1, 64) + `
vigil_gpu_batch_stage_seconds_count{model="` + model + `",batch="8",stage="` + stage + `"} 10
`
	}
	head := "# TYPE vigil_gpu_batch_stage_seconds histogram\n"
	a := parseFamilies(t, head+hist("m", "h2d", 1)+hist("m", "d2h", 1)+hist("m", "preprocess", 1)+hist("m", "infer", 1))
	// In the window: 0.1 + 0.1 s of copies against 0.2 + 1.6 s of compute.
	b := parseFamilies(t, head+hist("m", "h2d", 1.1)+hist("m", "d2h", 1.1)+hist("m", "preprocess", 1.2)+hist("m", "infer", 2.6))
	c := copyCheck(a, b)
	require.Equal(t, "10.0 %", c.Measured)
	require.True(t, c.OK)
	b2 := parseFamilies(t, head+hist("m", "h2d", 1.5)+hist("m", "d2h", 1.5)+hist("m", "preprocess", 1.2)+hist("m", "infer", 2.6))
	c = copyCheck(a, b2)
	require.Equal(t, "35.7 %", c.Measured) // 1.0 s of 2.8
	require.False(t, c.OK)
	require.Empty(t, copyCheck(a, a).Measured, "nothing ran in the window")
	require.Contains(t, copyCheck(families{}, families{}).Advice, "no GPU batch timings")
}
