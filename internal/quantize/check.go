package quantize

import (
	_ "embed" // the built-in frames
	"errors"
	"fmt"
	"os"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/pipeline"
)

// builtinFaces is frame 150 of OpenCV's Megamind.avi (720x528, faces;
// BSD licence, see internal/assets), the second frame Open checks an INT8
// copy on; the first is infer/gpu's built-in frame (vtest.avi frame 300,
// people), which the GPU engine's fp16 check uses.
//
//go:embed builtin_faces.jpg
var builtinFaces []byte

// AgreeIoU is the overlap each fp32 detection of a built-in frame must
// have with an INT8 one of the same class: infer.MatchIoU, vigil's rule
// for two engines that should see the same thing (the GPU engine against
// the CPU engine). Scores are not compared: INT8 moves them by more than
// infer.MatchScore without moving the boxes.
const AgreeIoU = infer.MatchIoU

// BuiltinFrames decodes the built-in frames (people, then faces) through
// FFmpeg; the caller releases them. Errors: FFmpeg's, or a temporary file
// that cannot be written.
func BuiltinFrames() ([]pipeline.Image, error) {
	street, err := gpu.BuiltinFrame()
	if err != nil {
		return nil, err
	}
	faces, err := decode.FirstFrame(builtinFaces)
	if err != nil {
		street.Release()
		return nil, err
	}
	return []pipeline.Image{street, faces}, nil
}

// Agree runs the built-in frames through the fp32 engine and the INT8
// one and returns "" when, on each, both find the same number of
// detections and every fp32 detection has an INT8 one of its class with
// IoU ≥ AgreeIoU; else why not, in a few words. Errors: decoding the
// frames, or a Detect that fails.
func Agree(fp32, int8 pipeline.Engine) (string, int, error) {
	imgs, err := BuiltinFrames()
	if err != nil {
		return "", 0, err
	}
	defer func() {
		for _, i := range imgs {
			i.Release()
		}
	}()
	n := 0
	for k, img := range imgs {
		want, err := fp32.Detect(img, &pipeline.StageTimes{}, nil)
		if err != nil {
			return "", n, err
		}
		got, err := int8.Detect(img, &pipeline.StageTimes{}, nil)
		if err != nil {
			return "", n, err
		}
		n += len(want)
		m := Pair(want, got, AgreeIoU)
		if len(want) != len(got) || m.Matched != len(want) {
			return fmt.Sprintf("built-in frame %d: fp32 finds %d detections, INT8 %d, %d of them paired at IoU >= %.1f",
				k+1, len(want), len(got), m.Matched, AgreeIoU), n, nil
		}
	}
	return "", n, nil
}

// Open returns the engine infer.precision int8 runs for o: the INT8 copy
// of o.Path from the cache when there is one and it agrees with fp32 (the
// engine given, which Open then closes), else fp32 itself. note says in
// one line which and why. Errors: only an INT8 copy that exists and
// fails to open or run (the fp32 engine is then still returned).
func Open(o infer.Options, fp32 *infer.Engine, cacheDir, modelRef string) (eng *infer.Engine, note string, err error) {
	path, rec, err := Lookup(o.Path, cacheDir)
	if errors.Is(err, os.ErrNotExist) {
		return fp32, fmt.Sprintf("int8: no INT8 copy of this model yet, running fp32; make one with `vigil model quantize --model %s --calibrate CLIP`", modelRef), nil
	}
	if err != nil {
		return fp32, "int8: cannot read the INT8 copy's record, running fp32", err
	}
	o.Path = path
	q, err := infer.Open(o)
	if err != nil {
		return fp32, "int8: the INT8 copy does not open, running fp32", err
	}
	why, n, err := Agree(fp32, q)
	if err != nil || why != "" {
		q.Close()
		if err != nil {
			return fp32, "int8: checking the INT8 copy failed, running fp32", err
		}
		return fp32, "int8: the INT8 copy disagrees with fp32 (" + why + "), running fp32", nil
	}
	fp32.Close()
	return q, fmt.Sprintf("int8 (QDQ copy %s calibrated on %s, %d frames, %s, keep-float %s: %d of %d blocks float; agrees with fp32 on the built-in frames, %d detections)",
		path, rec.Source, rec.Frames, rec.Method, rec.KeepFloat, len(rec.Float), rec.Blocks, n), nil
}
