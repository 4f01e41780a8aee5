package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/sinks"
)

// vigil runs the command in-process and returns its exit status and output.
func vigil(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	return rc, out.String(), errb.String()
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vigil.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

// Bad input: exit status 2 and exactly one line on stderr naming the problem.
func TestBadInput(t *testing.T) {
	megamind := testenv.Media(t, "Megamind.avi")
	front := testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
	edge := testenv.EdgeModels(t)
	notVideo := filepath.Join(t.TempDir(), "notes.mp4")
	require.NoError(t, os.WriteFile(notVideo, []byte("shopping list: milk, eggs\n"), 0o644))
	emptyFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(emptyFile, []byte("\n"), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown config key", []string{"run", "--config", writeConfig(t, "streams:\n  - id: a\n    url: "+megamind+"\n    bogus: 1\n")},
			[]string{`line 4: unknown key "bogus" in streams[]`}},
		{"unknown top-level key", []string{"check-config", writeConfig(t, "metric: {listen: x}\n")},
			[]string{`unknown key "metric" in top level`}},
		{"missing model file in config", []string{"run", "--config", writeConfig(t,
			"models:\n  - {name: m, path: /nonexistent/model.onnx}\nstreams:\n  - {id: a, url: "+megamind+", model: m}\n")},
			[]string{"streams[0].model", "/nonexistent/model.onnx does not exist"}},
		{"missing model file in detect", []string{"detect", "--model", "/nonexistent/model.onnx", megamind},
			[]string{"/nonexistent/model.onnx", "no such file"}},
		{"unsupported URL scheme in config", []string{"run", "--config", writeConfig(t, "streams:\n  - {id: a, url: \"ftp://u:pw@cam/x\"}\n")},
			[]string{"streams[0].url", `unsupported URL scheme "ftp"`}},
		{"missing file in detect", []string{"detect", "/nonexistent/clip.avi"},
			[]string{"source: stat /nonexistent/clip.avi: no such file or directory"}},
		{"unsupported URL scheme in detect", []string{"detect", "gopher://cam/x"},
			[]string{`unsupported URL scheme "gopher"`}},
		{"model shape does not fit adapter", []string{"run", "--config", writeConfig(t,
			"models:\n  - {name: wrong, path: "+front+", adapter: yolox}\nstreams:\n  - {id: a, url: "+megamind+", model: wrong}\n")},
			[]string{"format yolox", `"input:0" [1 128 128 3]`, "[B 3 H W]"}},
		{"not an ONNX model", []string{"detect", "--model", filepath.Join(edge, "not_onnx.onnx"), megamind},
			[]string{"not_onnx.onnx: ONNX Runtime cannot read it as an ONNX model ("}},
		{"two image inputs and no format", []string{"detect", "--model", filepath.Join(edge, "two_images.onnx"), megamind},
			[]string{"format auto", `2 image inputs ["left" [1 3 32 32] "right" [1 3 32 32]]`, "set the model's format"}},
		{"labels file shorter than the classes", []string{"run", "--config", writeConfig(t, "data_dir: "+t.TempDir()+
			"\nmodels:\n  - {name: m, path: "+filepath.Join(edge, "yolov8_nan.onnx")+", labels_file: "+filepath.Join(edge, "three.txt")+
			"}\nstreams:\n  - {id: a, url: "+megamind+", model: m}\n")},
			[]string{"yolov8_nan.onnx", "3 labels for a model with 80 classes"}},
		{"batch size without a batched model", []string{"run", "--config", writeConfig(t,
			"data_dir: "+t.TempDir()+"\ninfer: {batch_sizes: [1, 3]}\nstreams:\n  - {id: a, url: "+megamind+"}\n")},
			[]string{"infer.batch_sizes", ".b3.onnx"}},
		{"bad stream id", []string{"check-config", writeConfig(t, "streams:\n  - {id: \"a.b\", url: "+megamind+"}\n")},
			[]string{"streams[0].id", `"a.b"`}},
		{"self-intersecting zone", []string{"check-config", writeConfig(t, "streams:\n  - {id: a, url: "+megamind+
			", analytics: {zones: [{name: z, polygon: [[0, 0], [9, 9], [9, 0], [0, 9]]}]}}\n")},
			[]string{"streams[0].analytics.zones[0].polygon", "cross or touch"}},
		{"a line with a == b", []string{"check-config", writeConfig(t, "streams:\n  - {id: a, url: "+megamind+
			", analytics: {lines: [{name: l, a: [5, 5], b: [5, 5]}]}}\n")},
			[]string{"streams[0].analytics.lines[0].b", "the same point as a"}},
		{"zone name not a subject token", []string{"check-config", writeConfig(t, "streams:\n  - {id: a, url: "+megamind+
			", analytics: {zones: [{name: \"door*\", polygon: [[0, 0], [9, 0], [9, 9]]}]}}\n")},
			[]string{"streams[0].analytics.zones[0].name", `"door*"`}},
		{"class the model does not have", []string{"check-config", writeConfig(t, "streams:\n  - {id: a, url: "+megamind+
			", model: blazeface, analytics: {zones: [{name: z, polygon: [[0, 0], [9, 0], [9, 9]], classes: [face, car]}]}}\n")},
			[]string{"streams[0].analytics.zones[0].classes[1]", `"car": not a class of the model`}},
		{"class the model does not have, at run", []string{"run", "--config", writeConfig(t, "data_dir: "+t.TempDir()+
			"\nstreams:\n  - {id: a, url: "+megamind+", analytics: {lines: [{name: l, a: [0, 0], b: [9, 9], classes: [person]}]}}\n")},
			[]string{"streams[0].analytics.lines[0].classes[0]", `"person"`}},
		{"unknown flag", []string{"detect", "--frames", "3", megamind}, []string{"flag provided but not defined: -frames"}},
		{"shapes waste limit", []string{"shapes", "--max-waste", "120"}, []string{"--max-waste 120", "0 to 100"}},
		{"shapes waste NaN", []string{"shapes", "--max-waste", "nan"}, []string{"--max-waste NaN", "0 to 100"}},
		{"shapes timeout without probe", []string{"shapes", "--timeout", "3s"}, []string{"--timeout applies to --probe only"}},
		{"shapes probe timeout", []string{"shapes", "--probe", "--timeout", "0s"}, []string{"--timeout 0s", "positive"}},
		{"shapes API URL", []string{"shapes", "--api", "ftp://cam"}, []string{`--api "ftp://cam"`}},
		{"shapes bad config", []string{"shapes", "--config", writeConfig(t, "infer: {batch_sizes: [0]}\n")}, []string{"infer.batch_sizes"}},
		{"unknown command", []string{"serve"}, []string{`unknown command "serve"`}},
		{"unknown model subcommand", []string{"model", "quantise"}, []string{`unknown subcommand "quantise": want quantize`}},
		{"tail negative count", []string{"tail", "--count", "-1"}, []string{"--count -1: want 0 (until Ctrl-C) or more"}},
		{"empty API token file", []string{"streams", "ls", "--api", "http://127.0.0.1:1", "--token-file", emptyFile},
			[]string{"--token-file: " + emptyFile + " is empty"}},
		{"detect analytics file missing", []string{"detect", "--analytics", "/nonexistent/a.yaml", megamind},
			[]string{"--analytics /nonexistent/a.yaml: no such file or directory"}},
		{"calibration clip that does not decode", []string{"model", "quantize", "--model", front, "--calibrate", notVideo},
			[]string{"--calibrate " + notVideo, "cannot decode a video frame from it"}},
		{"quantize keep-float value", []string{"model", "quantize", "--model", front, "--calibrate", megamind, "--keep-float", "most"},
			[]string{"--keep-float", "auto, none or a number", `"most"`}},
		{"check-config: a model file that is not ONNX", []string{"check-config", writeConfig(t, "models: [{name: bad, path: "+notVideo+"}]\n"+
			"streams:\n  - {id: a, url: "+megamind+", model: bad}\n")},
			[]string{"streams[0].model", "ONNX Runtime cannot read it as an ONNX model"}},
		{"check-config: a model file that is not there", []string{"check-config", writeConfig(t, "streams:\n  - {id: a, url: "+megamind+
			", model: /nonexistent/m.onnx}\n")},
			[]string{"streams[0].model", "/nonexistent/m.onnx", "does not exist"}},
		{"int8 on a GPU provider", []string{"check-config", writeConfig(t, "infer: {precision: int8, provider: cuda}\n")},
			[]string{"infer.precision", "int8 runs on the CPU engine"}},
		{"bench --streams on a file that is not video", []string{"bench", "--streams", "--ceiling", "0", "--source", notVideo},
			[]string{"--source: not a video vigil can decode", notVideo}},
		{"bench on a file that is not there", []string{"bench", "--source", "/nonexistent/clip.mp4"},
			[]string{"--source: stat /nonexistent/clip.mp4: no such file or directory"}},
		{"bench --streams cpu threads", []string{"bench", "--streams", "--cpu-threads", "0"}, []string{"--cpu-threads 0", "1 to 16"}},
		{"bench cpu threads without streams", []string{"bench", "--cpu-threads", "2"}, []string{"--cpu-threads applies to --streams only"}},
		{"bench --gpu precision", []string{"bench", "--gpu", "--precisions", "fp32,int4"}, []string{`--precisions "fp32,int4"`, "fp32, tf32 or fp16"}},
		{"bench --gpu instances", []string{"bench", "--gpu", "--instances", "1,17"}, []string{`--instances "1,17"`, "1 to 16"}},
		{"bench --gpu nhwc", []string{"bench", "--gpu", "--nhwc", "maybe"}, []string{`--nhwc "maybe"`}},
		{"bench --gpu batch", []string{"bench", "--gpu", "--batches", "32,256"}, []string{"1 to 128"}},
		{"bench --gpu conv search", []string{"bench", "--gpu", "--conv-search", "fastest"}, []string{"--conv-search", `"fastest"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rc, _, stderr := vigil(tc.args...)
			require.Equal(t, 2, rc, "stderr: %s", stderr)
			require.Less(t, time.Since(start), 10*time.Second, "caught at start")
			first := strings.SplitN(stderr, "\n", 2)[0]
			for _, w := range tc.want {
				require.Contains(t, first, w)
			}
			if !strings.Contains(tc.name, "flag") && !strings.Contains(tc.name, "command") {
				require.Equal(t, 1, strings.Count(strings.TrimRight(stderr, "\n"), "\n")+1, "one line: %q", stderr)
			}
			require.NotContains(t, stderr, "pw@", "credentials are redacted")
		})
	}
}

// ignoreSIGINT keeps the SIGINT a test sends its own process from killing
// it should the signal arrive when nothing else listens (after the command
// has stopped listening), until the test ends.
func ignoreSIGINT(t *testing.T) {
	keep := make(chan os.Signal, 1)
	signal.Notify(keep, os.Interrupt)
	t.Cleanup(func() { signal.Stop(keep) })
}

// interruptAfter runs vigil with args, sends the process SIGINT once a
// line of its stdout contains marker, and returns the exit status, the
// stdout lines and stderr. It fails the test when no line contains marker.
func interruptAfter(t *testing.T, marker string, args ...string) (rc int, out []string, stderr string) {
	ignoreSIGINT(t)
	pr, pw := io.Pipe()
	var errb bytes.Buffer
	rcs := make(chan int, 1)
	go func() {
		rcs <- run(args, pw, &errb)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	signalled := false
	for sc.Scan() {
		out = append(out, sc.Text())
		if !signalled && strings.Contains(sc.Text(), marker) {
			require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
			signalled = true
		}
	}
	rc = <-rcs
	require.True(t, signalled, "no line with %q:\n%s\n%s", marker, strings.Join(out, "\n"), errb.String())
	return rc, out, errb.String()
}

// Ctrl-C during the plain bench: status 130 and one line, not "context
// canceled" with status 1.
func TestBenchInterrupted(t *testing.T) {
	clip := testenv.Media(t, "Megamind.avi")
	rc, _, stderr := interruptAfter(t, "decode only", "bench", "--source", clip, "--duration", "5s") // the first phase is done
	require.Equal(t, 130, rc, stderr)
	require.Equal(t, "vigil bench: interrupted before the bench finished; its figures are incomplete\n", stderr)
}

// Ctrl-C during bench --streams: status 130 and one line saying which
// point was cut short and that the lines printed before it stand.
func TestBenchStreamsInterrupted(t *testing.T) {
	cfg := writeConfig(t, "infer: {provider: cpu}\n")
	clip := testenv.Media(t, "Megamind.avi")
	rc, out, stderr := interruptAfter(t, "drops:", // the first point is complete
		"bench", "--streams", "--config", cfg, "--source", clip, "--model", "blazeface",
		"--ceiling", "0", "--start", "1", "--step", "1", "--max-streams", "64", "--warmup", "1s", "--each", "2s", "--budget-ms", "2000")
	require.Equal(t, 130, rc, "stdout:\n%s\nstderr: %s", strings.Join(out, "\n"), stderr)
	require.Equal(t, "vigil bench: interrupted during the 2-stream point (not counted); the lines above are complete measurements, and 1 stream passed\n", stderr)
}

// After the first signal, the shutdown grace passing exits the process with
// status 1; a command that returns before that stops the signal watch, so
// its grace must not exit the process later (it used to, and killed
// whatever ran next in the same process).
func TestSignalContextStops(t *testing.T) {
	ignoreSIGINT(t)
	exits := make(chan int, 2)
	exit = func(code int) { exits <- code }
	t.Cleanup(func() { exit = os.Exit })

	ctx, stop := signalContext(io.Discard, 50*time.Millisecond)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not end the context")
	}
	select {
	case code := <-exits:
		require.Equal(t, 1, code, "a shutdown past its grace exits with status 1")
	case <-time.After(10 * time.Second):
		t.Fatal("the shutdown outlasted its 50 ms grace by 10 s and nothing exited")
	}
	stop()

	ctx, stop = signalContext(io.Discard, 50*time.Millisecond)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not end the context")
	}
	stop()
	stop() // idempotent
	// Six times the grace: the exit above came within it (plus scheduling),
	// so one still pending would have come by now.
	select {
	case code := <-exits:
		t.Fatalf("exit(%d) after the command returned and stopped the signal watch", code)
	case <-time.After(300 * time.Millisecond):
	}
}

// Every config the repository ships passes check-config, analytics'
// classes included, with the assets make setup installs: configs/
// demo-people.yaml's YOLOX-Nano may be missing from the cache, so the
// models directory is the cache's models and ../shared's YOLOX-Nano (the
// file is skipped when neither has it).
func TestCheckConfigShippedConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "configs", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	cache := t.TempDir()
	models := filepath.Join(cache, "models")
	require.NoError(t, os.Mkdir(models, 0o755))
	front := testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
	entries, err := os.ReadDir(filepath.Dir(front))
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.Symlink(filepath.Join(filepath.Dir(front), e.Name()), filepath.Join(models, e.Name())))
	}
	yolox := filepath.Join(models, "yolox_nano.onnx")
	if _, err := os.Stat(yolox); err != nil {
		if p := filepath.Join(testenv.RepoRoot(), "..", "shared", "testdata", "models", "yolox_nano.onnx"); fileExists(p) {
			require.NoError(t, os.Symlink(p, yolox))
		}
	}
	require.NoError(t, os.Symlink(filepath.Dir(testenv.Media(t, "Megamind.avi")), filepath.Join(cache, "media")))
	ort := testenv.ORTLibrary(t)
	t.Setenv("VIGIL_CACHE_DIR", cache)
	t.Setenv("VIGIL_ORT_LIBRARY", ort)
	for _, f := range files {
		if filepath.Base(f) == "demo-people.yaml" && !fileExists(yolox) {
			t.Logf("%s skipped: no yolox_nano.onnx in the cache or ../shared/testdata/models", f)
			continue
		}
		rc, out, stderr := vigil("check-config", f)
		require.Equal(t, 0, rc, "%s: %s", f, stderr)
		require.Contains(t, out, "ok")
	}
}

func TestDetectMaxFrames(t *testing.T) {
	rc, out, stderr := vigil("detect", "--max-frames", "5", testenv.Media(t, "Megamind.avi"))
	require.Equal(t, 0, rc, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5)
	for i, l := range lines {
		require.Contains(t, l, fmt.Sprintf(`"seq":%d,`, i))
		require.Contains(t, l, `"schema":"vigil.detections/v1"`)
	}
}

func TestHelpAndVersion(t *testing.T) {
	rc, out, _ := vigil("help")
	require.Equal(t, 0, rc)
	for _, c := range []string{"run", "detect", "tail", "streams", "shapes", "doctor", "bench", "check-config", "version"} {
		require.Contains(t, out, "vigil "+c)
	}
	rc, out, _ = vigil("version")
	require.Equal(t, 0, rc)
	require.Contains(t, out, "vigil ")
	rc, _, stderr := vigil("detect", "--help")
	require.Equal(t, 0, rc)
	require.Contains(t, stderr, "-max-frames")
}

// Every command's --help is status 0, as `vigil --help` says to run it
// (vigil model --help was status 2, "want a subcommand").
func TestEveryCommandHelp(t *testing.T) {
	for _, c := range [][]string{{"run"}, {"detect"}, {"tail"}, {"streams"}, {"nodes"}, {"shapes"}, {"doctor"},
		{"bench"}, {"model"}, {"model", "quantize"}, {"check-config"}} {
		rc, out, stderr := vigil(append(c, "--help")...)
		require.Equal(t, 0, rc, "vigil %s --help: %s", strings.Join(c, " "), stderr)
		require.Contains(t, out+stderr, "Usage: vigil "+c[0], "vigil %s --help", strings.Join(c, " "))
	}
}

// The real binary: `vigil run` serves, `vigil tail` reads, /metrics answers,
// and SIGTERM stops it cleanly with status 0.
func TestBinaryRunTailMetrics(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "vigil")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=binarytest", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	cfg := writeConfig(t, `
data_dir: `+t.TempDir()+`
api: {listen: "127.0.0.1:0"}
metrics: {listen: "127.0.0.1:0"}
nats: {listen: "127.0.0.1:0"}
pipeline: {progress_interval: 1s}
streams:
  - {id: cam1, url: `+testenv.Media(t, "Megamind.avi")+`, realtime: true, loop: true}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--config", cfg)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var natsURL, metricsURL, apiURL string
	var log []string
	reNATS := regexp.MustCompile(`watch with: vigil tail --nats (\S+)`)
	reAPI := regexp.MustCompile(`manage streams with: vigil streams ls --api (\S+)`)
	reMetrics := regexp.MustCompile(`"url": "(http://[^"]+/metrics)"`)
	sawProgress := false
	for natsURL == "" || metricsURL == "" || apiURL == "" || !sawProgress {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "vigil exited early:\n%s", strings.Join(log, "\n"))
			log = append(log, l)
			if m := reNATS.FindStringSubmatch(l); m != nil {
				natsURL = m[1]
			}
			if m := reMetrics.FindStringSubmatch(l); m != nil {
				metricsURL = m[1]
			}
			if m := reAPI.FindStringSubmatch(l); m != nil {
				apiURL = m[1]
			}
			sawProgress = sawProgress || (strings.HasPrefix(l, "cam1 ") && strings.Contains(l, "fps"))
		case <-ctx.Done():
			t.Fatalf("no ready line:\n%s", strings.Join(log, "\n"))
		}
	}
	rc, out, errOut := vigil("tail", "--nats", natsURL, "--stream", "cam1", "--count", "3")
	require.Equal(t, 0, rc, errOut)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3)
	require.Contains(t, out, "cam1")

	resp, err := http.Get(metricsURL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(body), `vigil_frames_processed_total{stream="cam1"}`)

	// The node's entry carries the version the binary was built as, the
	// one vigil version prints (it said "(devel)", the module's).
	rc, out, errOut = vigil("nodes", "ls", "--api", apiURL, "-o", "json")
	require.Equal(t, 0, rc, errOut)
	var nodes []struct{ Version string }
	require.NoError(t, json.Unmarshal([]byte(out), &nodes), out)
	require.Len(t, nodes, 1)
	require.Equal(t, "binarytest", nodes[0].Version)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	go func() {
		for range lines {
		}
	}()
	require.NoError(t, cmd.Wait(), "clean exit on SIGTERM")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// vigil detect --analytics runs the analytics stage offline: on
// testenv.FacePan (one face, always in view, crossing x 256 rightwards at
// 2 s and 10 s and leftwards at 6 s and 14 s) every frame's results line,
// with the face's track id, and between them the events and counts, each
// line with its schema; one track from start to end, and the line crossed
// exactly as the clip was made. A file that is not valid, or names a class
// BlazeFace does not have, is bad input naming the field.
func TestDetectAnalytics(t *testing.T) {
	clip := testenv.FacePan(t)
	file := writeConfig(t, `analytics:
  zones:
    - {name: right, polygon: [[256, 0], [512, 0], [512, 256], [256, 256]], classes: [face], anchor: center}
  lines:
    - {name: mid, a: [256, 256], b: [256, 0], classes: [face], anchor: center}
`)
	rc, out, stderr := vigil("detect", "--analytics", file, clip)
	require.Equal(t, 0, rc, stderr)
	schemas := map[string]*jsonschema.Schema{}
	for name, doc := range map[string][]byte{"vigil.detections/v1": sinks.SchemaJSON, "vigil.analytics/v1": analytics.SchemaJSON,
		"vigil.counts/v1": analytics.CountsSchemaJSON} {
		d, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		require.NoError(t, err)
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		require.NoError(t, c.AddResource("s.json", d))
		schemas[name], err = c.Compile("s.json")
		require.NoError(t, err)
	}
	bySchema := map[string]int{}
	var crossings []string
	var tracks []string
	var lastCounts map[string]any
	ids := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		schema, _ := m["schema"].(string)
		bySchema[schema]++
		if sc := schemas[schema]; sc != nil {
			v, err := jsonschema.UnmarshalJSON(strings.NewReader(l))
			require.NoError(t, err)
			require.NoError(t, sc.Validate(v), l)
		}
		switch schema {
		case "vigil.detections/v1":
			for _, d := range m["detections"].([]any) {
				if id, ok := d.(map[string]any)["track_id"].(string); ok {
					ids[id] = true
				}
			}
		case "vigil.analytics/v1":
			switch m["type"] {
			case "line_cross":
				crossings = append(crossings, fmt.Sprintf("%s %s at %.0f s", m["line"], m["direction"], m["pts"]))
			case "track_start", "track_end":
				tracks = append(tracks, m["type"].(string))
			}
		case "vigil.counts/v1":
			lastCounts = m
		default:
			t.Fatalf("a line without a known schema: %s", l)
		}
	}
	require.Equal(t, 400, bySchema["vigil.detections/v1"], "every frame")
	require.Len(t, ids, 1, "one face, one id: %v", ids)
	require.Equal(t, []string{"track_start", "track_end"}, tracks)
	require.Equal(t, []string{"mid in at 2 s", "mid out at 6 s", "mid in at 10 s", "mid out at 14 s"}, crossings)
	require.NotNil(t, lastCounts)
	line := lastCounts["lines"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"face": 2.0}, line["in"])
	require.Equal(t, map[string]any{"face": 2.0}, line["out"])

	// With --max-frames, nothing of the frames after the last one written,
	// but the track's end.
	rc, out, stderr = vigil("detect", "--analytics", file, "--max-frames", "75", clip) // 3 s
	require.Equal(t, 0, rc, stderr)
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct{ Schema, Type, Line string }
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		if m.Schema == "vigil.analytics/v1" {
			kinds = append(kinds, m.Type+m.Line)
		}
	}
	require.Equal(t, 75, strings.Count(out, `"schema":"vigil.detections/v1"`))
	// The zone's entry (after its inertia of 3 frames) and the crossing
	// (beyond a margin of a tenth of the box) come a frame or two apart,
	// in either order.
	require.ElementsMatch(t, []string{"track_start", "line_crossmid", "zone_enter", "zone_exit", "track_end"}, kinds)
	require.Equal(t, "track_start", kinds[0])
	require.Equal(t, []string{"zone_exit", "track_end"}, kinds[3:], "the stream's end ends the track, leaving the zone first")

	for _, tc := range []struct{ body, want string }{
		{"analytics:\n  zones:\n    - {name: z, polygon: [[0, 0], [9, 9], [9, 0], [0, 9]]}\n", "analytics.zones[0].polygon"},
		{"analytics:\n  lines:\n    - {name: l, a: [0, 0], b: [9, 9], classes: [person]}\n", `analytics.lines[0].classes[0]: "person": not a class of the model`},
	} {
		rc, _, stderr := vigil("detect", "--analytics", writeConfig(t, tc.body), clip)
		require.Equal(t, 2, rc, stderr)
		require.Contains(t, stderr, tc.want)
		require.Equal(t, 1, strings.Count(strings.TrimRight(stderr, "\n"), "\n")+1, "one line: %q", stderr)
	}
}

// check-config accepts the deprecated decode.nvdec_fps and cpu_fps, and
// says on stderr what to write instead: the pixel rate at 1080p.
func TestCheckConfigDeprecatedRates(t *testing.T) {
	rc, out, stderr := vigil("check-config", writeConfig(t, "decode: {hwaccel: hybrid, nvdec_fps: 2000, cpu_fps: 1000}\n"))
	require.Equal(t, 0, rc, stderr)
	require.Contains(t, out, "ok")
	require.Contains(t, stderr, "decode.nvdec_fps is deprecated: it is read as frames of 1920x1080 per second; write decode.nvdec_pixel_rate: 4147200000 instead")
	require.Contains(t, stderr, "write decode.cpu_pixel_rate: 2073600000 instead")
	rc, _, stderr = vigil("check-config", writeConfig(t, "decode: {nvdec_fps: 2000, nvdec_pixel_rate: 4147200000}\n"))
	require.Equal(t, 2, rc)
	require.Contains(t, stderr, "decode.nvdec_fps: deprecated, and decode.nvdec_pixel_rate is set too")
}

// The README's table of commands and each command's usage line name every
// flag the command has (tail's --prefix, detect's --config, --id and
// --realtime and model quantize's --config were missing), and no flag it
// does not have.
func TestREADMEAndUsageListEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	flagName := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	dashed := regexp.MustCompile(`--([a-z0-9-]+)`)
	for _, c := range []string{"run", "detect", "tail", "doctor", "model quantize", "check-config"} {
		rc, out, stderr := vigil(append(strings.Fields(c), "--help")...)
		require.Equal(t, 0, rc)
		help := out + stderr
		var have []string
		for _, m := range flagName.FindAllStringSubmatch(help, -1) {
			have = append(have, m[1])
		}
		row := regexp.MustCompile("(?m)^\\| `vigil " + c + "[ `][^`]*`").FindString(string(readme))
		require.NotEmpty(t, row, "README has a row for vigil %s", c)
		usage := strings.SplitN(help, "\n", 2)[0]
		for where, text := range map[string]string{"README's row": row, "the usage line": usage} {
			var listed []string
			for _, m := range dashed.FindAllStringSubmatch(text, -1) {
				listed = append(listed, m[1])
			}
			require.ElementsMatch(t, have, listed, "vigil %s: flags in %s: %s", c, where, text)
		}
	}
}
