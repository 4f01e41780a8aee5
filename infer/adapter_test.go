package infer

import (
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
	require.InDelta(t, 1.0, iou(box(0, 0, 10, 10), box(0, 0, 10, 10)), 1e-6)
	require.InDelta(t, 25.0/175, iou(box(0, 0, 10, 10), box(5, 5, 15, 15)), 1e-6)
	require.Zero(t, iou(box(0, 0, 1, 1), box(2, 2, 3, 3)))
	require.Zero(t, iou(box(0, 0, 0, 0), box(0, 0, 0, 0)))
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
