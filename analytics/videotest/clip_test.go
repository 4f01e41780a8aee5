package videotest

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// find returns the file named by the environment variable env, else
// ../shared/testdata/<rel>, else make setup's copy in cache, or skips the
// test naming where it looked.
func find(t testing.TB, env, rel, cache string) string {
	t.Helper()
	paths := []string{filepath.Join(testenv.RepoRoot(), "..", "shared", "testdata", rel), filepath.Join(cache, filepath.Base(rel))}
	if p := os.Getenv(env); p != "" {
		paths = append([]string{p}, paths...)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("%s is absent (looked at $%s and %v): make setup installs the videos, and YOLOX-Nano when github.com "+
		"can be reached", filepath.Base(rel), env, paths)
	return ""
}

// The models and clips of these tests. The figures written in the tests
// were measured with ../shared/testdata/models/yolox_nano.onnx (see its
// README, section 2) and vtest.avi (sha256 45cddc94...).
func yoloxModel(t testing.TB) string {
	return find(t, "VIGIL_YOLOX", "models/yolox_nano.onnx", assets.ModelsDir())
}
func vtestClip(t testing.TB) string {
	return find(t, "VIGIL_VTEST", "video/vtest.avi", assets.MediaDir())
}
func blazefaceModel(t testing.TB) string {
	return testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
}
func megamindClip(t testing.TB) string { return testenv.Media(t, "Megamind.avi") }

// frame is one decoded frame: its detections, tracked (TrackID and Zones
// set by the stage), and what each step cost.
type frame struct {
	Seq  uint64
	PTS  float64
	W, H int
	Dets []pipeline.Detection
	// Infer is the engine's time for the frame: preprocessing, the ONNX
	// Runtime run and postprocessing (wall clock, the stage times the
	// pipeline reports), and InferCPU the process's CPU time meanwhile
	// (ONNX Runtime runs on threads of its own).
	Infer, InferCPU time.Duration
	// Stage is the CPU time of analytics.Stage.Observe on the frame, on
	// the calling thread (it does not start others).
	Stage time.Duration
}

// run is one pass of a clip through decode, the engine (CPU) and an
// analytics stage: every frame, and every event (Close's included).
type run struct {
	frames []frame
	events []analytics.Event
}

// runClip decodes every frame of video, runs model on it with ONNX
// Runtime's CPU provider and the adapter's default thresholds (what vigil
// run uses), and feeds each frame's detections to an analytics stage with
// cfg, as the stream worker will. The frame's wall time is PTS after a
// fixed origin, so that events are reproducible.
func runClip(t testing.TB, model, adapter, video string, cfg analytics.Config) run {
	t.Helper()
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	defer sc.Close()
	e, err := infer.Open(infer.Options{Path: model, Spec: infer.Spec{Format: adapter}, Resizer: sc})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	st, err := analytics.New("clip", "e0", cfg)
	require.NoError(t, err)
	src, err := decode.New(decode.Options{URL: video})
	require.NoError(t, err)
	origin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var r run
	var ferr error
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		defer f.Image.Release()
		if ferr != nil {
			return
		}
		// One OS thread for the whole frame, so that the thread's CPU
		// clock measures Observe alone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var times pipeline.StageTimes
		p0 := cpu(unix.CLOCK_PROCESS_CPUTIME_ID)
		dets, err := e.Detect(f.Image, &times, nil)
		p1 := cpu(unix.CLOCK_PROCESS_CPUTIME_ID)
		if err != nil {
			ferr = err
			return
		}
		dets = append([]pipeline.Detection(nil), dets...)
		t0 := cpu(unix.CLOCK_THREAD_CPUTIME_ID)
		evs := st.Observe(f.PTS, origin.Add(time.Duration(f.PTS*float64(time.Second))), f.Image.Width(), f.Image.Height(), dets)
		t1 := cpu(unix.CLOCK_THREAD_CPUTIME_ID)
		r.events = append(r.events, evs...)
		r.frames = append(r.frames, frame{Seq: f.Seq, PTS: f.PTS, W: f.Image.Width(), H: f.Image.Height(), Dets: dets,
			Infer: times.Preprocess + times.Infer + times.Postprocess, InferCPU: p1 - p0, Stage: t1 - t0})
	})
	require.True(t, errors.Is(err, io.EOF), "decoding %s: %v", video, err)
	require.NoError(t, ferr)
	require.NotEmpty(t, r.frames)
	last := r.frames[len(r.frames)-1].PTS
	r.events = append(r.events, st.Close(last, origin.Add(time.Duration(last*float64(time.Second))))...)
	return r
}

// cpu reads a CPU-time clock.
func cpu(clock int32) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// frameAt returns the index of the frame with that PTS (an event's).
func (r run) frameAt(pts float64) int {
	for i, f := range r.frames {
		if f.PTS >= pts-1e-6 {
			return i
		}
	}
	return len(r.frames) - 1
}

// span is one track as the detections show it.
type span struct {
	id, label   string
	first, last int // frame indices
	observed    int // frames with a detection of the track
}

// tracks returns the confirmed tracks in order of their first frame.
func (r run) tracks() []*span {
	var out []*span
	byID := map[string]*span{}
	for i, f := range r.frames {
		for _, d := range f.Dets {
			if d.TrackID == "" {
				continue
			}
			s := byID[d.TrackID]
			if s == nil {
				s = &span{id: d.TrackID, label: d.Label, first: i}
				byID[d.TrackID] = s
				out = append(out, s)
			}
			s.last = i
			s.observed++
		}
	}
	return out
}

// idAt returns the track id of the tracked detection of class label whose
// box holds (x, y) in frame i, the one with the nearest centre if several
// do, or "" if none.
func (r run) idAt(i int, label string, x, y float32) string {
	id, best := "", float32(1e9)
	for _, d := range r.frames[i].Dets {
		b := d.Box
		if d.TrackID == "" || d.Label != label || x < b.X1 || x > b.X2 || y < b.Y1 || y > b.Y2 {
			continue
		}
		dx, dy := (b.X1+b.X2)/2-x, (b.Y1+b.Y2)/2-y
		if dd := dx*dx + dy*dy; dd < best {
			id, best = d.TrackID, dd
		}
	}
	return id
}
