package rtsptest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// It may be called from any goroutine.
func readFrames(t *testing.T, url string, n int, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error",
		"-progress", "pipe:1", "-stats_period", "0.2",
		"-rtsp_transport", "tcp", "-analyzeduration", "1000000", "-i", url, "-frames:v", strconv.Itoa(n), "-f", "null", "-")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("ffmpeg: %w", err)
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

// rtspConn is a minimal RTSP client on one TCP connection, RTP interleaved
// on it (RFC 2326, 10.12): just enough to time what a server sends.
type rtspConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	cseq int
}

func dialRTSP(t *testing.T, rawURL string) *rtspConn {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rtspConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

// do sends one request and returns its response's header and body, failing
// the test unless the status is 200 within 5 s.
func (c *rtspConn) do(method, target string, hdr ...string) (textproto.MIMEHeader, string) {
	c.t.Helper()
	c.cseq++
	req := fmt.Sprintf("%s %s RTSP/1.0\r\nCSeq: %d\r\n%s\r\n", method, target, c.cseq, strings.Join(append(hdr, ""), "\r\n"))
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.conn, req); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	tp := textproto.NewReader(c.br)
	status, err := tp.ReadLine()
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	if !strings.HasPrefix(status, "RTSP/1.0 200") {
		c.t.Fatalf("%s: %q", method, status)
	}
	var body []byte
	if n, _ := strconv.Atoi(h.Get("Content-Length")); n > 0 {
		body = make([]byte, n)
		if _, err := io.ReadFull(c.br, body); err != nil {
			c.t.Fatalf("%s: %v", method, err)
		}
	}
	return h, string(body)
}

// play runs DESCRIBE, SETUP (RTP/AVP/TCP, interleaved 0-1) of the last
// media and PLAY.
func (c *rtspConn) play(rawURL string) {
	c.t.Helper()
	c.playWith(rawURL, "RTP/AVP/TCP;unicast;interleaved=0-1")
}

// playWith runs DESCRIBE, SETUP of the last media with the given Transport
// header and PLAY; it returns the SETUP response's Transport header.
func (c *rtspConn) playWith(rawURL, transport string) string {
	c.t.Helper()
	h, sdp := c.do("DESCRIBE", rawURL, "Accept: application/sdp")
	base := h.Get("Content-Base")
	if base == "" {
		base = rawURL + "/"
	}
	control := ""
	for _, l := range strings.Split(sdp, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "a=control:"); ok && v != "*" {
			control = v
		}
	}
	if !strings.Contains(control, "://") {
		control = strings.TrimSuffix(base, "/") + "/" + control
	}
	h, _ = c.do("SETUP", control, "Transport: "+transport)
	session, _, _ := strings.Cut(h.Get("Session"), ";")
	c.do("PLAY", base, "Session: "+session, "Range: npt=0-")
	return h.Get("Transport")
}

// next reads one interleaved frame and returns its channel (0: RTP, 1:
// RTCP) and length.
func (c *rtspConn) next(deadline time.Time) (channel, length int, err error) {
	channel, data, err := c.nextFrame(deadline)
	return channel, len(data), err
}

// nextFrame reads one interleaved frame and returns its channel (0: RTP,
// 1: RTCP) and data.
func (c *rtspConn) nextFrame(deadline time.Time) (channel int, data []byte, err error) {
	_ = c.conn.SetDeadline(deadline)
	var hdr [4]byte
	if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
		return 0, nil, err
	}
	if hdr[0] != '$' {
		return 0, nil, fmt.Errorf("not an interleaved frame: %q", hdr)
	}
	data = make([]byte, int(hdr[2])<<8|int(hdr[3]))
	_, err = io.ReadFull(c.br, data)
	return int(hdr[1]), data, err
}

func TestFirstFrameDelay(t *testing.T) {
	t.Parallel()
	const delay = 4 * time.Second
	file := sample(t, 150)
	// The RTSP exchange is answered at once, then nothing at all (no RTP,
	// no RTCP) comes before the delay, then RTP.
	t.Run("packets", func(t *testing.T) {
		t.Parallel()
		srv := Start(t, file, Options{Loop: true, FirstFrameDelay: delay})
		c := dialRTSP(t, srv.URL)
		start := time.Now()
		c.play(srv.URL)
		played := time.Since(start)
		if played > time.Second {
			t.Fatalf("DESCRIBE, SETUP and PLAY took %v, want them answered at once", played)
		}
		ch, n, err := c.next(start.Add(delay + 5*time.Second))
		first := time.Since(start)
		if err != nil || ch != 0 {
			t.Fatalf("first interleaved frame after %v: channel %d, %d bytes, %v; want RTP (channel 0)", first, ch, n, err)
		}
		if first < delay-100*time.Millisecond {
			t.Fatalf("first RTP packet after %v, want %v", first, delay)
		}
		t.Logf("PLAY answered after %v, first packet (RTP) after %v", played.Round(time.Millisecond), first.Round(time.Millisecond))
	})
	t.Run("ffmpeg", func(t *testing.T) {
		t.Parallel()
		srv := Start(t, file, Options{Loop: true, FirstFrameDelay: delay})
		start := time.Now()
		got, err := readFrames(t, srv.URL, 10, delay+10*time.Second)
		took := time.Since(start)
		if err != nil || got < 10 {
			t.Fatalf("got %d frames (%v) in %v, want 10", got, err, took)
		}
		if took < delay {
			t.Fatalf("read 10 frames in %v, before the first frame delay of %v", took, delay)
		}
		t.Logf("read 10 frames in %v", took.Round(time.Millisecond))
	})
}

// logRecorder is a testing.TB that also keeps what is logged through it.
type logRecorder struct {
	testing.TB
	mu   sync.Mutex
	logs []string
}

func (r *logRecorder) Logf(format string, args ...any) {
	r.TB.Helper()
	r.mu.Lock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	r.TB.Logf(format, args...)
}

func (r *logRecorder) contains(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.logs {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// pattern fills b with the bytes of a stream at offset off: (off+i) % 251.
func pattern(b []byte, off int64) {
	for i := range b {
		b[i] = byte((off + int64(i)) % 251)
	}
}

// waitFor polls cond every 5 ms until it holds or timeout passes, and
// returns how long it took and whether it held.
func waitFor(timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			return time.Since(start), false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), true
}

func TestProxy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// The server writes 1 KiB every 10 ms (a pattern, to check order) until
	// stop, then half-closes and waits for the client to close; it counts
	// what it receives.
	var sent, fromClient atomic.Int64
	var maxWrite atomic.Int64 // longest Write, in ns
	stop := make(chan struct{})
	serverDone := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverDone <- err
			return
		}
		defer conn.Close()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		block := make([]byte, 1024)
		for {
			select {
			case <-tick.C:
			case <-stop:
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					serverDone <- err
					return
				}
				buf := make([]byte, 4096)
				for {
					n, err := conn.Read(buf)
					fromClient.Add(int64(n))
					if err != nil {
						if errors.Is(err, io.EOF) {
							err = nil
						}
						serverDone <- err
						return
					}
				}
			}
			pattern(block, sent.Load())
			start := time.Now()
			if _, err := conn.Write(block); err != nil {
				serverDone <- err
				return
			}
			if d := int64(time.Since(start)); d > maxWrite.Load() {
				maxWrite.Store(d)
			}
			sent.Add(int64(len(block)))
			// What the client sends arrives in small writes: take it as it comes.
			_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
			var in [4096]byte
			n, _ := conn.Read(in[:])
			fromClient.Add(int64(n))
			_ = conn.SetReadDeadline(time.Time{})
		}
	}()

	p := StartProxy(t, ln.Addr().String())
	if got := p.URL("rtsp://user:pw@127.0.0.1:8554/cam?x=1"); got != "rtsp://user:pw@"+p.Addr()+"/cam?x=1" {
		t.Errorf("URL: %q", got)
	}
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var received atomic.Int64
	clientDone := make(chan error, 1)
	go func() {
		buf, want := make([]byte, 64<<10), make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			pattern(want[:n], received.Load())
			if string(buf[:n]) != string(want[:n]) {
				clientDone <- fmt.Errorf("wrong bytes at offset %d", received.Load())
				return
			}
			received.Add(int64(n))
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				clientDone <- err
				return
			}
		}
	}()
	ping := func() {
		t.Helper()
		if _, err := conn.Write(make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	const KiB = 1024

	time.Sleep(500 * time.Millisecond)
	if r := received.Load(); r < 25*KiB {
		t.Fatalf("%d bytes in 500 ms before Pause, want about 50 KiB", r)
	}
	ping()
	if _, ok := waitFor(time.Second, func() bool { return fromClient.Load() == 100 }); !ok {
		t.Fatalf("server got %d bytes from the client, want 100", fromClient.Load())
	}

	const cut = 2 * time.Second
	p.Pause()
	p.Pause() // no-op
	time.Sleep(50 * time.Millisecond)
	r0 := received.Load()
	ping()
	time.Sleep(cut)
	r1, held := received.Load(), p.held()
	if r1 != r0 {
		t.Errorf("%d bytes arrived during the pause", r1-r0)
	}
	if n := fromClient.Load(); n != 100 {
		t.Errorf("server got %d bytes from the client during the pause, want none", n-100)
	}
	if held < 150*KiB {
		t.Errorf("proxy holds %d bytes after a %v pause, want about 200 KiB", held, cut)
	}
	if d := time.Duration(maxWrite.Load()); d > 100*time.Millisecond {
		t.Errorf("a server write blocked for %v", d)
	}

	p.Resume()
	took, ok := waitFor(time.Second, func() bool { return received.Load() >= r1+int64(held) })
	if !ok {
		t.Fatalf("%d bytes arrived in 1 s after Resume, want the %d held", received.Load()-r1, held)
	}
	if _, ok := waitFor(time.Second, func() bool { return fromClient.Load() == 200 }); !ok {
		t.Errorf("server got %d bytes from the client after Resume, want 200", fromClient.Load())
	}
	t.Logf("%d bytes held during the %v pause, all delivered %v after Resume", held, cut, took.Round(time.Millisecond))

	r2 := received.Load()
	time.Sleep(500 * time.Millisecond)
	if d := received.Load() - r2; d < 25*KiB || d > 100*KiB {
		t.Errorf("%d bytes in 500 ms after the burst, want about 50 KiB", d)
	}

	// The server's half-close reaches the client after all its data.
	close(stop)
	if err := <-clientDone; err != nil {
		t.Fatalf("client: %v", err)
	}
	if r, s := received.Load(), sent.Load(); r != s {
		t.Errorf("client got %d bytes, server sent %d", r, s)
	}
	conn.Close()
	if err := <-serverDone; err != nil {
		t.Fatalf("server: %v", err)
	}
	p.Close()
	p.Close() // idempotent
}

func TestProxyOverflow(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverDone := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverDone <- err
			return
		}
		defer conn.Close()
		// Until the proxy drops the connection (the kernel's buffers take
		// some MiB first).
		block := make([]byte, 64<<10)
		for range 1024 {
			if _, err := conn.Write(block); err != nil {
				serverDone <- err
				return
			}
		}
		serverDone <- nil
	}()

	rec := &logRecorder{TB: t}
	p := StartProxy(rec, ln.Addr().String())
	p.mu.Lock()
	p.maxBuffer = 64 << 10
	p.mu.Unlock()
	p.Pause() // new connections start paused too
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	if n != 0 || err != nil {
		t.Fatalf("client read %d bytes (%v), want none then EOF", n, err)
	}
	if err := <-serverDone; err == nil {
		t.Errorf("server wrote 64 MiB to a dropped connection")
	}
	if !rec.contains("dropping the connection") {
		t.Errorf("no log about the dropped connection")
	}
}

func TestProxyRTSP(t *testing.T) {
	t.Parallel()
	file := sample(t, 50)
	srv := Start(t, file, Options{Loop: true})
	p := StartProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.Port))
	// A 2 s cut in the middle of a 60-frame (6 s) read: the frames of the
	// cut arrive late, in a burst, and ffmpeg goes on. The cut starts once
	// RTP flows (16 KiB: more than the RTSP exchange), not after a fixed
	// time, which a loaded machine may spend before PLAY.
	var held int
	cutDone := make(chan struct{})
	go func() {
		defer close(cutDone)
		if _, ok := waitFor(20*time.Second, func() bool { return p.fromServers() > 16<<10 }); !ok {
			return // the read below fails
		}
		time.Sleep(time.Second) // into the read
		p.Pause()
		time.Sleep(2 * time.Second)
		held = p.held()
		p.Resume()
	}()
	start := time.Now()
	got, err := readFrames(t, p.URL(srv.URL), 60, 20*time.Second)
	<-cutDone
	if err != nil || got < 60 {
		t.Fatalf("got %d frames (%v), want 60", got, err)
	}
	if held < 10<<10 {
		t.Errorf("proxy held %d bytes during the cut, want the 2 s of RTP the server kept sending", held)
	}
	t.Logf("read 60 frames in %v through a 2 s cut (%d bytes held)", time.Since(start).Round(time.Millisecond), held)
}
