package rtsptest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

const (
	// proxyMaxBuffer bounds what a paused Proxy holds per connection (both
	// directions together) before it drops that connection.
	proxyMaxBuffer = 256 << 20
	// proxyWindow is how much a forwarding (not paused) direction reads
	// ahead of its writes: small, so that a slow receiver still slows the
	// sender down as it would without the proxy.
	proxyWindow = 64 << 10
	// proxyBatch bounds one write, so that Pause takes effect soon even
	// during a flush.
	proxyBatch = 1 << 20
)

// Proxy is a TCP proxy on 127.0.0.1 for network-cut tests: it forwards every
// connection it accepts to a target address, and Pause/Resume simulate a cut
// of the network (and its end) for all of them at once. Start it with
// StartProxy. Its methods are safe for concurrent use.
//
// While paused, it still reads from both sides, so neither side's TCP
// blocks (a server keeps sending in real time, as if its packets were
// queued somewhere on the way), but it holds the data in memory instead of
// writing it. Resume then delivers all of it in a burst, in order, before
// forwarding normally again: for an RTSP/TCP session, the RTP of the whole
// cut arrives at once, late, and so do the client's keep-alives at the
// server. Closing (EOF) is delayed in the same way. A connection whose
// held data exceeds 256 MiB is dropped (both sides closed), with a message
// logged to the test.
type Proxy struct {
	t         testing.TB
	ln        net.Listener
	target    string
	maxBuffer int // proxyMaxBuffer; lowered by tests

	mu       sync.Mutex
	cond     *sync.Cond // on mu; broadcast on any change below
	paused   bool
	pausedAt time.Time
	closed   bool
	conns    map[*proxyConn]struct{}
	nextID   int
	fromSrv  int64 // bytes read from the target, all connections

	wg sync.WaitGroup // the accept loop and every connection's goroutines
}

// proxyConn is one proxied connection: client (accepted) and server
// (dialed to the target), with one direction each way.
type proxyConn struct {
	id             int
	client, server net.Conn
	dirs           [2]proxyDir // client to server, server to client
	dead           bool        // both conns closed; guarded by Proxy.mu
	finished       int         // directions done; guarded by Proxy.mu
}

// proxyDir is one direction of a proxyConn. A reader goroutine reads src
// into chunks; a writer goroutine writes them to dst. All fields but src,
// dst and name are guarded by Proxy.mu.
type proxyDir struct {
	name     string
	src, dst net.Conn
	chunks   [][]byte // read, not yet written
	size     int      // bytes in chunks plus the batch being written
	rerr     error    // src's read error (io.EOF: closed), once read ended
}

// StartProxy starts a Proxy listening on 127.0.0.1 (a free port) that
// forwards every accepted connection to target (host:port), dialed when the
// connection is accepted (even while paused: the target then sees it, but
// no data). It is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("rtsptest: proxy: %v", err)
	}
	p := &Proxy{t: t, ln: ln, target: target, maxBuffer: proxyMaxBuffer,
		conns: make(map[*proxyConn]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the address the proxy listens on, 127.0.0.1:PORT.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns serverURL (such as Server.URL) with its host and port
// replaced by the proxy's, so that a client given it connects through the
// proxy. It fails the test when serverURL does not parse.
func (p *Proxy) URL(serverURL string) string {
	p.t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil || u.Host == "" {
		p.t.Fatalf("rtsptest: proxy: bad URL %q (%v)", serverURL, err)
	}
	u.Host = p.Addr()
	return u.String()
}

// Pause starts a network cut: from now on, data read from either side of
// every connection (current and new ones) is held instead of written. A
// write already under way (at most 1 MiB) still completes. It is a no-op
// when already paused.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused || p.closed {
		return
	}
	p.paused, p.pausedAt = true, time.Now()
	p.cond.Broadcast()
}

// Resume ends a network cut: everything held is written as fast as the
// receivers take it, in order per direction, then data is forwarded as
// before. It does not wait for that burst to be written. It is a no-op when
// not paused.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		return
	}
	held := 0
	for c := range p.conns {
		held += c.dirs[0].size + c.dirs[1].size
	}
	p.t.Logf("rtsptest: proxy %s: resumed after %v; flushing %d bytes held on %d connections",
		p.Addr(), time.Since(p.pausedAt).Round(time.Millisecond), held, len(p.conns))
	p.paused = false
	p.cond.Broadcast()
}

// Close stops the proxy: it closes its listener and every connection
// (without delivering held data) and waits for all its goroutines to end.
// It is idempotent; StartProxy's test cleanup calls it too.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		_ = p.ln.Close()
		for c := range p.conns {
			p.killLocked(c, nil)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// held returns the bytes currently held (read and not yet written).
func (p *Proxy) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		n += c.dirs[0].size + c.dirs[1].size
	}
	return n
}

// fromServers returns how many bytes the proxy has read from the target.
func (p *Proxy) fromServers() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fromSrv
}

// accept runs until the listener is closed.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if !closed {
				p.t.Logf("rtsptest: proxy %s: accept: %v", p.Addr(), err)
			}
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.t.Logf("rtsptest: proxy %s: %v; closing the client's connection", p.Addr(), err)
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.nextID++
		c := &proxyConn{id: p.nextID, client: client, server: server}
		c.dirs[0] = proxyDir{name: "client to server", src: client, dst: server}
		c.dirs[1] = proxyDir{name: "server to client", src: server, dst: client}
		p.conns[c] = struct{}{}
		p.wg.Add(4) // while this goroutine still counts, so never after Close's Wait returned
		p.mu.Unlock()
		for i := range c.dirs {
			go p.read(c, &c.dirs[i])
			go p.write(c, &c.dirs[i])
		}
	}
}

// read copies d.src into d.chunks until it ends or c dies. Forwarding, it
// stays at most proxyWindow ahead of the writer; paused, it never waits.
func (p *Proxy) read(c *proxyConn, d *proxyDir) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := d.src.Read(buf)
		p.mu.Lock()
		if n > 0 {
			for !c.dead && !p.paused && d.size >= proxyWindow {
				p.cond.Wait()
			}
			if c.dead {
				p.mu.Unlock()
				return
			}
			if c.dirs[0].size+c.dirs[1].size+n > p.maxBuffer {
				p.killLocked(c, fmt.Errorf("more than %d bytes held; dropping the connection", p.maxBuffer))
				p.mu.Unlock()
				return
			}
			d.chunks = append(d.chunks, append([]byte(nil), buf[:n]...))
			d.size += n
			if d.src == c.server {
				p.fromSrv += int64(n)
			}
			p.cond.Broadcast()
		}
		if err != nil {
			d.rerr = err
			p.cond.Broadcast()
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// write writes d.chunks to d.dst whenever not paused. Once they are all
// written and d.src has ended, it half-closes d.dst (or, after a read
// error other than EOF, closes the connection), and closes the connection
// when both directions are done.
func (p *Proxy) write(c *proxyConn, d *proxyDir) {
	defer p.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for !c.dead && (p.paused || (len(d.chunks) == 0 && d.rerr == nil)) {
			p.cond.Wait()
		}
		if c.dead {
			return
		}
		if len(d.chunks) == 0 { // d.src ended and all was written
			if !errors.Is(d.rerr, io.EOF) {
				p.killLocked(c, nil) // reset or the like: pass it on
				return
			}
			if tc, ok := d.dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			if c.finished++; c.finished == 2 {
				p.killLocked(c, nil)
			}
			return
		}
		var batch net.Buffers
		n := 0
		for len(d.chunks) > 0 && (n == 0 || n+len(d.chunks[0]) <= proxyBatch) {
			n += len(d.chunks[0])
			batch = append(batch, d.chunks[0])
			d.chunks[0] = nil
			d.chunks = d.chunks[1:]
		}
		p.mu.Unlock()
		_, err := batch.WriteTo(d.dst)
		p.mu.Lock()
		d.size -= n
		p.cond.Broadcast()
		if err != nil {
			if !c.dead {
				p.killLocked(c, fmt.Errorf("%s: %w", d.name, err))
			}
			return
		}
	}
}

// killLocked closes both sides of c, logging why when err is not nil.
// The reason is logged before the sockets close, so that a peer (or a
// test) that sees the close can already read why. p.mu must be held.
func (p *Proxy) killLocked(c *proxyConn, err error) {
	if c.dead {
		return
	}
	c.dead = true
	if err != nil {
		p.t.Logf("rtsptest: proxy %s: connection %d: %v", p.Addr(), c.id, err)
	}
	_ = c.client.Close()
	_ = c.server.Close()
	delete(p.conns, c)
	p.cond.Broadcast()
}
