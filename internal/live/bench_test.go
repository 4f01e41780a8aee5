package live

import (
	"testing"

	"github.com/vigil-video/vigil/pipeline"
)

// BenchmarkFrame is the work one watched frame costs off the pipeline,
// by step, on a 720×528 picture (Megamind.avi's size) with one detection:
// the range stretch, drawing the overlay, and the JPEG encoding.
//
//	go test -run '^$' -bench BenchmarkFrame ./internal/live/
func BenchmarkFrame(b *testing.B) {
	dets := []pipeline.Detection{{Label: "face", Score: 0.9, Box: pipeline.Box{X1: 300, Y1: 100, X2: 420, Y2: 240}, TrackID: "abc-7"}}
	b.Run("full_range", func(b *testing.B) {
		p := &pipeline.Picture{Image: grey(720, 528)}
		for b.Loop() {
			p.FullRange = false
			fullRange(p)
		}
	})
	b.Run("annotate", func(b *testing.B) {
		img := grey(720, 528)
		for b.Loop() {
			Annotate(img, dets, nil, nil)
		}
	})
	b.Run("clone", func(b *testing.B) {
		img := grey(720, 528)
		for b.Loop() {
			_ = cloneYCbCr(img)
		}
	})
	b.Run("encode", func(b *testing.B) {
		img := grey(720, 528)
		Annotate(img, dets, nil, nil) // some edges to code
		for b.Loop() {
			_ = encode(img, 80)
		}
	})
}
