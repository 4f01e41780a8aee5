package rtsptest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-video/vigil/internal/assets"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sample encodes the first n frames of vtest.avi (10 fps).
func sample(t *testing.T, n int) string {
	t.Helper()
	return EncodeH264(t, filepath.Join(assets.MediaDir(), "vtest.avi"), n)
}

// readFrames reads up to n decoded frames from url with the ffmpeg CLI over
// RTSP/TCP. It returns the number of frames decoded and nil when ffmpeg
// finished, context.DeadlineExceeded when it was still running at the
// timeout (it is then killed), or ffmpeg's error.
func readFrames(t *testing.T, url string, n int, timeout time.Duration) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error",
		"-progress", "pipe:1", "-stats_period", "0.2",
		"-rtsp_transport", "tcp", "-analyzeduration", "1000000", "-i", url, "-frames:v", strconv.Itoa(n), "-f", "null", "-")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("ffmpeg: %v", err)
	}
	frames := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "frame="); ok {
			frames, _ = strconv.Atoi(v)
		}
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		return frames, ctx.Err()
	}
	if err != nil {
		return frames, fmt.Errorf("ffmpeg: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Logf("ffmpeg stderr: %s", s)
	}
	return frames, nil
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	file := sample(t, 150)
	srv := Start(t, file, Options{Path: "/cam1"})
	if !strings.HasSuffix(srv.URL, "/cam1") || srv.Port == 0 {
		t.Fatalf("URL %q, port %d", srv.URL, srv.Port)
	}
	check := func() {
		start := time.Now()
		got, err := readFrames(t, srv.URL, 30, 15*time.Second)
		if err != nil || got < 30 {
			t.Fatalf("got %d frames (%v), want 30", got, err)
		}
		t.Logf("read %d frames from %s in %v", got, srv.URL, time.Since(start).Round(time.Millisecond))
	}
	check()
	port, url := srv.Port, srv.URL
	start := time.Now()
	srv.Stop()
	t.Logf("stopped in %v", time.Since(start).Round(time.Millisecond))
	srv.Stop() // idempotent
	if got, err := readFrames(t, url, 1, 5*time.Second); err == nil || got > 0 {
		t.Fatalf("read %d frames from a stopped server (%v)", got, err)
	}
	srv.Restart(t)
	if srv.Port != port || srv.URL != url {
		t.Fatalf("restarted at %s, want %s", srv.URL, url)
	}
	check()
}

func TestLoop(t *testing.T) {
	t.Parallel()
	file := sample(t, 50) // 5 s at 10 fps
	srv := Start(t, file, Options{Loop: true})
	got, err := readFrames(t, srv.URL, 80, 15*time.Second)
	if err != nil || got < 80 {
		t.Fatalf("got %d frames (%v), want 80 from a 50-frame looped file", got, err)
	}
}

func TestStall(t *testing.T) {
	t.Parallel()
	file := sample(t, 150)
	srv := Start(t, file, Options{Loop: true, StallAfter: 2 * time.Second})
	got, err := readFrames(t, srv.URL, 200, 6*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read %d frames (%v): want ffmpeg still connected but stalled at the deadline", got, err)
	}
	if got < 5 || got > 40 {
		t.Fatalf("got %d frames before the stall, want about 20", got)
	}
	t.Logf("%d frames, then nothing for the rest of 6 s", got)
}
