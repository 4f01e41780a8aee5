package testenv

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// FacePan makes, with the ffmpeg CLI, a 16 s clip at 25 fps (400 frames,
// H.264 in MP4) of a real face moving, for the analytics tests: the
// astronaut of astronaut.png (BlazeFace finds her face in every frame,
// infer's TestBlazeFaceAstronaut) cut to 256×256 around her face and slid
// along a cosine over a grey 512×256 canvas, so that the centre of her
// face (y 128) goes from x 128 to 384 and back every 8 s: it crosses x 256
// rightwards at 2 s and 10 s and leftwards at 6 s and 14 s, and x 300
// rightwards at about 2.7 s and 10.7 s, at up to 100 px/s (4 px a
// frame). It is written under t.TempDir().
func FacePan(t testing.TB) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "facepan.mp4")
	cmd := exec.Command("ffmpeg", "-v", "error", "-y", "-loop", "1", "-i", Media(t, "astronaut.png"), "-filter_complex",
		"[0]crop=256:256:97:0[t];color=c=gray:s=512x256:r=25[bg];[bg][t]overlay=x='128-128*cos(2*PI*t/8)':y=0:shortest=1,format=yuv420p",
		"-t", "16", "-c:v", "libx264", "-preset", "veryfast", "-g", "25", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, b)
	}
	return out
}
