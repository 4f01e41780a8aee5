package decode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/asticode/go-astiav"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

// encode runs the ffmpeg CLI on a 320×240 test pattern, 1 s at 25 fps.
func encode(t *testing.T, name string, codec ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25",
		"-t", "1", "-pix_fmt", "yuv420p"}, codec...)
	b, err := exec.Command("ffmpeg", append(args, out)...).CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", b)
	return out
}

// filtered is what the Annex B filter gave for one input packet.
type filtered struct {
	in, out []byte
	key     bool
}

// annexBPackets runs every video packet of path through newAnnexB, as the
// direct NVDEC path does.
func annexBPackets(t *testing.T, path string) []filtered {
	t.Helper()
	fc := astiav.AllocFormatContext()
	require.NoError(t, fc.OpenInput(path, nil, nil))
	defer fc.CloseInput()
	require.NoError(t, fc.FindStreamInfo(nil))
	st := bestVideoStream(fc)
	_, name, ok := nvdecCodec(st.CodecParameters().CodecID())
	require.True(t, ok)
	bsf, err := newAnnexB(name, st.CodecParameters(), st.TimeBase())
	require.NoError(t, err)
	defer bsf.Free()
	pkt, out := astiav.AllocPacket(), astiav.AllocPacket()
	defer pkt.Free()
	defer out.Free()
	var got []filtered
	for {
		err := fc.ReadFrame(pkt)
		if errors.Is(err, astiav.ErrEof) {
			break
		}
		require.NoError(t, err)
		if pkt.StreamIndex() != st.Index() {
			pkt.Unref()
			continue
		}
		f := filtered{in: pkt.Data(), key: pkt.Flags().Has(astiav.PacketFlagKey)}
		require.NoError(t, bsf.SendPacket(pkt))
		pkt.Unref()
		for {
			err := bsf.ReceivePacket(out)
			if errors.Is(err, astiav.ErrEagain) {
				break
			}
			require.NoError(t, err)
			f.out = append(f.out, out.Data()...)
			out.Unref()
		}
		got = append(got, f)
	}
	return got
}

// nalTypes lists the NAL unit types of an Annex B buffer (H.264: the low 5
// bits of the header byte; HEVC: bits 1-6).
func nalTypes(b []byte, hevc bool) []int {
	var types []int
	for i := 0; i+3 < len(b); i++ {
		if b[i] == 0 && b[i+1] == 0 && b[i+2] == 1 {
			h := b[i+3]
			if hevc {
				types = append(types, int(h>>1&0x3f))
			} else {
				types = append(types, int(h&0x1f))
			}
			i += 2
		}
	}
	return types
}

// frameHashes decodes path in software and hashes each frame's planes.
func frameHashes(t *testing.T, path string) [][32]byte {
	t.Helper()
	src, err := New(Options{URL: path})
	require.NoError(t, err)
	var hs [][32]byte
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		defer f.Image.Release()
		y, ok := f.Image.(*Picture).YUV420()
		require.True(t, ok)
		h := sha256.New()
		for r := range y.Height {
			h.Write(y.Y[r*y.YStride : r*y.YStride+y.Width])
		}
		for r := range (y.Height + 1) / 2 {
			h.Write(y.U[r*y.UVStride : r*y.UVStride+(y.Width+1)/2])
			h.Write(y.V[r*y.UVStride : r*y.UVStride+(y.Width+1)/2])
		}
		hs = append(hs, [32]byte(h.Sum(nil)))
	})
	require.ErrorIs(t, err, io.EOF)
	return hs
}

// The Annex B conversion of the direct NVDEC path: MP4's length-prefixed
// H.264 and HEVC become start-code access units with the parameter sets in
// front of every keyframe (so the NVDEC parser needs no extradata), and the
// converted stream decodes, in software, to the same frames as the MP4;
// MPEG-TS, already Annex B, passes unchanged.
func TestAnnexBConversion(t *testing.T) {
	for _, c := range []struct {
		name, file string
		codec      []string
		hevc       bool
		params     []int // parameter-set NAL types every keyframe must carry
		ext        string
	}{
		{"h264", "c.mp4", []string{"-c:v", "libx264", "-g", "10"}, false, []int{7, 8}, "h264"},
		{"hevc", "c.mp4", []string{"-c:v", "libx265", "-x265-params", "keyint=10:log-level=error"}, true, []int{32, 33, 34}, "hevc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mp4 := encode(t, c.file, c.codec...)
			pkts := annexBPackets(t, mp4)
			require.Len(t, pkts, 25)
			var stream []byte
			keys := 0
			for i, p := range pkts {
				require.True(t, isAnnexB(p.out), "packet %d does not start with a start code", i)
				require.False(t, bytes.Equal(p.in, p.out), "MP4 packet %d unchanged", i)
				types := nalTypes(p.out, c.hevc)
				if p.key {
					keys++
					for _, want := range c.params {
						require.Contains(t, types, want, "keyframe packet %d (NAL types %v)", i, types)
					}
				}
				stream = append(stream, p.out...)
			}
			require.GreaterOrEqual(t, keys, 3, "keyint 10 over 25 frames")
			raw := filepath.Join(t.TempDir(), "c."+c.ext)
			require.NoError(t, os.WriteFile(raw, stream, 0o644))
			require.Equal(t, frameHashes(t, mp4), frameHashes(t, raw))

			ts := encode(t, "c.ts", c.codec...)
			for i, p := range annexBPackets(t, ts) {
				require.True(t, bytes.Equal(p.in, p.out), "MPEG-TS packet %d changed", i)
			}
		})
	}
}

func TestIsAnnexB(t *testing.T) {
	for in, want := range map[string]bool{
		"\x00\x00\x00\x01\x67": true, "\x00\x00\x01\x67\x00": true,
		"\x01\x64\x00\x1f\xff": false, "\x00\x00\x02\x01": false, "\x00\x00": false, "": false,
	} {
		require.Equal(t, want, isAnnexB([]byte(in)), "%q", in)
	}
}

// hasPicture finds a VCL NAL unit behind 3- and 4-byte start codes, and
// none in parameter sets and SEI alone (NAL unit types from ITU-T H.264
// and H.265, Table 7-1 of each).
func TestHasPicture(t *testing.T) {
	sc4, sc3 := []byte{0, 0, 0, 1}, []byte{0, 0, 1}
	au := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// H.264: SPS 7, PPS 8, SEI 6, IDR slice 5, non-IDR slice 1.
	require.False(t, hasPicture(astiav.CodecIDH264, au(sc4, []byte{0x67, 1, 2}, sc4, []byte{0x68, 3}, sc3, []byte{0x06, 4})))
	require.True(t, hasPicture(astiav.CodecIDH264, au(sc4, []byte{0x67, 1}, sc3, []byte{0x65, 0x88})))
	require.True(t, hasPicture(astiav.CodecIDH264, au(sc3, []byte{0x41, 0x9a})))
	// HEVC (type in bits 1-6): VPS 32, SPS 33, PPS 34, prefix SEI 39;
	// IDR_W_RADL 19, TRAIL_R 1.
	require.False(t, hasPicture(astiav.CodecIDHevc, au(sc4, []byte{32 << 1, 1}, sc4, []byte{33 << 1, 1}, sc4, []byte{34 << 1, 1}, sc4, []byte{39 << 1, 1})))
	require.True(t, hasPicture(astiav.CodecIDHevc, au(sc4, []byte{32 << 1, 1}, sc4, []byte{19 << 1, 1})))
	require.True(t, hasPicture(astiav.CodecIDHevc, au(sc3, []byte{1 << 1, 1})))
	require.False(t, hasPicture(astiav.CodecIDH264, nil))
}
