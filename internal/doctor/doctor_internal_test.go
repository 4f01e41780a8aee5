package doctor

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

// The engine-time tail's advice fits the engine that ran: CUDA graphs
// only when the GPU engine timed batches in the window, never for the CPU
// engine (it used to recommend them on machines without a GPU).
func TestTailAdviceFitsTheEngine(t *testing.T) {
	// 100 inferences, 90 under 5 ms and 10 up to 500 ms: mean 10 ms,
	// P99 about 450 ms, far past 3x.
	const tail = `# TYPE vigil_stage_latency_seconds histogram
vigil_stage_latency_seconds_bucket{stream="a",stage="infer",le="0.005"} 90
vigil_stage_latency_seconds_bucket{stream="a",stage="infer",le="0.5"} 100
vigil_stage_latency_seconds_bucket{stream="a",stage="infer",le="+Inf"} 100
vigil_stage_latency_seconds_sum{stream="a",stage="infer"} 1
vigil_stage_latency_seconds_count{stream="a",stage="infer"} 100
`
	cpu := tailCheck(families{}, parseFamilies(t, tail))
	require.False(t, cpu.OK, cpu.Measured)
	require.NotContains(t, cpu.Advice, "CUDA")
	require.Contains(t, cpu.Advice, "cores")

	gpuStage := func(sum string) string {
		return `# TYPE vigil_gpu_batch_stage_seconds histogram
vigil_gpu_batch_stage_seconds_bucket{model="m",batch="1",stage="infer",le="+Inf"} 10
vigil_gpu_batch_stage_seconds_sum{model="m",batch="1",stage="infer"} ` + sum + `
vigil_gpu_batch_stage_seconds_count{model="m",batch="1",stage="infer"} 10
`
	}
	gpu := tailCheck(parseFamilies(t, gpuStage("1")), parseFamilies(t, tail+gpuStage("1.5")))
	require.False(t, gpu.OK)
	require.Contains(t, gpu.Advice, "CUDA graphs")
}

// The drop line judges frames lost against the frames vigil meant to
// process (decoded less skipped by policy): skips alone never warn, and
// losses among few admitted frames do.
func TestDropCheckSkipsAreNotLosses(t *testing.T) {
	counters := func(decoded, dropped, skipped int) families {
		return parseFamilies(t, `# TYPE vigil_frames_decoded_total counter
vigil_frames_decoded_total{stream="cam"} `+strconv.Itoa(decoded)+`
# TYPE vigil_frames_dropped_total counter
vigil_frames_dropped_total{stream="cam",stage="queue",reason="deadline"} `+strconv.Itoa(dropped)+`
# TYPE vigil_frames_skipped_total counter
vigil_frames_skipped_total{stream="cam",reason="rate_limit"} `+strconv.Itoa(skipped)+`
`)
	}
	a := counters(0, 0, 0)
	// fps_limit 10 on a 25 fps camera: 60 % skipped, nothing lost.
	c := dropCheck(a, counters(250, 0, 150))
	require.True(t, c.OK)
	require.Equal(t, "0 % (60 % skipped by policy)", c.Measured)
	// fps_limit 5: 20 of 25 fps skipped, 2 of the 5 admitted lost: 8 % of
	// decoded frames, but 40 % of the frames it was meant to process.
	c = dropCheck(a, counters(250, 20, 200))
	require.False(t, c.OK)
	require.Equal(t, "40 % (80 % skipped by policy)", c.Measured)
	// No skips: as before, lost over decoded.
	c = dropCheck(a, counters(100, 30, 0))
	require.False(t, c.OK)
	require.Equal(t, "30 %", c.Measured)
}
