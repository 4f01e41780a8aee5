//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fakeDecoder is a VideoDecoder on the fake NVDEC that records what Output
// got: each picture's timestamp, status, format and copied bytes (CopyTo
// into a device buffer, read back).
type fakeDecoder struct {
	*VideoDecoder
	c    *Context
	buf  *DeviceBuffer
	pics []fakePic
	fail error // Output's answer
	skip bool  // Output does not copy
}

type fakePic struct {
	ts     int64
	status DecodeStatus
	format VideoFormat
	pitch  int
	bytes  []byte
	err    error
}

func newFakeDecoder(t *testing.T, c *Context, s *Stream, delay int) *fakeDecoder {
	t.Helper()
	fd := &fakeDecoder{c: c, buf: gpuAlloc(t, c, 1<<20)}
	d, err := c.NewVideoDecoder(VideoDecoderConfig{Codec: CodecH264, ExtraSurfaces: 2, DisplayDelay: delay, Stream: s, Output: fd.output})
	if err != nil {
		t.Fatalf("NewVideoDecoder: %v", err)
	}
	fd.VideoDecoder = d
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return fd
}

func (fd *fakeDecoder) output(p *DecodedPicture) error {
	if fd.fail != nil {
		return fd.fail
	}
	fp := fakePic{ts: p.Timestamp, format: p.Format}
	if !fd.skip {
		fp.pitch = p.Format.Width()*p.Format.BytesPerSample() + 32
		fp.err = p.CopyTo(fd.buf.Ptr(), fp.pitch)
		if fp.err == nil {
			h := p.Format.Height()
			fp.bytes = make([]byte, fp.pitch*(h+(h+1)/2))
			if err := fd.c.CopyDtoH(fp.bytes, fd.buf.Ptr()); err != nil {
				return err
			}
		}
	}
	var err error
	if fp.status, err = p.Status(); err != nil {
		return err
	}
	fd.pics = append(fd.pics, fp)
	return nil
}

func (fd *fakeDecoder) parse(t *testing.T, cmd string, ts int64) error {
	t.Helper()
	return fd.Parse([]byte(cmd), ts, true)
}

// checkPicture checks a copied picture against the fake's pattern (see
// fakenvcuvid.c) for value v.
func checkPicture(t *testing.T, p fakePic, v int) {
	t.Helper()
	if p.err != nil {
		t.Fatalf("picture %d: CopyTo: %v", v, p.err)
	}
	w, h, bps := p.format.Width(), p.format.Height(), p.format.BytesPerSample()
	rows := h + (h+1)/2
	for r := 0; r < rows; r++ {
		want := v + r
		if r >= h {
			want = v + 100 + (r - h)
		}
		for x := 0; x < w*bps; x += bps {
			got := int(p.bytes[r*p.pitch+x])
			exp := want & 255
			if bps == 2 {
				got |= int(p.bytes[r*p.pitch+x+1]) << 8
				exp = (want & 1023) << 6
			}
			if got != exp {
				t.Fatalf("picture %d (%s): row %d byte %d = %#x, want %#x", v, p.format, r, x, got, exp)
			}
		}
	}
}

// testFakeNVDEC drives the fake NVDEC through the package: decoder made at
// the first sequence header, pictures copied out in display order with
// their timestamps and statuses, reconfigured for a smaller size, made
// again for a larger one and for 10 bits, reused by a new parser after
// Flush, and errors and panics of Output brought back to Parse.
func testFakeNVDEC(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	fd := newFakeDecoder(t, c, s, 0)
	if _, ok := fd.Format(); ok {
		t.Fatal("Format before any sequence header")
	}
	steps := []string{"SEQ 64 48 8 1 4", "PIC 10", "PIC 11 conceal", "PIC 12 error", "PIC 13 reject"}
	for i, cmd := range steps {
		if err := fd.parse(t, cmd, int64(1000+i)); err != nil {
			t.Fatalf("Parse(%q): %v", cmd, err)
		}
	}
	if len(fd.pics) != 4 {
		t.Fatalf("%d pictures, want 4", len(fd.pics))
	}
	f, _ := fd.Format()
	if f.Width() != 64 || f.Height() != 48 || f.CodedHeight != 48 || f.BitDepth != 8 || !f.FullRange || f.Matrix != 1 || f.MinSurfaces != 4 {
		t.Errorf("format %+v", f)
	}
	for i, want := range []DecodeStatus{DecodeSuccess, DecodeConcealed, DecodeError, DecodeCallFailed} {
		p := fd.pics[i]
		if p.ts != int64(1001+i) || p.status != want {
			t.Errorf("picture %d: ts %d status %s, want %d %s", i, p.ts, p.status, 1001+i, want)
		}
		if i < 3 {
			checkPicture(t, p, 10+i)
		}
	}
	if err := fd.pics[3].err; err == nil || !strings.Contains(err.Error(), "cuvidDecodePicture failed") {
		t.Errorf("CopyTo of a rejected picture: %v", err)
	}

	// Smaller: reconfigured; larger than made: made again; 10-bit: again.
	fd.pics = nil
	for i, cmd := range []string{"SEQ 32 20 8 1 4", "PIC 20", "SEQ 96 64 8 1 4", "PIC 30", "SEQ 96 64 10 1 4", "PIC 40"} {
		if err := fd.parse(t, cmd, int64(2000+i)); err != nil {
			t.Fatalf("Parse(%q): %v", cmd, err)
		}
	}
	if st := fd.Stats(); st.Created != 3 || st.Reconfigured != 1 {
		t.Errorf("stats %+v, want 3 made and 1 reconfigured", st)
	}
	if len(fd.pics) != 3 {
		t.Fatalf("%d pictures, want 3", len(fd.pics))
	}
	for i, v := range []int{20, 30, 40} {
		checkPicture(t, fd.pics[i], v)
	}
	if f := fd.pics[2].format; f.BytesPerSample() != 2 || f.Width() != 96 {
		t.Errorf("10-bit picture format %s", f)
	}

	// A display delay of 2 holds pictures until Flush; then a new parser
	// reuses the decoder for the same format.
	d2 := newFakeDecoder(t, c, s, 2)
	for i, cmd := range []string{"SEQ 64 48 8 1 4", "PIC 1", "PIC 2", "PIC 3"} {
		if err := d2.parse(t, cmd, int64(4-i)); err != nil { // timestamps 4, 3, 2, 1
			t.Fatalf("Parse(%q): %v", cmd, err)
		}
	}
	if len(d2.pics) != 1 {
		t.Fatalf("%d pictures before Flush with display delay 2, want 1", len(d2.pics))
	}
	if err := d2.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// Handed out in increasing order, as NVIDIA's parser does.
	if len(d2.pics) != 3 || d2.pics[0].ts != 1 || d2.pics[1].ts != 2 || d2.pics[2].ts != 3 {
		t.Fatalf("after Flush: %d pictures (%+v), want timestamps 1, 2, 3", len(d2.pics), d2.pics)
	}
	checkPicture(t, d2.pics[0], 1)
	checkPicture(t, d2.pics[2], 3)
	for _, cmd := range []string{"SEQ 64 48 8 1 4", "PIC 4"} {
		if err := d2.parse(t, cmd, 9); err != nil {
			t.Fatalf("Parse(%q) after Flush: %v", cmd, err)
		}
	}
	if err := d2.Discontinuity(); err != nil {
		t.Fatalf("Discontinuity: %v", err)
	}
	if st := d2.Stats(); st.Created != 1 || st.Reused != 1 || len(d2.pics) != 4 {
		t.Errorf("after a new parser: stats %+v, %d pictures; want 1 made, 1 reused, 4 pictures", st, len(d2.pics))
	}

	// Output's error comes back from Parse; a panic is raised again there.
	boom := errors.New("boom")
	fd.fail = boom
	if err := fd.parse(t, "PIC 50", 1); !errors.Is(err, boom) {
		t.Errorf("Parse with a failing Output = %v, want boom", err)
	}
	fd.fail = nil
	func() {
		defer func() {
			if v := recover(); v != "output panicked" {
				t.Errorf("recovered %v, want Output's panic", v)
			}
		}()
		d := fd.VideoDecoder
		d.cfg.Output = func(*DecodedPicture) error { panic("output panicked") }
		defer func() { d.cfg.Output = fd.output }()
		_ = fd.parse(t, "PIC 51", 2)
		t.Error("Parse returned after Output panicked")
	}()
	if err := fd.parse(t, "PIC 52", 3); err != nil {
		t.Errorf("Parse after a recovered panic: %v", err)
	}

	// Formats NVDEC is not asked for, and the caps check.
	for cmd, want := range map[string]string{
		"SEQ 64 48 8 2 4":   "4:2:0 pictures only",
		"SEQ 64 48 12 1 4":  "NVDEC on this GPU cannot decode h264 64x48 12-bit 4:2:0",
		"SEQ 8192 48 8 1 4": "coded size 8192x48 outside 16x16 to 4096x4096",
	} {
		d := newFakeDecoder(t, c, s, 0)
		if err := d.parse(t, cmd, 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", cmd, err, want)
		}
	}
	if err := fd.Parse([]byte("nonsense"), 0, true); err == nil || !strings.Contains(err.Error(), "cuvidParseVideoData") {
		t.Errorf("Parse of garbage = %v, want cuvidParseVideoData's error", err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := fd.Parse([]byte("PIC 1"), 0, true); !errors.Is(err, ErrClosed) {
		t.Errorf("Parse after Close = %v, want ErrClosed", err)
	}
	if _, err := c.NewVideoDecoder(VideoDecoderConfig{Codec: 99, Stream: s, Output: fd.output}); err == nil {
		t.Error("NewVideoDecoder accepted codec 99")
	}
}

// testFakeNoNVDEC: a driver without libnvcuvid.so.1 gives ErrNoNVDEC, with
// the library's name and the container hint.
func testFakeNoNVDEC(t *testing.T) {
	c := gpuContext(t)
	s := gpuStream(t, c)
	_, err := c.NewVideoDecoder(VideoDecoderConfig{Codec: CodecH264, Stream: s, Output: func(*DecodedPicture) error { return nil }})
	if !errors.Is(err, ErrNoNVDEC) || errors.Is(err, ErrNoDriver) {
		t.Fatalf("NewVideoDecoder = %v, want ErrNoNVDEC only", err)
	}
	for _, want := range []string{"no NVIDIA video decoder library found", nvdecLibrary, "NVIDIA_DRIVER_CAPABILITIES must include video"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if again := LoadNVDEC(); again != err {
		t.Errorf("LoadNVDEC again = %v, want the first error", again)
	}
	t.Log(err)
}

// TestVideoDecoderWithoutDriver: with no driver at all, LoadNVDEC and
// NewVideoDecoder give Init's ErrNoDriver error (CI's machines).
func TestVideoDecoderWithoutDriver(t *testing.T) {
	initErr := Init()
	if initErr == nil {
		t.Skip("a CUDA driver is present")
	}
	if err := LoadNVDEC(); err != initErr {
		t.Errorf("LoadNVDEC = %v, want Init's %v", err, initErr)
	}
	for c, want := range map[VideoCodec]string{CodecH264: "h264", CodecHEVC: "hevc", 3: "codec(3)"} {
		if c.String() != want {
			t.Errorf("%d: %q, want %q", int(c), c, want)
		}
	}
	for s, want := range map[DecodeStatus]string{DecodeConcealed: "concealed", DecodeError: "error", DecodeCallFailed: "decode_call_failed", 5: "status(5)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", int(s), s, want)
		}
	}
	f := VideoFormat{Codec: CodecHEVC, Right: 1920, Bottom: 1080, BitDepth: 10, Chroma: Chroma420}
	if got := fmt.Sprint(f); got != "hevc 1920x1080 10-bit 4:2:0" || f.BytesPerSample() != 2 {
		t.Errorf("format %q, %d bytes per sample", got, f.BytesPerSample())
	}
}
