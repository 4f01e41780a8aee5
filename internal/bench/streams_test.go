package bench_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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

// bench --streams on a CPU-only machine: the software ceiling is measured
// with the real ffmpeg CLI, the NVDEC ones say why they are n/a, and vigil
// carries a few real-time streams within the budget.
func TestBenchStreams(t *testing.T) {
	c := config.Default()
	c.Infer.Provider = "cpu"
	var out bytes.Buffer
	r, err := bench.Streams(context.Background(), c, bench.StreamsOptions{Source: testenv.Media(t, "Megamind.avi"), Model: "blazeface",
		Start: 1, Step: 1, Max: 2, Each: 2 * time.Second, Budget: 500 * time.Millisecond, CeilingFor: 3 * time.Second}, zap.NewNop(), &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	var cpu, nvdec int
	for _, ce := range r.Ceilings {
		switch ce.Kind {
		case "cpu":
			require.NoError(t, ce.Err)
			require.Greater(t, ce.FPS, 100.0, "Megamind decodes far faster than real time")
			cpu++
		case "nvdec":
			if cuda.Init() != nil {
				require.Error(t, ce.Err, "no GPU here")
			}
			nvdec++
		}
	}
	require.Equal(t, 1, cpu)
	require.Equal(t, 2, nvdec)
	require.NotEmpty(t, r.Points)
	require.GreaterOrEqual(t, r.Best.Streams, 1)
	require.Greater(t, r.Combined, 0.0)
	require.Contains(t, out.String(), "result: ")

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
	_, err = bench.Streams(context.Background(), c, o, zap.NewNop(), &out)
	require.EqualError(t, err, "every decode-only ceiling failed (see the n/a lines); check --ffmpeg /bin/false, or skip the ceilings with --ceiling 0")
	require.Contains(t, out.String(), "n/a: /bin/false: exit status 1")
	require.NotContains(t, out.String(), "streams    offered", "no point runs without a ceiling")
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
