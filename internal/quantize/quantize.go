// Package quantize makes calibrated static INT8 copies of detection
// models (`vigil model quantize`) and opens them for infer.precision:
// int8 on the CPU engine.
//
// A copy is the model in ONNX's QDQ format: QuantizeLinear and
// DequantizeLinear pairs around the tensors, int8 weights per output
// channel. ONNX Runtime's CPU provider fuses each DQ → op → Q group into
// its integer kernel (QLinearConv, QLinearAdd, ...), which runs on the
// CPU's VNNI and AMX INT8 instructions where it has them; TensorRT's
// explicit-quantization INT8 path reads the same file (not run here:
// these machines have no TensorRT). The activation ranges come from
// running the fp32 model through ONNX Runtime on frames of a real clip,
// decoded by vigil's decode package and preprocessed by the model's own
// adapter; quantize_model.py (Debian's python3-onnx) edits the graph.
//
// Calibration takes the 99.999th percentile of each activation's values
// at both ends (Percentile), not the minimum and maximum, and not
// TensorRT's entropy (KL divergence) method. The extremes of a handful
// of frames are outliers that would stretch a tensor's 256 levels over
// values that almost never occur; entropy calibration fits the bulk of
// the distribution and clips harder, which suits classification but
// cuts off the large values a detector's box regression and objectness
// carry on the few cells that hold an object. The percentile keeps those
// and drops only one value in 100,000 at each end.
//
// Where quantising every layer costs too much accuracy (YOLOX-Nano: its
// SiLU pre-activations on one uint8 scale each), a sensitivity search
// ranks the blocks (a convolution with its activation) by the output
// error each causes alone, and keeps the worst in float (Options.KeepFloat,
// search.go; docs/performance.md, "INT8 on the CPU").
package quantize

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/pipeline"
)

// Percentile is the calibration percentile: each activation's range is
// [its 0.001th, its 99.999th percentile] over the calibration frames
// (ONNX Runtime's quantizer uses the same default for its percentile
// method).
const Percentile = 99.999

// DefaultFrames is how many calibration frames Quantize decodes when
// Options.Frames is 0: on YOLOX-Nano 100 frames matched fp32 no better
// than 20 and took five times as long, and with 128 the search kept 124
// of 130 blocks float where 32 frames need 96 (docs/performance.md,
// "INT8 on the CPU").
const DefaultFrames = 32

// ErrUndecodable is returned (wrapped) when the calibration source yields
// no frame.
var ErrUndecodable = errors.New("cannot decode a video frame from it")

// Options are Quantize's inputs.
type Options struct {
	// Model is the fp32 model, resolved (infer.Model.File a path).
	Model infer.Model
	// Source is the calibration clip: a file or a URL decode opens.
	Source string
	// Skip is how many frames of Source to pass over before calibrating
	// (to calibrate on another segment of a clip than one tested on).
	Skip int
	// Frames is the number of frames to calibrate on (0: DefaultFrames).
	Frames int
	// CacheDir is vigil's cache directory; copies go to CacheDir/int8.
	CacheDir string
	// Threads is ONNX Runtime's intra-op thread count (0: ORT chooses).
	Threads int
	// KeepFloat is how many blocks (a convolution with its activation,
	// or another quantised node) stay float: "auto" (or ""), "none" or a
	// number, taken worst first by the sensitivity search (search.go).
	KeepFloat string
	// Progress, when set, gets a line at each step of the search.
	Progress func(string)
}

// Result says what Quantize made.
type Result struct {
	// Path is the QDQ copy.
	Path string
	// Cached: the copy existed already for this model and calibration.
	Cached bool
	// Record is what the copy was made from.
	Record Record
}

// Record describes a copy; Quantize writes it beside the copy and as the
// model's current record, which Lookup reads.
type Record struct {
	Model      string    `json:"model"` // the fp32 model's path when quantised
	ModelHash  string    `json:"model_sha256"`
	File       string    `json:"file"` // the copy's file name, in the same directory
	Source     string    `json:"calibration_source"`
	Skip       int       `json:"calibration_skip,omitempty"`
	Frames     int       `json:"calibration_frames"` // frames actually used
	Method     string    `json:"method"`             // "percentile 99.999"
	Seconds    float64   `json:"seconds"`            // time taken to make it
	Made       time.Time `json:"made"`
	Nodes      int       `json:"quantized_nodes"`
	FloatNodes int       `json:"float_nodes"`
	Pairs      int       `json:"qdq_pairs"`
	Weights    int       `json:"weights"`
	// KeepFloat is Options.KeepFloat ("auto", "none" or a number), Float
	// the blocks it kept float and Blocks how many the model has.
	KeepFloat string   `json:"keep_float"`
	Float     []string `json:"float_blocks"`
	Blocks    int      `json:"blocks"`
	// Check is how the copy compared with fp32 when it was made.
	Check CheckResult `json:"check"`
}

// Dir is where copies of the model with this hash live.
func Dir(cacheDir, modelHash string) string {
	return filepath.Join(cacheDir, "int8", modelHash[:16])
}

// FileHash is the hex SHA-256 of a file's contents.
func FileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sourceID identifies the calibration input: a local file by its
// contents, a URL by itself.
func sourceID(src string) string {
	kind, path, err := decode.ParseURL(src)
	if err == nil && kind == decode.KindFile {
		if h, err := FileHash(path); err == nil {
			return "sha256:" + h
		}
	}
	return "url:" + src
}

// key is the cache key of a copy: the model, its preprocessing, the
// calibration input and method, and the script.
// keep is ParseKeepFloat's (-2 for what all choices share: the
// sensitivity ranking).
func key(modelHash string, o Options, frames, keep int) string {
	spec, _ := json.Marshal(o.Model.Spec)
	h := sha256.Sum256([]byte(strings.Join([]string{modelHash, string(spec), sourceID(o.Source),
		fmt.Sprint(o.Skip), fmt.Sprint(frames), fmt.Sprint(Percentile), scriptHash(),
		fmt.Sprint("keep-float ", keep, RankFrames, CheckFrames, CheckMatched, CheckExtra, CheckIoU)}, "\n")))
	return hex.EncodeToString(h[:8])
}

// Quantize makes (or finds in the cache) the QDQ INT8 copy of o.Model
// calibrated on o.Source, and makes it the model's current copy (Lookup).
// With o.KeepFloat auto (the default) it checks the copy against fp32
// and, when it fails, keeps the blocks the sensitivity search ranks worst
// in float, as few as make it pass (search.go).
// infer.InitRuntime must have succeeded. Errors: ErrKeepFloat for a bad
// o.KeepFloat; ErrUndecodable for a source with no frame; ErrNoPython;
// infer's for a model that does not open; the script's for a graph it
// cannot quantise.
func Quantize(ctx context.Context, o Options) (Result, error) {
	start := time.Now()
	frames := o.Frames
	if frames <= 0 {
		frames = DefaultFrames
	}
	keep, err := ParseKeepFloat(o.KeepFloat)
	if err != nil {
		return Result{}, err
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	mh, err := FileHash(o.Model.File)
	if err != nil {
		return Result{}, fmt.Errorf("model %s: %w", o.Model.File, err)
	}
	dir := Dir(o.CacheDir, mh)
	k := key(mh, o, frames, keep)
	path := filepath.Join(dir, k+".onnx")
	if rec, err := readRecord(filepath.Join(dir, k+".json")); err == nil {
		if _, err := os.Stat(path); err == nil {
			return Result{Path: path, Cached: true, Record: rec}, writeRecord(filepath.Join(dir, "current.json"), rec)
		}
	}
	if _, err := python(ctx); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, err
	}
	tmp, err := os.MkdirTemp(dir, ".work-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	ranges, samples, used, err := calibrate(ctx, o, frames, tmp)
	if err != nil {
		return Result{}, err
	}
	progress(fmt.Sprintf("calibrated on %d frames (%.1f s)", used, time.Since(start).Seconds()))
	rp := filepath.Join(dir, k+".ranges.json")
	b, _ := json.Marshal(ranges)
	if err := os.WriteFile(rp, b, 0o644); err != nil {
		return Result{}, err
	}
	var bl struct {
		Blocks []Block `json:"blocks"`
	}
	if err := runScript(ctx, &bl, "blocks", o.Model.File, rp); err != nil {
		return Result{}, err
	}
	// The check frames are those after the calibration frames; a clip
	// with none left is checked on its calibration frames.
	rank, check := samples[:min(RankFrames, used)], samples[used:]
	if len(check) == 0 {
		check = samples
	}
	s, err := newSearcher(o, rp, tmp, filepath.Join(dir, key(mh, o, frames, -2)+".sensitivity.json"), rank, check)
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	out := filepath.Join(tmp, "model.onnx")
	sr, st, err := s.search(ctx, keep, bl.Blocks, out, progress)
	if err != nil {
		return Result{}, err
	}
	if err := os.Rename(out, path); err != nil {
		return Result{}, err
	}
	b, _ = json.MarshalIndent(sr, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, k+".search.json"), b, 0o644); err != nil {
		return Result{}, err
	}
	rec := Record{Model: o.Model.File, ModelHash: mh, File: filepath.Base(path), Source: decode.RedactURL(o.Source), Skip: o.Skip,
		Frames: used, Method: fmt.Sprintf("percentile %g", Percentile), Seconds: time.Since(start).Seconds(), Made: time.Now().UTC(),
		Nodes: st.Nodes, FloatNodes: st.FloatNodes, Pairs: st.Pairs, Weights: st.Weights,
		KeepFloat: sr.Mode, Float: sr.Float, Blocks: len(sr.Blocks), Check: sr.Check}
	if err := writeRecord(filepath.Join(dir, k+".json"), rec); err != nil {
		return Result{}, err
	}
	return Result{Path: path, Record: rec}, writeRecord(filepath.Join(dir, "current.json"), rec)
}

// Lookup returns the current INT8 copy of the model at modelPath (the
// last one Quantize made or found) and its record. Errors wrap
// os.ErrNotExist when there is none.
func Lookup(modelPath, cacheDir string) (string, Record, error) {
	mh, err := FileHash(modelPath)
	if err != nil {
		return "", Record{}, err
	}
	dir := Dir(cacheDir, mh)
	rec, err := readRecord(filepath.Join(dir, "current.json"))
	if err != nil {
		return "", Record{}, err
	}
	p := filepath.Join(dir, rec.File)
	if _, err := os.Stat(p); err != nil {
		return "", Record{}, err
	}
	return p, rec, nil
}

func readRecord(path string) (Record, error) {
	var r Record
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// writeRecord writes r to path through a rename, so that a reader never
// sees half a file.
func writeRecord(path string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// calibrate runs the fp32 model with its activations exposed on the
// source's frames and returns each activation's percentile range, the
// preprocessed frames (the calibration frames, then up to CheckFrames
// more) and the number of calibration frames used.
func calibrate(ctx context.Context, o Options, frames int, tmp string) (map[string][2]float32, []sample, int, error) {
	sc := decode.NewScaler()
	defer sc.Close()
	eng, err := infer.Open(infer.Options{Name: o.Model.Name, Path: o.Model.File, Spec: o.Model.Spec, Resizer: sc, IntraOpThreads: o.Threads})
	if err != nil {
		return nil, nil, 0, err
	}
	defer eng.Close()
	b := eng.Binding()
	if b.Batch != 1 || b.InType != "float32" {
		return nil, nil, 0, fmt.Errorf("model %s: calibration takes a batch-1 model with a float32 input (this one: batch %d, %s): quantise the batch-1 fp32 model", o.Model.File, b.Batch, b.InType)
	}
	exposed := filepath.Join(tmp, "exposed.onnx")
	var ex struct {
		Added []string `json:"added"`
	}
	if err := runScript(ctx, &ex, "expose", o.Model.File, exposed); err != nil {
		return nil, nil, 0, err
	}
	c, err := newCollector(exposed, b, ex.Added, o.Threads)
	if err != nil {
		return nil, nil, 0, err
	}
	defer c.close()
	var samples []sample
	n, err := eachFrame(ctx, o.Source, o.Skip, frames+CheckFrames, func(img pipeline.Image) error {
		if _, err := eng.Detect(img, &pipeline.StageTimes{}, nil); err != nil {
			return err
		}
		in := eng.InputTensor()
		samples = append(samples, sample{in: in, w: img.Width(), h: img.Height()})
		if len(samples) > frames {
			return nil // a check frame
		}
		return c.run(in)
	})
	if err != nil {
		return nil, nil, n, err
	}
	return c.ranges(), samples, min(n, frames), nil
}

// eachFrame decodes src and calls fn on frames skip+1 .. skip+n (fewer
// when the source ends first). Errors: ErrUndecodable when no frame came
// out, fn's.
func eachFrame(ctx context.Context, src string, skip, n int, fn func(pipeline.Image) error) (int, error) {
	s, err := decode.New(decode.Options{URL: src, StreamID: "calibration"})
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", decode.RedactURL(src), ErrUndecodable, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen, used := 0, 0
	var fnErr error
	runErr := s.Run(ctx, func(f *pipeline.Frame) {
		defer f.Image.Release()
		seen++
		if seen <= skip || fnErr != nil || used >= n {
			return
		}
		if fnErr = fn(f.Image); fnErr != nil {
			cancel()
			return
		}
		if used++; used >= n {
			cancel()
		}
	})
	switch {
	case fnErr != nil:
		return used, fnErr
	case used == 0 && seen > 0:
		return 0, fmt.Errorf("%s: %w: it has %d frames, all skipped (--skip %d)", decode.RedactURL(src), ErrUndecodable, seen, skip)
	case used == 0:
		return 0, fmt.Errorf("%s: %w: %s", decode.RedactURL(src), ErrUndecodable, oneLine(runErr))
	case ctx.Err() != nil && used < n:
		return used, ctx.Err() // interrupted
	}
	return used, nil
}

func oneLine(err error) string {
	if err == nil {
		return "no video frame in it"
	}
	l, _, _ := strings.Cut(err.Error(), "\n")
	return l
}

// collector runs the exposed model and keeps a histogram per activation.
type collector struct {
	sess   *ort.DynamicAdvancedSession
	in     *ort.Tensor[float32]
	feeds  []ort.Value
	names  []string
	outs   []ort.Value
	hists  []*histogram
	input  *histogram
	inName string
}

func newCollector(path string, b infer.Binding, names []string, threads int) (*collector, error) {
	c := &collector{names: names, inName: b.Input, input: newHistogram()}
	shape := ort.NewShape(b.InShape...)
	t, err := ort.NewEmptyTensor[float32](shape)
	if err != nil {
		return nil, err
	}
	c.in = t
	c.feeds = []ort.Value{t}
	inNames := []string{b.Input}
	for _, k := range b.Consts {
		v, err := constValue(k)
		if err != nil {
			c.close()
			return nil, err
		}
		c.feeds = append(c.feeds, v)
		inNames = append(inNames, k.Name)
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		c.close()
		return nil, err
	}
	defer opts.Destroy()
	if threads > 0 {
		if err := opts.SetIntraOpNumThreads(threads); err != nil {
			c.close()
			return nil, err
		}
	}
	c.sess, err = ort.NewDynamicAdvancedSession(path, inNames, names, opts)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("opening the model with its activations exposed: %w", err)
	}
	c.outs = make([]ort.Value, len(names))
	for range names {
		c.hists = append(c.hists, newHistogram())
	}
	return c, nil
}

func constValue(k infer.ConstInput) (ort.Value, error) {
	v, err := infer.ConstTensor(k)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", k.Name, err)
	}
	return v, nil
}

// run feeds one preprocessed input tensor and adds every activation to
// its histogram.
func (c *collector) run(in []float32) error {
	copy(c.in.GetData(), in)
	c.input.add(in)
	if err := c.sess.Run(c.feeds, c.outs); err != nil {
		return fmt.Errorf("onnxruntime run (calibration): %w", err)
	}
	for i, v := range c.outs {
		if t, ok := v.(*ort.Tensor[float32]); ok {
			c.hists[i].add(t.GetData())
		}
	}
	// Outputs are allocated by ORT on the first run (shapes vary by
	// model); later runs reuse them.
	return nil
}

// ranges are the percentile ranges of the input and of every activation
// that was seen.
func (c *collector) ranges() map[string][2]float32 {
	out := map[string][2]float32{}
	// The input's range is the preprocessing's, every value meaningful.
	out[c.inName] = [2]float32{c.input.lo, c.input.hi}
	for i, h := range c.hists {
		if h.n == 0 {
			continue
		}
		lo, hi := h.percentileRange(Percentile)
		out[c.names[i]] = [2]float32{lo, hi}
	}
	return out
}

func (c *collector) close() {
	if c.sess != nil {
		c.sess.Destroy()
	}
	for _, v := range append(c.feeds, c.outs...) {
		if v != nil {
			v.Destroy()
		}
	}
	runtime.KeepAlive(c)
}
