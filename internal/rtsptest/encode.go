package rtsptest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// h264Args are the libx264 settings of EncodeH264. No B-frames (server.py
// derives PTS from DTS for an elementary stream), a keyframe every 25
// frames, one slice per frame.
var h264Args = []string{"-an", "-c:v", "libx264", "-preset", "veryfast",
	"-g", "25", "-bf", "0", "-pix_fmt", "yuv420p", "-f", "h264"}

// h264BFramesArgs are the libx264 settings of EncodeH264BFrames: always 3
// B-frames between references (b-adapt=0; the middle one is a reference
// too, b-pyramid normal), a closed GOP of 25 frames starting with an IDR
// picture.
var h264BFramesArgs = []string{"-an", "-c:v", "libx264", "-preset", "veryfast",
	"-g", "25", "-bf", "3", "-x264-params", "b-adapt=0:b-pyramid=normal:scenecut=0",
	"-pix_fmt", "yuv420p", "-f", "mpegts"}

// HEVCCRAInterval is the distance in frames between the keyframes of
// EncodeHEVCCRA's output: an IDR picture first, then CRA pictures. With 3
// B-frames between references, an interval that is a multiple of 4 puts 3
// B-frames right before each CRA in display order, which x265 codes after
// the CRA as RASL pictures.
const HEVCCRAInterval = 28

// HEVCCRALeading is the number of RASL pictures that follow each CRA picture
// of EncodeHEVCCRA's output in decode order (and precede it in display
// order): 3, the B-frames between references.
const HEVCCRALeading = 3

// hevcCRAArgs are the libx265 settings of EncodeHEVCCRA: open GOP, so that
// the keyframes after the first are CRA pictures whose leading pictures
// reference the GOP before; a fixed keyframe interval and B-frame pattern;
// VPS/SPS/PPS repeated before every keyframe.
var hevcCRAArgs = []string{"-an", "-c:v", "libx265", "-preset", "ultrafast",
	"-x265-params", fmt.Sprintf("keyint=%d:min-keyint=%[1]d:scenecut=0:open-gop=1:bframes=%d:b-adapt=0:repeat-headers=1:log-level=error",
		HEVCCRAInterval, HEVCCRALeading),
	"-pix_fmt", "yuv420p", "-f", "mpegts"}

// EncodeH264 re-encodes the video src with the ffmpeg CLI into an H.264
// Annex-B elementary stream (a format Start serves) without B-frames, with
// a keyframe every 25 frames, of at most maxFrames frames (all when
// maxFrames <= 0), at src's frame rate, and returns its path. The result
// is cached under os.TempDir()/vigil-rtsptest, keyed by src's path and
// size, maxFrames and the encoder settings, so repeated runs do not
// re-encode.
func EncodeH264(t testing.TB, src string, maxFrames int) string {
	t.Helper()
	return encode(t, src, maxFrames, 0, h264Args, ".h264", nil)
}

// EncodeH264BFrames re-encodes the video src like EncodeH264 (at most
// maxFrames frames, cached alike), but into MPEG-TS (a format Start
// serves, with PTS and DTS) and with 3 B-frames between reference frames
// (pyramid: the middle B-frame is a reference too), so that the frames
// arrive in decode order with PTS out of order, as from a camera with
// B-frames: a keyframe with PTS t is followed by the P-frame of t+4 frames,
// then the B-frames of t+2, t+1 and t+3. Each GOP is closed and starts with
// an IDR picture, every 25 frames.
func EncodeH264BFrames(t testing.TB, src string, maxFrames int) string {
	t.Helper()
	return encode(t, src, maxFrames, 0, h264BFramesArgs, ".ts", nil)
}

// EncodeHEVCCRA re-encodes the video src with libx265 into MPEG-TS (a
// format Start serves) with open GOPs: a keyframe every HEVCCRAInterval
// frames, all but the first of them CRA pictures, each followed in decode
// order by HEVCCRALeading RASL pictures that precede it in display order
// and reference the GOP before it. The result is then cut so that it
// starts at the first CRA picture (the first HEVCCRAInterval -
// HEVCCRALeading access units are removed): a client that starts there
// never gets the pictures that the first RASL pictures reference (a
// decoder must skip them), like a client joining an open-GOP HEVC camera.
// It has at most maxFrames access units, counted from the CRA picture in
// decode order (all that follow it when maxFrames <= 0), at src's frame
// rate. It is cached like EncodeH264's result. It fails t when src has no
// more than HEVCCRAInterval frames (no CRA picture).
func EncodeHEVCCRA(t testing.TB, src string, maxFrames int) string {
	t.Helper()
	skip := HEVCCRAInterval - HEVCCRALeading // access units before the first CRA
	return encode(t, src, maxFrames, skip, hevcCRAArgs, ".ts", cutAtCRA)
}

// encode runs ffmpeg on src with args into a cached file with extension ext
// holding at most skip+maxFrames frames (all when maxFrames <= 0), passed
// through post (when not nil) from a temporary file into the final one.
func encode(t testing.TB, src string, maxFrames, skip int, args []string, ext string,
	post func(in, out string) error) string {
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
	// The key names the post-processing too: cutAtCRA's result differs from
	// ffmpeg's (cutVersion changes when cutAtCRA does).
	key := fmt.Sprintf("%s\x00%d\x00%d\x00%s", abs, fi.Size(), maxFrames, strings.Join(args, " "))
	if post != nil {
		key += "\x00" + cutVersion
	}
	sum := sha256.Sum256([]byte(key))
	dir := filepath.Join(os.TempDir(), "vigil-rtsptest")
	out := filepath.Join(dir, hex.EncodeToString(sum[:8])+ext)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	tmp := tempFile(t, dir, ext)
	defer os.Remove(tmp) // no-op once renamed

	cmd := []string{"-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", abs}
	if maxFrames > 0 {
		cmd = append(cmd, "-frames:v", strconv.Itoa(skip+maxFrames))
	}
	cmd = append(append(cmd, args...), tmp)
	start := time.Now()
	if msg, err := exec.Command(ffmpeg, cmd...).CombinedOutput(); err != nil {
		t.Fatalf("rtsptest: ffmpeg %s: %v\n%s", strings.Join(cmd, " "), err, msg)
	}
	if post != nil {
		cut := tempFile(t, dir, ext)
		defer os.Remove(cut)
		if err := post(tmp, cut); err != nil {
			t.Fatalf("rtsptest: %s: %v", src, err)
		}
		tmp = cut
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	t.Logf("rtsptest: encoded %s (%d frames max) to %s in %v", src, maxFrames, out, time.Since(start).Round(time.Millisecond))
	return out
}

// tempFile creates an empty file in dir and returns its name.
func tempFile(t testing.TB, dir, ext string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "encode-*"+ext)
	if err != nil {
		t.Fatalf("rtsptest: %v", err)
	}
	f.Close()
	return f.Name()
}

// MPEG-TS constants (ISO/IEC 13818-1).
const (
	tsPacketSize = 188
	tsSync       = 0x47
	hevcCRA      = 21 // HEVC NAL unit type CRA_NUT (ITU-T H.265, table 7-1)
	cutVersion   = "cutAtCRA 1"
)

// cutAtCRA copies the MPEG-TS file in to out starting at the PES packet of
// the first HEVC access unit with a CRA picture: it keeps the packets before
// the first video PES packet (PAT, PMT, SDT) and every packet from that
// access unit on. It works on the files ffmpeg's mpegts muxer writes: one
// access unit per PES packet, each starting a TS packet, PCR on the video
// PID. (ffmpeg -ss with -c copy drops packets here, so it is not used.)
func cutAtCRA(in, out string) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	if len(data)%tsPacketSize != 0 {
		return fmt.Errorf("%s: %d bytes, not a whole number of TS packets", in, len(data))
	}
	n := len(data) / tsPacketSize
	pkt := func(i int) []byte { return data[i*tsPacketSize : (i+1)*tsPacketSize] }

	headers := -1 // packets before the first video PES packet
	videoPID := -1
	pesStart := -1 // packet index of the PES packet being collected
	var pes []byte
	for i := 0; i <= n; i++ {
		var p []byte
		pid, start := -1, false
		if i < n {
			p = pkt(i)
			if p[0] != tsSync {
				return fmt.Errorf("%s: packet %d: lost TS sync", in, i)
			}
			pid, start = int(p[1]&0x1f)<<8|int(p[2]), p[1]&0x40 != 0
		}
		if videoPID < 0 && start {
			if payload := tsPayload(p); bytes.HasPrefix(payload, []byte{0, 0, 1}) &&
				len(payload) > 3 && payload[3]&0xf0 == 0xe0 { // PES of a video stream
				videoPID, headers = pid, i
			}
		}
		if pid != videoPID && i < n {
			continue
		}
		if start || i == n { // the PES packet collected so far is complete
			if pesStart >= 0 && hasNAL(pes, hevcCRA) {
				var buf bytes.Buffer
				buf.Write(data[:headers*tsPacketSize])
				buf.Write(data[pesStart*tsPacketSize:])
				return os.WriteFile(out, buf.Bytes(), 0o644)
			}
			pesStart, pes = i, pes[:0]
		}
		if i < n {
			pes = append(pes, tsPayload(p)...)
		}
	}
	return errors.New("no HEVC CRA picture (is the video longer than HEVCCRAInterval frames?)")
}

// tsPayload returns the payload of TS packet p (nil when it has none).
func tsPayload(p []byte) []byte {
	off := 4
	if p[3]&0x20 != 0 { // adaptation field
		off += 1 + int(p[4])
	}
	if p[3]&0x10 == 0 || off >= len(p) {
		return nil
	}
	return p[off:]
}

// hasNAL reports whether the PES packet pes holds an HEVC NAL unit of type
// typ in its Annex-B payload.
func hasNAL(pes []byte, typ byte) bool {
	if len(pes) < 9 || !bytes.HasPrefix(pes, []byte{0, 0, 1}) {
		return false
	}
	es := pes[min(len(pes), 9+int(pes[8])):] // after the PES header
	for {
		i := bytes.Index(es, []byte{0, 0, 1})
		if i < 0 || i+3 >= len(es) {
			return false
		}
		if (es[i+3]>>1)&0x3f == typ {
			return true
		}
		es = es[i+3:]
	}
}
