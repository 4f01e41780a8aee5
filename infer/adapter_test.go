package infer

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
)

func TestLetterbox(t *testing.T) {
	// Values from ../shared/testdata/README.md (YOLOX preprocessing).
	for _, tc := range []struct{ w, h, cw, ch int }{
		{768, 576, 416, 312}, {720, 528, 416, 305}, {512, 512, 416, 416},
	} {
		lb := NewLetterbox(tc.w, tc.h, 416, 416)
		require.Equal(t, tc.cw, lb.ContentW)
		require.Equal(t, tc.ch, lb.ContentH)
		x, y := lb.ToSource(416, 208)
		require.InDelta(t, float64(tc.w), x, 1e-9)
		require.InDelta(t, float64(tc.w)*208/416, y, 1e-9)
	}
}

func box(x1, y1, x2, y2 float32) pipeline.Box { return pipeline.Box{X1: x1, Y1: y1, X2: x2, Y2: y2} }

func TestIoU(t *testing.T) {
	require.InDelta(t, 1.0, IoU(box(0, 0, 10, 10), box(0, 0, 10, 10)), 1e-6)
	require.InDelta(t, 25.0/175, IoU(box(0, 0, 10, 10), box(5, 5, 15, 15)), 1e-6)
	require.Zero(t, IoU(box(0, 0, 1, 1), box(2, 2, 3, 3)))
	require.Zero(t, IoU(box(0, 0, 0, 0), box(0, 0, 0, 0)))
}

func TestNMSClassAware(t *testing.T) {
	c := []pipeline.Detection{
		{ClassID: 0, Score: 0.6, Box: box(1, 1, 11, 11)},
		{ClassID: 0, Score: 0.9, Box: box(0, 0, 10, 10)},
		{ClassID: 2, Score: 0.8, Box: box(0, 0, 10, 10)}, // other class, same place: kept
		{ClassID: 0, Score: 0.5, Box: box(50, 50, 60, 60)},
	}
	out := nmsClassAware(c, 0.45, nil)
	require.Len(t, out, 3)
	require.Equal(t, []float32{0.9, 0.8, 0.5}, []float32{out[0].Score, out[1].Score, out[2].Score})
}

func TestWeightedMerge(t *testing.T) {
	kp := func(x float32) []pipeline.Point { return []pipeline.Point{{X: x, Y: x}} }
	c := []pipeline.Detection{
		{Score: 0.5, Box: box(2, 0, 12, 10), Keypoints: kp(4)},
		{Score: 1.0, Box: box(0, 0, 10, 10), Keypoints: kp(1)},
		{Score: 0.7, Box: box(100, 100, 110, 110), Keypoints: kp(100)}, // alone
	}
	out := weightedMerge(c, 0.3, nil)
	require.Len(t, out, 2)
	// Group {1.0 @cx5, 0.5 @cx7}: weighted centre x = (5 + 3.5)/1.5.
	require.InDelta(t, 8.5/1.5, float64(out[0].Box.X1+out[0].Box.X2)/2, 1e-5)
	require.InDelta(t, 2.0, float64(out[0].Keypoints[0].X), 1e-5) // (1·1 + 0.5·4)/1.5
	require.Equal(t, float32(1.0), out[0].Score)
	require.Equal(t, float32(0.7), out[1].Score, "a lone candidate is kept")
}

func bindAs(t *testing.T, format string, in, out []TensorInfo) (Binding, error) {
	t.Helper()
	a, err := NewAdapter(Spec{Format: format})
	require.NoError(t, err)
	return a.Bind(in, out)
}

func TestBindRejects(t *testing.T) {
	img := []TensorInfo{{Name: "images", Shape: []int64{1, 3, 416, 416}}}
	_, err := bindAs(t, "blazeface", img, nil)
	require.ErrorIs(t, err, ErrModelMismatch)
	_, err = bindAs(t, "yolox", img, []TensorInfo{{Name: "output", Shape: []int64{1, 100, 85}}})
	require.ErrorIs(t, err, ErrModelMismatch)
	require.Contains(t, err.Error(), "3549")
	b, err := bindAs(t, "yolox", img, []TensorInfo{{Name: "output", Shape: []int64{1, 3549, 85}}})
	require.NoError(t, err)
	require.Equal(t, pipeline.BGR, b.Order)
}

// Format auto tells the formats apart by shapes and, where a YOLOX and a
// transposed YOLOv8 output could both be meant, by the class count: the
// labels' length, else COCO's 80; a tie fails listing both.
func TestAutoFormat(t *testing.T) {
	img416 := []TensorInfo{{Name: "images", Shape: []int64{1, 3, 416, 416}}}
	img640 := []TensorInfo{{Name: "images", Shape: []int64{1, 3, 640, 640}}}
	out := func(s ...int64) []TensorInfo { return []TensorInfo{{Name: "output0", Shape: s}} }
	for _, c := range []struct {
		in, out []TensorInfo
		labels  int
		want    string
	}{
		{img416, out(1, 3549, 85), 0, "yolox"},
		{img416, out(1, 3549, 84), 0, "yolov8"},
		{img416, out(1, 84, 3549), 0, "yolov8"},
		{img640, out(1, 7, 8400), 0, "yolov8"}, // 3 classes, unambiguous
		{img416, out(1, 3549, 50), 46, "yolov8"},
		{img416, out(1, 3549, 50), 45, "yolox"},
		{img640, out(1, 300, 6), 0, "yolov10"},
		{img640, out(1, 8400, 6), 0, "yolov10"}, // not a 2-class YOLOv8: 80 classes expected
		{append(img640, TensorInfo{Name: "orig_target_sizes", Shape: []int64{1, 2}, Type: "int64"}), []TensorInfo{
			{Name: "labels", Shape: []int64{1, 300}, Type: "int64"}, {Name: "boxes", Shape: []int64{1, 300, 4}}, {Name: "scores", Shape: []int64{1, 300}}}, 0, "rtdetr"},
		{img640, []TensorInfo{{Name: "dets", Shape: []int64{1, 300, 4}}, {Name: "labels", Shape: []int64{1, 300, 91}}}, 0, "rfdetr"},
		{[]TensorInfo{{Name: "image_tensor:0", Shape: []int64{1, 300, 300, 3}, Type: "uint8"}}, []TensorInfo{
			{Name: "detection_boxes:0", Shape: []int64{1, 100, 4}}, {Name: "detection_classes:0", Shape: []int64{1, 100}},
			{Name: "detection_scores:0", Shape: []int64{1, 100}}, {Name: "num_detections:0", Shape: []int64{1}}}, 0, "ssd"},
		{[]TensorInfo{{Name: "input", Shape: []int64{1, 128, 128, 3}}}, []TensorInfo{
			{Name: "a", Shape: []int64{1, 896, 16}}, {Name: "b", Shape: []int64{1, 512, 1}}, {Name: "c", Shape: []int64{1, 384, 1}},
			{Name: "d", Shape: []int64{1, 512, 16}}, {Name: "e", Shape: []int64{1, 384, 16}}}, 0, ""}, // five outputs: none
	} {
		s := Spec{}
		for i := range c.labels {
			s.Labels = append(s.Labels, "c"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		}
		a, err := NewAdapter(s)
		require.NoError(t, err)
		b, err := a.Bind(c.in, c.out)
		if c.want == "" {
			require.ErrorIs(t, err, ErrModelMismatch)
			require.Contains(t, err.Error(), "no format fits")
			continue
		}
		require.NoError(t, err, "%v", c.out)
		require.Equal(t, c.want, a.Name(), "%v", c.out)
		require.Contains(t, b.Chosen, c.want+" (auto: ")
	}
	a, err := NewAdapter(Spec{})
	require.NoError(t, err)
	_, err = a.Bind(img416, out(1, 3549, 50))
	require.ErrorIs(t, err, ErrModelMismatch)
	require.Contains(t, err.Error(), "fit more than one format: yolox (")
	require.Contains(t, err.Error(), " or yolov8 (")
}

// A dynamic input takes input.size [width, height]; without it it is
// refused, naming the keys.
func TestDynamicInputSize(t *testing.T) {
	in := []TensorInfo{{Name: "images", Shape: []int64{-1, 3, -1, -1}}}
	out := []TensorInfo{{Name: "output0", Shape: []int64{-1, 84, -1}}}
	a, err := NewAdapter(Spec{Format: "yolov8"})
	require.NoError(t, err)
	_, err = a.Bind(in, out)
	require.ErrorIs(t, err, ErrModelMismatch)
	require.Contains(t, err.Error(), "set the model's input.size [width, height]")
	a, err = NewAdapter(Spec{Input: InputSpec{Width: 640, Height: 384}})
	require.NoError(t, err)
	b, err := a.Bind(in, out)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3, 384, 640}, b.InShape)
	require.Equal(t, [][]int64{{1, 84, 5040}}, b.OutShapes, "N: the anchors of 640x384")
	_, err = a.Bind([]TensorInfo{{Name: "images", Shape: []int64{1, 3, 416, 416}}}, out)
	require.ErrorContains(t, err, "input.size width 640, but input \"images\" [1 3 416 416] is fixed at 416")
}

// Stretch maps each axis by its own scale.
func TestStretch(t *testing.T) {
	lb := NewStretch(1280, 720, 640, 640)
	require.Equal(t, 640, lb.ContentW)
	require.Equal(t, 640, lb.ContentH)
	x, y := lb.ToSource(320, 320)
	require.InDelta(t, 640.0, x, 1e-9)
	require.InDelta(t, 360.0, y, 1e-9)
	require.Equal(t, lb, Binding{Stretch: true, InW: 640, InH: 640}.Letterbox(1280, 720))
}

// FloatToHalf rounds to nearest even and halfToFloat widens exactly: whole
// 8-bit levels survive float16 unchanged.
func TestHalf(t *testing.T) {
	for v := range 256 {
		require.Equal(t, float32(v), halfToFloat(FloatToHalf(float32(v))))
	}
	for _, c := range []struct {
		v    float32
		want uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00}, {5.960464477539063e-08, 0x0001}, {1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}} {
		require.Equal(t, c.want, FloatToHalf(c.v), "%v", c.v)
	}
}

// The model block's values are checked before any model is read.
func TestSpecCheck(t *testing.T) {
	pad, nan := float32(300), float32(math.NaN())
	for _, c := range []struct {
		s    Spec
		want string
	}{
		{Spec{Format: "yolov5"}, `format: unknown format "yolov5"`},
		{Spec{Input: InputSpec{Layout: "chw"}}, "input.layout"},
		{Spec{Input: InputSpec{Range: []float32{1, 1}}}, "input.range"},
		{Spec{Input: InputSpec{Mean: []float32{0, 0, 0}}}, "input.mean and input.std"},
		{Spec{Input: InputSpec{Mean: []float32{0, 0, 0}, Std: []float32{1, 0, 1}}}, "input.std"},
		{Spec{Input: InputSpec{Pad: &pad}}, "input.pad"},
		{Spec{Input: InputSpec{Width: 640}}, "input.size: [640, 0]"},
		{Spec{ClassThresholds: map[string]float32{"person": 2}}, "class_thresholds: person"},
		// NaN (YAML's .nan) fails every comparison: it must be refused, not
		// let through as if in range.
		{Spec{Input: InputSpec{Pad: &nan}}, "input.pad"},
		{Spec{ScoreThreshold: nan}, "score_threshold"},
		{Spec{IoUThreshold: nan}, "iou_threshold"},
		{Spec{ClassThresholds: map[string]float32{"person": nan}}, "class_thresholds: person"},
	} {
		require.ErrorContains(t, c.s.Check(), c.want)
	}
	require.NoError(t, Spec{Format: "yolo11"}.Check(), "aliases")
	f, err := CanonicalFormat("YOLO26")
	require.NoError(t, err)
	require.Equal(t, "yolov10", f)
}

// Classes and per-class thresholds filter what a decoder found.
func TestClassesAndThresholds(t *testing.T) {
	a, err := NewAdapter(Spec{Format: "yolov10", Classes: []string{"person", "car"}, ClassThresholds: map[string]float32{"car": 0.8}})
	require.NoError(t, err)
	_, err = a.Bind([]TensorInfo{{Name: "images", Shape: []int64{1, 3, 64, 64}}}, []TensorInfo{{Name: "output0", Shape: []int64{1, 4, 6}}})
	require.NoError(t, err)
	out := []float32{
		1, 1, 9, 9, 0.5, 0, // person at 0.5: kept (default 0.25)
		1, 1, 9, 9, 0.7, 2, // car at 0.7: below its 0.8
		1, 1, 9, 9, 0.9, 2, // car at 0.9: kept
		1, 1, 9, 9, 0.9, 1, // bicycle: not in classes
	}
	d := a.Decode([][]float32{out}, NewLetterbox(64, 64, 64, 64), nil)
	require.Len(t, d, 2)
	require.Equal(t, "person", d[0].Label)
	require.Equal(t, "car", d[1].Label)
	_, err = NewAdapter(Spec{Format: "yolov10", Classes: []string{"unicorn"}})
	require.NoError(t, err)
	a, _ = NewAdapter(Spec{Format: "yolov10", Classes: []string{"unicorn"}})
	_, err = a.Bind([]TensorInfo{{Name: "images", Shape: []int64{1, 3, 64, 64}}}, []TensorInfo{{Name: "output0", Shape: []int64{1, 4, 6}}})
	require.ErrorContains(t, err, `classes: "unicorn" is not one of the model's labels`)
}

// Decode is safe for concurrent use: the GPU engine decodes its slots at
// once (run with -race).
func TestDecodeConcurrently(t *testing.T) {
	a, err := NewAdapter(Spec{})
	require.NoError(t, err)
	_, err = a.Bind([]TensorInfo{{Name: "images", Shape: []int64{1, 3, 64, 64}}}, []TensorInfo{{Name: "output0", Shape: []int64{1, 84, 84}}})
	require.NoError(t, err)
	require.Equal(t, "yolov8", a.Name())
	out := make([]float32, 84*84)
	for i := range 84 { // anchor i: a box at (i, i), class i%80 at 0.9
		out[i], out[84+i], out[2*84+i], out[3*84+i] = float32(i)/2, float32(i)/2, 4, 4
		out[(4+i%80)*84+i] = 0.9
	}
	lb := NewLetterbox(64, 64, 64, 64)
	want := a.Decode([][]float32{out}, lb, nil)
	require.Len(t, want, 84)
	done := make(chan []pipeline.Detection)
	for range 4 {
		go func() {
			var d []pipeline.Detection
			for range 50 {
				d = a.Decode([][]float32{out}, lb, d[:0])
			}
			done <- d
		}()
	}
	for range 4 {
		require.Equal(t, want, <-done)
	}
}
