package bench_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/bench"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/internal/testenv"
)

// bench --streams on a CPU-only machine: vigil's own software ceiling is
// measured (decode.Source on every core, no inference), the NVDEC one says
// in one line why it is n/a, the pixel rate to paste is printed, the
// engine ceiling runs on host frames, the ffmpeg CLI's ceilings are
// measured too when --ffmpeg names one, and vigil carries a few real-time
// streams within the budget, reported against both ceilings with the
// acceptance line. Figures are checked for structure, not speed.
func TestBenchStreams(t *testing.T) {
	c := config.Default()
	c.Infer.Provider = "cpu"
	var out bytes.Buffer
	r, err := bench.Streams(context.Background(), c, bench.StreamsOptions{Source: testenv.Media(t, "Megamind.avi"), Model: "blazeface",
		FFmpeg: "ffmpeg", Start: 1, Step: 1, Max: 2, Each: 2 * time.Second, Budget: 500 * time.Millisecond, CeilingFor: 3500 * time.Millisecond}, zap.NewNop(), &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	kinds := map[string]bench.Ceiling{}
	for _, ce := range r.Ceilings {
		kinds[ce.Kind] = ce
	}
	require.Len(t, kinds, 4, "vigil's NVDEC and CPU, the ffmpeg CLI's NVDEC and CPU")
	cpu := kinds[bench.KindCPU]
	require.NoError(t, cpu.Err)
	require.Equal(t, runtime.NumCPU(), cpu.Parallel)
	require.Greater(t, cpu.FPS, 0.0)
	require.InDelta(t, 720*528, cpu.PixelRate/cpu.FPS, 1, "pixels per frame: Megamind is 720×528")
	require.NoError(t, kinds[bench.KindFFmpegCPU].Err)
	if cuda.Init() != nil {
		require.Error(t, kinds[bench.KindNVDEC].Err, "no GPU here")
		require.Equal(t, 1, strings.Count(out.String(), "decode-only NVDEC direct"), "one line for NVDEC")
		require.Contains(t, out.String(), "n/a: no usable GPU here")
		require.Equal(t, cpu.FPS, r.Combined, "the decode ceiling is the CPU's alone")
		require.Contains(t, out.String(), "# nvdec_pixel_rate: not measured")
		require.Zero(t, r.Together)
	}
	require.Equal(t, cpu.PixelRate, r.CPUPixelRate, "measured apart when NVDEC cannot run")
	require.Regexp(t, `\n    cpu_pixel_rate: [0-9]+   # all [0-9]+ cores\n`, out.String(), "a line to paste under decode:")
	require.Greater(t, r.EngineFPS, 0.0)
	require.Contains(t, out.String(), "engine ceiling ")
	require.Contains(t, out.String(), "host frames, CPU engine")
	require.NotEmpty(t, r.Points)
	require.GreaterOrEqual(t, r.Best.Streams, 1)
	require.InDelta(t, 0.9*min(r.Combined, r.EngineFPS), r.Bound, 1e-9)
	require.Equal(t, r.Best.ProcessedFPS >= r.Bound, r.Pass)
	require.Regexp(t, `result: .* × the decode ceiling \(vigil's NVDEC \+ CPU decode-only, [0-9.]+ fps\), [0-9.]+ × the engine ceiling`, out.String())
	require.Regexp(t, `\nacceptance: [0-9.]+ fps processed (>=|<) 0\.9 × min\(decode ceiling [0-9.]+, engine ceiling [0-9.]+\) = [0-9.]+: (passes|fails|not decided: no point failed before --max-streams; raise it)\n`, out.String())
	// The order of the run: decode ceilings, engine ceiling, then points.
	require.Less(t, strings.Index(out.String(), "decode-only CPU"), strings.Index(out.String(), "engine ceiling"))
	require.Less(t, strings.Index(out.String(), "engine ceiling"), strings.Index(out.String(), "streams    offered"))

	_, err = bench.Streams(context.Background(), c, bench.StreamsOptions{FFmpeg: "/no/such/ffmpeg", Start: 1, Step: 1, Max: 1, Each: time.Second, Budget: time.Second}, zap.NewNop(), &out)
	require.ErrorContains(t, err, "--ffmpeg /no/such/ffmpeg")

	out.Reset()
	_, err = bench.Streams(context.Background(), c, bench.StreamsOptions{Source: testenv.Media(t, "Megamind.avi"), Model: "nosuchmodel",
		Start: 1, Step: 1, Max: 1, Each: time.Second, Budget: time.Second}, zap.NewNop(), &out)
	require.ErrorContains(t, err, `unknown model "nosuchmodel"`)
	require.NotContains(t, out.String(), "decode-only", "refused before the ceilings run")

	if cuda.Init() != nil {
		out.Reset()
		cc := c
		cc.Decode.HWAccel = "cuda"
		_, err = bench.Streams(context.Background(), cc, bench.StreamsOptions{Source: testenv.Media(t, "Megamind.avi"), Model: "blazeface",
			Start: 1, Step: 1, Max: 1, Each: time.Second, Budget: time.Second}, zap.NewNop(), &out)
		var bad *cli.BadInputError
		require.ErrorAs(t, err, &bad)
		require.ErrorContains(t, err, "decode.hwaccel cuda: NVDEC is not available here")
		require.NotContains(t, out.String(), "decode-only", "refused before the ceilings run")
	}
}

// bench --streams across the devices of infer.devices: each gets its own
// engine (with the CPU engine a device is only a label, which is how this
// runs without GPUs) and the streams are spread over them.
func TestBenchStreamsDevices(t *testing.T) {
	c := config.Default()
	c.Infer.Provider = "cpu"
	c.Infer.Devices = []int{0, 1}
	c.Decode.HWAccel = "hybrid"
	c.Decode.NVDECFPS, c.Decode.CPUFPS = 100, 100 // 3 streams: NVDEC of GPU 0, of GPU 1, the CPU
	var out bytes.Buffer
	r, err := bench.Streams(context.Background(), c, bench.StreamsOptions{Source: testenv.Media(t, "Megamind.avi"), Model: "blazeface",
		Start: 3, Step: 1, Max: 3, Each: time.Second, Budget: 500 * time.Millisecond, NoCeilings: true}, zap.NewNop(), &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	require.Contains(t, out.String(), "devices [0 1]: streams placed on the one with the fewest")
	require.Equal(t, 2, strings.Count(out.String(), "  engine: "), "one engine per device")
	if cuda.Init() != nil { // no GPU: the streams placed on NVDEC decode on the CPU, and the bench says so
		require.Contains(t, out.String(), "by decoder: NVDEC 0 streams")
		require.Contains(t, out.String(), "; CPU 3 streams")
		require.Contains(t, out.String(), "(2 placed on NVDEC decode on the CPU: NVDEC could not open them)")
		require.Zero(t, r.Points[0].OnNVDEC)
	}
	require.Len(t, r.Points, 1)
}

// Inputs a user gives: a file:// URL is its file; a FIFO, a model file
// ONNX Runtime cannot load and an ffmpeg that fails every ceiling are
// refused with what was wrong, before any point runs.
func TestBenchStreamsInputs(t *testing.T) {
	c := config.Default()
	c.Infer.Provider = "cpu"
	clip := testenv.Media(t, "Megamind.avi")
	// 2 s points: at 24 fps a frame in flight as the window opens or
	// closes is 2 % of a point, well inside the 95 % pass rule (4 % at 1 s).
	one := bench.StreamsOptions{Model: "blazeface", Start: 1, Step: 1, Max: 1, Each: 2 * time.Second, Warmup: 500 * time.Millisecond,
		Budget: time.Second, NoCeilings: true}
	var out bytes.Buffer
	o := one
	o.Source = "file://" + clip
	r, err := bench.Streams(context.Background(), c, o, zap.NewNop(), &out)
	require.NoError(t, err, out.String())
	require.Len(t, r.Points, 1)
	require.Regexp(t, `result: at least 1 stream within P99 1s: [0-9.]+ fps processed; no decode ceiling measured \(--ceiling 0\); NVDEC`, out.String())

	fifo := filepath.Join(t.TempDir(), "pipe")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	o = one
	o.Source = fifo
	_, err = bench.Streams(context.Background(), c, o, zap.NewNop(), &out)
	var bad *cli.BadInputError
	require.ErrorAs(t, err, &bad)
	require.ErrorContains(t, err, "not a regular file")

	corrupt := filepath.Join(t.TempDir(), "broken.onnx")
	require.NoError(t, os.WriteFile(corrupt, []byte("not a model"), 0o644))
	out.Reset()
	o = one
	o.Source, o.Model, o.NoCeilings, o.CeilingFor = clip, corrupt, false, 4*time.Second
	_, err = bench.Streams(context.Background(), c, o, zap.NewNop(), &out)
	require.ErrorAs(t, err, &bad)
	require.ErrorContains(t, err, "--model: model "+corrupt)
	require.NotContains(t, out.String(), "decode-only", "refused before the ceilings run")

	out.Reset()
	o = one
	o.Source, o.NoCeilings, o.CeilingFor, o.FFmpeg = clip, false, 4*time.Second, "/bin/false"
	r, err = bench.Streams(context.Background(), c, o, zap.NewNop(), &out)
	require.NoError(t, err, "an ffmpeg CLI that fails only loses its comparison lines")
	require.Contains(t, out.String(), "ffmpeg CLI decode-only cpu   x")
	require.Contains(t, out.String(), "n/a: /bin/false: exit status 1")
	require.Greater(t, r.Combined, 0.0, "vigil's own ceilings ran")
}

// Each bad number is named, with what is wanted.
func TestBenchStreamsBadNumbers(t *testing.T) {
	c := config.Default()
	c.Infer.Provider = "cpu"
	var out bytes.Buffer
	_, err := bench.Streams(context.Background(), c, bench.StreamsOptions{Source: testenv.Media(t, "Megamind.avi"),
		Start: 5, Step: 0, Max: 3, Each: time.Millisecond, Budget: time.Second}, zap.NewNop(), &out)
	var bad *cli.BadInputError
	require.ErrorAs(t, err, &bad)
	require.EqualError(t, err, "bench --streams: --step 0: want 1 or more; --max-streams 3: want --start (5) or more; --each 1ms: want 100ms or more")
	require.Empty(t, out.String())
}
