// Package rtsptest runs a real RTSP server (gst-rtsp-server, driven by the
// server.py script next to this file through python3-gi) for tests.
//
// The server streams a video file as RTP over RTSP (TCP interleaved or UDP,
// as the client asks): an H.264 Annex-B elementary stream without B-frames
// (.h264), or MPEG-TS (.ts) with H.264 or HEVC, B-frames allowed, whose PTS
// and DTS it keeps. These make such files from any video ffmpeg can read:
//
//   - EncodeH264: .h264, no B-frames;
//   - EncodeH264BFrames: .ts, H.264 with 3 B-frames (PTS out of decode order);
//   - EncodeHEVCCRA: .ts, open-GOP HEVC cut so that it starts at a CRA
//     picture whose RASL pictures reference pictures a client never gets.
//
// Typical use:
//
//	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
//	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true})
//	// ... open srv.URL ...
//
// StartPreset serves a live test picture (PresetLive, PresetLiveHEVC)
// instead of a file; `make camera` runs one by hand.
//
// Options.StallAfter, Options.FirstFrameDelay and Options.PacketLoss (or
// Server.SetPacketLoss), and Server.ResetTimestamps make the server misbehave
// like a real camera; StartProxy puts a TCP proxy in front of it (or of any
// TCP server) whose Pause and Resume simulate a network cut.
//
// It needs python3 with the gi module and gir1.2-gst-rtsp-server-1.0,
// gstreamer1.0-plugins-{base,good,bad}, gstreamer1.0-x (the presets'
// overlays), and the ffmpeg CLI with libx264 and libx265 (all installed by
// scripts/setup.sh).
package rtsptest

import (
	"bufio"
	"errors"
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
	// PacketLoss, when positive, is the fraction of RTP packets (0 to 1)
	// that the server drops, at random but reproducibly (the same packets
	// of a file on every run: the generator is seeded with 1 for each
	// media). Their sequence numbers are used up, so a client sees them as
	// lost on the way; RTCP is not dropped. SetPacketLoss changes it while
	// the server runs.
	//
	// Decision: the packets are dropped in the server, right after the
	// payloader, rather than by a UDP proxy in front of it (what a network
	// would do), because:
	//   - it works alike for RTP over UDP and over TCP (interleaved);
	//   - a UDP proxy must also be an RTSP proxy: it has to rewrite the
	//     client_port and server_port parameters of every SETUP's Transport
	//     header and relay two UDP ports each way per stream (RTP and
	//     RTCP), which is a second RTSP implementation to get right and to
	//     keep leak-free, for the same packets missing.
	// What the client sees is the same: RTP sequence numbers with gaps.
	// The differences: every client of a shared stream loses the same
	// packets, and the server's RTCP sender reports count only the packets
	// it sent (clients count losses from sequence numbers, RFC 3550 A.3).
	PacketLoss float64
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

	source []string // server.py's --file or --preset
	opts   Options
	log    testing.TB // the test given to Start: the process logs there

	mu      sync.Mutex
	cmd     *exec.Cmd
	stdin   io.WriteCloser // server.py's commands (--control-stdin)
	replies chan string    // server.py's "DONE ..." and "FAIL ..." lines
	done    chan struct{}  // closed once cmd has been waited for
	nextID  int            // of the last command sent

	cmdMu sync.Mutex // one command at a time
}

// readyTimeout bounds how long Start waits for the READY line.
const readyTimeout = 20 * time.Second

// Start runs server.py serving file (an H.264 Annex-B elementary stream
// without B-frames, .h264, or MPEG-TS with H.264 or HEVC, .ts; see
// EncodeH264, EncodeH264BFrames and EncodeHEVCCRA), waits until it listens,
// and stops it when the test ends. The script's stderr goes to t.Log. It
// fails the test when the server does not come up within 20 s.
//
// The parameter sets (SPS and PPS, plus VPS for HEVC) go with every
// keyframe, so a client can start decoding at any keyframe. MPEG-TS
// timestamps are moved 1 s later (so that the RASL pictures before a CRA
// picture are not clipped): the first packet of a .ts file goes out 1 s
// after PLAY.
func Start(t testing.TB, file string, opts Options) *Server {
	t.Helper()
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	return startSource(t, []string{"--file", file}, opts)
}

// The presets of StartPreset: live cameras made by GStreamer, a moving ball
// with the wall clock (top left) and the stream's running time (bottom
// right) drawn on it, 640x360 at 25 fps, a keyframe every 25 frames, no
// B-frames. `make camera` runs PresetLive by hand (README.md).
const (
	// PresetLive is H.264 (openh264enc, Constrained Baseline).
	PresetLive = "live"
	// PresetLiveHEVC is HEVC (x265enc, ultrafast, zero latency).
	PresetLiveHEVC = "live-hevc"
)

// StartPreset runs server.py serving a live preset (PresetLive or
// PresetLiveHEVC) instead of a file, like Start otherwise. Being live, the
// stream never ends (Options.Loop must be false); it starts when a client
// first asks for it, and stops once every client has left. The overlays
// need gstreamer1.0-x, which scripts/setup.sh installs; without it the
// server answers DESCRIBE with 503.
func StartPreset(t testing.TB, preset string, opts Options) *Server {
	t.Helper()
	if preset != PresetLive && preset != PresetLiveHEVC {
		t.Fatalf("rtsptest: unknown preset %q", preset)
	}
	if opts.Loop {
		t.Fatalf("rtsptest: Loop applies to files only; a preset never ends")
	}
	return startSource(t, []string{"--preset", preset}, opts)
}

// startSource is Start and StartPreset once the source is checked.
func startSource(t testing.TB, source []string, opts Options) *Server {
	t.Helper()
	if opts.PacketLoss < 0 || opts.PacketLoss > 1 {
		t.Fatalf("rtsptest: PacketLoss %v is not a fraction between 0 and 1", opts.PacketLoss)
	}
	if opts.Path == "" {
		opts.Path = "/stream"
	}
	if !strings.HasPrefix(opts.Path, "/") {
		opts.Path = "/" + opts.Path
	}
	s := &Server{source: source, opts: opts, log: t}
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
	s.cmd, s.stdin = nil, nil
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
	args := append([]string{scriptPath()}, s.source...)
	args = append(args, "--path", s.opts.Path, "--port", strconv.Itoa(s.opts.Port), "--control-stdin")
	if s.opts.Loop {
		args = append(args, "--loop")
	}
	if s.opts.StallAfter > 0 {
		args = append(args, "--stall-after", strconv.FormatFloat(s.opts.StallAfter.Seconds(), 'f', -1, 64))
	}
	if s.opts.FirstFrameDelay > 0 {
		args = append(args, "--first-frame-delay", strconv.FormatFloat(s.opts.FirstFrameDelay.Seconds(), 'f', -1, 64))
	}
	if s.opts.PacketLoss > 0 {
		args = append(args, "--packet-loss", strconv.FormatFloat(s.opts.PacketLoss, 'g', -1, 64))
	}
	cmd := exec.Command(py, args...)
	// The pipe carries commands and stays open until Wait; if this process
	// dies without cleaning up, the server sees EOF on stdin and exits too.
	stdin, err := cmd.StdinPipe()
	if err != nil {
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
	replies := make(chan string, 16)
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		s.forward(stderr, nil, nil)
	}()
	go func() {
		defer readers.Done()
		s.forward(stdout, ready, replies)
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
		s.cmd, s.stdin, s.replies, s.done = cmd, stdin, replies, done
		return nil
	case <-done:
		return fmt.Errorf("server.py exited before it was ready (see its log above)")
	case <-time.After(readyTimeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("server.py not ready after %v", readyTimeout)
	}
}

// forward logs r's lines; with ready set, the first READY line goes there,
// and with replies set, answers to commands go there (unless 16 are
// waiting already: they are then only logged).
func (s *Server) forward(r io.Reader, ready, replies chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if ready != nil && strings.HasPrefix(line, "READY ") {
			ready <- line
			ready = nil
			continue
		}
		s.log.Logf("server.py: %s", line)
		if replies != nil && (strings.HasPrefix(line, "DONE ") || strings.HasPrefix(line, "FAIL ")) {
			select {
			case replies <- line:
			default:
			}
		}
	}
}

// resetTimeout bounds how long ResetTimestamps waits: the next keyframe
// comes within one GOP (2.5 s for EncodeH264's files at 10 fps, 2.8 s for
// EncodeHEVCCRA's); the rest is room for a loaded machine.
const resetTimeout = 20 * time.Second

// ResetTimestamps makes the stream's timestamps jump back, as a camera does
// that restarts its timeline while its clients stay connected (seen when
// another client re-joined a camera's mount: the PTS of a connected client
// went from 68.6 s back to 2 s). At the next keyframe, the PTS and DTS of
// the stream move back to where the stream started (its first frame's),
// and the RTP timestamps with them; packets keep flowing in real time on
// the same RTSP session, with the same SSRC and consecutive sequence
// numbers. It returns how far back the timestamps went, once they have.
// Every client of the shared stream sees the jump.
//
// It needs a client playing the stream, and returns an error when none is,
// when the server is not running, or when no keyframe came within 20 s
// (for example after StallAfter; the jump then still comes at the next
// keyframe). It may be called from any goroutine.
func (s *Server) ResetTimestamps() (time.Duration, error) {
	detail, err := s.command("reset", resetTimeout)
	if err != nil {
		return 0, fmt.Errorf("rtsptest: reset timestamps: %w", err)
	}
	// "back S seconds"
	var secs float64
	if _, err := fmt.Sscanf(detail, "back %g seconds", &secs); err != nil {
		return 0, fmt.Errorf("rtsptest: reset timestamps: bad answer %q", detail)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// SetPacketLoss changes Options.PacketLoss (the fraction of RTP packets
// the server drops, 0 to 1) from now on, for the clients playing now and
// those to come, until the server is restarted (Restart goes back to
// Options.PacketLoss). It returns an error when fraction is not between 0
// and 1 or the server is not running. It may be called from any goroutine.
func (s *Server) SetPacketLoss(fraction float64) error {
	if fraction < 0 || fraction > 1 {
		return fmt.Errorf("rtsptest: packet loss %v is not a fraction between 0 and 1", fraction)
	}
	if _, err := s.command("loss "+strconv.FormatFloat(fraction, 'g', -1, 64), 5*time.Second); err != nil {
		return fmt.Errorf("rtsptest: set packet loss: %w", err)
	}
	return nil
}

// command sends server.py one command (see its --control-stdin) and waits
// up to timeout for its answer; it returns what follows "DONE ID ".
func (s *Server) command(cmd string, timeout time.Duration) (string, error) {
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	s.mu.Lock()
	stdin, replies, done := s.stdin, s.replies, s.done
	s.nextID++
	id := strconv.Itoa(s.nextID)
	s.mu.Unlock()
	if stdin == nil {
		return "", errors.New("the server is not running")
	}
	if _, err := io.WriteString(stdin, id+" "+cmd+"\n"); err != nil {
		return "", err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line := <-replies:
			status, rest, _ := strings.Cut(line, " ")
			rid, detail, _ := strings.Cut(rest, " ")
			if rid != id {
				continue // the late answer of an earlier command
			}
			if status == "FAIL" {
				return "", errors.New(detail)
			}
			return detail, nil
		case <-done:
			return "", errors.New("the server exited")
		case <-timer.C:
			return "", fmt.Errorf("no answer within %v", timeout)
		}
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
	return "", fmt.Errorf("no python3 can load gst-rtsp-server (bash scripts/setup.sh installs it: python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-x; or set VIGIL_PYTHON):\n%s",
		strings.Join(errs, "\n"))
})
