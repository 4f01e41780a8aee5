package infer_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

func TestMain(m *testing.M) {
	decode.SetLogger(nil)
	os.Exit(m.Run())
}

func openEngine(t *testing.T, name, path, adapter string, thr float32) *infer.Engine {
	t.Helper()
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	sc := decode.NewScaler()
	t.Cleanup(sc.Close)
	e, err := infer.Open(infer.Options{Name: name, Path: path, Spec: infer.Spec{Format: adapter, ScoreThreshold: thr}, Resizer: sc})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// frameAt decodes src and runs fn on frame number n (0-based).
func frameAt(t *testing.T, src string, n uint64, fn func(pipeline.Image)) {
	t.Helper()
	s, err := decode.New(decode.Options{URL: src})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := false
	err = s.Run(ctx, func(f *pipeline.Frame) {
		defer f.Image.Release()
		if f.Seq == n {
			fn(f.Image)
			done = true
			cancel()
		}
	})
	require.True(t, done, "frame %d of %s not reached: %v", n, src, err)
}

// Reference values: ../shared/testdata/README.md, "Checked results"
// (ORT 1.30 CPU, OpenCV bilinear); tolerances there: box ±5 % of its size.
func TestBlazeFaceAstronaut(t *testing.T) {
	for _, tc := range []struct {
		model, file  string
		cx, cy, size float64
		score        float64
		kps          [6][2]float64
	}{
		{"blazeface", "face_detection_front_128x128_barracuda.onnx", 225, 128, 92, 0.92,
			[6][2]float64{{205, 101}, {249, 108}, {224, 124}, {221, 144}, {178, 110}, {271, 125}}},
		{"blazeface-back", "face_detection_back_256x256_barracuda.onnx", 225, 126, 104, 0.88,
			[6][2]float64{{203, 102}, {248, 103}, {224, 128}, {224, 149}, {177, 111}, {273, 114}}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			e := openEngine(t, tc.model, testenv.Model(t, tc.file), "", 0.5)
			require.Equal(t, "blazeface", e.Adapter(), "adapter detected from the model's shapes")
			var dets []pipeline.Detection
			frameAt(t, testenv.Media(t, "astronaut.png"), 0, func(img pipeline.Image) {
				var st pipeline.StageTimes
				var err error
				dets, err = e.Detect(img, &st, nil)
				require.NoError(t, err)
				require.Positive(t, st.Infer)
			})
			require.Len(t, dets, 1, "exactly one face")
			d := dets[0]
			w, h := float64(d.Box.X2-d.Box.X1), float64(d.Box.Y2-d.Box.Y1)
			tol := 0.05 * tc.size
			require.InDelta(t, tc.cx, float64(d.Box.X1+d.Box.X2)/2, tol)
			require.InDelta(t, tc.cy, float64(d.Box.Y1+d.Box.Y2)/2, tol)
			require.InDelta(t, tc.size, w, tol)
			require.InDelta(t, tc.size, h, tol)
			require.InDelta(t, tc.score, float64(d.Score), 0.05)
			require.Equal(t, "face", d.Label)
			require.Len(t, d.Keypoints, 6)
			for i, k := range d.Keypoints {
				require.InDelta(t, tc.kps[i][0], float64(k.X), tol, "keypoint %d x", i)
				require.InDelta(t, tc.kps[i][1], float64(k.Y), tol, "keypoint %d y", i)
			}
		})
	}
}

// Golden raw outputs for an all-zero input, from the same README: this
// checks the ORT binding (tensor names, order and layout), no image code.
func TestRawGoldenZeroInput(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[int][]float32 // output index (adapter order) -> first values
	}{
		{"face_detection_front_128x128_barracuda.onnx", map[int][]float32{
			0: {-5.47516, -4.62575, -5.49161, -4.48594}, // Identity:0
			1: {-6.01768, -8.19545},                     // Identity_1:0
			2: {0.56141, -0.59060, 28.73555, 28.73518},  // Identity_2:0
		}},
		{"face_detection_back_256x256_barracuda.onnx", map[int][]float32{
			0: {-64.63931, -22.80846, -478.61035, -260.52510}, // Identity:0
			3: {25.90795, 23.91290, 89.99953},                 // Identity_3:0
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			e := openEngine(t, "", testenv.Model(t, tc.file), "blazeface", 0)
			w, h := e.InputSize()
			outs, err := e.Raw(make([]float32, w*h*3))
			require.NoError(t, err)
			require.Equal(t, []string{"Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"}, e.OutputNames())
			for i, want := range tc.want {
				for j, v := range want {
					require.InDelta(t, v, outs[i][j], 1e-3*math.Max(1, math.Abs(float64(v))), "output %d value %d", i, j)
				}
			}
		})
	}
}

// YOLOX-Nano is not in any registry this project can fetch from; the test
// uses ../shared/testdata when it is there and skips otherwise.
func TestYOLOXNanoVtestFrame100(t *testing.T) {
	model := testenv.Shared(t, "models/yolox_nano.onnx")
	e := openEngine(t, "yolox-nano", model, "", 0)
	require.Equal(t, "yolox", e.Adapter())
	var dets []pipeline.Detection
	frameAt(t, testenv.Media(t, "vtest.avi"), 100, func(img pipeline.Image) {
		var st pipeline.StageTimes
		var err error
		dets, err = e.Detect(img, &st, nil)
		require.NoError(t, err)
	})
	persons := 0
	for _, d := range dets {
		require.GreaterOrEqual(t, d.Box.X1, float32(0))
		require.LessOrEqual(t, d.Box.X2, float32(768))
		require.LessOrEqual(t, d.Box.Y2, float32(576))
		if d.Label == "person" && d.Score >= 0.5 {
			persons++
		}
	}
	require.GreaterOrEqual(t, persons, 5, "detections: %+v", dets)

	// Empty canvas (every value 114): row 0 golden values, no objects.
	w, h := e.InputSize()
	in := make([]float32, 3*w*h)
	for i := range in {
		in[i] = 114
	}
	outs, err := e.Raw(in)
	require.NoError(t, err)
	for j, v := range []float32{1.25277, 1.35610, 0.95785, 0.82903} {
		require.InDelta(t, v, outs[0][j], 1e-3)
	}
	for r := 0; r < len(outs[0])/85; r++ {
		require.LessOrEqual(t, outs[0][r*85+4], float32(0.0015))
	}
}

func TestModelMismatchCaughtAtOpen(t *testing.T) {
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	_, err := infer.Open(infer.Options{Path: testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), Spec: infer.Spec{Format: "yolox"}})
	require.ErrorIs(t, err, infer.ErrModelMismatch)
	require.Contains(t, err.Error(), "input:0")
	require.Contains(t, err.Error(), "[B 3 H W]")

	_, err = infer.Open(infer.Options{Path: "/nonexistent/m.onnx"})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestNegativeClipNoFaces(t *testing.T) {
	e := openEngine(t, "blazeface", testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), "", 0)
	s, err := decode.New(decode.Options{URL: testenv.Media(t, "tree.avi")})
	require.NoError(t, err)
	sc := 0
	err = s.Run(context.Background(), func(f *pipeline.Frame) {
		defer f.Image.Release()
		var st pipeline.StageTimes
		d, err := e.Detect(f.Image, &st, nil)
		require.NoError(t, err)
		sc += len(d)
	})
	require.ErrorIs(t, err, io.EOF)
	require.Zero(t, sc, "tree.avi has no faces")
}

// Batch-4 and batch-32 copies of BlazeFace (scripts/batch_models.py) give,
// for each of N different frames in one execution, the detections the
// shipped batch-1 model gives for that frame alone.
func TestBatchedModelMatchesBatch1(t *testing.T) {
	one := openEngine(t, "b1", testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), "", 0)
	require.Equal(t, 1, one.Batch())
	for _, n := range []int{4, 32} {
		t.Run(fmt.Sprintf("b%d", n), func(t *testing.T) {
			eng := openEngine(t, fmt.Sprintf("b%d", n), testenv.Model(t, fmt.Sprintf("face_detection_front_128x128_barracuda.b%d.onnx", n)), "", 0)
			require.Equal(t, n, eng.Batch())
			imgs := distinctFrames(t, testenv.Media(t, "Megamind.avi"), n, 256/n) // Megamind has 270 frames
			sts := make([]*pipeline.StageTimes, n)
			for i := range sts {
				sts[i] = &pipeline.StageTimes{}
			}
			batch, err := eng.DetectBatch(imgs, sts, make([][]pipeline.Detection, n))
			require.NoError(t, err)
			faces := 0
			for i, img := range imgs {
				var st pipeline.StageTimes
				want, err := one.Detect(img, &st, nil)
				require.NoError(t, err)
				require.Len(t, batch[i], len(want), "frame %d", i)
				for j := range want {
					require.InDelta(t, want[j].Score, batch[i][j].Score, 1e-4)
					require.InDelta(t, want[j].Box.X1, batch[i][j].Box.X1, 0.05)
					require.InDelta(t, want[j].Box.Y2, batch[i][j].Box.Y2, 0.05)
				}
				faces += len(want)
				require.Equal(t, sts[0].Infer, sts[i].Infer, "one execution for the batch")
			}
			require.Positive(t, faces)
			// A partial batch (2 of N) uses the first slots.
			part, err := eng.DetectBatch(imgs[:2], sts[:2], make([][]pipeline.Detection, 2))
			require.NoError(t, err)
			require.Len(t, part[1], len(batch[1]))
			_, err = one.DetectBatch(imgs, sts, make([][]pipeline.Detection, n))
			require.Error(t, err, "more images than the batch")
		})
	}
}

// distinctFrames returns n frames of src, one every step frames (the test
// releases them at its end).
func distinctFrames(t *testing.T, src string, n, step int) []pipeline.Image {
	t.Helper()
	s, err := decode.New(decode.Options{URL: src})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var imgs []pipeline.Image
	_ = s.Run(ctx, func(f *pipeline.Frame) {
		if int(f.Seq)%step == step/2 && len(imgs) < n {
			imgs = append(imgs, f.Image)
			if len(imgs) == n {
				cancel()
			}
			return
		}
		f.Image.Release()
	})
	t.Cleanup(func() {
		for _, im := range imgs {
			im.Release()
		}
	})
	require.Len(t, imgs, n, "%s has fewer than %d frames", src, n*step)
	return imgs
}

// A batch-8 copy of YOLOX-Nano, made by scripts/batch_models.py from
// ../shared's model (setup cannot download it), gives for each of 8
// different frames in one execution the raw outputs the batch-1 model gives
// for that frame alone, within float tolerance, and so the same detections.
func TestYOLOXNanoBatch8MatchesBatch1(t *testing.T) {
	const n = 8
	shared := testenv.Shared(t, "models/yolox_nano.onnx")
	one := openEngine(t, "yolox-b1", shared, "", 0)
	eng := openEngine(t, "yolox-b8", batchedCopy(t, shared, n), "", 0)
	require.Equal(t, "yolox", eng.Adapter())
	require.Equal(t, n, eng.Batch())
	imgs := distinctFrames(t, testenv.Media(t, "vtest.avi"), n, 90) // vtest has 795 frames

	// Raw outputs: each frame preprocessed by the batch-1 engine, then the
	// eight inputs stacked and run once on the batch-8 engine.
	var stacked []float32
	var want [][]float32
	var wantDets [][]pipeline.Detection
	for _, img := range imgs {
		var st pipeline.StageTimes
		d, err := one.Detect(img, &st, nil)
		require.NoError(t, err)
		wantDets = append(wantDets, d)
		in := one.InputTensor()
		stacked = append(stacked, in...)
		outs, err := one.Raw(in)
		require.NoError(t, err)
		want = append(want, append([]float32(nil), outs[0]...))
	}
	outs, err := eng.Raw(stacked)
	require.NoError(t, err)
	per := len(outs[0]) / n
	require.Len(t, want[0], per)
	require.NotEqual(t, want[0], want[n-1], "the frames differ, so a mixed-up slot would show")
	for i := range imgs {
		got := outs[0][i*per : (i+1)*per]
		worst := 0.0
		for k, v := range want[i] {
			d := math.Abs(float64(v - got[k]))
			require.LessOrEqual(t, d, 1e-3*math.Max(1, math.Abs(float64(v))), "frame %d value %d: %v vs %v", i, k, v, got[k])
			worst = math.Max(worst, d)
		}
		t.Logf("frame %d: largest raw difference %.2g", i, worst)
	}

	// Detections through DetectBatch match Detect's.
	sts := make([]*pipeline.StageTimes, n)
	for i := range sts {
		sts[i] = &pipeline.StageTimes{}
	}
	got, err := eng.DetectBatch(imgs, sts, make([][]pipeline.Detection, n))
	require.NoError(t, err)
	people := 0
	for i := range imgs {
		require.Len(t, got[i], len(wantDets[i]), "frame %d", i)
		for j, w := range wantDets[i] {
			require.Equal(t, w.Label, got[i][j].Label)
			require.InDelta(t, w.Score, got[i][j].Score, 1e-3)
			require.InDelta(t, w.Box.X1, got[i][j].Box.X1, 0.1)
			require.InDelta(t, w.Box.Y2, got[i][j].Box.Y2, 0.1)
		}
		people += len(wantDets[i])
	}
	require.Positive(t, people, "vtest.avi shows pedestrians")
}

// batchedCopy copies model into a temporary directory and makes its
// batch-n copy there with scripts/batch_models.py (the source may be
// read-only, as ../shared is).
func batchedCopy(t *testing.T, model string, n int) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(model)
	require.NoError(t, err)
	src := filepath.Join(dir, filepath.Base(model))
	require.NoError(t, os.WriteFile(src, b, 0o644))
	script := filepath.Join(testenv.RepoRoot(), "scripts", "batch_models.py")
	out, err := exec.Command("/usr/bin/python3", script, src, strconv.Itoa(n)).CombinedOutput()
	require.NoError(t, err, "%s (python3-onnx comes with `make setup`)", out)
	return strings.TrimSuffix(src, ".onnx") + fmt.Sprintf(".b%d.onnx", n)
}

// Inspect reports what Open would bind, without an engine.
func TestInspect(t *testing.T) {
	require.NoError(t, infer.InitRuntime(testenv.ORTLibrary(t)))
	s, err := infer.Inspect(testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), infer.Spec{})
	require.NoError(t, err)
	faces := []string{"face"}
	require.Equal(t, `blazeface (auto: the four outputs of BlazeFace's 896 anchors)`, s.Chosen, "format auto says why")
	s.Chosen = ""
	require.Equal(t, infer.Shape{Adapter: "blazeface", InW: 128, InH: 128, Batch: 1, Square: true, Labels: faces}, s)
	s, err = infer.Inspect(testenv.Model(t, "face_detection_back_256x256_barracuda.b32.onnx"), infer.Spec{Format: "blazeface"})
	require.NoError(t, err)
	require.Equal(t, "blazeface (given)", s.Chosen)
	s.Chosen = ""
	require.Equal(t, infer.Shape{Adapter: "blazeface", InW: 256, InH: 256, Batch: 32, Square: true, Labels: faces}, s)
	_, err = infer.Inspect(testenv.Model(t, "face_detection_front_128x128_barracuda.onnx"), infer.Spec{Format: "yolox"})
	require.ErrorIs(t, err, infer.ErrModelMismatch)
	_, err = infer.Inspect("/nonexistent/m.onnx", infer.Spec{})
	require.ErrorIs(t, err, os.ErrNotExist)
	if p := filepath.Join(testenv.RepoRoot(), "..", "shared", "testdata", "models", "yolox_nano.onnx"); fileExists(p) {
		s, err = infer.Inspect(p, infer.Spec{})
		require.NoError(t, err)
		// The 80 COCO classes in YOLOX's order
		// (yolox/data/datasets/coco_classes.py).
		require.Len(t, s.Labels, 80)
		require.Equal(t, []string{"person", "bicycle", "car"}, s.Labels[:3])
		require.Equal(t, "toothbrush", s.Labels[79])
		s.Labels = nil
		require.Contains(t, s.Chosen, "yolox (auto: ")
		s.Chosen = ""
		require.Equal(t, infer.Shape{Adapter: "yolox", InW: 416, InH: 416, Batch: 1}, s)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Decode of Raw's outputs for a stored input tensor gives what Detect
// gave for the frame (the INT8 search in internal/quantize replays
// frames so).
func TestDecodeReplaysDetect(t *testing.T) {
	shared := testenv.Shared(t, "models/yolox_nano.onnx")
	e := openEngine(t, "yolox", shared, "", 0)
	imgs := distinctFrames(t, testenv.Media(t, "vtest.avi"), 2, 90)
	for _, img := range imgs {
		want, err := e.Detect(img, &pipeline.StageTimes{}, nil)
		require.NoError(t, err)
		require.NotEmpty(t, want)
		outs, err := e.Raw(e.InputTensor())
		require.NoError(t, err)
		require.Equal(t, want, e.Decode(outs, img.Width(), img.Height(), nil))
	}
}
