package videotest

import (
	"testing"
	"time"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/pipeline"
)

// clipRuns keeps each clip's run for the benchmarks (decoding and
// detecting vtest.avi takes seconds; the benchmark functions are called
// again for each b.N).
var clipRuns = map[string]run{}

// BenchmarkObserveClip is the analytics stage's cost per frame (ns/op is
// per frame) on real detections: YOLOX-Nano's on vtest.avi (a line and a
// zone) and BlazeFace's on Megamind.avi (a zone), the clip played again
// and again with its PTS running on. engine-µs/frame is the engine's time
// per frame (preprocess, ONNX Runtime on the CPU, postprocess) measured on
// the same frames in the same run, and share-% the stage's time as a
// share of it. Package analytics' BenchmarkObserve has the synthetic
// 10/100/500-object figures.
func BenchmarkObserveClip(b *testing.B) {
	for _, c := range []struct {
		name                  string
		model, adapter, video func(testing.TB) string
		cfg                   analytics.Config
	}{
		{"vtest-yolox", yoloxModel, func(testing.TB) string { return "yolox" }, vtestClip,
			analytics.Config{Zones: []analytics.Zone{vtestZone}, Lines: []analytics.Line{vtestLine}}},
		{"megamind-blazeface", blazefaceModel, func(testing.TB) string { return "blazeface" }, megamindClip,
			analytics.Config{Zones: []analytics.Zone{megamindZone}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r, ok := clipRuns[c.name]
			if !ok {
				r = runClip(b, c.model(b), c.adapter(b), c.video(b), c.cfg)
				clipRuns[c.name] = r
			}
			var engine time.Duration
			dets := make([][]pipeline.Detection, len(r.frames))
			objects := 0
			for i, f := range r.frames {
				engine += f.Infer
				dets[i] = append([]pipeline.Detection(nil), f.Dets...)
				objects += len(f.Dets)
			}
			length := r.frames[len(r.frames)-1].PTS + (r.frames[1].PTS - r.frames[0].PTS)
			st, err := analytics.New("clip", "e0", c.cfg)
			if err != nil {
				b.Fatal(err)
			}
			wall := time.Now()
			k := 0
			step := func() {
				i := k % len(dets)
				st.Observe(r.frames[i].PTS+float64(k/len(dets))*length, wall, r.frames[i].W, r.frames[i].H, dets[i])
				k++
			}
			for range dets { // one pass first: the tracks of the clip exist
				step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			perFrame := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 1e3
			enginePerFrame := float64(engine.Microseconds()) / float64(len(r.frames))
			b.ReportMetric(perFrame, "µs/frame")
			b.ReportMetric(enginePerFrame, "engine-µs/frame")
			b.ReportMetric(100*perFrame/enginePerFrame, "share-%")
			b.ReportMetric(float64(objects)/float64(len(r.frames)), "objects/frame")
		})
	}
}
