//go:build gpu

package decode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

// TestNVDECStart measures what `vigil bench --streams` and a `vigil run`
// with many cameras go through at their start, without the detector: N
// looping copies of $VIGIL_H264 paced in real time (Options.Realtime, as
// the bench's streams are), started at once, for each mode:N of
// $VIGIL_NVDEC_START (e.g. "direct:96 ffmpeg:96"; skipped without it),
// $VIGIL_NVDEC_START_SECONDS (default 10) from the start. Per run it
// prints one RESULT line: when the sources emitted their first frame
// (median, 90th percentile, last), the most frames one source emitted in
// any second from its first frame on (real time is the clip's rate: many
// more is a catch-up burst), the longest gap between two frames of one
// source once it had started (a session stalled by another's start), the
// frames per second of the last 4 s against real time, and CPU time per
// frame and NVML decoder utilisation over those 4 s; then the same frames
// per second and CPU per frame from 1 s after the last source's first
// frame to the end (settled_*: the paced steady state, with no decoder
// being made; -1 when that leaves less than 2 s). Readings, not pass/fail
// criteria; a source that fails or emits nothing fails the test.
func TestNVDECStart(t *testing.T) {
	clip, spec := os.Getenv("VIGIL_H264"), os.Getenv("VIGIL_NVDEC_START")
	if clip == "" || spec == "" {
		t.Skip("set VIGIL_H264 and VIGIL_NVDEC_START")
	}
	secs := 10.0
	if v, err := strconv.ParseFloat(os.Getenv("VIGIL_NVDEC_START_SECONDS"), 64); err == nil && v > 5 {
		secs = v
	}
	dev := nvmlDevice(t)
	for _, run := range strings.Fields(spec) {
		mode, ns, ok := strings.Cut(run, ":")
		require.True(t, ok, "VIGIL_NVDEC_START item %q: want mode:N,N,...", run)
		m, err := ParseNVDECMode(mode)
		require.NoError(t, err)
		for _, s := range strings.Split(ns, ",") {
			n, err := strconv.Atoi(s)
			require.NoError(t, err)
			measureStart(t, clip, m, n, secs, dev)
		}
	}
}

func measureStart(t *testing.T, clip string, mode NVDECMode, n int, secs float64, dev nvml.Device) {
	label := fmt.Sprintf("start-%s-n%d%s", mode, n, os.Getenv("VIGIL_NVDEC_RATE_LABEL"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each source's emit times, appended on its own goroutine and read
	// after wg.Wait.
	times := make([][]time.Time, n)
	errs := make([]error, n)
	var fps float64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		src, err := New(Options{URL: clip, Loop: true, Realtime: true, HWAccel: HWCUDA, NVDEC: mode, StreamID: strconv.Itoa(i), NVDECPoll: pollFromEnv()})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := src.Run(ctx, func(f *pipeline.Frame) {
				times[i] = append(times[i], time.Now())
				f.Image.Release()
			})
			if !errors.Is(err, context.Canceled) {
				errs[i] = err
			}
			if i == 0 && src.Info() != nil {
				fps = src.Info().FPS
			}
		}()
	}
	// The process's CPU time every 250 ms, for the settled window.
	type cpuAt struct {
		t   time.Time
		cpu float64
	}
	var cpuLog []cpuAt // read after <-logged
	logStop, logged := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(logged)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			cpuLog = append(cpuLog, cpuAt{time.Now(), cpuSeconds()})
			select {
			case <-logStop:
				return
			case <-tick.C:
			}
		}
	}()
	// The steady state: the last 4 s.
	steady := time.Duration((secs - 4) * float64(time.Second))
	time.Sleep(time.Until(start.Add(steady)))
	cpu1, t1 := cpuSeconds(), time.Now()
	var util []float64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if dev == nil {
					continue
				}
				if u, _, ret := dev.GetDecoderUtilization(); ret == nvml.SUCCESS {
					util = append(util, float64(u))
				}
			}
		}
	}()
	time.Sleep(time.Until(start.Add(time.Duration(secs * float64(time.Second)))))
	cpu2, t2 := cpuSeconds(), time.Now()
	close(stop)
	<-sampled
	close(logStop)
	<-logged
	cancel()
	wg.Wait()

	var firsts []float64
	maxSecond, maxGap := 0, time.Duration(0)
	var steadyFrames int
	for i, ts := range times {
		require.NoError(t, errs[i], "%s: source %d", label, i)
		require.NotEmpty(t, ts, "%s: source %d emitted nothing", label, i)
		firsts = append(firsts, ts[0].Sub(start).Seconds())
		lo := 0
		for j, x := range ts {
			for x.Sub(ts[lo]) >= time.Second {
				lo++
			}
			maxSecond = max(maxSecond, j-lo+1)
			if j > 0 {
				maxGap = max(maxGap, x.Sub(ts[j-1]))
			}
			if !x.Before(t1) && x.Before(t2) {
				steadyFrames++
			}
		}
	}
	// The settled window: from the first CPU sample 1 s after the last
	// source's first frame to the end.
	settledFPS, settledUS, settledWin := -1.0, -1.0, 0.0
	var lastFirst time.Time
	for _, ts := range times {
		if len(ts) > 0 && ts[0].After(lastFirst) {
			lastFirst = ts[0]
		}
	}
	for _, c := range cpuLog {
		if c.t.Before(lastFirst.Add(time.Second)) {
			continue
		}
		if settledWin = t2.Sub(c.t).Seconds(); settledWin >= 2 {
			frames := 0
			for _, ts := range times {
				for _, x := range ts {
					if !x.Before(c.t) && x.Before(t2) {
						frames++
					}
				}
			}
			settledFPS = float64(frames) / settledWin
			settledUS = (cpu2 - c.cpu) / float64(max(frames, 1)) * 1e6
		}
		break
	}
	slices.Sort(firsts)
	q := func(p float64) float64 { return firsts[min(len(firsts)-1, int(p*float64(len(firsts))))] }
	win := t2.Sub(t1).Seconds()
	meanUtil := -1.0
	if len(util) > 0 {
		s := 0.0
		for _, u := range util {
			s += u
		}
		meanUtil = s / float64(len(util))
	}
	line := fmt.Sprintf("RESULT label=%s mode=%s sessions=%d clip_fps=%.2f first_frame_s_p50=%.2f first_frame_s_p90=%.2f first_frame_s_max=%.2f "+
		"max_frames_in_1s=%d max_gap_ms=%.0f steady_fps=%.1f realtime_fps=%.1f steady_cores=%.2f cpu_us_per_frame=%.1f dec_util_mean=%.1f "+
		"settled_window_s=%.2f settled_fps=%.1f settled_cpu_us_per_frame=%.1f",
		label, mode, n, fps, q(0.5), q(0.9), firsts[len(firsts)-1], maxSecond, maxGap.Seconds()*1e3,
		float64(steadyFrames)/win, fps*float64(n), (cpu2-cpu1)/win, (cpu2-cpu1)/float64(max(steadyFrames, 1))*1e6, meanUtil,
		settledWin, settledFPS, settledUS)
	fmt.Println(line)
	t.Log(line)
}
