package decode_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

func TestMain(m *testing.M) {
	decode.SetLogger(nil) // keep FFmpeg's warnings about the sample files out of test output
	goleak.VerifyTestMain(m)
}

// collect runs a source to its end and returns the frames' metadata.
func collect(t *testing.T, ctx context.Context, o decode.Options) ([]pipeline.Frame, int, int, error) {
	t.Helper()
	src, err := decode.New(o)
	require.NoError(t, err)
	var frames []pipeline.Frame
	w, h := 0, 0
	err = src.Run(ctx, func(f *pipeline.Frame) {
		w, h = f.Image.Width(), f.Image.Height()
		f.Image.Release()
		c := *f
		c.Image = nil
		frames = append(frames, c)
	})
	return frames, w, h, err
}

func TestMegamindFrames(t *testing.T) {
	frames, w, h, err := collect(t, context.Background(), decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "m"})
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, frames, 270)
	require.Equal(t, 720, w)
	require.Equal(t, 528, h)
	require.True(t, frames[0].Keyframe, "first frame is a keyframe")
	for i := 1; i < len(frames); i++ {
		require.Greater(t, frames[i].PTS, frames[i-1].PTS, "PTS increases at frame %d", i)
		require.Equal(t, uint64(i), frames[i].Seq)
		require.False(t, frames[i].Arrival.After(frames[i].Decoded))
	}
	// 270 frames at 2997/125 fps: the last PTS is 269 * 125/2997 s.
	require.InDelta(t, 269*125.0/2997, frames[269].PTS, 1e-3)
}

// An http:// source: a real HTTP server (net/http/httptest) serving the file.
func TestHTTPSource(t *testing.T) {
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(testenv.Media(t, "Megamind.avi")))))
	defer srv.Close()
	src, err := decode.New(decode.Options{URL: srv.URL + "/Megamind.avi"})
	require.NoError(t, err)
	require.True(t, src.Live())
	n := 0
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release(); n++ })
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 270, n)
	require.Equal(t, "mpeg4", src.Info().Codec)
	// Megamind.avi declares 2997/125 fps (its AVI header).
	require.InDelta(t, 2997.0/125, src.NominalFPS(), 1e-6)
}

// tree.avi has 68 coded frames at irregular gaps in 444 nominal slots: a
// variable-frame-rate file that is complete, not truncated.
func TestVariableFrameRateFile(t *testing.T) {
	frames, w, h, err := collect(t, context.Background(), decode.Options{URL: testenv.Media(t, "tree.avi")})
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, frames, 68)
	require.Equal(t, 320, w)
	require.Equal(t, 240, h)
	for i := 1; i < len(frames); i++ {
		require.Greater(t, frames[i].PTS, frames[i-1].PTS)
	}
}

func TestLoopKeepsPTSIncreasing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), Loop: true})
	require.NoError(t, err)
	var last float64 = -1
	n := 0
	err = src.Run(ctx, func(f *pipeline.Frame) {
		f.Image.Release()
		require.Greater(t, f.PTS, last)
		if last >= 0 { // no gap at the loop either: one frame (24 fps) apart
			require.InDelta(t, 1.0/24, f.PTS-last, 0.01, "frame %d", n)
		}
		last = f.PTS
		if n++; n == 300 { // past the end of the 270-frame file
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	require.GreaterOrEqual(t, n, 300)
}

// medianHeld runs a real-time source for n frames and returns the median
// of Decoded - Arrival: how long frames spent in the decoder.
func medianHeld(t *testing.T, o decode.Options, n int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := decode.New(o)
	require.NoError(t, err)
	var held []time.Duration
	err = src.Run(ctx, func(f *pipeline.Frame) {
		f.Image.Release()
		held = append(held, f.Decoded.Sub(f.Arrival))
		if len(held) == n {
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	slices.Sort(held)
	return held[len(held)/2]
}

// A frame's Arrival is when its own packet was read, not when the decoder
// released it: with frame threads the decoder holds threads-1 frames, so
// stamping at output would hide that delay from the latency figures.
func TestArrivalIsThePacketsTime(t *testing.T) {
	// Packets are paced at 24 fps, and 4 frame threads release frame i
	// only once packet i+3 is in: 125 ms after frame i's own packet.
	m := medianHeld(t, decode.Options{URL: testenv.Media(t, "Megamind.avi"), Realtime: true, Threads: 4}, 24)
	require.Greater(t, m, 80*time.Millisecond, "median decode stage %s", m)
}

// With the default thread count a real-time source gets slice threads
// only: FFmpeg's automatic frame threads (cores+1 of them) would hold
// frames in the decoder and make every frame that much older.
func TestRealtimeDefaultThreadsAddNoDelay(t *testing.T) {
	m := medianHeld(t, decode.Options{URL: testenv.Media(t, "Megamind.avi"), Realtime: true}, 24)
	require.Less(t, m, 40*time.Millisecond, "median decode stage %s", m)
}

func TestRealtimePacing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), Realtime: true})
	require.NoError(t, err)
	var first, last pipeline.Frame
	n := 0
	err = src.Run(ctx, func(f *pipeline.Frame) {
		f.Image.Release()
		if n == 0 {
			first = *f
		}
		last = *f
		if n++; n == 25 {
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	// Paced: wall time between arrivals is at least the PTS span (minus
	// the decoder's frame-threading delay of a few frames).
	span := time.Duration((last.PTS - first.PTS) * float64(time.Second))
	require.Greater(t, last.Arrival.Sub(first.Arrival), span-300*time.Millisecond)
}

// A real-time file whose first frame is held for a while (a decoder slow
// to start, as direct NVDEC's sessions were at 96 streams on 2026-12-01, or
// a consumer slow to take it) starts its schedule again from there: the
// frames after it keep their spacing instead of coming in a burst of every
// frame missed, which a camera would never send.
func TestRealtimeLateStartDoesNotBurst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), Realtime: true})
	require.NoError(t, err)
	const hold, window = 1500 * time.Millisecond, 500 * time.Millisecond
	var resumed time.Time
	var after []time.Duration // each later frame's emit, from the end of the hold
	err = src.Run(ctx, func(f *pipeline.Frame) {
		f.Image.Release()
		if resumed.IsZero() {
			time.Sleep(hold)
			resumed = time.Now()
			return
		}
		if a := time.Since(resumed); a < 2*window {
			after = append(after, a)
		} else {
			cancel()
		}
	})
	require.ErrorIs(t, err, context.Canceled)
	inWindow := 0
	for _, a := range after {
		if a < window {
			inWindow++
		}
	}
	// At the file's rate the window holds fps × 0.5 frames, plus the few
	// the pacer may catch up (paceCatchUp, 100 ms); the margin of 6 frames
	// is scheduling slack on a loaded machine. A burst of the 1.5 s missed
	// would add fps × 1.5 (36 here).
	fps := src.Info().FPS
	limit := int(fps*(window+100*time.Millisecond).Seconds()) + 6
	require.LessOrEqual(t, inWindow, limit, "%d frames in the %s after a %s hold at %.1f fps", inWindow, window, hold, fps)
	require.Greater(t, inWindow, int(fps*window.Seconds())/2, "frames still flow after the hold")
}

func TestTruncatedFile(t *testing.T) {
	full, err := os.ReadFile(testenv.Media(t, "Megamind.avi"))
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "cut.avi")
	require.NoError(t, os.WriteFile(p, full[:len(full)/2], 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	frames, _, _, err := collect(t, ctx, decode.Options{URL: p})
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "must end by itself, not hang")
	require.ErrorIs(t, err, decode.ErrTruncated)
	require.Contains(t, err.Error(), "cut.avi")
	require.NotEmpty(t, frames, "the intact half is decoded")
}

func TestMissingFile(t *testing.T) {
	_, _, _, err := collect(t, context.Background(), decode.Options{URL: "/nonexistent/clip.mp4"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "/nonexistent/clip.mp4")
	require.Contains(t, err.Error(), "open")
}

// A server that accepts TCP connections and never answers must make the
// open fail with ErrTimeout within OpenTimeout (plus scheduling slack).
func TestOpenTimeoutSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // hold it open, say nothing
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()

	for _, scheme := range []string{"rtsp", "http"} {
		t.Run(scheme, func(t *testing.T) {
			const timeout = 1500 * time.Millisecond
			start := time.Now()
			_, _, _, err := collect(t, context.Background(), decode.Options{
				URL: scheme + "://user:hunter2@" + ln.Addr().String() + "/stream", OpenTimeout: timeout, StallTimeout: 30 * time.Second,
			})
			el := time.Since(start)
			require.ErrorIs(t, err, decode.ErrTimeout)
			require.GreaterOrEqual(t, el, timeout)
			require.Less(t, el, timeout+2*time.Second, "open must give up near its timeout")
			require.NotContains(t, err.Error(), "hunter2", "credentials are redacted")
		})
	}
}

func TestCancelDuringOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, _, err = collect(t, ctx, decode.Options{URL: "rtsp://" + ln.Addr().String() + "/x", OpenTimeout: time.Minute})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	require.Less(t, time.Since(start), 3*time.Second)
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind decode.Kind
		ok   bool
	}{
		{"rtsp://cam/1", decode.KindRTSP, true},
		{"RTSPS://cam/1", decode.KindRTSP, true},
		{"https://x/y.mp4", decode.KindHTTP, true},
		{"file:///tmp/a.avi", decode.KindFile, true},
		{"/tmp/a.avi", decode.KindFile, true},
		{"ftp://x/y", 0, false},
		{"", 0, false},
		{"file://", 0, false},
		{"FILE://", 0, false},
		{"rtsp://", 0, false},
		{"rtsp://:554/x", 0, false},
		{"rtsp://h:99999/x", 0, false},
		{"rtsp://ho st/x", 0, false},
		{"rtsp://h/x\n", 0, false},
		{"http:///x", 0, false},
		{"concat:/a.avi|/b.avi", 0, false},
		{"pipe:0", 0, false},
		{"rtsp://admin:s3cr@t:xy/z@127.0.0.1:18554/cam", 0, false},
		{"rtsp://admin:p%2Fw@127.0.0.1:8554/cam", decode.KindRTSP, true},
		// A raw '#' or '?' in the password ends the host early: with
		// digits before it, the URL parsed as host "admin", port 12.
		{"rtsp://admin:12#34@127.0.0.1/cam", 0, false},
		{"rtsp://admin:12?34@127.0.0.1/cam", 0, false},
		{"rtsp://admin:12%2334@127.0.0.1/cam", decode.KindRTSP, true},
		{"http://cam/snap?mail=a@b", 0, false},
		{"http://cam/snap?mail=a%40b", decode.KindHTTP, true},
		{"relative/clip.mp4", decode.KindFile, true},
	} {
		k, _, err := decode.ParseURL(tc.in)
		if tc.ok {
			require.NoError(t, err, tc.in)
			require.Equal(t, tc.kind, k, tc.in)
		} else {
			require.Error(t, err, tc.in)
		}
	}
	_, _, err := decode.ParseURL("ftp://u:pw@x/y")
	require.ErrorIs(t, err, decode.ErrUnsupportedScheme)
	require.NotContains(t, err.Error(), "pw@")
}

// Every error of ParseURL hides the password, whatever makes the URL
// invalid, and names what is wrong (issue 14, item 5: a raw '#' or '?'
// in the password made the "not a valid URL" error show it).
func TestParseURLErrorsHidePassword(t *testing.T) {
	for _, tc := range []struct{ url, secret, want string }{
		{"rtsp://admin:pa#ss@10.0.0.5/s", "pa#ss", "percent-encode the password"},
		{"rtsp://admin:pa?ss@10.0.0.5/s", "pa?ss", "percent-encode the password"},
		{"rtsp://admin:s#3?c@10.0.0.5:554/s?x=1", "s#3?c", "percent-encode the password"},
		{"rtsp://admin:pa/ss@10.0.0.5/s", "pa/ss", "raw '/'"},
		{"rtsp://admin:pa ss@10.0.0.5/s", "pa ss", "whitespace"},
		{"rtsp://admin:pa%zz@10.0.0.5/s", "pa%zz", "not a valid URL"},
		{"rtsp://admin:pass@10.0.0.5:99999/s", "pass", "port 99999"},
		{"ftp://admin:pa#ss@10.0.0.5/s", "pa#ss", "unsupported URL scheme"},
		{"rtsp:/admin:pa#ss@10.0.0.5/s", "pa#ss", "unsupported URL scheme"},
		{"rtsp:admin:pass@10.0.0.5/s", "pass", "unsupported URL scheme"},
		{"rtsp://admin:pass@:554/s", "pass", "no host"},
		{"http://cam/snap?token=ab#cd@x", "ab#cd", "percent-encode"},
	} {
		_, _, err := decode.ParseURL(tc.url)
		if err == nil {
			t.Fatalf("ParseURL accepted a URL whose password is %d bytes long (case %q)", len(tc.secret), tc.want)
		}
		testenv.NoSecret(t, "ParseURL's error", err.Error(), tc.secret)
		require.Contains(t, err.Error(), tc.want)
	}
}

// LocalPath names the file of a path or file:// URL, and nothing for a
// network URL or one ParseURL refuses.
func TestLocalPath(t *testing.T) {
	for raw, want := range map[string]string{"/x/clip.mp4": "/x/clip.mp4", "clip.mp4": "clip.mp4", "file:///x/clip.mp4": "/x/clip.mp4"} {
		p, ok := decode.LocalPath(raw)
		require.True(t, ok, raw)
		require.Equal(t, want, p, raw)
	}
	for _, raw := range []string{"rtsp://cam/s", "https://h/v.mp4", "concat:a|b", ""} {
		_, ok := decode.LocalPath(raw)
		require.False(t, ok, raw)
	}
}

func TestRedactURL(t *testing.T) {
	require.Equal(t, "rtsp://admin:***@10.0.0.5:554/s1", decode.RedactURL("rtsp://admin:s3cret@10.0.0.5:554/s1"))
	require.Equal(t, "rtsp://cam/s1", decode.RedactURL("rtsp://cam/s1"))
	require.Equal(t, "/a/b.avi", decode.RedactURL("/a/b.avi"))
	require.NotContains(t, decode.RedactURL("rtsp://a:b%zz@h/"), "b%zz")
	// Passwords holding @ : / %: percent-encoded as RFC 3986 wants, or
	// with raw @ and : (the last @ ends the user info), or with a stray %.
	for in, want := range map[string]string{
		"rtsp://admin:p%40ss%3Aw0rd%2Fx%25y@10.0.0.5/s": "rtsp://admin:***@10.0.0.5/s",
		"rtsp://admin:p@ss:w0rd@10.0.0.5:554/s":         "rtsp://admin:***@10.0.0.5:554/s",
		"rtsp://admin:p@ss:w0%rd@10.0.0.5/s":            "rtsp://admin:***@10.0.0.5/s",
	} {
		got := decode.RedactURL(in)
		require.Equal(t, want, got, in)
		for _, secret := range []string{"p%40ss", "p@ss", "w0rd", "w0%rd"} {
			require.NotContains(t, got, secret)
		}
	}
}

func TestScalerResize(t *testing.T) {
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "astronaut.png")})
	require.NoError(t, err)
	sc := decode.NewScaler()
	defer sc.Close()
	var rgb, bgr []byte
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		defer f.Image.Release()
		rgb = make([]byte, 64*64*3)
		bgr = make([]byte, 64*64*3)
		require.NoError(t, sc.Resize(f.Image, 64, 64, pipeline.RGB, rgb))
		require.NoError(t, sc.Resize(f.Image, 64, 64, pipeline.BGR, bgr))
		require.Error(t, sc.Resize(f.Image, 64, 64, pipeline.RGB, rgb[:10]))
	})
	require.ErrorIs(t, err, io.EOF)
	require.NotNil(t, rgb)
	var differ bool
	for i := 0; i < len(rgb); i += 3 {
		require.Equal(t, rgb[i], bgr[i+2])
		require.Equal(t, rgb[i+2], bgr[i])
		differ = differ || rgb[i] != rgb[i+2]
	}
	require.True(t, differ, "a colour photo has R != B somewhere")
}

// A real RTSP server that keeps the session open but stops sending RTP: the
// read must fail with ErrTimeout about StallTimeout after the last frame.
// (FFmpeg 5.1's own socket timeout fires late or never here.)
func TestRTSPSilentStall(t *testing.T) {
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 100)
	srv := rtsptest.Start(t, file, rtsptest.Options{StallAfter: 4 * time.Second, Loop: true})
	src, err := decode.New(decode.Options{URL: srv.URL, StallTimeout: 2 * time.Second})
	require.NoError(t, err)
	var times []time.Time
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = src.Run(ctx, func(f *pipeline.Frame) { f.Image.Release(); times = append(times, time.Now()) })
	end := time.Now()
	require.ErrorIs(t, err, decode.ErrTimeout)
	require.NoError(t, ctx.Err())
	require.NotEmpty(t, times)
	// The stall starts after the last frame that is not followed within
	// 1 s by another (the demuxer may flush a few queued packets once it is
	// interrupted, so frames can trail the timeout itself).
	stallStart := times[len(times)-1]
	for i := 0; i+1 < len(times); i++ {
		if times[i+1].Sub(times[i]) > time.Second {
			stallStart = times[i]
			break
		}
	}
	stall := end.Sub(stallStart)
	require.GreaterOrEqual(t, stall, 2*time.Second)
	require.Less(t, stall, 3*time.Second, "bounded by StallTimeout (+ watchdog tick)")
}

// A raw H.264 elementary stream has no timestamps: frames still come out in
// order with increasing PTS, and realtime pacing still applies (nominal
// 25 fps from the stream's frame rate).
func TestRawH264NoPTSPaced(t *testing.T) {
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 30)
	src, err := decode.New(decode.Options{URL: file, Realtime: true})
	require.NoError(t, err)
	var pts []float64
	start := time.Now()
	err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release(); pts = append(pts, f.PTS) })
	el := time.Since(start)
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, pts, 30)
	for i := 1; i < len(pts); i++ {
		require.Greater(t, pts[i], pts[i-1])
	}
	fps := src.Info().FPS
	require.Positive(t, fps)
	require.Greater(t, el.Seconds(), 28/fps*0.9, "paced at %.1f fps", fps)
}
