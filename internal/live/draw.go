package live

import (
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"math"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/pipeline"
)

// Geometry is what of a stream's analytics spec is drawn: its zones and
// lines, in the pixels of the size they were drawn for (FrameSize, when
// the spec gives one; the frame's own size otherwise).
type Geometry struct {
	Zones     []Shape
	Lines     []Shape
	FrameSize [2]int // 0, 0: the frame's own size
}

// Shape is a named polygon (a zone) or segment (a line, two points).
type Shape struct {
	Name   string
	Points []pipeline.Point
}

// GeometryOf returns what of cfg is drawn; nil for no analytics.
func GeometryOf(cfg *analytics.Config) *Geometry {
	if cfg == nil {
		return nil
	}
	g := &Geometry{}
	pt := func(xy analytics.XY) pipeline.Point {
		if len(xy) < 2 {
			return pipeline.Point{}
		}
		return pipeline.Point{X: float32(xy[0]), Y: float32(xy[1])}
	}
	for _, z := range cfg.Zones {
		s := Shape{Name: z.Name}
		for _, p := range z.Polygon {
			s.Points = append(s.Points, pt(p))
		}
		g.Zones = append(g.Zones, s)
	}
	for _, l := range cfg.Lines {
		g.Lines = append(g.Lines, Shape{Name: l.Name, Points: []pipeline.Point{pt(l.A), pt(l.B)}})
	}
	if len(cfg.FrameSize) == 2 {
		g.FrameSize = [2]int{cfg.FrameSize[0], cfg.FrameSize[1]}
	}
	return g
}

// Colours of the overlay (BT.601 full-range YCbCr, as JPEG stores them).
var (
	colZone      = ycc(255, 210, 0)   // amber
	colLine      = ycc(0, 200, 255)   // cyan
	colUntracked = ycc(80, 220, 80)   // green: a detection without a track
	colHighlight = ycc(255, 40, 40)   // red: the object of an event snapshot
	colText      = ycc(255, 255, 255) // labels, on colBack
	colBack      = ycc(0, 0, 0)
	// trackColours tell tracks apart (picked by a hash of the track id).
	trackColours = []color.YCbCr{ycc(80, 220, 80), ycc(60, 160, 255), ycc(255, 120, 200), ycc(255, 160, 40),
		ycc(170, 110, 255), ycc(40, 230, 200), ycc(230, 230, 60)}
)

func ycc(r, g, b uint8) color.YCbCr {
	y, cb, cr := color.RGBToYCbCr(r, g, b)
	return color.YCbCr{Y: y, Cb: cb, Cr: cr}
}

// Highlight is the object an event snapshot is about: drawn thicker and
// red, with the event as its caption.
type Highlight struct {
	TrackID string
	Box     pipeline.Box
	Caption string
}

// Annotate draws on img (full-range 4:2:0, the frame's size) the
// geometry's zones and lines (nil: none), every detection of dets with
// its label, score and track number, and hl (nil: none). Everything of a
// detection is drawn inside its box (the label along its top edge, above
// it only when the box is too small to hold it), so that pixels change
// only within the boxes, the shapes and their names.
func Annotate(img *image.YCbCr, dets []pipeline.Detection, g *Geometry, hl *Highlight) {
	c := canvas{img}
	w, h := img.Rect.Dx(), img.Rect.Dy()
	if g != nil {
		sx, sy := 1.0, 1.0
		if g.FrameSize[0] > 0 && g.FrameSize[1] > 0 {
			sx, sy = float64(w)/float64(g.FrameSize[0]), float64(h)/float64(g.FrameSize[1])
		}
		scale := func(p pipeline.Point) (float64, float64) { return float64(p.X) * sx, float64(p.Y) * sy }
		for _, z := range g.Zones {
			for i := range z.Points {
				x0, y0 := scale(z.Points[i])
				x1, y1 := scale(z.Points[(i+1)%len(z.Points)])
				c.line(x0, y0, x1, y1, 2, colZone)
			}
			if len(z.Points) > 0 {
				x, y := scale(z.Points[0])
				c.label(int(x)+3, int(y)+3, z.Name, colZone)
			}
		}
		for _, l := range g.Lines {
			x0, y0 := scale(l.Points[0])
			x1, y1 := scale(l.Points[1])
			c.line(x0, y0, x1, y1, 2, colLine)
			c.label(int((x0+x1)/2)+3, int((y0+y1)/2)+3, l.Name, colLine)
		}
	}
	for _, d := range dets {
		col, t := colUntracked, 2
		if d.TrackID != "" {
			col = trackColour(d.TrackID)
		}
		caption := fmt.Sprintf("%s %.2f", d.Label, d.Score)
		if n := trackNumber(d.TrackID); n != "" {
			caption = d.Label + " #" + n
		}
		if hl != nil && (hl.TrackID != "" && d.TrackID == hl.TrackID || hl.TrackID == "" && d.Box == hl.Box) {
			col, t, caption = colHighlight, 4, hl.Caption+" #"+trackNumber(d.TrackID)
			hl = nil // drawn
		}
		c.box(d.Box, t, col, caption)
	}
	if hl != nil { // the object was not detected in this frame: its last box
		c.box(hl.Box, 4, colHighlight, hl.Caption)
	}
}

// trackNumber is the n of a track id "<epoch>-<n>" ("" for none).
func trackNumber(id string) string {
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		return id[i+1:]
	}
	return id
}

func trackColour(id string) color.YCbCr {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return trackColours[h.Sum32()%uint32(len(trackColours))]
}

// canvas draws on a 4:2:0 picture: a pixel sets its luma sample and the
// chroma samples of its 2×2 block.
type canvas struct{ img *image.YCbCr }

func (c canvas) set(x, y int, col color.YCbCr) {
	if !(image.Point{x, y}.In(c.img.Rect)) {
		return
	}
	c.img.Y[c.img.YOffset(x, y)] = col.Y
	ci := c.img.COffset(x, y)
	c.img.Cb[ci], c.img.Cr[ci] = col.Cb, col.Cr
}

// fill paints r (clipped to the picture).
func (c canvas) fill(r image.Rectangle, col color.YCbCr) {
	r = r.Intersect(c.img.Rect)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.set(x, y, col)
		}
	}
}

// box outlines b with lines t pixels wide inside it, with caption on a
// dark band along its top edge (above it when the box is too small).
func (c canvas) box(b pipeline.Box, t int, col color.YCbCr, caption string) {
	r := image.Rect(int(math.Floor(float64(b.X1))), int(math.Floor(float64(b.Y1))), int(math.Ceil(float64(b.X2))), int(math.Ceil(float64(b.Y2))))
	c.fill(image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+t), col)
	c.fill(image.Rect(r.Min.X, r.Max.Y-t, r.Max.X, r.Max.Y), col)
	c.fill(image.Rect(r.Min.X, r.Min.Y, r.Min.X+t, r.Max.Y), col)
	c.fill(image.Rect(r.Max.X-t, r.Min.Y, r.Max.X, r.Max.Y), col)
	x, y := r.Min.X+t, r.Min.Y+t
	if r.Dy() < 2*glyphH+2*t {
		y = r.Min.Y - glyphH - 2
	}
	c.textClipped(x, y, caption, col, image.Rect(r.Min.X+t, min(y, r.Min.Y+t), r.Max.X-t, max(y+glyphH+2, r.Max.Y-t)))
}

// line draws a segment t pixels wide.
func (c canvas) line(x0, y0, x1, y1 float64, t int, col color.YCbCr) {
	n := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for i := 0; i <= n; i++ {
		f := float64(i) / float64(n)
		x, y := int(x0+(x1-x0)*f)-t/2, int(y0+(y1-y0)*f)-t/2
		c.fill(image.Rect(x, y, x+t, y+t), col)
	}
}

// label writes s at (x, y) (top-left) in col on a dark band.
func (c canvas) label(x, y int, s string, col color.YCbCr) {
	c.textClipped(x, y, s, col, c.img.Rect)
}

// glyphH is the height of basicfont.Face7x13's cell, in pixels.
const glyphH = 13

// textClipped writes s at (x, y) on a dark band, both clipped to clip:
// the text in white, with a stripe of col under it.
func (c canvas) textClipped(x, y int, s string, col color.YCbCr, clip image.Rectangle) {
	face := basicfont.Face7x13
	w := font.MeasureString(face, s).Ceil()
	band := image.Rect(x, y, x+w+4, y+glyphH+2).Intersect(clip)
	c.fill(band, colBack)
	c.fill(image.Rect(band.Min.X, band.Max.Y-1, band.Max.X, band.Max.Y).Intersect(clip), col)
	dot := fixed.P(x+2, y+face.Ascent)
	for _, r := range s {
		dr, mask, mp, adv, ok := face.Glyph(dot, r)
		if ok {
			for py := dr.Min.Y; py < dr.Max.Y; py++ {
				for px := dr.Min.X; px < dr.Max.X; px++ {
					_, _, _, a := mask.At(mp.X+px-dr.Min.X, mp.Y+py-dr.Min.Y).RGBA()
					if a > 0x8000 && (image.Point{px, py}.In(clip)) {
						c.img.Y[c.img.YOffset(px, py)] = colText.Y
					}
				}
			}
		}
		dot.X += adv
	}
}
