package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// Every goroutine but nats.go's known one (testenv.IgnoreNATSPutLeak:
// event snapshots go through ObjectStore.Put) is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreNATSPutLeak) }

// grey returns a mid-grey full-range 4:2:0 picture of w×h.
func grey(w, h int) *image.YCbCr {
	img := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
	for i := range img.Y {
		img.Y[i] = 128
	}
	for i := range img.Cb {
		img.Cb[i], img.Cr[i] = 128, 128
	}
	return img
}

var testBox = pipeline.Box{X1: 100, Y1: 60, X2: 200, Y2: 180}

// frame is a tap frame of a grey 320×240 picture with one tracked face.
func frame(seq uint64) *pipeline.TapFrame {
	return &pipeline.TapFrame{Picture: &pipeline.Picture{Image: grey(320, 240), FullRange: true},
		Result:  pipeline.Result{StreamID: "s", Seq: seq, Width: 320, Height: 240, Detections: []pipeline.Detection{{Label: "face", Score: 0.9, Box: testBox, TrackID: "abc-7"}}},
		Message: []byte(`{"seq":1}`)}
}

// changed returns the pixels whose luma or chroma differ between a and b.
func changed(a, b *image.YCbCr) []image.Point {
	var out []image.Point
	for y := 0; y < a.Rect.Dy(); y++ {
		for x := 0; x < a.Rect.Dx(); x++ {
			if a.Y[a.YOffset(x, y)] != b.Y[b.YOffset(x, y)] || a.Cb[a.COffset(x, y)] != b.Cb[b.COffset(x, y)] {
				out = append(out, image.Pt(x, y))
			}
		}
	}
	return out
}

// Annotate draws a detection (box, label, track number) inside its box
// only: every pixel it changes is within the box, give or take the 2×2
// chroma block a pixel's colour shares; and a zone and a line along
// their own paths.
func TestAnnotateStaysInsideTheBox(t *testing.T) {
	img := grey(320, 240)
	Annotate(img, frame(0).Result.Detections, nil, nil)
	diff := changed(grey(320, 240), img)
	require.Greater(t, len(diff), 2*(100+120)*2, "the box's outline at least")
	in := image.Rect(int(testBox.X1)-1, int(testBox.Y1)-1, int(testBox.X2)+1, int(testBox.Y2)+1) // chroma blocks
	for _, p := range diff {
		require.True(t, p.In(in), "pixel %v changed outside the box %v", p, in)
	}

	img = grey(320, 240)
	g := &Geometry{Zones: []Shape{{Name: "z", Points: []pipeline.Point{{X: 10, Y: 10}, {X: 60, Y: 10}, {X: 60, Y: 60}}}},
		Lines: []Shape{{Name: "l", Points: []pipeline.Point{{X: 300, Y: 0}, {X: 300, Y: 239}}}}}
	Annotate(img, nil, g, nil)
	diff = changed(grey(320, 240), img)
	require.NotEmpty(t, diff)
	zoneOrLine := image.Rect(8, 8, 62, 62).Union(image.Rect(298, 0, 320, 240)).Union(image.Rect(10, 10, 10+4+7*1+2, 10+3+glyphH+3)) // shapes and the zone's name
	for _, p := range diff {
		require.True(t, p.In(zoneOrLine) || p.X > 298 && p.X < 320, "pixel %v changed away from the zone and the line", p)
	}
}

// A viewer that never takes a frame delays nothing: the worker's deliver
// returns at once every time, the other viewer gets its frames at its
// rate (never closer than its interval), and the slow viewer's frames are
// skipped and counted. The JPEGs are the picture's size; the cap on
// viewers holds; closing the hub ends every view, and no goroutine is
// left (goleak).
func TestSlowViewerDelaysNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := New(Options{MaxFPS: 20, MaxViewers: 2, Registerer: reg})
	f := h.feed("s")
	h.Tap("s") // the stream's tap exists before anyone watches

	slow, err := h.Watch("s", 20, true) // never reads
	require.NoError(t, err)
	fast, err := h.Watch("s", 10, false)
	require.NoError(t, err)
	_, err = h.Watch("s", 5, false)
	require.ErrorIs(t, err, ErrTooManyViewers)

	// The worker: a frame every 2 ms, whether asked or not.
	stop := make(chan struct{})
	worker := make(chan time.Duration)
	go func() {
		var longest time.Duration
		for seq := uint64(0); ; seq++ {
			select {
			case <-stop:
				worker <- longest
				return
			case <-time.After(2 * time.Millisecond):
			}
			t0 := time.Now()
			f.deliver(frame(seq))
			longest = max(longest, time.Since(t0))
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last time.Time
	for i := range 5 {
		fr, err := fast.Next(ctx)
		require.NoError(t, err)
		if i > 0 {
			// The feed serves a viewer due within dueSlack; it is never
			// served sooner (its due time counts from its previous serve,
			// which happened after the serve time was taken).
			require.GreaterOrEqual(t, fr.Served.Sub(last), 100*time.Millisecond-dueSlack, "frame %d came sooner than 10 fps", i)
		}
		last = fr.Served
		img, err := jpeg.Decode(bytes.NewReader(fr.JPEG))
		require.NoError(t, err)
		require.Equal(t, image.Rect(0, 0, 320, 240), img.Bounds())
		require.Equal(t, `{"seq":1}`, string(fr.Message))
	}
	close(stop)
	longest := <-worker
	// deliver stores a pointer and signals a buffered channel; a
	// millisecond is ample on a loaded machine (regression guard).
	require.Less(t, longest, 50*time.Millisecond, "deliver never waits for a viewer")
	require.Positive(t, testutil.ToFloat64(h.m.skipped), "the slow viewer's frames were skipped")
	require.Equal(t, 2.0, testutil.ToFloat64(h.m.viewers))
	require.Positive(t, testutil.ToFloat64(h.m.encoded.WithLabelValues(VariantAnnotated)))

	slow.Close()
	slow.Close() // idempotent
	h.Close()
	_, err = fast.Next(context.Background())
	require.True(t, errors.Is(err, ErrClosed) || err == nil, "after Close: %v", err)
	fast.Close()
	require.Equal(t, 0.0, testutil.ToFloat64(h.m.viewers))
	_, err = h.Watch("s", 5, false)
	require.ErrorIs(t, err, ErrClosed)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// A limited-range picture is stretched to full range before encoding:
// luma 16 becomes black and 235 white.
func TestFullRange(t *testing.T) {
	p := &pipeline.Picture{Image: grey(16, 16)}
	p.Image.Y[0], p.Image.Y[1] = 16, 235
	fullRange(p)
	require.True(t, p.FullRange)
	require.Equal(t, []uint8{0, 255}, p.Image.Y[:2])
	require.Equal(t, uint8(128), p.Image.Cb[0])
}

// A frame without a picture (a GPU-decoded stream's: pipeline.Copier
// refused it) reaches the viewer as the error, which the API answers
// with 501.
func TestNoPictureReachesTheViewer(t *testing.T) {
	h := New(Options{})
	defer h.Close()
	v, err := h.Watch("gpu", 0, false)
	require.NoError(t, err)
	defer v.Close()
	f := h.feed("gpu")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the worker
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			f.deliver(&pipeline.TapFrame{Err: fmt.Errorf("%w: the frame is in GPU memory (NVDEC)", pipeline.ErrNoPicture), Result: pipeline.Result{StreamID: "gpu"}})
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = v.Next(ctx)
	close(stop)
	<-done
	require.ErrorIs(t, err, pipeline.ErrNoPicture)
}

// A view's rate stays within MinFPS and MaxFPS: a tiny ?fps= overflowed
// the interval to a negative duration, which served every frame.
func TestWatchRateBounds(t *testing.T) {
	h := New(Options{MaxFPS: 15, MaxViewers: 4})
	defer h.Close()
	for _, tc := range []struct {
		fps  float64
		want time.Duration
	}{
		{1e-300, 10 * time.Second},
		{1e-10, 10 * time.Second},
		{100, time.Second / 15},
		{0, time.Second / 5}, // the default
	} {
		v, err := h.Watch("s", tc.fps, false)
		require.NoError(t, err)
		require.Equal(t, tc.want, v.interval, "fps %g", tc.fps)
		v.Close()
	}
}
