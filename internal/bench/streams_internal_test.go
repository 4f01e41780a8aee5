package bench

import (
	"context"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// A ceiling counts a process's frames from its first report after the
// start-up allowance to its last, so slow starts do not lower it.
func TestProgressRate(t *testing.T) {
	var p progressRate
	require.Zero(t, p.fps(), "no report")
	p.add(500*time.Millisecond, 10) // start-up: ignored
	p.add(ceilingSettle-time.Millisecond, 100)
	require.Zero(t, p.fps(), "only start-up reports")
	p.add(ceilingSettle+time.Second, 1000)
	require.Zero(t, p.fps(), "one steady report gives no rate")
	p.add(ceilingSettle+3*time.Second, 3000)
	require.InDelta(t, 1000.0, p.fps(), 1e-9, "(3000-1000) frames / 2 s")
}

// With hybrid decoding each point also reports the NVDEC and CPU streams
// apart, from the per-stream counters between two snapshots.
func TestSidesLine(t *testing.T) {
	side := map[string]int{"s0": sideNVDEC, "s1": sideNVDEC, "s2": sideCPU}
	a := map[string]float64{"stream decoded s0": 100, "stream decoded s1": 100, "stream decoded s2": 50, "stream dropped s2": 5}
	b := map[string]float64{"stream decoded s0": 160, "stream decoded s1": 160, "stream decoded s2": 110, "stream dropped s2": 20, "stream dropped s0": 3}
	ms := func(v ...int) (d []time.Duration) {
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	got := sidesLine(side, a, b, [2][]time.Duration{ms(10, 20, 30, 40), ms(90, 95)}, 2*time.Second)
	require.Equal(t, "by decoder: NVDEC 2 streams: offered 60.0, processed 2.0 fps, dropped 2.5%, P99 40.0 ms; "+
		"CPU 1 streams: offered 30.0, processed 1.0 fps, dropped 25.0%, P99 95.0 ms", got)
}

// Bench streams are placed as vigil run places them: across the devices,
// fewest streams first, and with hybrid decoding on that GPU's NVDEC or the
// CPU in proportion to capacity; the same stream gets the same place at
// every point.
func TestBenchPlacement(t *testing.T) {
	c := config.Default()
	c.Decode.HWAccel = "hybrid"
	c.Decode.NVDECFPS, c.Decode.CPUFPS = 200, 100 // NVDEC 200 fps per GPU, CPU 100
	p := newBenchPlacement(&c, []int{3, 5})
	devs, nvdec := map[int]int{}, 0
	for i := range 10 {
		s := p.at(i)
		devs[s.dev]++
		if s.decode.HWAccel != decode.HWNone {
			nvdec++
			require.Equal(t, strconv.Itoa(s.dev), s.decode.HWDevice, "NVDEC of the stream's own GPU")
		} else {
			require.Equal(t, 1, s.decode.Threads, "a CPU-decoded stream runs one decoder thread")
		}
	}
	require.Equal(t, map[int]int{3: 5, 5: 5}, devs)
	require.Equal(t, 8, nvdec, "capacities 200 + 200 : 100 put 8 of 10 on NVDEC")
	require.Equal(t, p.at(7), p.at(7))

	// --cpu-threads: the CPU-decoded streams get that many decoder
	// threads (FFmpeg's frame threads above 1); NVDEC ones are untouched.
	p = newBenchPlacement(&c, []int{3, 5})
	p.cpuThreads = 2
	for i := range 10 {
		if s := p.at(i); s.decode.HWAccel == decode.HWNone {
			require.Equal(t, 2, s.decode.Threads, "stream %d", i)
		} else {
			require.Zero(t, s.decode.Threads, "stream %d decodes on NVDEC", i)
		}
	}

	c.Decode.HWAccel = "none"
	one := newBenchPlacement(&c, []int{0})
	require.Equal(t, decode.HWNone, one.at(0).decode.HWAccel)
	require.Zero(t, one.at(0).decode.Threads, "FFmpeg's own thread count outside hybrid")
}

// peakEngine is an engine that takes 20 ms per frame and records how many
// of its kind ran at once; id tells two apart (as engines, map keys).
type peakEngine struct {
	id        int
	cur, peak *atomic.Int32
}

func (e peakEngine) Model() string { return "peak" }
func (e peakEngine) Detect(pipeline.Image, *pipeline.StageTimes, []pipeline.Detection) ([]pipeline.Detection, error) {
	n := e.cur.Add(1)
	for p := e.peak.Load(); n > p && !e.peak.CompareAndSwap(p, n); p = e.peak.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	e.cur.Add(-1)
	return nil, nil
}

// benchPoint runs one sweep point of n Megamind streams with the policy,
// placed by newBenchPlacement over len(engs) devices, device k running on
// engs[k] (no batcher).
func benchPoint(t *testing.T, c config.Config, engs []pipeline.Engine, n int) SweepPoint {
	t.Helper()
	devs := make([]int, len(engs))
	for k := range devs {
		devs[k] = k
	}
	p := newBenchPlacement(&c, devs)
	p.engines = func(k int) (pipeline.Engine, *pipeline.Batcher) { return engs[k], nil }
	o := SweepOptions{Source: testenv.Media(t, "Megamind.avi"), Each: time.Second, Warmup: time.Second, Budget: time.Second, place: p.at}
	pt, err := sweepPoint(context.Background(), engs[0], nil, o, n, true)
	require.NoError(t, err)
	return pt
}

// Without batching, each device's engine has a gate of its own, as in vigil
// run: streams on two devices run their engines at the same time.
func TestSweepPointGatePerEngine(t *testing.T) {
	var cur, peak atomic.Int32
	benchPoint(t, config.Default(), []pipeline.Engine{peakEngine{0, &cur, &peak}, peakEngine{1, &cur, &peak}}, 4)
	require.GreaterOrEqual(t, peak.Load(), int32(2), "the two devices' engines never ran at once: one gate for both")
}

// The by-decoder line splits the point's offered frames: its two sides'
// offered fps add up to the point's (to the 0.1 fps printed), all counted
// over the one window. Without a GPU the NVDEC side falls back to the CPU,
// which still prints the line.
func TestSweepPointSidesAddUp(t *testing.T) {
	c := config.Default()
	c.Decode.HWAccel = "hybrid"
	c.Decode.NVDECFPS, c.Decode.CPUFPS = 100, 100
	var cur, peak atomic.Int32
	pt := benchPoint(t, c, []pipeline.Engine{peakEngine{0, &cur, &peak}}, 2)
	m := regexp.MustCompile(`NVDEC (\d+) streams: offered ([0-9.]+), .*; CPU (\d+) streams: offered ([0-9.]+), `).FindStringSubmatch(pt.Breakdown)
	require.NotNil(t, m, "no by-decoder line:\n%s", pt.Breakdown)
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		return v
	}
	require.Equal(t, 2.0, num(m[1])+num(m[3]), "streams on the two sides")
	require.Positive(t, pt.OfferedFPS)
	require.InDelta(t, pt.OfferedFPS, num(m[2])+num(m[4]), 0.11, pt.Breakdown)
}

// The acceptance line: 0.9 × the smaller ceiling, from this run; n/a
// without either ceiling; a sweep that --max-streams stopped before any
// point failed decides nothing when it is under the bound.
func TestAcceptanceLine(t *testing.T) {
	r := StreamsResult{Combined: 8000, EngineFPS: 6000, Bound: 0.9 * 6000, Best: SweepPoint{Streams: 200, ProcessedFPS: 5500}}
	require.Equal(t, "acceptance: 5500.0 fps processed >= 0.9 × min(decode ceiling 8000.0, engine ceiling 6000.0) = 5400.0: passes", acceptanceLine(&r, true))
	require.True(t, r.Pass)
	r.Best.ProcessedFPS = 5000
	require.Equal(t, "acceptance: 5000.0 fps processed < 0.9 × min(decode ceiling 8000.0, engine ceiling 6000.0) = 5400.0: fails", acceptanceLine(&r, true))
	require.False(t, r.Pass)
	require.Contains(t, acceptanceLine(&r, false), ": not decided: no point failed before --max-streams; raise it")
	require.Equal(t, "acceptance: n/a (no engine ceiling measured)", acceptanceLine(&StreamsResult{Combined: 100}, true))
	require.Equal(t, "acceptance: n/a (no decode ceiling measured)", acceptanceLine(&StreamsResult{}, true))
}

// vigil's own decode-only rate on the CPU: k looping sources of a real
// clip, no inference, counted after the start-up; every source decodes in
// software, and the pixel rate is the frame size times the frame rate.
// Checked for structure, not speed.
func TestDecodeRateCPU(t *testing.T) {
	clip := testenv.Media(t, "Megamind.avi")
	fps, pix, info, err := decodeRate(context.Background(), 2, ceilingSettle+time.Second, cpuOptions(clip))
	require.NoError(t, err)
	require.Greater(t, fps, 0.0)
	require.InDelta(t, 720*528, pix/fps, 1, "Megamind is 720×528")
	require.Len(t, info, 2)
	for _, i := range info {
		require.NotNil(t, i)
		require.False(t, i.NVDEC)
	}
	// The NVDEC ceiling's note on sessions that did not decode directly.
	require.Empty(t, notDirect([]*decode.Info{{NVDEC: true, Direct: true}, nil}))
	require.Equal(t, " (1 of 2 sessions through FFmpeg's hwaccel: direct NVDEC takes H.264 and HEVC, not mpeg4)",
		notDirect([]*decode.Info{{NVDEC: true, Direct: true}, {NVDEC: true, Codec: "mpeg4"}}))
	require.Equal(t, " (2 of 2 sessions decoded on the CPU: NVDEC could not take mpeg4)", notDirect(info))

	_, _, _, err = decodeRate(context.Background(), 1, ceilingSettle+time.Second, cpuOptions("/no/such/clip.mp4"))
	require.Error(t, err, "a source that fails fails the ceiling")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, _, err = decodeRate(ctx, 1, time.Second, cpuOptions(clip))
	require.ErrorIs(t, err, context.Canceled)
}

// A point's measuring window opens only once every stream has decoded a
// frame, however late its decoder was made, and a stream that never
// starts holds it for the limit only.
func TestWaitFirstFrames(t *testing.T) {
	m := pipeline.NewMetrics(prometheus.NewRegistry())
	m.Decoded.WithLabelValues("s0").Inc()
	waited, all := waitFirstFrames(context.Background(), m, 1, time.Minute, nil)
	require.Zero(t, waited, "the one stream had decoded a frame")
	require.True(t, all)

	waited, all = waitFirstFrames(context.Background(), m, 2, 300*time.Millisecond, nil)
	require.False(t, all, "s1 never decodes")
	require.GreaterOrEqual(t, waited, 300*time.Millisecond)

	// A stream that failed will never decode: no waiting out the limit.
	t0 := time.Now()
	waited, all = waitFirstFrames(context.Background(), m, 2, time.Minute, func() bool { return true })
	require.False(t, all)
	// 30 s: half the limit, far above one poll (100 ms) on a busy machine.
	require.Less(t, time.Since(t0), 30*time.Second, "waited %s for a failed stream", waited)

	go func() {
		time.Sleep(200 * time.Millisecond)
		m.Decoded.WithLabelValues("s1").Inc()
	}()
	// A minute: far beyond the 200 ms the goroutine sleeps, on a busy machine.
	waited, all = waitFirstFrames(context.Background(), m, 2, time.Minute, nil)
	require.True(t, all)
	require.GreaterOrEqual(t, waited, 100*time.Millisecond, "it waited for s1")
}

// A point passes only when its decoders keep up with real time too: the
// H200 run of 2026-12-01 (docs/h200-runs/2026-12-01-acceptance) had 224
// streams "pass" with 5,284.8 fps decoded of the 6,720 they send.
func TestPointFails(t *testing.T) {
	ok := SweepPoint{OfferedFPS: 3000, ProcessedFPS: 2990, RealTimeFPS: 3000, P99: 50 * time.Millisecond}
	require.Empty(t, pointFails(ok, 100*time.Millisecond))
	slow := ok
	slow.OfferedFPS, slow.ProcessedFPS, slow.RealTimeFPS = 5284.8, 5270.5, 6720
	why := pointFails(slow, 100*time.Millisecond)
	require.Len(t, why, 1)
	require.Contains(t, why[0], "under 95 % of the 6720.0 fps the streams send in real time")
	late := ok
	late.P99 = 101 * time.Millisecond
	require.Contains(t, pointFails(late, 100*time.Millisecond)[0], "P99 101.0 ms over the 100ms budget")
	lost := ok
	lost.ProcessedFPS = 2000
	require.Contains(t, pointFails(lost, 100*time.Millisecond)[0], "processed 2000.0 fps, under 95 % of the 3000.0 offered")
	unknown := slow
	unknown.RealTimeFPS = 0 // a source whose rate FFmpeg did not know
	require.Empty(t, pointFails(unknown, 100*time.Millisecond))
}
