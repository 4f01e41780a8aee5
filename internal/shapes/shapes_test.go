package shapes_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/shapes"
)

// The letterbox numbers vigil shapes prints, and its suggestion rule: the
// source's aspect ratio, the larger side kept, the other rounded UP to a
// multiple of 32 (so the scale stays today's and less than 32 px pad).
func TestShapeFitAndSuggestion(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		srcW, srcH, inW, inH int
		scale                float64
		cw, ch, padR, padB   int
		waste                float64
		sugW, sugH           int
		sugWaste             float64
	}{
		// 1080p into YOLOX-Nano: 416×234 of content, 182 rows of padding.
		{"1080p yolox", 1920, 1080, 416, 416, 0.2167, 416, 234, 0, 182, 43.75, 416, 256, 8.59},
		{"portrait 1080p yolox", 1080, 1920, 416, 416, 0.2167, 234, 416, 182, 0, 43.75, 256, 416, 8.59},
		// Megamind into BlazeFace 128: floor(528·0.1778) = 93 rows.
		{"megamind blazeface", 720, 528, 128, 128, 0.1778, 128, 93, 0, 35, 27.34, 128, 96, 3.12},
		{"megamind blazeface-back", 720, 528, 256, 256, 0.3556, 256, 187, 0, 69, 26.95, 256, 192, 2.60},
		// Upscaled ×1.3, exactly 25 % padding.
		{"qvga yolox", 320, 240, 416, 416, 1.3, 416, 312, 0, 104, 25, 416, 320, 2.5},
		{"square", 512, 512, 256, 256, 0.5, 256, 256, 0, 0, 0, 256, 256, 0},
		// The smaller side never drops below 32.
		{"panorama", 4000, 100, 416, 416, 0.104, 416, 10, 0, 406, 97.60, 416, 32, 68.75},
		// A non-square engine: the larger side is the input's larger side.
		{"720p on 416x256", 1280, 720, 416, 256, 0.3250, 416, 234, 0, 22, 8.59, 416, 256, 8.59},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := shapes.FitShape(tc.srcW, tc.srcH, tc.inW, tc.inH)
			require.InDelta(t, tc.scale, f.Scale, 5e-5)
			require.Equal(t, []int{tc.cw, tc.ch, tc.padR, tc.padB}, []int{f.ContentWidth, f.ContentHeight, f.PadRight, f.PadBottom})
			require.InDelta(t, tc.waste, f.WastePct, 0.005)
			w, h := shapes.SuggestShape(tc.srcW, tc.srcH, tc.inW, tc.inH)
			require.Equal(t, []int{tc.sugW, tc.sugH}, []int{w, h})
			require.Zero(t, w%32+h%32, "multiples of 32")
			s := shapes.FitShape(tc.srcW, tc.srcH, w, h)
			require.InDelta(t, tc.sugWaste, s.WastePct, 0.005)
			require.GreaterOrEqual(t, s.Scale, f.Scale-1e-9, "rounding up keeps the scale")
		})
	}
}
