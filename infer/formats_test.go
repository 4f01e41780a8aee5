package infer_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// formatCase is one of scripts/format_models.py's rewrites of YOLOX-Nano:
// the file, the format auto must pick, and the model block settings that
// make vigil treat it as the YOLOX adapter does (YOLOX's thresholds, and
// the letterbox where the format's own convention is a stretch).
type formatCase struct {
	file, format string
	spec         infer.Spec
}

// yoloxPad is YOLOX's letterbox level, for a format that pads black.
var yoloxPad = float32(114)

var formatCases = []formatCase{
	// RGB v/255 NCHW: the format's default input.
	{"yolov8.onnx", "yolov8", infer.Spec{ScoreThreshold: 0.3, IoUThreshold: 0.45}},
	// float16 BGR 0..255, transposed output.
	{"yolov8t.onnx", "yolov8", infer.Spec{ScoreThreshold: 0.3, IoUThreshold: 0.45,
		Input: infer.InputSpec{Order: "bgr", Range: []float32{0, 255}}}},
	// NHWC uint8 RGB, NMS in the graph.
	{"yolov10.onnx", "yolov10", infer.Spec{ScoreThreshold: 0.3}},
	{"rtdetr.onnx", "rtdetr", infer.Spec{ScoreThreshold: 0.3, Input: infer.InputSpec{Resize: "letterbox"}}},
	// ImageNet mean/std (the format's default).
	{"rfdetr.onnx", "rfdetr", infer.Spec{ScoreThreshold: 0.3, Input: infer.InputSpec{Resize: "letterbox"}}},
	// NHWC uint8, COCO category ids (the labels differ from YOLOX's).
	{"ssd.onnx", "ssd", infer.Spec{ScoreThreshold: 0.3, Input: infer.InputSpec{Resize: "letterbox", Pad: &yoloxPad}}},
}

// Every format decodes YOLOX-Nano's rewrites to YOLOX-Nano's own
// detections on the same vtest frames: the same count, each paired with
// one of the same class at IoU ≥ 0.95 (the acceptance rule; the
// graphs differ only in float rounding: v/255·255, float16 of whole
// levels, cx±w/2 in the graph). Format auto picks each format and says so.
func TestFormatsAgreeWithYOLOX(t *testing.T) {
	dir := testenv.FormatModels(t)
	ref := openEngine(t, "yolox", testenv.YOLOXNano(t), "yolox", 0)
	engines := make([]*infer.Engine, len(formatCases))
	for i, c := range formatCases {
		engines[i] = openSpec(t, filepath.Join(dir, c.file), c.spec)
		require.Equal(t, c.format, engines[i].Adapter(), "%s: format auto", c.file)
		require.Contains(t, engines[i].Chosen(), c.format+" (auto: ", c.file)
		if c.format != "ssd" {
			require.Equal(t, ref.Labels(), engines[i].Labels(), "%s: COCO labels", c.file)
		}
	}
	frames, total := 0, 0
	eachFrame(t, testenv.Media(t, "vtest.avi"), []uint64{0, 60, 120, 180, 240}, func(img pipeline.Image) {
		want := detect(t, ref, img)
		total += len(want)
		for i, c := range formatCases {
			got := detect(t, engines[i], img)
			require.Len(t, got, len(want), "%s frame %d: %v\nwant %v", c.file, frames, got, want)
			sameDetections(t, c.file, want, got, 0.95)
		}
		frames++
	})
	require.Equal(t, 5, frames)
	require.Greater(t, total, 20, "vtest's crowd gives YOLOX-Nano detections to compare")
}

// A wrong explicit format fails at open, naming the shapes it takes.
func TestWrongFormatNamesExpectedShapes(t *testing.T) {
	dir := testenv.FormatModels(t)
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	for _, c := range []struct{ file, format, want string }{
		{"yolov8.onnx", "rtdetr", "orig_target_sizes [B 2]"},
		{"yolov10.onnx", "yolov8", "[B 4+classes N] or [B N 4+classes]"},
		{"rtdetr.onnx", "yolov10", "one output [B K 6]"},
		{"rfdetr.onnx", "yolox", "[B N 5+classes]"},
		{"yolov8t.onnx", "rfdetr", "dets [B Q 4]"},
		{"rfdetr.onnx", "ssd", "detection_boxes [B N 4]"},
	} {
		_, err := infer.Inspect(filepath.Join(dir, c.file), infer.Spec{Format: c.format})
		require.ErrorIs(t, err, infer.ErrModelMismatch, c.file)
		require.Contains(t, err.Error(), c.want, c.file)
		require.Contains(t, err.Error(), "format "+c.format, c.file)
	}
}

// Synthetic models whose outputs are constants: zero and 300 detections,
// boxes outside the input, NaN and infinite values. Each decodes cleanly
// (boxes clamped, bad rows skipped), never crashes. The astronaut is
// 512×512 and the models take 32×32, so a model pixel is 16 frame pixels.
func TestFormatEdgeCases(t *testing.T) {
	dir := testenv.EdgeModels(t)
	box := func(x1, y1, x2, y2 float32) pipeline.Box { return pipeline.Box{X1: x1, Y1: y1, X2: x2, Y2: y2} }
	cases := []struct {
		file, format string
		want         []pipeline.Detection // nil: only the count
		count        int
	}{
		{"e2e_zero.onnx", "yolov10", nil, 0},
		{"e2e_full.onnx", "yolov10", nil, 300},
		{"e2e_outside.onnx", "yolov10", []pipeline.Detection{
			{Label: "person", ClassID: 0, Box: box(0, 0, 160, 160)},
			{Label: "bicycle", ClassID: 1, Box: box(320, 320, 512, 512)},
			{Label: "class500", ClassID: 500, Box: box(16, 16, 64, 64)},
		}, 3},
		{"e2e_nan.onnx", "yolov10", []pipeline.Detection{{Label: "bicycle", ClassID: 1, Box: box(32, 32, 96, 96)}}, 1},
		{"yolov8_nan.onnx", "yolov8", []pipeline.Detection{{Label: "bicycle", ClassID: 1, Box: box(192, 192, 320, 320)}}, 1},
		{"rfdetr_nan.onnx", "rfdetr", []pipeline.Detection{{Label: "motorcycle", ClassID: 3, Box: box(128, 128, 384, 384)}}, 1},
	}
	engines := make([]*infer.Engine, len(cases))
	for i, c := range cases {
		engines[i] = openSpec(t, filepath.Join(dir, c.file), infer.Spec{})
		require.Equal(t, c.format, engines[i].Adapter(), c.file)
	}
	frameAt(t, testenv.Media(t, "astronaut.png"), 0, func(img pipeline.Image) {
		for i, c := range cases {
			got := detect(t, engines[i], img)
			require.Len(t, got, c.count, "%s: %v", c.file, got)
			for j, w := range c.want {
				require.Equal(t, w.Label, got[j].Label, c.file)
				require.Equal(t, w.ClassID, got[j].ClassID, c.file)
				require.InDeltaSlice(t, []float32{w.Box.X1, w.Box.Y1, w.Box.X2, w.Box.Y2},
					[]float32{got[j].Box.X1, got[j].Box.Y1, got[j].Box.X2, got[j].Box.Y2}, 1e-3, c.file)
			}
		}
	})
}

// Bad models and blocks fail at open with one clear line each.
func TestFormatBadInput(t *testing.T) {
	dir := testenv.EdgeModels(t)
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	_, err := infer.Inspect(filepath.Join(dir, "not_onnx.onnx"), infer.Spec{})
	require.ErrorIs(t, err, infer.ErrModelMismatch)
	require.Contains(t, err.Error(), "cannot read it as an ONNX model")
	_, err = infer.Inspect(filepath.Join(dir, "two_images.onnx"), infer.Spec{})
	require.ErrorIs(t, err, infer.ErrModelMismatch)
	require.Contains(t, err.Error(), `2 image inputs ["left" [1 3 32 32] "right" [1 3 32 32]]`)
	require.Contains(t, err.Error(), "set the model's format")
	labels, err := infer.ReadLabels(filepath.Join(dir, "three.txt"))
	require.NoError(t, err)
	require.Equal(t, []string{"person", "bicycle", "car"}, labels, "comments skipped")
	_, err = infer.Inspect(filepath.Join(dir, "yolov8_nan.onnx"), infer.Spec{Labels: labels})
	require.ErrorIs(t, err, infer.ErrModelMismatch)
	require.Contains(t, err.Error(), "3 labels for a model with 80 classes")
	for _, e := range []error{err} {
		require.NotContains(t, e.Error(), "\n", "one line")
	}
}

func openSpec(t *testing.T, path string, s infer.Spec) *infer.Engine {
	t.Helper()
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	t.Cleanup(sc.Close)
	e, err := infer.Open(infer.Options{Path: path, Spec: s, Resizer: sc, IntraOpThreads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

func detect(t *testing.T, e *infer.Engine, img pipeline.Image) []pipeline.Detection {
	t.Helper()
	var st pipeline.StageTimes
	d, err := e.Detect(img, &st, nil)
	require.NoError(t, err)
	return d
}

// eachFrame decodes src once and runs fn on each frame numbered in seqs
// (ascending), stopping after the last.
func eachFrame(t *testing.T, src string, seqs []uint64, fn func(pipeline.Image)) {
	t.Helper()
	s, err := decode.New(decode.Options{URL: src})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	next := 0
	err = s.Run(ctx, func(f *pipeline.Frame) {
		defer f.Image.Release()
		if next < len(seqs) && f.Seq == seqs[next] {
			fn(f.Image)
			next++
			if next == len(seqs) {
				cancel()
			}
		}
	})
	require.Equal(t, len(seqs), next, "frames of %s reached: %v", src, err)
}

// sameDetections pairs each of want with the unused detection of got of
// the same class name that overlaps it most, and requires IoU ≥ minIoU.
func sameDetections(t *testing.T, what string, want, got []pipeline.Detection, minIoU float64) {
	t.Helper()
	used := make([]bool, len(got))
	for _, w := range want {
		best, bi := 0.0, -1
		for j, g := range got {
			if v := boxIoU(w.Box, g.Box); !used[j] && g.Label == w.Label && v > best {
				best, bi = v, j
			}
		}
		require.GreaterOrEqual(t, best, minIoU, "%s: %s %.3f at %v: best IoU %.3f", what, w.Label, w.Score, w.Box, best)
		used[bi] = true
	}
}

func boxIoU(a, b pipeline.Box) float64 {
	ix := min(a.X2, b.X2) - max(a.X1, b.X1)
	iy := min(a.Y2, b.Y2) - max(a.Y1, b.Y1)
	if ix <= 0 || iy <= 0 {
		return 0
	}
	in := float64(ix * iy)
	return in / (float64((a.X2-a.X1)*(a.Y2-a.Y1)+(b.X2-b.X1)*(b.Y2-b.Y1)) - in)
}

// The GPU engine (infer/gpu) binds through Describe: one float32 or
// float16 image input scaled alike in every channel, float32 outputs.
// Models that need more are refused without ErrModelMismatch, so that
// internal/engines opens them on the CPU instead, saying why.
func TestDescribeForGPU(t *testing.T) {
	dir := testenv.FormatModels(t)
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	_, b, half, err := infer.Describe(infer.Options{Path: filepath.Join(dir, "yolov8t.onnx")})
	require.NoError(t, err)
	require.True(t, half, "a float16 input")
	require.Equal(t, []int64{1, 3549, 84}, b.OutShapes[0])
	_, _, half, err = infer.Describe(infer.Options{Path: filepath.Join(dir, "yolov8.onnx")})
	require.NoError(t, err)
	require.False(t, half)
	for file, want := range map[string]string{
		"yolov10.onnx": "needs a uint8 input",
		"rfdetr.onnx":  "needs per-channel mean/std",
		"rtdetr.onnx":  "needs constant input orig_target_sizes, int64 output labels",
	} {
		_, _, _, err := infer.Describe(infer.Options{Path: filepath.Join(dir, file)})
		require.ErrorContains(t, err, want, file)
		require.NotErrorIs(t, err, infer.ErrModelMismatch, file)
	}
}
