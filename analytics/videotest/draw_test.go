package videotest

import (
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/pipeline"
)

// annotate writes dir/f<seq>.png for every every-th frame of video: the
// frame as the ffmpeg CLI decodes it, the config's zones (yellow) and
// lines (red, its a end marked), each tracked detection's box in a colour
// of its id with the id's number, and the untracked detections in thin
// grey. It is how the expected counts of the tests were checked by eye:
// run the tests with VIGIL_VTEST_FRAMES=dir and look at the pictures.
func annotate(t *testing.T, video, dir string, every int, r run, cfg analytics.Config) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	raw := filepath.Join(dir, "raw")
	require.NoError(t, os.MkdirAll(raw, 0o755))
	cmd := exec.Command("ffmpeg", "-loglevel", "error", "-y", "-i", video, "-vf", fmt.Sprintf("select=not(mod(n\\,%d))", every),
		"-fps_mode", "passthrough", "-start_number", "0", filepath.Join(raw, "%05d.png"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "ffmpeg: %s", out)
	for i := 0; ; i++ {
		seq := i * every
		f, err := os.Open(filepath.Join(raw, fmt.Sprintf("%05d.png", i)))
		if os.IsNotExist(err) || seq >= len(r.frames) {
			break
		}
		require.NoError(t, err)
		src, err := png.Decode(f)
		f.Close()
		require.NoError(t, err)
		img := image.NewRGBA(src.Bounds())
		draw.Draw(img, img.Bounds(), src, image.Point{}, draw.Src)
		yellow, red := color.RGBA{255, 220, 0, 255}, color.RGBA{255, 0, 0, 255}
		for _, z := range cfg.Zones {
			for k := range z.Polygon {
				a, b := z.Polygon[k], z.Polygon[(k+1)%len(z.Polygon)]
				segment(img, a[0], a[1], b[0], b[1], 2, yellow)
			}
			label(img, int(z.Polygon[0][0])+3, int(z.Polygon[0][1])+14, z.Name, yellow)
		}
		for _, l := range cfg.Lines {
			segment(img, l.A[0], l.A[1], l.B[0], l.B[1], 2, red)
			label(img, int(l.A[0])+4, int(l.A[1])+14, l.Name+" a", red)
		}
		for _, d := range r.frames[seq].Dets {
			if d.TrackID == "" {
				rect(img, d.Box, 1, color.RGBA{160, 160, 160, 255})
			}
		}
		for _, d := range r.frames[seq].Dets {
			if d.TrackID == "" {
				continue
			}
			c := idColour(d.TrackID)
			rect(img, d.Box, 2, c)
			n := d.TrackID[strings.LastIndexByte(d.TrackID, '-')+1:]
			label(img, int(d.Box.X1), int(d.Box.Y1)-3, n, c)
		}
		label(img, 6, 16, fmt.Sprintf("frame %d  pts %.1f s", seq, r.frames[seq].PTS), color.RGBA{255, 255, 255, 255})
		w, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%04d.png", seq)))
		require.NoError(t, err)
		require.NoError(t, png.Encode(w, img))
		require.NoError(t, w.Close())
	}
}

func idColour(id string) color.RGBA {
	h := fnv.New32a()
	h.Write([]byte(id))
	v := h.Sum32()
	// Saturated colours, never grey.
	r, g, b := uint8(v), uint8(v>>8), uint8(v>>16)
	switch v % 3 {
	case 0:
		r = 255
	case 1:
		g = 255
	default:
		b = 255
	}
	return color.RGBA{r, g, b, 255}
}

func rect(img *image.RGBA, b pipeline.Box, w int, c color.RGBA) {
	x1, y1, x2, y2 := float64(b.X1), float64(b.Y1), float64(b.X2), float64(b.Y2)
	segment(img, x1, y1, x2, y1, w, c)
	segment(img, x2, y1, x2, y2, w, c)
	segment(img, x2, y2, x1, y2, w, c)
	segment(img, x1, y2, x1, y1, w, c)
}

func segment(img *image.RGBA, x1, y1, x2, y2 float64, w int, c color.RGBA) {
	n := int(math.Max(math.Abs(x2-x1), math.Abs(y2-y1))) + 1
	for i := 0; i <= n; i++ {
		x := x1 + (x2-x1)*float64(i)/float64(n)
		y := y1 + (y2-y1)*float64(i)/float64(n)
		for dx := 0; dx < w; dx++ {
			for dy := 0; dy < w; dy++ {
				img.SetRGBA(int(x)+dx, int(y)+dy, c)
			}
		}
	}
}

// label writes s at (x, y) (the text's baseline) on a black background.
func label(img *image.RGBA, x, y int, s string, c color.RGBA) {
	face := basicfont.Face7x13
	w := font.MeasureString(face, s).Ceil()
	draw.Draw(img, image.Rect(x-1, y-11, x+w+1, y+3), image.NewUniform(color.Black), image.Point{}, draw.Src)
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
