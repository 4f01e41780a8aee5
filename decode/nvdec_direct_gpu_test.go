//go:build gpu

package decode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/asticode/go-astiav"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// The direct NVDEC tests read their clips from $VIGIL_NVDEC_CLIPS (the
// device machine has no ffmpeg CLI): TestMakeNVDECClips makes them there,
// on a machine with ffmpeg, from these recipes (ffmpeg arguments before
// the output file). testsrc2 has fine detail and motion everywhere; every
// H.264 clip has B-frames.
var nvdecClips = map[string][]string{
	// 640×360 H.264 High, 3 B-frames, two GOPs.
	"h264.mp4": {"-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-frames:v", "60", "-pix_fmt", "yuv420p",
		"-c:v", "libx264", "-bf", "3", "-g", "30", "-b:v", "1M"},
	// 640×360 HEVC Main, B-frames, two GOPs.
	"hevc.mp4": {"-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-frames:v", "60", "-pix_fmt", "yuv420p",
		"-c:v", "libx265", "-x265-params", "keyint=30:bframes=3:log-level=error", "-b:v", "1M", "-tag:v", "hvc1"},
	// The same in HEVC Main 10.
	"hevc10.mp4": {"-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-frames:v", "60", "-pix_fmt", "yuv420p10le",
		"-c:v", "libx265", "-x265-params", "keyint=30:bframes=3:log-level=error", "-b:v", "1M", "-tag:v", "hvc1"},
}

// nvdecResChange is the resolution-change clip: H.264 segments of
// 640×360, 1280×720, 320×180 and 640×360 (20 frames each), concatenated
// into one MPEG-TS, as a camera whose resolution is changed mid-stream
// sends it.
var nvdecResChange = [][2]int{{640, 360}, {1280, 720}, {320, 180}, {640, 360}}

// TestMakeNVDECClips writes the clips into $VIGIL_NVDEC_MAKE (skipped
// without it) with the ffmpeg CLI.
func TestMakeNVDECClips(t *testing.T) {
	dir := os.Getenv("VIGIL_NVDEC_MAKE")
	if dir == "" {
		t.Skip("set VIGIL_NVDEC_MAKE to a folder to make the clips in")
	}
	ffmpeg := func(out string, args ...string) {
		args = append(append([]string{"-nostdin", "-hide_banner", "-loglevel", "error", "-y"}, args...), out)
		b, err := exec.Command("ffmpeg", args...).CombinedOutput()
		require.NoError(t, err, "ffmpeg %s: %s", strings.Join(args, " "), b)
	}
	for name, args := range nvdecClips {
		ffmpeg(filepath.Join(dir, name), args...)
	}
	var all []byte
	for i, sz := range nvdecResChange {
		seg := filepath.Join(t.TempDir(), fmt.Sprintf("seg%d.ts", i))
		ffmpeg(seg, "-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=30", sz[0], sz[1]), "-frames:v", "20",
			"-pix_fmt", "yuv420p", "-c:v", "libx264", "-bf", "2", "-g", "20", "-b:v", "1M")
		b, err := os.ReadFile(seg)
		require.NoError(t, err)
		all = append(all, b...)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "reschange.ts"), all, 0o644))
	// Damaged bitstreams (TestNVDECDirectDamaged): 50 frames of 640×360
	// H.264, one IDR, in a raw Annex B file and in an MP4 (moov first), with
	// 8 bytes inverted at 20 places spread over the second half of the file,
	// as decode's TestCorruptFramesFlagged damages its clip for FFmpeg.
	for _, name := range []string{"damaged.h264", "damaged.mp4"} {
		clean := filepath.Join(t.TempDir(), "clean"+filepath.Ext(name))
		ffmpeg(clean, "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25", "-frames:v", strconv.Itoa(damagedFrames),
			"-c:v", "libx264", "-bf", "0", "-g", "50", "-pix_fmt", "yuv420p", "-movflags", "+faststart")
		data, err := os.ReadFile(clean)
		require.NoError(t, err)
		testenv.Damage(data, 20, 8)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
}

// damagedFrames is how many coded pictures the damaged clips hold.
const damagedFrames = 50

// TestNVDECDirectDamaged: damaged H.264 (raw Annex B and MP4) through
// direct NVDEC ends at the file's end, not in a crash or a hang; every
// picture lost is counted as a decode error under one of the documented
// reasons (frames plus decode errors are the coded pictures), the first
// frame (before the damage) is clean, and Faults and the metrics agree.
// What NVDEC made of the damage (frames flagged corrupt, errors by
// reason) is logged beside FFmpeg's software decoder on the same file: a
// reading, since the two decoders conceal differently.
func TestNVDECDirectDamaged(t *testing.T) {
	for _, name := range []string{"damaged.h264", "damaged.mp4"} {
		t.Run(name, func(t *testing.T) {
			path := nvdecClip(t, name)
			sw, ssrc := decodeClip(t, Options{URL: path}, 0)
			m := NewMetrics(prometheus.NewRegistry())
			hw, src := decodeClip(t, Options{URL: path, StreamID: "s", HWAccel: HWCUDA, NVDEC: NVDECDirect, Metrics: m}, 0)
			require.True(t, src.Info().Direct)
			f := src.Faults()
			corrupt := 0
			for _, d := range hw {
				require.True(t, d.isDirect)
				if d.corrupt {
					corrupt++
				}
			}
			swCorrupt := 0
			for _, d := range sw {
				if d.corrupt {
					swCorrupt++
				}
			}
			t.Logf("RESULT clip=%s nvdec_frames=%d nvdec_corrupt=%d nvdec_errors=%v software_frames=%d software_corrupt=%d software_errors=%v",
				name, len(hw), corrupt, f.DecodeErrorsByReason, len(sw), swCorrupt, ssrc.Faults().DecodeErrorsByReason)
			require.NotEmpty(t, hw)
			require.False(t, hw[0].corrupt, "the first frame comes before the damage")
			require.Equal(t, uint64(damagedFrames), uint64(len(hw))+f.DecodeErrors, "frames and decode errors account for every coded picture")
			require.Equal(t, uint64(corrupt), f.CorruptFrames)
			var sum uint64
			for r, n := range f.DecodeErrorsByReason {
				require.Contains(t, []DecodeErrorReason{ErrDecoder, ErrBitstream, ErrNVDECRefused, ErrNVDECStatus, ErrNVDECMap}, r)
				require.Equal(t, float64(n), testutil.ToFloat64(m.DecodeErrors.WithLabelValues("s", string(r))), "metric for %s", r)
				sum += n
			}
			require.Equal(t, f.DecodeErrors, sum)
			require.Equal(t, float64(corrupt), testutil.ToFloat64(m.FramesCorrupt.WithLabelValues("s")))
		})
	}
}

func nvdecClip(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("VIGIL_NVDEC_CLIPS")
	if dir == "" {
		t.Skip("set VIGIL_NVDEC_CLIPS to the folder TestMakeNVDECClips made")
	}
	p := filepath.Join(dir, name)
	_, err := os.Stat(p)
	require.NoError(t, err)
	return p
}

// decoded is one emitted frame: its metadata and a hash of its pixels.
type decoded struct {
	pts             float64
	key, corrupt    bool
	disc            bool
	seq             uint64
	w, h            int
	hash            [32]byte
	onGPU, isDirect bool
}

// hashPicture hashes a picture's samples in one layout for every decoder:
// luma rows, then chroma rows with Cb,Cr interleaved (NV12 order), each
// sample one byte (8-bit) or two little-endian bytes holding the value
// (deeper: a P016 sample shifted down by 16-bit depth, a yuv420p10le one
// as it is).
func hashPicture(t *testing.T, p *Picture) [32]byte {
	t.Helper()
	h := sha256.New()
	w, ht := p.Width(), p.Height()
	cw, ch := (w+1)/2, (ht+1)/2
	if f := p.nv; f != nil {
		host := make([]byte, f.pitch*(f.h+ch))
		require.NoError(t, f.pool.ctx.CopyDtoH(host, f.buf.Ptr()))
		row := func(r, n int) []byte { return host[r*f.pitch : r*f.pitch+n] }
		if f.bps == 1 {
			for r := range ht {
				h.Write(row(r, w))
			}
			for r := range ch {
				h.Write(row(ht+r, 2*cw))
			}
		} else {
			shift := func(b []byte) []byte {
				out := make([]byte, len(b))
				for i := 0; i+1 < len(b); i += 2 {
					binary.LittleEndian.PutUint16(out[i:], binary.LittleEndian.Uint16(b[i:])>>6)
				}
				return out
			}
			for r := range ht {
				h.Write(shift(row(r, 2*w)))
			}
			for r := range ch {
				h.Write(shift(row(ht+r, 4*cw)))
			}
		}
		return [32]byte(h.Sum(nil))
	}
	ls := p.f.Linesize()
	bps := 1
	switch p.f.PixelFormat() {
	case astiav.PixelFormatYuv420P, astiav.PixelFormatYuvj420P:
	case astiav.PixelFormatYuv420P10Le:
		bps = 2
	default:
		t.Fatalf("software frame in %s", p.f.PixelFormat())
	}
	y, u, v := planeView(p.f, 0, ls[0]*ht), planeView(p.f, 1, ls[1]*ch), planeView(p.f, 2, ls[2]*ch)
	for r := range ht {
		h.Write(y[r*ls[0] : r*ls[0]+w*bps])
	}
	uv := make([]byte, 2*cw*bps)
	for r := range ch {
		for x := range cw {
			copy(uv[2*x*bps:], u[r*ls[1]+x*bps:r*ls[1]+(x+1)*bps])
			copy(uv[(2*x+1)*bps:], v[r*ls[2]+x*bps:r*ls[2]+(x+1)*bps])
		}
		h.Write(uv)
	}
	return [32]byte(h.Sum(nil))
}

// decodeClip runs a Source over o until it has emitted n frames (or, for
// n = 0, to its end) and returns them.
func decodeClip(t *testing.T, o Options, n int) ([]decoded, *Source) {
	t.Helper()
	src, err := New(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out []decoded
	err = src.Run(ctx, func(f *pipeline.Frame) {
		defer f.Image.Release()
		if n > 0 && len(out) >= n {
			return
		}
		p := f.Image.(*Picture)
		out = append(out, decoded{pts: f.PTS, key: f.Keyframe, corrupt: f.Corrupt, disc: f.Discontinuity, seq: f.Seq,
			w: p.Width(), h: p.Height(), hash: hashPicture(t, p), onGPU: p.OnGPU(), isDirect: p.nv != nil})
		if n > 0 && len(out) == n {
			cancel()
		}
	})
	if n > 0 {
		require.ErrorIs(t, err, context.Canceled)
	} else {
		require.ErrorIs(t, err, io.EOF)
	}
	return out, src
}

// compareFrames requires the direct NVDEC frames to be the software
// frames: same pixels, PTS, flags and sequence numbers.
func compareFrames(t *testing.T, name string, sw, hw []decoded) {
	t.Helper()
	require.Equal(t, len(sw), len(hw), "%s: frame count", name)
	same := 0
	for i := range sw {
		require.True(t, hw[i].isDirect, "%s frame %d was not decoded by direct NVDEC", name, i)
		require.False(t, sw[i].onGPU)
		if sw[i].hash == hw[i].hash {
			same++
		} else if len(sw)-same < 5 || i < 5 {
			t.Errorf("%s frame %d (%dx%d): NVDEC's pixels differ from the software decoder's", name, i, hw[i].w, hw[i].h)
		}
		s, h := sw[i], hw[i]
		s.hash, h.hash, s.onGPU, h.onGPU, s.isDirect, h.isDirect = [32]byte{}, [32]byte{}, false, false, false, false
		require.Equal(t, s, h, "%s frame %d: metadata", name, i)
	}
	t.Logf("%s: %d of %d frames bit-identical to FFmpeg's software decoder", name, same, len(sw))
	require.Equal(t, len(sw), same, "%s: frames that differ", name)
}

// TestNVDECDirectBitExact: NVDEC driven directly decodes every frame of
// looping H.264 and HEVC (8- and 10-bit) clips to the same samples as
// FFmpeg's software decoder, through two passes and ten frames more (the
// loop restart sends the empty discontinuity packet), with the same PTS,
// keyframe, corrupt and discontinuity flags and sequence numbers. With
// VIGIL_H264 set, the 1080p bench clip too.
func TestNVDECDirectBitExact(t *testing.T) {
	clips := []string{"h264.mp4", "hevc.mp4", "hevc10.mp4"}
	// The bench clip's scene in HEVC Main and Main 10 at 720p, when
	// carried (made from cam1080.mp4: docs/h200-runs/2026-12-01-nvdec).
	for _, name := range []string{"cam720-hevc.mp4", "cam720-hevc10.mp4"} {
		if _, err := os.Stat(filepath.Join(os.Getenv("VIGIL_NVDEC_CLIPS"), name)); err == nil {
			clips = append(clips, name)
		}
	}
	for _, name := range clips {
		t.Run(name, func(t *testing.T) { bitExact(t, name, nvdecClip(t, name)) })
	}
	if p := os.Getenv("VIGIL_H264"); p != "" {
		t.Run("cam1080", func(t *testing.T) { bitExact(t, "cam1080", p) })
	}
}

func bitExact(t *testing.T, name, path string) {
	pass, _ := decodeClip(t, Options{URL: path}, 0)
	n := 2*len(pass) + 10
	sw, _ := decodeClip(t, Options{URL: path, Loop: true}, n)
	hw, src := decodeClip(t, Options{URL: path, Loop: true, HWAccel: HWCUDA, NVDEC: NVDECDirect}, n)
	require.True(t, src.Info().Direct)
	compareFrames(t, name, sw, hw)
	f := src.Faults()
	require.Zero(t, f.DecodeErrors)
	require.Zero(t, f.CorruptFrames)
}

// TestNVDECDirectResolutionChange: a stream whose resolution changes three
// times (up past the decoder's size, down, up within it) decodes in one
// open, without a restart, bit-identical to software; the decoder is made
// again or reconfigured for each change (logged).
func TestNVDECDirectResolutionChange(t *testing.T) {
	clip := nvdecClip(t, "reschange.ts")
	sw, _ := decodeClip(t, Options{URL: clip}, 0)
	core, logs := observer.New(zap.InfoLevel)
	hw, src := decodeClip(t, Options{URL: clip, HWAccel: HWCUDA, NVDEC: NVDECDirect, Logger: zap.New(core)}, 0)
	compareFrames(t, "reschange", sw, hw)
	var sizes [][2]int
	for _, f := range hw {
		if sz := [2]int{f.w, f.h}; len(sizes) == 0 || sizes[len(sizes)-1] != sz {
			sizes = append(sizes, sz)
		}
	}
	require.Equal(t, nvdecResChange, sizes)
	require.Equal(t, 1, logs.FilterMessage("opened").Len(), "one open, no restart")
	changes := logs.FilterMessage("NVDEC: the stream's format changed").All()
	require.Len(t, changes, 3)
	last := changes[2].ContextMap()
	t.Logf("decoders made %v, reconfigured %v", last["decoders_made"], last["reconfigured"])
	require.Zero(t, src.Faults().DecodeErrors)
}

// TestNVDECDirectReconnectReusesDecoder: a live source's session outlives
// Run, so that the next Run (the supervisor's reconnect) reuses the
// decoder for the same format, with a new parser, and decodes the same
// frames.
func TestNVDECDirectReconnectReusesDecoder(t *testing.T) {
	clip := nvdecClip(t, "h264.mp4")
	src, err := New(Options{URL: clip, HWAccel: HWCUDA, NVDEC: NVDECDirect})
	require.NoError(t, err)
	src.kind = KindHTTP // a live input: Run keeps the session for the reconnect
	var runs [2][][32]byte
	for i := range runs {
		err := src.Run(context.Background(), func(f *pipeline.Frame) {
			runs[i] = append(runs[i], hashPicture(t, f.Image.(*Picture)))
			f.Image.Release()
		})
		require.ErrorIs(t, err, io.EOF)
		require.NotNil(t, src.nv.s, "the session outlives a live Run")
	}
	st := src.nv.s.dec.Stats()
	require.Equal(t, 1, st.Created, "one decoder for both connections")
	require.GreaterOrEqual(t, st.Reused, 1)
	require.Equal(t, runs[0], runs[1])
	require.Len(t, runs[0], 60)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = src.Run(ctx, func(f *pipeline.Frame) { f.Image.Release() })
	require.Nil(t, src.nv.s, "closed once Run ends with its context")
}

// TestNVDECDecodeRate measures decode-only frames per second of N looping
// copies of $VIGIL_H264, unpaced, each frame released as soon as it is
// emitted, as the probe in ../shared/tools/nvdec-direct measures NVDEC
// alone: for each mode:N of $VIGIL_NVDEC_RATE (e.g. "direct:7,14,28
// ffmpeg:7,14,28"; skipped without it), $VIGIL_NVDEC_RATE_SECONDS (default
// 6) after every source has emitted a frame, the first second not
// counted. It prints one RESULT line per run in the probe's key=value
// form: fps, per-session min and max, NVML decoder utilisation (sampled
// every 200 ms) and video clock, the process's CPU time per frame, the
// host's busy share (/proc/stat), and the decode errors and corrupt frames
// the sources counted. Rates are measurements to read, not pass/fail
// criteria; a source that fails or emits nothing fails the test.
func TestNVDECDecodeRate(t *testing.T) {
	clip, spec := os.Getenv("VIGIL_H264"), os.Getenv("VIGIL_NVDEC_RATE")
	if clip == "" || spec == "" {
		t.Skip("set VIGIL_H264 and VIGIL_NVDEC_RATE")
	}
	secs := 6.0
	if v, err := strconv.ParseFloat(os.Getenv("VIGIL_NVDEC_RATE_SECONDS"), 64); err == nil && v > 1 {
		secs = v
	}
	poll := pollFromEnv()
	dev := nvmlDevice(t)
	for _, run := range strings.Fields(spec) {
		mode, ns, ok := strings.Cut(run, ":")
		require.True(t, ok, "VIGIL_NVDEC_RATE item %q: want mode:N,N,...", run)
		m, err := ParseNVDECMode(mode)
		require.NoError(t, err)
		for _, s := range strings.Split(ns, ",") {
			n, err := strconv.Atoi(s)
			require.NoError(t, err)
			measureRate(t, clip, m, n, secs, poll, dev)
		}
	}
}

// pollFromEnv is Options.NVDECPoll for the measuring tests:
// $VIGIL_NVDEC_POLL_US µs, 0 when unset.
func pollFromEnv() time.Duration {
	v, _ := strconv.Atoi(os.Getenv("VIGIL_NVDEC_POLL_US"))
	return time.Duration(v) * time.Microsecond
}

// profileWindow starts a CPU profile of the measured window into
// $VIGIL_NVDEC_RATE_PROFILE/<label>.pprof (every run, when set: labelled
// apart by $VIGIL_NVDEC_RATE_LABEL, since profiling costs a little), and
// returns its stop.
func profileWindow(t *testing.T, label string) func() {
	dir := os.Getenv("VIGIL_NVDEC_RATE_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, label+".pprof"))
	require.NoError(t, err)
	require.NoError(t, pprof.StartCPUProfile(f))
	return func() {
		pprof.StopCPUProfile()
		require.NoError(t, f.Close())
	}
}

// nvmlDevice returns GPU 0's NVML handle, or nil when NVML is not there
// (the figures are then -1).
func nvmlDevice(t *testing.T) nvml.Device {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		t.Logf("no NVML: %s", nvml.ErrorString(ret))
		return nil
	}
	t.Cleanup(func() { _ = nvml.Shutdown() })
	d, ret := nvml.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Logf("no NVML device 0: %s", nvml.ErrorString(ret))
		return nil
	}
	return d
}

// cpuSeconds is the process's user + system time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func measureRate(t *testing.T, clip string, mode NVDECMode, n int, secs float64, poll time.Duration, dev nvml.Device) {
	label := fmt.Sprintf("vigil-%s-n%d%s", mode, n, os.Getenv("VIGIL_NVDEC_RATE_LABEL"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := make([]atomic.Int64, n)
	errs := make([]error, n) // read after wg.Wait
	failed := make([]atomic.Bool, n)
	srcs := make([]*Source, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		src, err := New(Options{URL: clip, Loop: true, HWAccel: HWCUDA, NVDEC: mode, StreamID: strconv.Itoa(i), NVDECPoll: poll})
		require.NoError(t, err)
		srcs[i] = src
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := src.Run(ctx, func(f *pipeline.Frame) {
				counts[i].Add(1)
				f.Image.Release()
			})
			if !errors.Is(err, context.Canceled) {
				errs[i] = err
				failed[i].Store(true)
			}
		}()
	}
	ready := func() bool {
		for i := range counts {
			if counts[i].Load() == 0 && !failed[i].Load() {
				return false
			}
		}
		return true
	}
	for !ready() && time.Since(start) < time.Minute {
		time.Sleep(2 * time.Millisecond)
	}
	startup := time.Since(start)
	time.Sleep(time.Second) // the first second is not counted
	snap := func() []int64 {
		c := make([]int64, n)
		for i := range counts {
			c[i] = counts[i].Load()
		}
		return c
	}
	stopProfile := profileWindow(t, label)
	c1, cpu1, t1 := snap(), cpuSeconds(), time.Now()
	busy1, tot1 := testenv.HostJiffies()
	var util, clk []float64
	stop := make(chan struct{})
	sampled := make(chan struct{})
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
				if mhz, ret := dev.GetClockInfo(nvml.CLOCK_VIDEO); ret == nvml.SUCCESS {
					clk = append(clk, float64(mhz))
				}
			}
		}
	}()
	time.Sleep(time.Duration((secs - 1) * float64(time.Second)))
	c2, cpu2, t2 := snap(), cpuSeconds(), time.Now()
	busy2, tot2 := testenv.HostJiffies()
	stopProfile()
	close(stop)
	<-sampled
	// The sessions' counts of pictures slept for before mapping (read while
	// they run: a torn read only blurs a figure that is printed, not judged).
	var polled, polls uint64
	for _, s := range srcs {
		if s.nv != nil && s.nv.s != nil && s.nv.s.dec != nil {
			st := s.nv.s.dec.Stats()
			polled, polls = polled+st.Polled, polls+st.Polls
		}
	}
	cancel()
	wg.Wait()
	win := t2.Sub(t1).Seconds()
	var frames int64
	mn, mx := 1e18, 0.0
	for i := range c1 {
		d := c2[i] - c1[i]
		frames += d
		r := float64(d) / win
		mn, mx = min(mn, r), max(mx, r)
	}
	mean := func(v []float64) float64 {
		if len(v) == 0 {
			return -1
		}
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	busy := -1.0
	if tot2 > tot1 {
		busy = 100 * float64(busy2-busy1) / float64(tot2-tot1)
	}
	var decErrs, corrupt uint64
	for _, s := range srcs {
		f := s.Faults()
		decErrs += f.DecodeErrors
		corrupt += f.CorruptFrames
	}
	fps := float64(frames) / win
	umax := -1.0
	if len(util) > 0 {
		umax = slices.Max(util)
	}
	line := fmt.Sprintf("RESULT label=%s mode=%s sessions=%d fps=%.1f per_session=%.1f min_session=%.1f max_session=%.1f window_s=%.2f "+
		"dec_util_mean=%.1f dec_util_max=%.0f nvml_n=%d video_mhz=%.0f proc_cores=%.2f cpu_us_per_frame=%.1f host_busy_pct=%.1f "+
		"startup_s=%.2f decode_errors=%d corrupt_frames=%d poll_us=%d polled=%d polls=%d",
		label, mode, n, fps, fps/float64(n), mn, mx, win, mean(util), umax, len(util), mean(clk),
		(cpu2-cpu1)/win, (cpu2-cpu1)/float64(max(frames, 1))*1e6, busy, startup.Seconds(), decErrs, corrupt, poll.Microseconds(), polled, polls)
	fmt.Println(line)
	t.Log(line)
	for i, err := range errs {
		require.NoError(t, err, "%s: source %d", label, i)
		require.Positive(t, c2[i]-c1[i], "%s: source %d emitted nothing in the window", label, i)
	}
}

// copied runs a Source over o and returns CopyPicture of its first n
// frames (taken before each frame is released, as pipeline.Tap does).
func copied(t *testing.T, o Options, n int) []*pipeline.Picture {
	t.Helper()
	src, err := New(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out []*pipeline.Picture
	var copyErr error
	err = src.Run(ctx, func(f *pipeline.Frame) {
		defer f.Image.Release()
		if len(out) >= n || copyErr != nil {
			return
		}
		p, err := f.Image.(*Picture).CopyPicture()
		if err != nil {
			copyErr = err
			cancel()
			return
		}
		if out = append(out, p); len(out) == n {
			cancel()
		}
	})
	require.NoError(t, copyErr)
	require.ErrorIs(t, err, context.Canceled)
	return out
}

// TestNVDECPictureCopy: a frame of direct NVDEC, and one of FFmpeg's NVDEC
// hwaccel, copied out of device memory for the live pictures
// (CopyPicture) has the samples of the software decoder's frame copied the
// same way, since the decodes are bit-identical (TestNVDECDirectBitExact;
// NVDEC is the same hardware either way): any difference is the copy's
// (pitch, padding, chroma de-interleaving). A 10-bit HEVC frame copies to
// 8 bits a sample at the frame's size.
func TestNVDECPictureCopy(t *testing.T) {
	for _, name := range []string{"h264.mp4", "hevc.mp4"} {
		t.Run(name, func(t *testing.T) {
			path := nvdecClip(t, name)
			sw := copied(t, Options{URL: path}, 10)
			for _, mode := range []NVDECMode{NVDECDirect, NVDECFFmpeg} {
				hw := copied(t, Options{URL: path, HWAccel: HWCUDA, NVDEC: mode}, 10)
				for i := range sw {
					s, h := sw[i].Image, hw[i].Image
					require.Equal(t, s.Rect, h.Rect, "%s: frame %d", mode, i)
					require.Equal(t, sw[i].FullRange, hw[i].FullRange, "%s: frame %d", mode, i)
					require.True(t, bytes.Equal(s.Y, h.Y) && bytes.Equal(s.Cb, h.Cb) && bytes.Equal(s.Cr, h.Cr), "%s: frame %d: samples differ", mode, i)
				}
			}
		})
	}
	t.Run("hevc10.mp4", func(t *testing.T) {
		// Direct NVDEC decodes into P016, FFmpeg's hwaccel into P010: both
		// hold a 10-bit value shifted up 6, and the copies keep high bytes.
		for _, mode := range []NVDECMode{NVDECDirect, NVDECFFmpeg} {
			hw := copied(t, Options{URL: nvdecClip(t, "hevc10.mp4"), HWAccel: HWCUDA, NVDEC: mode}, 3)
			require.Equal(t, image.Rect(0, 0, 640, 360), hw[0].Image.Rect, "%s", mode)
			// testsrc2's gradients give many luma values; the low bytes
			// hold at most 4 (0, 64, 128, 192), zeros one: the high bytes
			// were taken.
			seen := map[byte]bool{}
			for _, v := range hw[0].Image.Y {
				seen[v] = true
			}
			require.Greater(t, len(seen), 32, "%s: distinct luma values", mode)
		}
	})
}
