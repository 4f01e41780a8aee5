package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(""), "empty.yaml")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:4222", c.NATS.Listen)
	require.Equal(t, "vigil", c.NATS.SubjectPrefix)
	require.Equal(t, 4, c.Pipeline.QueueSize)
	require.Equal(t, 5*time.Second, c.Pipeline.ProgressInterval.Duration)
	require.Equal(t, []int{1}, c.Infer.BatchSizes, "no batching by default")
	require.Equal(t, 2000, c.Pipeline.MaxQueueDelayUS)
	require.Equal(t, 10, c.Pipeline.DegradeDepth)
	require.Equal(t, DefaultBudgetMS, *c.Pipeline.BudgetMS)
	require.Equal(t, 10*time.Second, c.Pipeline.AlertInterval.Duration)
}

func TestStreamDefaultsAndExpansion(t *testing.T) {
	t.Setenv("VIGIL_TEST_HOST", "cam7")
	c, err := Parse([]byte(`
infer: {models_dir: /tmp}
models: [{name: m, path: /dev/null}]
streams:
  - {id: a, url: "rtsp://${VIGIL_TEST_HOST}/s", model: m}
`), "x.yaml")
	require.NoError(t, err)
	s := c.Streams[0]
	require.Equal(t, "rtsp://cam7/s", s.URL)
	require.Equal(t, "tcp", s.Transport)
	require.Equal(t, 60*time.Second, s.OpenTimeout.Duration)
	require.Equal(t, 4, s.QueueSize)
}

// Every problem is reported, each naming its field, on one line.
func TestValidateNamesFields(t *testing.T) {
	_, err := Parse([]byte(`
log: {level: loud}
metrics: {listen: nowhere}
pipeline: {queue_size: 0}
models: [{name: m, path: /dev/null, adapter: retinanet}]
streams:
  - {id: "bad id", url: "ftp://x/y", transport: sctp, model: nope}
  - {id: ok, url: /x.avi, model: m, open_timeout: 1s}
  - {id: ok, url: /x.avi, model: m}
`), "bad.yaml")
	require.Error(t, err)
	msg := err.Error()
	require.NotContains(t, msg, "\n")
	for _, want := range []string{
		"bad.yaml: ", "log.level", "metrics.listen", "pipeline.queue_size", "models[0].adapter",
		"streams[0].id", "streams[0].url", "streams[0].transport", `streams[0].model: unknown model "nope"`,
		`streams[2].id: "ok" is used twice`,
	} {
		require.Contains(t, msg, want)
	}
}

func TestUnknownKeysAndBadValues(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"nats: {urll: x}\n", `line 1: unknown key "urll" in nats`},
		{"infer: {tensorrt: {fp17: true}}\n", `line 1: unknown key "fp17" in infer.tensorrt`},
		{"decode: {hwacel: cuda}\n", `line 1: unknown key "hwacel" in decode`},
		{"streams:\n  - id: a\n    loop: sometimes\n", "line 3"},
		{"streams:\n  - {id: a, url: /x, stall_timeout: soon}\n", `"soon" is not a duration`},
		{"streams: [\n", "did not find expected node content"},
		{"infer: {provider: vulkan}\n", `infer.provider: "vulkan": want auto, tensorrt, cuda or cpu`},
		{"infer: {slots: 0}\n", "infer.slots: 0: want 1 to 16"},
		{"infer: {device: -1}\n", "infer.device: -1"},
		{"infer: {tensorrt: {int8: true}}\n", "infer.tensorrt.int8_calibration_table: int8 needs a calibration table file"},
		{"decode: {hwaccel: vaapi}\n", `decode.hwaccel: "vaapi": want auto, cuda, hybrid or none`},
		{"decode: {nvdec: cuvid}\n", `decode.nvdec: "cuvid": want direct or ffmpeg`},
		{"decode: {cpu_fps: -5}\n", "decode.cpu_fps: -5: want 0 (default) or a positive rate in frames per second"},
		{"decode: {nvdec_pixel_rate: -1}\n", "decode.nvdec_pixel_rate: -1: want 0 (default) or a positive rate in pixels per second"},
		{"decode: {cpu_pixel_rate: 2000000, cpu_fps: 100}\n", "decode.cpu_fps: deprecated, and decode.cpu_pixel_rate is set too: keep decode.cpu_pixel_rate only"},
		{"decode: {reweigh_interval: 10ms}\n", "decode.reweigh_interval: 10ms: want 0s (never) or at least 100ms"},
		{"decode: {hw_surfaces: 0}\n", "decode.hw_surfaces: 0: want 1 to 64"},
		{"decode: {cpu_nice: 20}\n", "decode.cpu_nice: 20: want 0 to 19"},
		{"decode: {cpu_nice: -1}\n", "decode.cpu_nice: -1: want 0 to 19"},
		{"infer: {tf32: true, precision: fp16}\n", "infer.tf32: deprecated, and precision is fp16"},
		{"infer: {instances: 17}\n", "infer.instances: 17: want 0 (the default) or 1 to 16"},
		{"infer: {cudnn_conv_algo_search: fastest}\n", `infer.cudnn_conv_algo_search: "fastest"`},
		{"infer: {batch_sizes: [1, 256]}\n", "infer.batch_sizes: 256: want 1 to 128"},
		{"infer: {precision: int4}\n", `infer.precision: "int4": want fp32, tf32, fp16 or int8`},
		{"infer: {precision: int8, provider: tensorrt}\n", "infer.precision: int8 runs on the CPU engine: set infer.provider to auto or cpu"},
		{"infer: {tf32: true, precision: int8}\n", "infer.tf32: deprecated, and precision is int8"},
	} {
		_, err := Parse([]byte(tc.yaml), "c.yaml")
		require.Error(t, err, tc.yaml)
		require.Contains(t, err.Error(), tc.want)
		require.True(t, strings.HasPrefix(err.Error(), "c.yaml: "))
	}
}

// The GPU engine's keys that are fine: tf32 as an alias beside precision
// tf32 or none, batch 128, the algorithm search in any case.
func TestPrecisionKeys(t *testing.T) {
	for _, y := range []string{
		"infer: {tf32: true}\n", "infer: {tf32: true, precision: tf32}\n", "infer: {precision: fp16, instances: 4, prefer_nhwc: true}\n",
		"infer: {batch_sizes: [1, 64, 128], cudnn_conv_algo_search: HEURISTIC}\n",
	} {
		_, err := Parse([]byte(y), "p.yaml")
		require.NoError(t, err, y)
	}
}

func TestBatchingAndDegradationKeys(t *testing.T) {
	_, err := Parse([]byte(`
infer: {batch_sizes: [1, 4]}
pipeline: {preferred_batch_sizes: [8], max_queue_delay_us: 0, degraded_fps: .nan, restore_after: 0s}
`), "k.yaml")
	require.Error(t, err)
	for _, want := range []string{"pipeline.preferred_batch_sizes: 8 is not one of", "pipeline.max_queue_delay_us", "pipeline.degraded_fps", "pipeline.restore_after"} {
		require.Contains(t, err.Error(), want)
	}
	_, err = Parse([]byte("streams: [{id: a, url: /x.avi, fps_limit: .nan}]\n"), "n.yaml")
	require.ErrorContains(t, err, "streams[0].fps_limit")
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("streams:\n  - {id: a, url: /x.avi}\n"))
	f.Add([]byte("nats: {url: nats://h:4222}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err == nil {
			require.NoError(t, c.Validate(), "a parsed config is valid")
		}
	})
}

func TestLimitsAndRelativeModelPaths(t *testing.T) {
	_, err := Parse([]byte(`
pipeline: {queue_size: 2000000000}
infer: {intra_op_threads: -5}
nats: {url: "garbage://x,nats://u:hunter2@h:4222"}
streams:
  - {id: a, url: /x.avi, decode_threads: 100000, queue_size: 5000}
`), "limits.yaml")
	require.Error(t, err)
	for _, want := range []string{"pipeline.queue_size", "infer.intra_op_threads", "nats.url", "streams[0].decode_threads", "streams[0].queue_size"} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "hunter2")
	require.Equal(t, 1, strings.Count(err.Error(), "streams[0].queue_size"), "each problem once: %s", err)

	dir := t.TempDir()
	c := Default()
	c.Infer.ModelsDir = dir
	m, err := c.ResolveModel("sub/model.onnx")
	require.NoError(t, err)
	require.Equal(t, dir+"/sub/model.onnx", m.File, "relative paths not in the working directory resolve in models_dir")
	require.Contains(t, c.CheckModel("yolox-nano").Error(), "make setup downloads it from Megvii's YOLOX GitHub release")
}

// Every problem of a stream is reported at once, those the registry's
// spec check finds included (it used to stop at the first of them).
func TestStreamProblemsAllAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
models: [{name: m, path: /dev/null}]
streams:
  - id: a
    url: /x.avi
    model: m
    fps_limit: -1
    fps_burst: -1
    budget_ms: -1
    priority: urgent
    labels: {"bad key": v, "also bad": w}
    stall_timeout: 2h
`), "s.yaml")
	require.Error(t, err)
	for _, want := range []string{
		"streams[0].fps_limit: -1", "streams[0].fps_burst: -1", "streams[0].budget_ms: -1",
		`streams[0].priority: "urgent"`, `streams[0].labels: key "also bad"`, `streams[0].labels: key "bad key"`,
		`streams[0].stall_timeout: "2h0m0s"`,
	} {
		require.Contains(t, err.Error(), want)
	}
}

// An unknown key names the key it most likely meant, and is reported with
// the file's other problems rather than alone.
func TestUnknownKeySuggestions(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"nats: {urll: x}\n", `line 1: unknown key "urll" in nats (did you mean "url"?)`},
		{"metric: {listen: x}\n", `line 1: unknown key "metric" in top level (did you mean "metrics"?)`},
		{"infer: {tensorrt: {fp17: true}}\n", `unknown key "fp17" in infer.tensorrt (did you mean "fp16"?)`},
		{"streams:\n  - {id: a, url: /x.avi, stall_timout: 5s}\n", `line 2: unknown key "stall_timout" in streams[] (did you mean "stall_timeout"?)`},
		{"pipeline: {QueueSize: 3}\n", `(did you mean "queue_size"?)`},
		{"pipeline: {Queue_Size: 3}\n", `(did you mean "queue_size"?)`},
	} {
		_, err := Parse([]byte(tc.yaml), "c.yaml")
		require.ErrorContains(t, err, tc.want, tc.yaml)
	}
	_, err := Parse([]byte("streams:\n  - {id: a, url: /x.avi, bogus: 1}\n"), "c.yaml")
	require.ErrorContains(t, err, `unknown key "bogus" in streams[]`)
	require.NotContains(t, err.Error(), "did you mean", "nothing is close to bogus")

	_, err = Parse([]byte("log: {levle: debug}\nstreams:\n  - {id: a, url: /x.avi, fps_limit: -1, priority: urgent}\n"), "c.yaml")
	require.Error(t, err)
	for _, want := range []string{`unknown key "levle" in log (did you mean "level"?)`, "streams[0].fps_limit: -1", `streams[0].priority: "urgent"`} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "\n")
}

// Every section of the file has a name in messages, found from the
// structs, so a section added later needs no table entry.
func TestEverySectionNamed(t *testing.T) {
	n := 0
	for _, k := range Keys() {
		if !k.Section {
			continue
		}
		n++
		name, keys, ok := sectionName(sectionType(k.Field.Type))
		require.True(t, ok, k.Path)
		require.True(t, strings.HasPrefix(name, k.Path), "%s named %q", k.Path, name)
		require.NotEmpty(t, keys)
		st, ok := sectionByTypeName(sectionType(k.Field.Type).String())
		require.True(t, ok)
		require.Equal(t, sectionType(k.Field.Type), st)
	}
	require.GreaterOrEqual(t, n, 10, "api, log, metrics, nats, infer, infer.tensorrt, decode, pipeline, models, streams")
}

// A stream's analytics block decodes, its problems are reported with the
// other problems, each naming its field under streams[i].analytics, and
// an unknown key inside it names its section.
func TestStreamAnalytics(t *testing.T) {
	c, err := Parse([]byte(`
models: [{name: m, path: /dev/null}]
streams:
  - id: a
    url: /x.avi
    model: m
    analytics:
      tracker: {lost_after: 3s}
      zones:
        - {name: door, polygon: [[0, 0], [10, 0], [10, 10]], classes: [person], loiter_after: 30s}
      lines:
        - {name: gate, a: [5, 0], b: [5, 10]}
`), "a.yaml")
	require.NoError(t, err)
	a := c.Streams[0].Analytics
	require.NotNil(t, a)
	require.Equal(t, 3*time.Second, time.Duration(a.Tracker.LostAfter))
	require.Equal(t, "door", a.Zones[0].Name)
	require.Equal(t, 30*time.Second, time.Duration(a.Zones[0].LoiterAfter))
	require.Equal(t, a, c.Spec(c.Streams[0]).Analytics, "the registry spec carries it")

	_, err = Parse([]byte(`
models: [{name: m, path: /dev/null}]
streams:
  - id: a
    url: /x.avi
    model: m
    analytics:
      zones:
        - {name: door, polygon: [[0, 0], [10, 0], [10, 10]]}
        - {name: bow, polygon: [[0, 0], [10, 10], [10, 0], [0, 10]]}
        - {name: "a.b", polygon: [[0, 0], [10, 0], [10, 10]]}
      lines:
        - {name: gate, a: [5, 5], b: [5, 5]}
`), "bad.yaml")
	require.Error(t, err)
	for _, want := range []string{
		"streams[0].analytics.zones[1].polygon: edges 0", "cross or touch",
		`streams[0].analytics.zones[2].name: "a.b": want 1-64 characters`,
		"streams[0].analytics.lines[0].b: [5 5]: the same point as a",
	} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "zones[0]")

	_, err = Parse([]byte(`
streams:
  - id: a
    url: /x.avi
    analytics: {zones: [{name: door, polygn: [[0, 0], [10, 0], [10, 10]]}]}
`), "typo.yaml")
	require.ErrorContains(t, err, `unknown key "polygn" in streams[].analytics.zones[] (did you mean "polygon"?)`)
}

// A file of one analytics block (vigil detect --analytics) decodes; its
// problems, unknown keys and a missing block name the file and the field.
func TestLoadAnalytics(t *testing.T) {
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "a.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	a, err := LoadAnalytics(write("analytics:\n  lines:\n    - {name: gate, a: [5, 0], b: [5, 10]}\n"))
	require.NoError(t, err)
	require.Equal(t, "gate", a.Lines[0].Name)
	for _, tc := range []struct{ body, want string }{
		{"analytics:\n  zones:\n    - {name: z, polygon: [[0, 0], [9, 9], [9, 0], [0, 9]]}\n", "analytics.zones[0].polygon: edges"},
		{"analytics:\n  lines:\n    - {name: l, a: [1, 1], b: [1, 1]}\n", "analytics.lines[0].b: [1 1]: the same point as a"},
		{"analytics:\n  zones:\n    - {name: z, polgon: [[0, 0], [9, 0], [9, 9]]}\n", `line 3: unknown key "polgon" in analytics.zones[] (did you mean "polygon"?)`},
		{"zones: []\n", `unknown key "zones"`},
		{"", "no analytics: block"},
	} {
		p := write(tc.body)
		_, err := LoadAnalytics(p)
		require.ErrorContains(t, err, p+": ")
		require.ErrorContains(t, err, tc.want)
	}
}

// A model block's values are checked at parse, each problem naming its
// key; labels_file is read relative to infer.models_dir; adapter is
// format's former name.
func TestModelBlock(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "names.txt"), []byte("# two\ncat\ndog\n"), 0o644))
	_, err := Parse([]byte(`
infer: {models_dir: `+dir+`}
models:
  - {name: a, path: m.onnx, format: yolov5}
  - {name: b, path: m.onnx, format: yolox, adapter: blazeface}
  - {name: c, path: m.onnx, input: {layout: chw, range: [1], mean: [0.5, 0.5, 0.5]}}
  - {name: d, path: m.onnx, labels_file: missing.txt}
  - {name: e, path: m.onnx, labels: [x], labels_file: names.txt}
  - {name: f, path: m.onnx, input: {pad: 300}, class_thresholds: {cat: 1.5}}
  - {name: g, path: m.onnx, input: {size: [640]}}
`), "m.yaml")
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`models[0].format: unknown format "yolov5" (want auto, blazeface, yolox, yolov8, yolov10, rtdetr, rfdetr, ssd)`,
		`models[1].adapter: "blazeface" and format "yolox"`,
		`models[2].input.layout: "chw"`,
		`models[3].labels_file: open ` + filepath.Join(dir, "missing.txt"),
		`models[4].labels_file: set labels or labels_file, not both`,
		`models[5].input.pad: 300`,
		`models[6].input.size: [-1, 0]: want [width, height]`,
	} {
		require.Contains(t, msg, want)
	}
	c, err := Parse([]byte(`
infer: {models_dir: `+dir+`}
models:
  - {name: pets, path: m.onnx, adapter: yolox, labels_file: names.txt, classes: [dog], input: {size: [640, 480], pad: 0}}
`), "m.yaml")
	require.NoError(t, err)
	m, err := c.ResolveModel("pets")
	require.NoError(t, err)
	require.Equal(t, "yolox", m.Spec.Format, "adapter still read")
	require.Equal(t, []string{"cat", "dog"}, m.Spec.Labels)
	require.Equal(t, []string{"dog"}, m.Spec.Classes)
	require.Equal(t, float32(0), *m.Spec.Input.Pad)
	require.Equal(t, 640, m.Spec.Input.Width)
}

// degrade_to names another model, configured or built in, and following
// it never comes back: each problem names its key.
func TestDegradeTo(t *testing.T) {
	_, err := Parse([]byte(`
models:
  - {name: a, path: m.onnx, degrade_to: a}
  - {name: b, path: m.onnx, degrade_to: nosuch}
  - {name: c, path: m.onnx, degrade_to: d}
  - {name: d, path: m.onnx, degrade_to: c}
`), "m.yaml")
	require.Error(t, err)
	for _, want := range []string{
		`models[0].degrade_to: "a": a model cannot degrade to itself`,
		`models[1].degrade_to: unknown model "nosuch" (want a models[] name or a built-in name: blazeface, blazeface-back, yolox-nano)`,
		`models[2].degrade_to: a cycle: c → d → c`,
		`models[3].degrade_to: a cycle: d → c → d`,
	} {
		require.Contains(t, err.Error(), want)
	}
	c, err := Parse([]byte(`
pipeline: {default_model: far}
models:
  - {name: far, path: face_detection_back_256x256_barracuda.onnx, degrade_to: near}
  - {name: near, path: face_detection_front_128x128_barracuda.onnx, degrade_to: blazeface}
`), "m.yaml")
	require.NoError(t, err, "a chain is allowed")
	require.Equal(t, "near", c.DegradeTo(""), "the default model's")
	require.Equal(t, "blazeface", c.DegradeTo("near"))
	require.Empty(t, c.DegradeTo("blazeface"), "built-in models have none")
}

// A missing file is one problem, said once per field, and the problems
// come in the same order every time (they were listed from a map: stat's
// and ReadToken's error for the same token file, in random order).
func TestMissingFilesReportedOnceInOrder(t *testing.T) {
	y := "api: {token_file: /nonexistent/api.tok, tls_cert: /nonexistent/c.pem, tls_key: /nonexistent/k.pem}\n" +
		"nats: {token_file: /nonexistent/nats.tok}\n"
	_, err := Parse([]byte(y), "f.yaml")
	require.Error(t, err)
	msg := err.Error()
	for _, f := range []string{"api.token_file", "api.tls_cert", "api.tls_key", "nats.token_file"} {
		require.Equal(t, 1, strings.Count(msg, f+": "), "%s once in %s", f, msg)
	}
	for range 20 {
		_, again := Parse([]byte(y), "f.yaml")
		require.Equal(t, msg, again.Error(), "the same order every time")
	}
}
