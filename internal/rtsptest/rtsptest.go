// Package rtsptest runs a real RTSP server (gst-rtsp-server, driven by the
// server.py script next to this file through python3-gi) for tests.
//
// The server streams an H.264 Annex-B elementary stream (.h264) as RTP over
// RTSP (TCP interleaved or UDP, as the client asks); EncodeH264 makes such a
// file from any video ffmpeg can read. Typical use:
//
//	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
//	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true})
//	// ... open srv.URL ...
//
// Options.StallAfter and Options.FirstFrameDelay make the server misbehave
// like a real camera; StartProxy puts a TCP proxy in front of it (or of any
// TCP server) whose Pause and Resume simulate a network cut.
//
// It needs python3 with the gi module and gir1.2-gst-rtsp-server-1.0,
// gstreamer1.0-plugins-{base,good,bad}, and the ffmpeg CLI with libx264.
package rtsptest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// encodeArgs are the libx264 settings of EncodeH264; they are part of the
// cache key. No B-frames (server.py derives PTS from DTS), a keyframe every
// 25 frames, one slice per frame.
var encodeArgs = []string{"-an", "-c:v", "libx264", "-preset", "veryfast",
	"-g", "25", "-bf", "0", "-pix_fmt", "yuv420p", "-f", "h264"}

// EncodeH264 re-encodes the video src with the ffmpeg CLI into an H.264
// Annex-B elementary stream (the format Start serves) of at most maxFrames
// frames (all when maxFrames <= 0), at src's frame rate, and returns its path.
// The result is cached under os.TempDir()/vigil-rtsptest, keyed by src's
// path, size and maxFrames, so repeated runs do not re-encode.
func EncodeH264(t testing.TB, src string, maxFrames int) string {
	t.Helper()
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatalf("rtsptest: the ffmpeg CLI is needed to encode test streams (apt-get install ffmpeg): %v", err)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		t.Fatalf("rtsptest: source video: %v", err)
	}
	key := fmt.Sprintf("%s\x00%d\x00%d\x00%s", abs, fi.Size(), maxFrames, strings.Join(encodeArgs, " "))
	sum := sha256.Sum256([]byte(key))
	dir := filepath.Join(os.TempDir(), "vigil-rtsptest")
	out := filepath.Join(dir, hex.EncodeToString(sum[:8])+".h264")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	tmp, err := os.CreateTemp(dir, "encode-*.h264")
	if err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // no-op once renamed

	args := []string{"-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", abs}
	if maxFrames > 0 {
		args = append(args, "-frames:v", strconv.Itoa(maxFrames))
	}
	args = append(append(args, encodeArgs...), tmp.Name())
	start := time.Now()
	if msg, err := exec.Command(ffmpeg, args...).CombinedOutput(); err != nil {
		t.Fatalf("rtsptest: ffmpeg %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	t.Logf("rtsptest: encoded %s (%d frames max) to %s in %v", src, maxFrames, out, time.Since(start).Round(time.Millisecond))
	return out
}

// Options configures Start.
type Options struct {
	// Path is the mount point; "/stream" when empty.
	Path string
	// Loop repeats the file forever, like a camera that never ends.
	Loop bool
	// StallAfter, when positive, makes the server stop sending RTP this long
	// after a client first asks for the stream (DESCRIBE), while keeping the
	// RTSP session and its TCP connection open. Timed per shared media: it
	// starts again only after every client has left.
	StallAfter time.Duration
	// FirstFrameDelay, when positive, makes the server send its first RTP
	// packet this long after the stream starts playing (the first PLAY),
	// like a camera that takes that long to deliver its first frame.
	// DESCRIBE, SETUP and PLAY are answered at once and the TCP connection
	// stays open meanwhile; then the stream flows normally from its
	// beginning (and loops with Loop). The delay shifts the stream's
	// timeline, so the RTP timestamps start FirstFrameDelay later too.
	// RTCP is held back too, so the connection is silent. Timed per shared
	// media, like StallAfter: a client that gives up and reconnects after
	// every client has left waits the whole delay again (as with a camera
	// that needs that long per session). StallAfter still counts from the
	// first DESCRIBE: include the delay in it when combining them.
	FirstFrameDelay time.Duration
	// Port is the TCP port to listen on, on 127.0.0.1; 0 picks a free one.
	Port int
}

// Server is a running server.py process. Stop and Restart must not be called
// concurrently with each other.
type Server struct {
	// URL is the stream's address, rtsp://127.0.0.1:PORT/path.
	URL string
	// Port is the port the server listens on; it stays the same on Restart.
	Port int

	file string
	opts Options
	log  testing.TB // the test given to Start: the process logs there

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// readyTimeout bounds how long Start waits for the READY line.
const readyTimeout = 20 * time.Second

// Start runs server.py serving file (an H.264 Annex-B elementary stream, see
// EncodeH264), waits until it listens, and stops it when the test ends. The
// script's stderr goes to t.Log. It fails the test when the server does not
// come up within 20 s.
func Start(t testing.TB, file string, opts Options) *Server {
	t.Helper()
	if opts.Path == "" {
		opts.Path = "/stream"
	}
	if !strings.HasPrefix(opts.Path, "/") {
		opts.Path = "/" + opts.Path
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	s := &Server{file: file, opts: opts, log: t}
	t.Cleanup(s.Stop)
	if err := s.start(0); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	return s
}

// Restart stops the server if it is running and starts it again on the same
// port and path, retrying for up to 5 s while the port cannot be bound. It
// fails t when the server does not come back. The server's log still goes to
// the test given to Start, which must outlive it.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(5 * time.Second); err != nil {
		t.Fatalf("rtsptest: restart: %v", err)
	}
}

// Stop stops the server: SIGTERM, then SIGKILL after 5 s, and waits for the
// process to exit. It is idempotent; Start's test cleanup calls it too.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.log.Logf("rtsptest: server did not exit on SIGTERM within 5 s; killing it")
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// start launches the process, retrying failed launches for retryFor.
func (s *Server) start(retryFor time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	deadline := time.Now().Add(retryFor)
	for {
		err := s.launch()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		s.log.Logf("rtsptest: %v; retrying", err)
		time.Sleep(250 * time.Millisecond)
	}
}

// launch starts one server.py process and waits for its READY line.
func (s *Server) launch() error {
	py, err := python()
	if err != nil {
		return err
	}
	args := []string{scriptPath(), "--file", s.file, "--path", s.opts.Path,
		"--port", strconv.Itoa(s.opts.Port), "--exit-on-stdin-eof"}
	if s.opts.Loop {
		args = append(args, "--loop")
	}
	if s.opts.StallAfter > 0 {
		args = append(args, "--stall-after", strconv.FormatFloat(s.opts.StallAfter.Seconds(), 'f', -1, 64))
	}
	if s.opts.FirstFrameDelay > 0 {
		args = append(args, "--first-frame-delay", strconv.FormatFloat(s.opts.FirstFrameDelay.Seconds(), 'f', -1, 64))
	}
	cmd := exec.Command(py, args...)
	// The pipe stays open until Wait; if this process dies without
	// cleaning up, the server sees EOF on stdin and exits too.
	if _, err := cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", py, err)
	}

	// Readers log until EOF; the waiter reaps the process after them
	// (os/exec requires pipes to be drained before Wait).
	ready := make(chan string, 1)
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		s.forward(stderr, nil)
	}()
	go func() {
		defer readers.Done()
		s.forward(stdout, ready)
	}()
	go func() {
		readers.Wait()
		if err := cmd.Wait(); err != nil {
			s.log.Logf("rtsptest: server.py exited: %v", err)
		}
		close(done)
	}()

	select {
	case line := <-ready:
		u, err := url.Parse(strings.TrimPrefix(line, "READY "))
		if err == nil {
			s.Port, err = strconv.Atoi(u.Port())
		}
		if err != nil {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("bad READY line %q", line)
		}
		s.URL, s.opts.Port = u.String(), s.Port
		s.cmd, s.done = cmd, done
		return nil
	case <-done:
		return fmt.Errorf("server.py exited before it was ready (see its log above)")
	case <-time.After(readyTimeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("server.py not ready after %v", readyTimeout)
	}
}

// forward logs r's lines; with ready set, the first READY line goes there.
func (s *Server) forward(r io.Reader, ready chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if ready != nil && strings.HasPrefix(line, "READY ") {
			ready <- line
			ready = nil
			continue
		}
		s.log.Logf("server.py: %s", line)
	}
}

// scriptPath returns the path of server.py, next to this file.
func scriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "server.py")
}

// python finds an interpreter that can load gst-rtsp-server: $VIGIL_PYTHON,
// else python3 from PATH, else /usr/bin/python3 (python3-gi is a Debian
// package, which a pyenv or venv python3 earlier in PATH cannot import).
var python = sync.OnceValues(func() (string, error) {
	cands := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("VIGIL_PYTHON"); p != "" {
		cands = []string{p}
	}
	const probe = "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer"
	var errs []string
	for _, c := range cands {
		out, err := exec.Command(c, "-c", probe).CombinedOutput()
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v: %s", c, err, strings.TrimSpace(string(out))))
	}
	return "", fmt.Errorf("no python3 can load gst-rtsp-server (apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad, or set VIGIL_PYTHON):\n%s",
		strings.Join(errs, "\n"))
})
