package app_test

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// clip makes an H.264 MPEG-TS clip of FFmpeg's test pattern: for each
// size, secs seconds at 10 fps (several sizes: the stream changes
// resolution in one file, as a camera reconfigured would).
func clip(t *testing.T, name string, secs int, sizes ...string) string {
	t.Helper()
	dir := t.TempDir()
	var parts []string
	for i, size := range sizes {
		p := filepath.Join(dir, fmt.Sprintf("%s-%d.ts", name, i))
		out, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi",
			"-i", "testsrc=size="+size+":rate=10", "-t", fmt.Sprint(secs), "-c:v", "libx264", "-preset", "ultrafast",
			"-bf", "0", "-g", "10", "-pix_fmt", "yuv420p", p).CombinedOutput()
		require.NoError(t, err, "ffmpeg: %s", out)
		parts = append(parts, p)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	p := filepath.Join(dir, name+".ts")
	out, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-i", "concat:"+strings.Join(parts, "|"),
		"-c", "copy", p).CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", out)
	return p
}

// decoderSides returns where each stream was last (re)started under
// hybrid decoding ("nvdec" or "cpu"), from vigil's log.
func decoderSides(logs string) map[string]string {
	re := regexp.MustCompile(`"msg":"stream \(re\)started","stream":"([^"]+)","url":"[^"]*","device":\d+,"decoder":"hybrid: (\w+)"`)
	sides := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(logs, -1) {
		sides[m[1]] = m[2]
	}
	return sides
}

// Hybrid decoding weighs streams by pixel rate: real streams of two sizes
// (640×480 and 160×120, 10 fps, decoded on the CPU on both sides here,
// since the NVDEC side falls back to software without a GPU, which is
// enough for placement), with NVDEC and the CPU of equal capacity, end
// with the big stream alone on its side, the four small ones on the other
// (counting streams would split them 3 and 2). Then one camera switches
// from 160×120 to 640×480: it is reweighed and a stream moves to even the
// load. After that nothing moves again while the rates hold (no flapping).
func TestHybridPlacementByPixelRate(t *testing.T) {
	big := clip(t, "big", 90, "640x480")
	small := clip(t, "small", 90, "160x120")
	cam := clip(t, "cam", 30, "160x120", "640x480") // switches 30 s after each start
	// Capacities of 2 Mpx/s each side: only their ratio matters; the move
	// margin (5 % of a side) is then 0.1 Mpx/s, a 160×120 stream 0.19.
	v := vigiltest.Start(t, t.TempDir(), "infer: {provider: cpu}\n"+
		"decode: {hwaccel: hybrid, nvdec_pixel_rate: 2000000, cpu_pixel_rate: 2000000, reweigh_interval: 1s}\n"+
		"pipeline: {progress_interval: 0s}\n")
	add := func(id, file string) {
		body := fmt.Sprintf(`{"id":%q,"url":%q,"realtime":true,"loop":true}`, id, file)
		code, b := v.Call("POST", "/v1/streams", body)
		require.Equal(t, http.StatusCreated, code, string(b))
	}
	add("big", big)
	add("cam", cam)
	for i := range 3 {
		add(fmt.Sprint("s", i), small)
	}
	alone := func() bool {
		sides := decoderSides(v.Logs.String())
		if len(sides) != 5 {
			return false
		}
		for id, side := range sides {
			if id != "big" && side == sides["big"] {
				return false
			}
		}
		return true
	}
	// Each stream is read once it has run 5 s, and reweighed after two
	// readings a second apart; moves restart streams, which then run 5 s
	// before their next reading. 40 s: several times that, on a loaded
	// 2-core machine.
	testenv.Eventually(t, alone, 40*time.Second, 200*time.Millisecond, "the 640×480 stream is not alone on its side:\n%s", v.Logs.String())
	require.Regexp(t, `"msg":"stream reweighed for hybrid decoding","stream":"big","pixel_rate":[0-9.]+,"was":62208000,"width":640,"height":480`, v.Logs.String())

	// The camera switches to 640×480 30 s after its last start.
	switched := regexp.MustCompile(`"msg":"stream reweighed for hybrid decoding","stream":"cam","pixel_rate":[0-9.]+,"was":[0-9.]+,"width":640`)
	testenv.Eventually(t, func() bool { return switched.MatchString(v.Logs.String()) }, 60*time.Second, 200*time.Millisecond,
		"the camera's switch to 640×480 was not seen:\n%s", v.Logs.String())
	at := switched.FindStringIndex(v.Logs.String())[1]
	moved := func() int { return strings.Count(v.Logs.String()[at:], `"msg":"stream moved to rebalance decoders"`) }
	// The cam side now holds 3.07 + 3 × 0.19 Mpx/s against big's 3.07:
	// one small stream moves over (the gap (3.65-0.1)-(3.07+0.1) is 0.39
	// Mpx/s, over the margin's 0.1); after it, (3.46-0.1)-(3.26+0.1) is
	// not.
	testenv.Eventually(t, func() bool { return moved() >= 1 }, 10*time.Second, 100*time.Millisecond,
		"no stream moved after the camera's switch:\n%s", v.Logs.String()[at:])
	n := moved()
	// No flapping: with every rate steady, eight more readings move
	// nothing (a timed window, since what is checked is that nothing
	// happens).
	time.Sleep(8 * time.Second)
	require.Equal(t, n, moved(), "streams moved again with steady rates:\n%s", v.Logs.String()[at:])
	require.Equal(t, 1, n, "one move evens the load:\n%s", v.Logs.String()[at:])
	for _, id := range []string{"big", "s0", "s1", "s2"} {
		require.Equal(t, 1, strings.Count(v.Logs.String(), `"msg":"stream reweighed for hybrid decoding","stream":"`+id+`"`),
			"%s is reweighed once, from the default to its rate", id)
	}
}
