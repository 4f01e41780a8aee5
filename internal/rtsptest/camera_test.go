package rtsptest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-video/vigil/internal/assets"
)

// vtestFPS is the frame rate of vtest.avi, which every test file here comes
// from; rtpTicksPerFrame is one frame in RTP's 90 kHz video clock.
const (
	vtestFPS         = 10
	rtpTicksPerFrame = 90000 / vtestFPS
)

func vtest() string { return filepath.Join(assets.MediaDir(), "vtest.avi") }

// rtpPacket is one RTP packet (RFC 3550, 5.1) as a client received it.
type rtpPacket struct {
	seq     uint16
	ts      uint32
	ssrc    uint32
	payload []byte
	at      time.Time
}

func parseRTP(b []byte, at time.Time) (rtpPacket, error) {
	if len(b) < 12 || b[0]>>6 != 2 {
		return rtpPacket{}, fmt.Errorf("not an RTP packet (%d bytes)", len(b))
	}
	off := 12 + 4*int(b[0]&0x0f)
	if b[0]&0x10 != 0 && len(b) >= off+4 { // header extension
		off += 4 + 4*int(binary.BigEndian.Uint16(b[off+2:]))
	}
	if off > len(b) {
		return rtpPacket{}, fmt.Errorf("RTP header of %d bytes in a %d-byte packet", off, len(b))
	}
	return rtpPacket{seq: binary.BigEndian.Uint16(b[2:]), ts: binary.BigEndian.Uint32(b[4:]),
		ssrc: binary.BigEndian.Uint32(b[8:]), payload: b[off:], at: at}, nil
}

// rtpReader is a minimal RTSP client that plays a stream over TCP
// (interleaved) or UDP and returns its RTP packets.
type rtpReader struct {
	c   *rtspConn
	rtp net.PacketConn // UDP only
}

// playRTP plays url over transport "tcp" or "udp".
func playRTP(t *testing.T, url, transport string) *rtpReader {
	t.Helper()
	r := &rtpReader{c: dialRTSP(t, url)}
	if transport == "tcp" {
		r.c.play(url)
		return r
	}
	// RTP on an even port, RTCP on the next one (RFC 3550, 11).
	var rtcp net.PacketConn
	for i := 0; rtcp == nil; i++ {
		if i == 20 {
			t.Fatal("no free pair of UDP ports")
		}
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		if port%2 == 0 {
			rtcp, _ = net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port+1))
		}
		if rtcp == nil {
			pc.Close()
			continue
		}
		r.rtp = pc
	}
	t.Cleanup(func() { r.rtp.Close(); rtcp.Close() })
	port := r.rtp.LocalAddr().(*net.UDPAddr).Port
	got := r.c.playWith(url, fmt.Sprintf("RTP/AVP;unicast;client_port=%d-%d", port, port+1))
	if !strings.Contains(got, fmt.Sprintf("client_port=%d-%d", port, port+1)) {
		t.Fatalf("SETUP over UDP answered with Transport %q", got)
	}
	return r
}

// next returns the next RTP packet, or an error at the deadline.
func (r *rtpReader) next(deadline time.Time) (rtpPacket, error) {
	if r.rtp != nil {
		_ = r.rtp.SetReadDeadline(deadline)
		buf := make([]byte, 65536)
		n, _, err := r.rtp.ReadFrom(buf)
		if err != nil {
			return rtpPacket{}, err
		}
		return parseRTP(buf[:n], time.Now())
	}
	for {
		ch, data, err := r.c.nextFrame(deadline)
		if err != nil {
			return rtpPacket{}, err
		}
		if ch == 0 {
			return parseRTP(data, time.Now())
		}
	}
}

// read returns the next n RTP packets, failing the test after timeout.
func (r *rtpReader) read(t *testing.T, n int, timeout time.Duration) []rtpPacket {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pkts := make([]rtpPacket, 0, n)
	for len(pkts) < n {
		p, err := r.next(deadline)
		if err != nil {
			t.Fatalf("after %d of %d RTP packets: %v", len(pkts), n, err)
		}
		pkts = append(pkts, p)
	}
	return pkts
}

// lost returns how many packets of pkts' sequence number range are missing
// (pkts in arrival order; the range must be under 32768 packets).
func lost(pkts []rtpPacket) (missing, expected int) {
	ext := int(pkts[0].seq)
	hi, n := ext, 0
	for i, p := range pkts {
		if i > 0 {
			ext += int(int16(p.seq - pkts[i-1].seq)) // unwrap
		}
		hi = max(hi, ext)
		n++
	}
	expected = hi - int(pkts[0].seq) + 1
	return expected - n, expected
}

// probed is what ffprobe reports of a stream's first packets.
type probed struct {
	codec   string
	bFrames int
	pts     []float64 // of the packets in decode order, seconds; NaN where none
}

// probeRTSP runs ffprobe over RTSP/TCP on url and returns its stream's codec
// and the PTS of the packets of the first seconds of the stream.
func probeRTSP(t *testing.T, url string, seconds float64) probed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds*float64(time.Second))+20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ffprobe", "-v", "error", "-rtsp_transport", "tcp", "-i", url,
		"-read_intervals", fmt.Sprintf("%%+%g", seconds), "-show_packets", "-show_streams",
		"-show_entries", "packet=pts_time:stream=codec_name,has_b_frames", "-of", "json").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("ffprobe %s: %v", url, err)
	}
	var res struct {
		Streams []struct {
			Codec   string `json:"codec_name"`
			BFrames int    `json:"has_b_frames"`
		}
		Packets []struct {
			PTS string `json:"pts_time"`
		}
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Streams) != 1 {
		t.Fatalf("ffprobe %s: %v: %s", url, err, out)
	}
	p := probed{codec: res.Streams[0].Codec, bFrames: res.Streams[0].BFrames}
	for _, pkt := range res.Packets {
		v, err := strconv.ParseFloat(pkt.PTS, 64)
		if err != nil {
			v = math.NaN()
		}
		p.pts = append(p.pts, v)
	}
	return p
}

// checkPTS checks that pts (seconds, decode order) go back in decode order
// at least minBackward times and are, sorted, whole frames apart: the
// reordering came through and no PTS was clipped or doubled. ffprobe gives
// the first packet over RTSP no PTS (NaN): that frame may be missing from
// the sorted list.
func checkPTS(t *testing.T, pts []float64, minBackward int) {
	t.Helper()
	var valid []float64
	backward := 0
	for _, v := range pts {
		if math.IsNaN(v) {
			continue
		}
		if len(valid) > 0 && v < valid[len(valid)-1] {
			backward++
		}
		valid = append(valid, v)
	}
	if backward < minBackward {
		t.Errorf("%d of %d PTS go back in decode order, want at least %d: %v", backward, len(valid), minBackward, valid)
	}
	slices.Sort(valid)
	skipped := 0
	for i := 1; i < len(valid); i++ {
		// ffprobe prints microseconds; 1 ms is far above its rounding.
		frames := (valid[i] - valid[i-1]) * vtestFPS
		if k := math.Round(frames); k < 1 || math.Abs(frames-k) > 0.01 {
			t.Errorf("sorted PTS %v and %v are %.2f frames apart, want a whole number", valid[i-1], valid[i], frames)
		} else {
			skipped += int(k) - 1
		}
	}
	if nan := len(pts) - len(valid); skipped > nan {
		t.Errorf("%d frames missing between the sorted PTS, %d packets without PTS: %v", skipped, nan, valid)
	}
}

// lateJoin reads frames from url with two ffmpeg clients: the first from
// the start, the second joining 3 s later (mid-GOP: parameter sets must
// come again with a keyframe). Both must decode 10 frames.
func lateJoin(t *testing.T, url string) {
	t.Helper()
	first := make(chan error, 1)
	go func() {
		n, err := readFrames(t, url, 60, 30*time.Second)
		if err == nil && n < 60 {
			err = fmt.Errorf("%d frames, want 60", n)
		}
		first <- err
	}()
	time.Sleep(3 * time.Second) // a join in the middle of the first client's session
	n, err := readFrames(t, url, 10, 20*time.Second)
	if err != nil || n < 10 {
		t.Errorf("late joiner: %d frames (%v), want 10", n, err)
	}
	if err := <-first; err != nil {
		t.Errorf("first client: %v", err)
	}
}

func TestBFrames(t *testing.T) {
	// Encoding is slow and takes every core: before the parallel tests
	// start, which time the stream.
	file := EncodeH264BFrames(t, vtest(), 150)
	t.Parallel()
	srv := Start(t, file, Options{Loop: true})
	t.Run("pts", func(t *testing.T) {
		p := probeRTSP(t, srv.URL, 4)
		if p.codec != "h264" || p.bFrames == 0 {
			t.Errorf("codec %s with has_b_frames %d, want h264 with B-frames", p.codec, p.bFrames)
		}
		// Each group of 4 frames (P B b b) has 2 PTS going back.
		checkPTS(t, p.pts, len(p.pts)/4)
	})
	t.Run("late joiner", func(t *testing.T) { lateJoin(t, srv.URL) })
}

// hevcNALs returns the NAL unit types that start in the HEVC RTP payload p
// (RFC 7798, 4.4): a single NAL unit, each unit of an aggregation packet
// (type 48), or the first fragment of a fragmentation unit (type 49).
func hevcNALs(p []byte) []int {
	if len(p) < 3 {
		return nil
	}
	switch typ := int(p[0]>>1) & 0x3f; typ {
	case 48:
		var types []int
		for b := p[2:]; len(b) > 2; {
			size := int(binary.BigEndian.Uint16(b))
			if len(b) < 2+size || size == 0 {
				break
			}
			types = append(types, int(b[2]>>1)&0x3f)
			b = b[2+size:]
		}
		return types
	case 49:
		if p[2]&0x80 != 0 { // start bit
			return []int{int(p[2] & 0x3f)}
		}
		return nil
	default:
		return []int{typ}
	}
}

// HEVC NAL unit types (ITU-T H.265, table 7-1).
const (
	nalRASLN = 8
	nalRASLR = 9
	nalCRA   = 21
	nalVPS   = 32
	nalSPS   = 33
	nalPPS   = 34
)

func TestHEVCCRA(t *testing.T) {
	// Encoding is slow and takes every core: before the parallel tests
	// start, which time the stream.
	file := EncodeHEVCCRA(t, vtest(), 150)
	t.Parallel()
	srv := Start(t, file, Options{Loop: true})
	// What a client gets first: VPS, SPS, PPS, the CRA picture, then its
	// RASL pictures, whose RTP timestamps are 1 to 3 frames before the
	// CRA's (in display order they come first).
	t.Run("rtp", func(t *testing.T) {
		r := playRTP(t, srv.URL, "tcp")
		deadline := time.Now().Add(15 * time.Second)
		var params []int
		type picture struct {
			typ int
			ts  uint32
		}
		var pics []picture // the first VCL NAL unit of each access unit
		for len(pics) < 1+HEVCCRALeading+1 {
			p, err := r.next(deadline)
			if err != nil {
				t.Fatalf("after %d pictures: %v", len(pics), err)
			}
			for _, typ := range hevcNALs(p.payload) {
				switch {
				case typ >= nalVPS && typ <= nalPPS && len(pics) == 0:
					params = append(params, typ)
				case typ < nalVPS && (len(pics) == 0 || pics[len(pics)-1].ts != p.ts):
					pics = append(pics, picture{typ, p.ts})
				}
			}
		}
		t.Logf("parameter sets %v, then pictures %v", params, pics)
		for _, want := range []int{nalVPS, nalSPS, nalPPS} {
			if !slices.Contains(params, want) {
				t.Errorf("no NAL unit of type %d before the first picture (got %v)", want, params)
			}
		}
		if pics[0].typ != nalCRA {
			t.Fatalf("first picture of type %d, want a CRA (%d)", pics[0].typ, nalCRA)
		}
		var before []int
		for _, p := range pics[1 : 1+HEVCCRALeading] {
			if p.typ != nalRASLN && p.typ != nalRASLR {
				t.Errorf("picture of type %d after the CRA, want RASL (%d or %d)", p.typ, nalRASLN, nalRASLR)
			}
			before = append(before, int(int32(pics[0].ts-p.ts)))
		}
		slices.Sort(before)
		if want := []int{rtpTicksPerFrame, 2 * rtpTicksPerFrame, 3 * rtpTicksPerFrame}; !slices.Equal(before, want) {
			t.Errorf("RASL pictures %v RTP ticks before the CRA, want %v (1, 2 and 3 frames)", before, want)
		}
		if last := pics[len(pics)-1]; last.typ > 1 || int32(last.ts-pics[0].ts) <= 0 {
			t.Errorf("after the RASL pictures: type %d, %d ticks after the CRA; want a trailing picture after it", last.typ, int32(last.ts-pics[0].ts))
		}
	})
	t.Run("pts", func(t *testing.T) {
		p := probeRTSP(t, srv.URL, 4)
		if p.codec != "hevc" {
			t.Errorf("codec %s, want hevc", p.codec)
		}
		checkPTS(t, p.pts, len(p.pts)/4)
	})
	t.Run("late joiner", func(t *testing.T) { lateJoin(t, srv.URL) })
}

func TestPacketLoss(t *testing.T) {
	t.Parallel()
	file := sample(t, 150)
	// 3 % over UDP, as the issue measured: about 30 of 1,000 packets. The
	// drops are seeded, so the count is the same on every run; the bounds
	// leave room for the kernel dropping a few datagrams too (3.7 standard
	// deviations of a binomial count, sqrt(1000 * 0.03 * 0.97) = 5.4).
	t.Run("udp", func(t *testing.T) {
		t.Parallel()
		srv := Start(t, file, Options{Loop: true, PacketLoss: 0.03})
		pkts := playRTP(t, srv.URL, "udp").read(t, 1000, 60*time.Second)
		missing, expected := lost(pkts)
		t.Logf("%d of %d packets missing over UDP", missing, expected)
		if share := float64(missing) / float64(expected); share < 0.01 || share > 0.05 {
			t.Errorf("%d of %d packets missing (%.1f %%), want about 3 %%", missing, expected, 100*share)
		}
	})
	// Over TCP nothing else can lose a packet: none before SetPacketLoss,
	// some after (10 %: 50 ± 7 of 500).
	t.Run("tcp", func(t *testing.T) {
		t.Parallel()
		srv := Start(t, file, Options{Loop: true})
		r := playRTP(t, srv.URL, "tcp")
		if missing, expected := lost(r.read(t, 200, 30*time.Second)); missing != 0 {
			t.Errorf("%d of %d packets missing without loss", missing, expected)
		}
		if err := srv.SetPacketLoss(0.1); err != nil {
			t.Fatal(err)
		}
		r.read(t, 20, 10*time.Second) // sent before the change, in the socket buffers
		missing, expected := lost(r.read(t, 500, 60*time.Second))
		t.Logf("%d of %d packets missing over TCP at 10 %%", missing, expected)
		if share := float64(missing) / float64(expected); share < 0.05 || share > 0.15 {
			t.Errorf("%d of %d packets missing (%.1f %%), want about 10 %%", missing, expected, 100*share)
		}
		if err := srv.SetPacketLoss(1.5); err == nil {
			t.Errorf("SetPacketLoss(1.5) accepted")
		}
	})
}

func TestResetTimestamps(t *testing.T) {
	t.Parallel()
	file := sample(t, 150)
	srv := Start(t, file, Options{Loop: true})
	if _, err := srv.ResetTimestamps(); err == nil {
		t.Errorf("ResetTimestamps with no client: no error")
	}
	r := playRTP(t, srv.URL, "tcp")

	// Read in the background while the test goroutine resets; stop once 2 s
	// of packets came after the reset.
	var mu sync.Mutex
	var pkts []rtpPacket
	var resetAt time.Time
	readErr := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for {
			p, err := r.next(deadline)
			if err != nil {
				readErr <- err
				return
			}
			mu.Lock()
			pkts = append(pkts, p)
			done := !resetAt.IsZero() && p.at.Sub(resetAt) > 2*time.Second
			mu.Unlock()
			if done {
				readErr <- nil
				return
			}
		}
	}()
	if _, ok := waitFor(30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(pkts) > 0 && pkts[len(pkts)-1].ts-pkts[0].ts > 4*90000
	}); !ok {
		t.Fatal("no 4 s of stream within 30 s")
	}
	back, err := srv.ResetTimestamps()
	mu.Lock()
	resetAt = time.Now()
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}

	// One jump back of `back`, at a frame boundary; sequence numbers and SSRC
	// go on; the packets keep their real-time pace across it.
	jumps := 0
	for i := 1; i < len(pkts); i++ {
		prev, p := pkts[i-1], pkts[i]
		if p.seq != prev.seq+1 || p.ssrc != prev.ssrc {
			t.Fatalf("packet %d: seq %d ssrc %x after seq %d ssrc %x", i, p.seq, p.ssrc, prev.seq, prev.ssrc)
		}
		d := int64(int32(p.ts - prev.ts))
		if d >= 0 {
			continue
		}
		jumps++
		// The jump replaces one frame step: it is back by `back` minus one
		// frame, to the tick (RTP time is exact; back is printed in ms).
		want := -(back.Seconds()*90000 - rtpTicksPerFrame)
		if math.Abs(float64(d)-want) > 90 {
			t.Errorf("RTP timestamps jump by %d ticks, want %.0f (back %v)", d, want, back)
		}
		// A pause is a gap in the stream; 1 s is ten frames at 10 fps.
		if gap := p.at.Sub(prev.at); gap > time.Second {
			t.Errorf("%v without packets at the jump", gap)
		}
		t.Logf("packet %d: RTP timestamp back %.3f s (%d ticks), %v after the previous packet",
			i, float64(-d)/90000, -d, p.at.Sub(prev.at).Round(time.Millisecond))
	}
	if jumps != 1 {
		t.Errorf("%d jumps back in the RTP timestamps, want 1", jumps)
	}
	// The stream had run 4 s; it goes back to its start (a 2.5 s GOP and
	// scheduling may add a few seconds; the floor is the 4 s already read
	// minus a frame).
	if back < 3900*time.Millisecond || back > 15*time.Second {
		t.Errorf("back %v, want about the 4 to 8 s the stream had run", back)
	}
}

func TestRestartTimeline(t *testing.T) {
	t.Parallel()
	file := sample(t, 150)
	srv := Start(t, file, Options{Loop: true})
	before := probeRTSP(t, srv.URL, 3)
	srv.Restart(t)
	after := probeRTSP(t, srv.URL, 1)
	last := func(pts []float64) float64 {
		for i := len(pts) - 1; i >= 0; i-- {
			if !math.IsNaN(pts[i]) {
				return pts[i]
			}
		}
		return math.NaN()
	}
	first := func(pts []float64) float64 {
		for _, v := range pts {
			if !math.IsNaN(v) {
				return v
			}
		}
		return math.NaN()
	}
	t.Logf("PTS %.3f to %.3f s before the restart, from %.3f s after", first(before.pts), last(before.pts), first(after.pts))
	// Two frames of slack: ffprobe gives the first packet no PTS.
	if f := first(after.pts); !(f <= 2.0/vtestFPS+0.001) {
		t.Errorf("first PTS %.3f s after a restart, want the stream's start (0)", f)
	}
	if l := last(before.pts); !(l > 2) {
		t.Errorf("last PTS %.3f s before the restart, want about 3 s", l)
	}
}

// frameHashes decodes n frames of url with the ffmpeg CLI over RTSP/TCP and
// returns each frame's MD5 (-f framemd5).
func frameHashes(t *testing.T, url string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error",
		"-rtsp_transport", "tcp", "-i", url, "-frames:v", strconv.Itoa(n), "-f", "framemd5", "-")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffmpeg %s: %v: %s", url, err, stderr.String())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Logf("ffmpeg stderr: %s", s)
	}
	var hashes []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Split(line, ","); len(f) == 6 && !strings.HasPrefix(line, "#") {
			hashes = append(hashes, strings.TrimSpace(f[5]))
		}
	}
	return hashes
}

func TestPresets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ preset, codec string }{
		{PresetLive, "h264"},
		{PresetLiveHEVC, "hevc"},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			t.Parallel()
			srv := StartPreset(t, tc.preset, Options{})
			if p := probeRTSP(t, srv.URL, 1); p.codec != tc.codec {
				t.Errorf("codec %s, want %s", p.codec, tc.codec)
			}
			// 2 s at 25 fps; every frame differs (the ball moves, the
			// running time on it counts milliseconds).
			hashes := frameHashes(t, srv.URL, 50)
			n := len(hashes)
			slices.Sort(hashes)
			if distinct := len(slices.Compact(hashes)); n != 50 || distinct < 45 {
				t.Errorf("%d frames decoded, %d distinct; want 50 moving frames", n, distinct)
			}
		})
	}
}
