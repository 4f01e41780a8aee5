package quantize_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/quantize"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// profileRuns is how many runs TestINT8Profile profiles per model (ORT's
// profile starts when the session is made, so the first, slower run is
// in it, spread over these).
const profileRuns = 100

// TestINT8Profile is a measurement, not a check: with
// VIGIL_INT8_PROFILE=DIR and VIGIL_INT8_PROFILE_MODELS=label=path,...
// (YOLOX-Nano and copies of it) it runs each model profileRuns times on
// the built-in street frame with ONNX Runtime's profiler on
// (SessionOptions profiling), writes the profiles to DIR and prints the
// kernel time per run by operator type (docs/int8/profile.txt).
func TestINT8Profile(t *testing.T) {
	dir := os.Getenv("VIGIL_INT8_PROFILE")
	if dir == "" {
		t.Skip("VIGIL_INT8_PROFILE not set (a measurement: docs/performance.md, INT8)")
	}
	initRuntime(t)
	m := infer.BuiltinModels["yolox-nano"]
	m.File = testenv.YOLOXNano(t)
	imgs, err := quantize.BuiltinFrames()
	require.NoError(t, err)
	defer func() {
		for _, i := range imgs {
			i.Release()
		}
	}()
	sc := decode.NewScaler()
	defer sc.Close()
	f32, err := infer.Open(infer.Options{Name: m.Name, Path: m.File, Spec: m.Spec, Resizer: sc})
	require.NoError(t, err)
	_, err = f32.Detect(imgs[0], &pipeline.StageTimes{}, nil)
	require.NoError(t, err)
	in := f32.InputTensor()
	b := f32.Binding()
	require.NoError(t, f32.Close())

	models := [][2]string{{"fp32", m.File}}
	for _, kv := range strings.Split(os.Getenv("VIGIL_INT8_PROFILE_MODELS"), ",") {
		if l, p, ok := strings.Cut(kv, "="); ok {
			models = append(models, [2]string{l, p})
		}
	}
	// The sessions take turns, one run each, so that all see the same
	// load from other processes on the shared cores.
	runs := make([]*profiled, len(models))
	for i, lp := range models {
		runs[i] = startProfile(t, lp[1], b, in, filepath.Join(dir, lp[0]))
	}
	for range profileRuns {
		for _, r := range runs {
			r.run(t)
		}
	}
	for i, r := range runs {
		printProfile(t, models[i][0], models[i][1], r.finish(t), r.wall)
	}
}

// profiled is one model's session with ORT's profiler on.
type profiled struct {
	s      *ort.DynamicAdvancedSession
	x      *ort.Tensor[float32]
	outs   []ort.Value
	prefix string
	wall   []time.Duration
}

func startProfile(t *testing.T, path string, b infer.Binding, in []float32, prefix string) *profiled {
	t.Helper()
	opts, err := ort.NewSessionOptions()
	require.NoError(t, err)
	defer opts.Destroy()
	require.NoError(t, opts.EnableProfiling(prefix))
	x, err := ort.NewTensor(ort.NewShape(b.InShape...), in)
	require.NoError(t, err)
	s, err := ort.NewDynamicAdvancedSession(path, []string{b.Input}, b.Outputs, opts)
	require.NoError(t, err)
	return &profiled{s: s, x: x, outs: make([]ort.Value, len(b.Outputs)), prefix: prefix}
}

func (p *profiled) run(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	require.NoError(t, p.s.Run([]ort.Value{p.x}, p.outs))
	p.wall = append(p.wall, time.Since(t0))
}

// finish ends the session, which writes the profile, and returns the
// profile's path.
func (p *profiled) finish(t *testing.T) string {
	t.Helper()
	require.NoError(t, p.s.Destroy())
	p.x.Destroy()
	for _, v := range p.outs {
		if v != nil {
			v.Destroy()
		}
	}
	files, err := filepath.Glob(p.prefix + "*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	slices.Sort(files)
	return files[len(files)-1]
}

// printProfile sums the profile's node kernel times by operator type.
func printProfile(t *testing.T, label, model, file string, wall []time.Duration) {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var evs []struct {
		Cat  string `json:"cat"`
		Name string `json:"name"`
		Dur  int64  `json:"dur"` // µs
		Args struct {
			Op string `json:"op_name"`
		} `json:"args"`
	}
	require.NoError(t, json.Unmarshal(raw, &evs))
	type agg struct {
		op    string
		us, n int64
	}
	by := map[string]*agg{}
	var total, runs int64
	for _, e := range evs {
		switch {
		case e.Cat == "Session" && e.Name == "model_run":
			runs++
		case e.Cat == "Node" && strings.HasSuffix(e.Name, "_kernel_time"):
			a := by[e.Args.Op]
			if a == nil {
				a = &agg{op: e.Args.Op}
				by[e.Args.Op] = a
			}
			a.us += e.Dur
			a.n++
			total += e.Dur
		}
	}
	require.Positive(t, runs)
	var list []*agg
	for _, a := range by {
		list = append(list, a)
	}
	slices.SortFunc(list, func(a, b *agg) int { return int(b.us - a.us) })
	slices.Sort(wall)
	fmt.Printf("\n%s (%s): %d runs, node kernel time %.2f ms per run, Run's wall time median %.2f ms; profile %s\n",
		label, model, runs, float64(total)/float64(runs)/1000, float64(wall[len(wall)/2].Microseconds())/1000, file)
	for _, a := range list {
		fmt.Printf("  %-22s %4d nodes  %8.3f ms per run  %5.1f %%\n", a.op, a.n/runs, float64(a.us)/float64(runs)/1000, 100*float64(a.us)/float64(total))
	}
}
