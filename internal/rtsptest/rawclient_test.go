package rtsptest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rtspConn is a minimal RTSP client over one TCP connection, with RTP
// interleaved on it (RFC 2326 10.12); just enough to time a server.
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

// do sends one request and reads its response, failing t unless it is 200.
func (c *rtspConn) do(method, target string, hdr ...string) (textproto.MIMEHeader, string) {
	c.t.Helper()
	c.cseq++
	req := fmt.Sprintf("%s %s RTSP/1.0\r\nCSeq: %d\r\n", method, target, c.cseq)
	for _, h := range hdr {
		req += h + "\r\n"
	}
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c.conn, req+"\r\n"); err != nil {
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
	body := make([]byte, 0)
	if n, _ := strconv.Atoi(h.Get("Content-Length")); n > 0 {
		body = make([]byte, n)
		if _, err := io.ReadFull(c.br, body); err != nil {
			c.t.Fatalf("%s: %v", method, err)
		}
	}
	return h, string(body)
}

// play runs DESCRIBE, SETUP (RTP/AVP/TCP, interleaved 0-1) and PLAY.
func (c *rtspConn) play(rawURL string) {
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
	h, _ = c.do("SETUP", control, "Transport: RTP/AVP/TCP;unicast;interleaved=0-1")
	session, _, _ := strings.Cut(h.Get("Session"), ";")
	c.do("PLAY", base, "Session: "+session, "Range: npt=0-")
}

// next reads one interleaved frame and returns its channel and length.
func (c *rtspConn) next(deadline time.Time) (int, int, error) {
	_ = c.conn.SetDeadline(deadline)
	var hdr [4]byte
	if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
		return 0, 0, err
	}
	if hdr[0] != '$' {
		return 0, 0, fmt.Errorf("not an interleaved frame: %q", hdr)
	}
	n := int(hdr[2])<<8 | int(hdr[3])
	_, err := c.br.Discard(n)
	return int(hdr[1]), n, err
}

func TestRawFFD(t *testing.T) {
	file := sample(t, 150)
	srv := Start(t, file, Options{Loop: true, FirstFrameDelay: 4 * time.Second})
	for _, d := range []string{"--first-frame-delay"} {
		_ = d
	}
	c := dialRTSP(t, srv.URL)
	start := time.Now()
	c.play(srv.URL)
	t.Logf("PLAY answered after %v", time.Since(start))
	var rtp [20]int
	for time.Since(start) < 12*time.Second {
		ch, _, err := c.next(time.Now().Add(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if ch == 1 {
			t.Logf("%v RTCP", time.Since(start))
		} else {
			rtp[int(time.Since(start)/time.Second)]++
		}
	}
	t.Logf("RTP per second %v", rtp)
}
