package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/pipeline"
)

// Ceiling kinds: vigil's own decode-only ceilings (decode.Source, as the
// streams decode), and the ffmpeg CLI's (--ffmpeg, for comparison with
// runs before 2026-12-02).
const (
	KindNVDEC       = "nvdec"        // vigil, decode.nvdec direct, NVDECSessionsPerGPU per GPU
	KindCPU         = "cpu"          // vigil, software, one single-thread decode per core
	KindFFmpegNVDEC = "ffmpeg-nvdec" // the ffmpeg CLI, -hwaccel cuda
	KindFFmpegCPU   = "ffmpeg-cpu"   // the ffmpeg CLI, -threads 1
)

// NVDECSessionsPerGPU is how many direct NVDEC sessions per GPU measure
// the NVDEC decode-only ceiling: on the H200 (7 engines) NVIDIA's decode
// API reached its aggregate rate from 14 sessions upward (issue 16; 0.98
// of it at 7), and vigil's direct path matched it at 14
// (docs/performance.md, "Direct NVDEC: decode-only rate").
const NVDECSessionsPerGPU = 14

// residentFrames is how many distinct frames the engine ceiling cycles
// through: enough for a batch of 32 to hold different frames.
const residentFrames = 32

// decodeRate runs k looping decode.Sources of src, unpaced, each frame
// released as soon as it is emitted (no inference), for about d, and
// returns their aggregate frames and pixels (width × height) per second
// counted from ceilingSettle to the end (session creation and the first
// keyframes are start-up), and whether every source decoded on the path
// asked for (Info.NVDEC and Info.Direct for NVDEC). opts gives source j's
// options. Errors: a source that fails (the first such error); ctx.Err()
// when ctx ends first.
func decodeRate(ctx context.Context, k int, d time.Duration, opts func(j int) decode.Options) (fps, pixels float64, info []*decode.Info, err error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var frames, pix atomic.Int64
	srcs := make([]*decode.Source, k)
	for j := range k {
		if srcs[j], err = decode.New(opts(j)); err != nil {
			return 0, 0, nil, err
		}
	}
	errs := make([]error, k)
	var wg sync.WaitGroup
	for j, s := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Run(ctx, func(f *pipeline.Frame) {
				frames.Add(1)
				pix.Add(int64(f.Image.Width()) * int64(f.Image.Height()))
				f.Image.Release()
			})
			if err != nil && ctx.Err() == nil {
				errs[j] = err
				cancel() // one failed: the rate would not be k sources'
			}
		}()
	}
	var n0, p0 int64
	var t0 time.Time
	select {
	case <-ctx.Done():
	case <-time.After(ceilingSettle):
		n0, p0, t0 = frames.Load(), pix.Load(), time.Now()
	}
	<-ctx.Done()
	n1, p1, t1 := frames.Load(), pix.Load(), time.Now()
	wg.Wait()
	if parent.Err() != nil {
		return 0, 0, nil, parent.Err()
	}
	if err := errors.Join(errs...); err != nil {
		return 0, 0, nil, err
	}
	if t0.IsZero() || n1 == n0 {
		return 0, 0, nil, fmt.Errorf("no steady-state rate: no frames after %s (run longer than %s)", ceilingSettle, d)
	}
	sec := t1.Sub(t0).Seconds()
	for _, s := range srcs {
		info = append(info, s.Info())
	}
	return float64(n1-n0) / sec, float64(p1-p0) / sec, info, nil
}

// nvdecOptions are the options of direct NVDEC ceiling source j: GPU
// devs[j % len(devs)], decode.nvdec direct, the config's surfaces.
func nvdecOptions(c *config.Config, src string, devs []int) func(j int) decode.Options {
	return func(j int) decode.Options {
		return decode.Options{URL: src, StreamID: "nvdec-" + strconv.Itoa(j), Loop: true, HWAccel: decode.HWCUDA,
			HWDevice: strconv.Itoa(devs[j%len(devs)]), NVDEC: decode.NVDECDirect, HWSurfaces: c.Decode.HWSurfaces,
			NVDECPoll: c.Decode.NVDECPoll.Duration}
	}
}

// cpuOptions are the options of software ceiling source j: one decoder
// thread, as CPU-decoded streams run under hybrid decoding.
func cpuOptions(src string) func(j int) decode.Options {
	return func(j int) decode.Options {
		return decode.Options{URL: src, StreamID: "cpu-" + strconv.Itoa(j), Loop: true, HWAccel: decode.HWNone, Threads: 1}
	}
}

// notDirect says, for the NVDEC ceiling's line, when some sessions did not
// decode on direct NVDEC (a codec other than H.264 and HEVC takes
// FFmpeg's hwaccel; NVDEC refusing the stream, the CPU); "" when all did.
func notDirect(info []*decode.Info) string {
	var ff, cpu int
	codec := ""
	for _, i := range info {
		switch {
		case i == nil:
		case !i.NVDEC:
			cpu++
			codec = i.Codec
		case !i.Direct:
			ff++
			codec = i.Codec
		}
	}
	switch {
	case cpu > 0:
		return fmt.Sprintf(" (%d of %d sessions decoded on the CPU: NVDEC could not take %s)", cpu, len(info), codec)
	case ff > 0:
		return fmt.Sprintf(" (%d of %d sessions through FFmpeg's hwaccel: direct NVDEC takes H.264 and HEVC, not %s)", ff, len(info), codec)
	}
	return ""
}

// measureVigilCeilings measures vigil's own decode-only ceilings into r
// and prints them: direct NVDEC with NVDECSessionsPerGPU sessions per GPU
// of devs, then software decoding with one single-thread decode per core,
// then both at once. Without a usable GPU the NVDEC ceiling is one n/a
// line and the software one still runs. It ends with the config lines for
// hybrid placement (decode.nvdec_pixel_rate, decode.cpu_pixel_rate).
// Errors: ctx.Err() when interrupted.
func measureVigilCeilings(ctx context.Context, c *config.Config, o StreamsOptions, devs []int, r *StreamsResult, out io.Writer) error {
	kn, kc := NVDECSessionsPerGPU*len(devs), runtime.NumCPU()
	var nv, cpu Ceiling
	nv = Ceiling{Kind: KindNVDEC, Parallel: kn}
	if err := cuda.Init(); err != nil {
		nv.Err = fmt.Errorf("no usable GPU here (%w); the CPU ceiling still runs", err)
		fmt.Fprintf(out, "  decode-only NVDEC direct x%-3d n/a: %v\n", kn, nv.Err)
	} else {
		var info []*decode.Info
		nv.FPS, nv.PixelRate, info, nv.Err = decodeRate(ctx, kn, o.CeilingFor, nvdecOptions(c, o.Source, devs))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if nv.Err != nil {
			fmt.Fprintf(out, "  decode-only NVDEC direct x%-3d n/a: %v\n", kn, nv.Err)
		} else {
			fmt.Fprintf(out, "  decode-only NVDEC direct x%-3d %9.1f fps, %.3g pixels/s%s\n", kn, nv.FPS, nv.PixelRate, notDirect(info))
		}
	}
	cpu = Ceiling{Kind: KindCPU, Parallel: kc}
	cpu.FPS, cpu.PixelRate, _, cpu.Err = decodeRate(ctx, kc, o.CeilingFor, cpuOptions(o.Source))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cpu.Err != nil {
		fmt.Fprintf(out, "  decode-only CPU x%-3d          n/a: %v\n", kc, cpu.Err)
	} else {
		fmt.Fprintf(out, "  decode-only CPU x%-3d          %9.1f fps, %.3g pixels/s (one single-thread decode per core)\n", kc, cpu.FPS, cpu.PixelRate)
	}
	r.Ceilings = append(r.Ceilings, nv, cpu)
	r.Combined = nv.FPS + cpu.FPS
	if nv.Err != nil {
		fmt.Fprintf(out, "  decode ceiling               %9.1f fps (the CPU's alone: no NVDEC ceiling)\n", r.Combined)
	} else {
		fmt.Fprintf(out, "  decode ceiling               %9.1f fps (NVDEC %.1f + CPU %.1f, measured apart)\n", r.Combined, nv.FPS, cpu.FPS)
	}
	// Both at once: NVDEC sessions take CPU too (demuxing, parsing,
	// submission), so the two sides together may give less than their
	// sum; hybrid decoding runs them together.
	nvAt, cpuAt := nv, cpu
	if nv.Err == nil && cpu.Err == nil {
		var wg sync.WaitGroup
		var nvErr error
		var nvT, nvPix float64
		wg.Add(1)
		go func() {
			defer wg.Done()
			nvT, nvPix, _, nvErr = decodeRate(ctx, kn, o.CeilingFor, nvdecOptions(c, o.Source, devs))
		}()
		cT, cPix, _, cErr := decodeRate(ctx, kc, o.CeilingFor, cpuOptions(o.Source))
		wg.Wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := errors.Join(nvErr, cErr); err != nil {
			fmt.Fprintf(out, "  both at once                 n/a: %v\n", err)
		} else {
			r.Together = nvT + cT
			nvAt.FPS, nvAt.PixelRate, cpuAt.FPS, cpuAt.PixelRate = nvT, nvPix, cT, cPix
			fmt.Fprintf(out, "  both at once                 %9.1f fps (NVDEC x%d %.1f + CPU x%d %.1f, run together)\n", r.Together, kn, nvT, kc, cT)
		}
	}
	// The capacities hybrid placement weighs streams against, in the form
	// the config takes: one GPU's NVDEC, all the cores; measured together
	// when both ran together, since hybrid decoding runs them so.
	how := "measured apart"
	if r.Together > 0 {
		how = "measured together"
	}
	if nvAt.Err == nil {
		r.NVDECPixelRate = nvAt.PixelRate / float64(len(devs))
	}
	if cpuAt.Err == nil {
		r.CPUPixelRate = cpuAt.PixelRate
	}
	fmt.Fprintf(out, "  hybrid placement capacities, %s, decode only (paste under decode: in the config; docs/gpu.md):\n", how)
	if r.NVDECPixelRate > 0 {
		fmt.Fprintf(out, "    nvdec_pixel_rate: %.0f   # one GPU's NVDEC, direct\n", r.NVDECPixelRate)
	} else {
		fmt.Fprintf(out, "    # nvdec_pixel_rate: not measured (no NVDEC ceiling)\n")
	}
	if r.CPUPixelRate > 0 {
		fmt.Fprintf(out, "    cpu_pixel_rate: %.0f   # all %d cores\n", r.CPUPixelRate, kc)
	}
	return nil
}

// measureEngineCeiling measures the engine ceiling into r and prints it:
// the detector of each device (eng, with its batcher when batching is on)
// alone, on residentFrames frames of src decoded beforehand and held, so
// that no decoding runs: on the GPU engine the frames are NVDEC's, in
// device memory (device-resident, as direct NVDEC hands them over), else
// software-decoded host frames. Enough callers run at once to fill every
// batch the batcher may have in flight; each frame's deadline is far off
// so that none is refused late. Images per second are counted from
// ceilingSettle to the end of o.CeilingFor, all devices together.
// Errors: ctx.Err() when interrupted; others are printed as n/a.
func measureEngineCeiling(ctx context.Context, c *config.Config, o StreamsOptions, devs []int, engs []pipeline.Engine, batchers []*pipeline.Batcher, r *StreamsResult, out io.Writer) error {
	maxB := 1
	for _, b := range c.Infer.BatchSizes {
		maxB = max(maxB, b)
	}
	callers := 2 // without a batcher the engine serialises its calls: two keep it busy
	if batchers[0] != nil {
		callers = maxB * (max(c.Infer.Slots, 1) + 1)
	}
	var done atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var held []pipeline.Image
	defer func() {
		for _, im := range held {
			im.Release()
		}
	}()
	// Every device's frames first, so that no caller runs while a later
	// device's frames fail.
	where := ""
	perDev := make([][]pipeline.Image, len(devs))
	for k, dev := range devs {
		// Any engine but the CPU one runs on the GPU (the GPU engine, or
		// whatever wraps it).
		_, onCPU := engs[k].(*infer.Engine)
		onGPU := !onCPU
		frames, resident, err := heldFrames(ctx, c, o.Source, dev, onGPU)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(out, "  engine ceiling               n/a: %v\n", err)
			return nil
		}
		held = append(held, frames...)
		perDev[k] = frames
		where = "host frames, CPU engine"
		if onGPU {
			where = "host frames uploaded (NVDEC could not decode the clip)"
			if resident {
				where = "device-resident NVDEC frames"
			}
		}
	}
	ctx2, cancel := context.WithTimeout(ctx, o.CeilingFor)
	defer cancel()
	var wg sync.WaitGroup
	for k, frames := range perDev {
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var st pipeline.StageTimes
				var dets []pipeline.Detection
				var err error
				for i := g; ctx2.Err() == nil; i += callers {
					img := frames[i%len(frames)]
					if batchers[k] != nil {
						dets, err = batchers[k].Do(ctx2, time.Now().Add(time.Minute), img, &st, dets[:0])
					} else {
						dets, err = engs[k].Detect(img, &st, dets[:0])
					}
					if err != nil {
						if ctx2.Err() == nil {
							mu.Lock()
							firstErr = cmp.Or(firstErr, err)
							mu.Unlock()
							cancel()
						}
						return
					}
					done.Add(1)
				}
			}()
		}
	}
	var n0 int64
	var t0 time.Time
	select {
	case <-ctx2.Done():
	case <-time.After(ceilingSettle):
		n0, t0 = done.Load(), time.Now()
	}
	<-ctx2.Done()
	n1, t1 := done.Load(), time.Now()
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if firstErr != nil || t0.IsZero() || n1 == n0 {
		why := "no frames after the start-up"
		if firstErr != nil {
			why = firstErr.Error()
		}
		fmt.Fprintf(out, "  engine ceiling               n/a: %s\n", why)
		return nil
	}
	r.EngineFPS = float64(n1-n0) / t1.Sub(t0).Seconds()
	batching := "no batching"
	if batchers[0] != nil {
		batching = fmt.Sprintf("through the batcher, %d callers per device", callers)
	}
	fmt.Fprintf(out, "  engine ceiling               %9.1f fps (%s alone on %d held frames, %s, %s)\n",
		r.EngineFPS, o.Model, residentFrames, where, batching)
	return nil
}

// heldFrames decodes residentFrames frames of src, spread over its first
// seconds, and keeps them: with onGPU on GPU dev with direct NVDEC, in
// device memory (resident true; the NVDEC pool holds them past the
// source's end), falling back to software decoding when NVDEC cannot;
// else in host memory. The caller releases them.
func heldFrames(ctx context.Context, c *config.Config, src string, dev int, onGPU bool) (frames []pipeline.Image, resident bool, err error) {
	grab := func(o decode.Options) ([]pipeline.Image, *decode.Info, error) {
		s, err := decode.New(o)
		if err != nil {
			return nil, nil, err
		}
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var imgs []pipeline.Image
		err = s.Run(gctx, func(f *pipeline.Frame) {
			if len(imgs) < residentFrames && f.Seq%3 == 0 {
				imgs = append(imgs, f.Image)
				if len(imgs) == residentFrames {
					cancel()
				}
				return
			}
			f.Image.Release()
		})
		if len(imgs) < residentFrames {
			for _, im := range imgs {
				im.Release()
			}
			return nil, nil, fmt.Errorf("decoding %s for the engine ceiling: got %d of %d frames: %v", src, len(imgs), residentFrames, err)
		}
		return imgs, s.Info(), nil
	}
	if onGPU {
		o := nvdecOptions(c, src, []int{dev})(0)
		o.HWSurfaces = residentFrames + 2 // all held, and the decoder still has room
		imgs, info, err := grab(o)
		if err == nil && info != nil && info.NVDEC {
			return imgs, true, nil
		}
		for _, im := range imgs {
			im.Release()
		}
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
	}
	imgs, _, err := grab(decode.Options{URL: src, StreamID: "engine-ceiling", Loop: true})
	return imgs, false, err
}
