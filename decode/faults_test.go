package decode_test

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// damage XORs n bytes at each of count positions spread evenly over the
// second half of the file in, and returns the damaged copy's path.
func damage(t *testing.T, in, name string, count, n int) string {
	t.Helper()
	data, err := os.ReadFile(in)
	require.NoError(t, err)
	testenv.Damage(data, count, n)
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// breakContinuity gives one MPEG-TS packet in the middle of a PES (video,
// payload, no payload_unit_start, and so is the next one) a wrong
// continuity counter: the demuxer flags that PES AV_PKT_FLAG_CORRUPT,
// while its payload, and so its picture, stays whole. The counter is moved
// by 8, not 1, so that the next packet is not taken for a duplicate.
func breakContinuity(t *testing.T, in, name string) string {
	t.Helper()
	data, err := os.ReadFile(in)
	require.NoError(t, err)
	const size = 188
	require.Zero(t, len(data)%size)
	mid := func(p []byte) bool {
		pid := int(p[1]&0x1f)<<8 | int(p[2])
		return p[0] == 0x47 && pid == 0x100 && p[1]&0x40 == 0 && p[3]&0x10 != 0 // ffmpeg's first video PID
	}
	for k := len(data) / size / 2; (k+2)*size <= len(data); k++ {
		p, next := data[k*size:], data[(k+1)*size:]
		if mid(p) && mid(next) {
			p[3] = p[3]&0xf0 | (p[3]+8)&0x0f
			out := filepath.Join(t.TempDir(), name)
			require.NoError(t, os.WriteFile(out, data, 0o644))
			return out
		}
	}
	t.Fatal("no video TS packet in the middle of a PES")
	return ""
}

// Frames the decoder damaged come out flagged, in the frame, in Faults and
// in vigil_frames_corrupt_total alike: with frame threads (files) and with
// slice threads (live and real-time inputs), whose reports differ in
// FFmpeg 5.1 (concealment with frame threads, failed slices with slice
// threads), and for a packet the demuxer flagged corrupt though the
// decoder found nothing wrong. The undamaged file has no corrupt frame.
func TestCorruptFramesFlagged(t *testing.T) {
	gen := func(name string) string {
		return makeMedia(t, name, "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25", "-frames:v", "50",
			"-c:v", "libx264", "-bf", "0", "-g", "50", "-pix_fmt", "yuv420p")
	}
	clean := gen("clean.ts")
	// A raw H.264 stream: its demuxer never flags packets, so what is
	// flagged there, the decoder reported.
	bad := damage(t, gen("clean.h264"), "bad.h264", 20, 8)
	for _, c := range []struct {
		name     string
		path     string
		realtime bool
		corrupt  func(t *testing.T, flagged []uint64)
	}{
		{"clean", clean, false, func(t *testing.T, flagged []uint64) { require.Empty(t, flagged) }},
		{"decoder, frame threads", bad, false, func(t *testing.T, flagged []uint64) {
			require.NotEmpty(t, flagged)
			require.NotContains(t, flagged, uint64(0), "the first frame comes before the damage")
		}},
		{"decoder, slice threads", bad, true, func(t *testing.T, flagged []uint64) {
			require.NotEmpty(t, flagged)
			require.NotContains(t, flagged, uint64(0), "the first frame comes before the damage")
		}},
		{"demuxer", breakContinuity(t, clean, "cc.ts"), false, func(t *testing.T, flagged []uint64) {
			require.Len(t, flagged, 1, "the one PES with a continuity error")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := decode.NewMetrics(prometheus.NewRegistry())
			src, err := decode.New(decode.Options{URL: c.path, StreamID: "s", Realtime: c.realtime, Metrics: m})
			require.NoError(t, err)
			var flagged []uint64
			n := 0
			err = src.Run(context.Background(), func(f *pipeline.Frame) {
				f.Image.Release()
				n++
				if f.Corrupt {
					flagged = append(flagged, f.Seq)
				}
			})
			require.ErrorIs(t, err, io.EOF)
			t.Logf("%d frames, corrupt: %v, faults %+v", n, flagged, src.Faults())
			c.corrupt(t, flagged)
			require.Equal(t, uint64(len(flagged)), src.Faults().CorruptFrames)
			require.Equal(t, float64(len(flagged)), testutil.ToFloat64(m.FramesCorrupt.WithLabelValues("s")))
		})
	}
}

// A stream joined before its first keyframe: FFmpeg 5.1 drops the frames
// that reference the missing keyframe unless asked to output them; vigil
// emits them flagged corrupt, so every coded picture is accounted for.
func TestFramesBeforeFirstKeyframe(t *testing.T) {
	full := makeMedia(t, "g50.h264", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-frames:v", "100",
		"-c:v", "libx264", "-bf", "0", "-g", "50", "-pix_fmt", "yuv420p")
	// Keep the parameter sets, drop the first IDR picture: 49 P-pictures,
	// then the second GOP (IDR + 49).
	late := testenv.RewriteH264(t, full, "late.h264", func(typ, nth int) bool { return typ != testenv.NALIDR || nth > 0 })
	src, err := decode.New(decode.Options{URL: late, StreamID: "late"})
	require.NoError(t, err)
	var corrupt []bool
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		f.Image.Release()
		corrupt = append(corrupt, f.Corrupt)
	})
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, corrupt, 99, "every coded picture comes out")
	for i, c := range corrupt {
		require.Equal(t, i < 49, c, "frame %d: corrupt only before the first keyframe", i)
	}
	require.Equal(t, uint64(49), src.Faults().CorruptFrames)
}

// packetPositions returns the byte offsets of the video packets of a file,
// as ffprobe reports them.
func packetPositions(t *testing.T, path string) []int {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pos",
		"-of", "csv=p=0", path).Output()
	require.NoError(t, err)
	var pos []int
	for _, l := range strings.Fields(string(out)) {
		p, err := strconv.Atoi(strings.TrimSuffix(l, ","))
		require.NoError(t, err)
		pos = append(pos, p)
	}
	return pos
}

// Packets the decoder cannot parse at all (a broken NAL length in an MP4)
// are counted as decode errors and do not end the stream, with frame
// threads too, where FFmpeg may report them from avcodec_receive_frame
// (the last packets' while the decoder is drained).
func TestDecodeErrorsCounted(t *testing.T) {
	clean := makeMedia(t, "clean.mp4", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-frames:v", "50",
		"-c:v", "libx264", "-bf", "0", "-g", "10", "-pix_fmt", "yuv420p", "-movflags", "+faststart")
	pos := packetPositions(t, clean)
	require.Len(t, pos, 50)
	data, err := os.ReadFile(clean)
	require.NoError(t, err)
	// P-pictures (keyframes every 10); with frame threads the last one is
	// reported while the decoder is drained at the end of the file.
	broken := []int{23, 37, 49}
	for _, i := range broken {
		binary.BigEndian.PutUint32(data[pos[i]:], 0x7fffffff) // the first NAL's length: past the packet's end
	}
	bad := filepath.Join(t.TempDir(), "bad.mp4")
	require.NoError(t, os.WriteFile(bad, data, 0o644))
	for _, threads := range []int{1, 0} {
		t.Run("threads="+strconv.Itoa(threads), func(t *testing.T) {
			m := decode.NewMetrics(prometheus.NewRegistry())
			src, err := decode.New(decode.Options{URL: bad, StreamID: "s", Threads: threads, Metrics: m})
			require.NoError(t, err)
			n := 0
			err = src.Run(context.Background(), func(f *pipeline.Frame) { f.Image.Release(); n++ })
			require.ErrorIs(t, err, io.EOF, "a broken packet does not end the stream")
			require.Equal(t, uint64(len(broken)), src.Faults().DecodeErrors)
			require.Equal(t, map[decode.DecodeErrorReason]uint64{decode.ErrDecoder: uint64(len(broken))}, src.Faults().DecodeErrorsByReason)
			require.Equal(t, float64(len(broken)), testutil.ToFloat64(m.DecodeErrors.WithLabelValues("s", "decoder")))
			// Every reason's series exists from the start, at 0 for those
			// that did not occur.
			require.Equal(t, 5, testutil.CollectAndCount(m.DecodeErrors))
			require.Zero(t, testutil.ToFloat64(m.DecodeErrors.WithLabelValues("s", "nvdec_error")))
			m.Forget("s")
			require.Zero(t, testutil.CollectAndCount(m.DecodeErrors), "Forget drops every reason's series")
			require.Equal(t, 50-len(broken), n)
		})
	}
}

// RTP packets lost over UDP (the test camera drops 3 % of them after its
// payloader, seeded) are counted from FFmpeg's report of each gap, in
// Faults and vigil_rtp_packets_lost_total; without loss none are.
func TestRTPLossCounted(t *testing.T) {
	file := rtsptest.EncodeH264(t, testenv.Media(t, "vtest.avi"), 150)
	for _, c := range []struct {
		name string
		loss float64
	}{{"3 % loss", 0.03}, {"no loss", 0}} {
		t.Run(c.name, func(t *testing.T) {
			srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true, PacketLoss: c.loss})
			m := decode.NewMetrics(prometheus.NewRegistry())
			src, err := decode.New(decode.Options{URL: srv.URL, Transport: "udp", StreamID: "cam", Metrics: m})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, corrupt := 0, 0
			err = src.Run(ctx, func(f *pipeline.Frame) {
				f.Image.Release()
				if f.Corrupt {
					corrupt++
				}
				if n++; n == 60 {
					cancel()
				}
			})
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, 60, n, "60 frames (6 s) within a minute")
			f := src.Faults()
			t.Logf("%+v, %d corrupt frames seen", f, corrupt)
			require.Equal(t, float64(f.PacketsLost), testutil.ToFloat64(m.PacketsLost.WithLabelValues("cam")))
			if c.loss == 0 {
				require.Zero(t, f.PacketsLost)
				require.Zero(t, corrupt)
				return
			}
			require.NotZero(t, f.PacketsLost)
			require.NotZero(t, corrupt, "lost packets damage frames")
		})
	}
}
