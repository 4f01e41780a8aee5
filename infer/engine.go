package infer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/vigil-video/vigil/pipeline"
)

// Resizer scales a decoded image to w×h packed 8-bit pixels in the given
// channel order, into dst (at least w·h·3 bytes, rows without padding).
// decode.Scaler (libswscale, bilinear) implements it.
type Resizer interface {
	Resize(img pipeline.Image, w, h int, order pipeline.PixelOrder, dst []byte) error
}

// Options configure an Engine.
type Options struct {
	// Name is the model name reported in results, e.g. "blazeface".
	Name string
	// Path is the .onnx file.
	Path string
	// Spec is the model block: format ("" or "auto" recognises it),
	// input, labels, classes and thresholds.
	Spec Spec
	// IntraOpThreads is ORT's intra-op thread count; 0 lets ORT choose
	// (one per physical core).
	IntraOpThreads int
	// Resizer is required for Detect (not for Raw).
	Resizer Resizer
	// NoSpin turns off the busy-waiting of ORT's intra-op threads between
	// runs (session.intra_op.allow_spinning = 0). An engine that is idle
	// most of the time beside a busy one on the same cores should not
	// spin: its threads would steal the busy engine's CPU. It costs the
	// engine itself some latency per run.
	NoSpin bool
}

// Engine runs one fixed-shape model on the ORT CPU execution provider. Its
// input tensor (float32, batch 1, layout per adapter) and output tensors
// are allocated once in Open and reused by every call; calls are
// serialised by a mutex. It implements pipeline.Engine.
type Engine struct {
	name    string
	adapter Adapter
	bind    Binding

	mu      sync.Mutex
	session *ort.AdvancedSession
	// input is the image tensor; in is its float32 contents, or the
	// float32 values Fill writes and toInput converts (float16, uint8).
	input   ort.Value
	in      []float32
	toInput func()
	consts  []ort.Value
	outputs []ort.Value
	outData [][]float32
	// fromOut converts the outputs that are not float32 into outData.
	fromOut []func()
	pix     []byte
	lastLB  []Letterbox // per batch slot: its padding is in place
	itemOut [][]float32 // one item's slices of outData
	resizer Resizer
}

var _ pipeline.Engine = (*Engine)(nil)

// Open loads the model, checks it against its adapter and allocates the
// tensors. InitRuntime must have succeeded first. Errors wrap
// os.ErrNotExist for a missing file and ErrModelMismatch for a model whose
// signature does not fit the adapter; both name the file.
func Open(o Options) (*Engine, error) {
	if _, err := os.Stat(o.Path); err != nil {
		return nil, fmt.Errorf("model %s: %w", o.Path, err)
	}
	if RuntimeVersion() == "" {
		return nil, errors.New("infer: InitRuntime has not succeeded")
	}
	ad, bind, err := inspect(o)
	if err != nil {
		return nil, err
	}
	e := &Engine{name: o.Name, adapter: ad, bind: bind, resizer: o.Resizer}
	if e.name == "" {
		e.name = ad.Name()
	}
	if err := e.allocate(o); err != nil {
		e.Close()
		return nil, fmt.Errorf("model %s: %w", o.Path, err)
	}
	return e, nil
}

// Describe reads the model's signature and binds it to its format (o.Name,
// o.Path and o.Spec are used), for engines other than Engine (infer/gpu),
// which feed one float32 or float16 image input (Half reports float16)
// with a single scale and bias for all channels, and read float32
// outputs. Errors are Open's: a missing file, one that is not a model or
// ErrModelMismatch; a model that needs more (a uint8 input, mean/std
// normalisation, a constant second input, integer outputs) is refused
// with an error that says so and does not wrap ErrModelMismatch: the CPU
// engine takes it.
func Describe(o Options) (ad Adapter, b Binding, half bool, err error) {
	if _, err := os.Stat(o.Path); err != nil {
		return nil, Binding{}, false, fmt.Errorf("model %s: %w", o.Path, err)
	}
	ad, b, err = inspect(o)
	if err != nil {
		return nil, Binding{}, false, err
	}
	var needs []string
	if b.InType == "uint8" {
		needs = append(needs, "a uint8 input")
	}
	if ad.Format().Channels != nil {
		needs = append(needs, "per-channel mean/std")
	}
	for _, c := range b.Consts {
		needs = append(needs, "constant input "+c.Name)
	}
	for i, t := range b.OutTypes {
		if t != "float32" {
			needs = append(needs, t+" output "+b.Outputs[i])
		}
	}
	if len(needs) > 0 {
		return nil, Binding{}, false, fmt.Errorf("model %s (%s) needs %s, which only the CPU engine feeds", o.Path, ad.Name(), strings.Join(needs, ", "))
	}
	return ad, b, b.InType == "float16", nil
}

func inspect(o Options) (Adapter, Binding, error) {
	ins, outs, err := ort.GetInputOutputInfo(o.Path)
	if err != nil {
		return nil, Binding{}, &notONNXError{path: o.Path, detail: cliLine(err)}
	}
	ad, err := NewAdapter(o.Spec)
	if err != nil {
		return nil, Binding{}, fmt.Errorf("model %s: %w", o.Path, err)
	}
	b, err := ad.Bind(tensorInfos(ins), tensorInfos(outs))
	if err != nil {
		return nil, Binding{}, fmt.Errorf("model %s: %w", o.Path, err)
	}
	return ad, b, nil
}

// cliLine is err's text up to its first line break.
// notONNXError is a file ONNX Runtime cannot read as a model: an
// ErrModelMismatch (bad input, status 2) whose text says only that, since
// no format was tried ("model does not fit its format" sent the reader
// looking at the format).
type notONNXError struct{ path, detail string }

func (e *notONNXError) Error() string {
	return fmt.Sprintf("model %s: ONNX Runtime cannot read it as an ONNX model (%s)", e.path, e.detail)
}

// Is makes errors.Is(err, ErrModelMismatch) hold.
func (e *notONNXError) Is(target error) bool { return target == ErrModelMismatch }

func cliLine(err error) string {
	l, _, _ := strings.Cut(err.Error(), "\n")
	return strings.TrimSpace(l)
}

func tensorInfos(infos []ort.InputOutputInfo) []TensorInfo {
	out := make([]TensorInfo, len(infos))
	for i, x := range infos {
		out[i] = TensorInfo{Name: x.Name, Shape: append([]int64(nil), x.Dimensions...), Type: typeName(x.DataType)}
	}
	return out
}

func (e *Engine) allocate(o Options) error {
	if err := e.allocateInput(); err != nil {
		return err
	}
	names := []string{e.bind.Input}
	ins := []ort.Value{e.input}
	for _, c := range e.bind.Consts {
		v, err := ConstTensor(c)
		if err != nil {
			return fmt.Errorf("input tensor %s: %w", c.Name, err)
		}
		e.consts = append(e.consts, v)
		names, ins = append(names, c.Name), append(ins, v)
	}
	vals := make([]ort.Value, len(e.bind.Outputs))
	for i, s := range e.bind.OutShapes {
		t, data, conv, err := outputTensor(s, e.bind.OutTypes[i])
		if err != nil {
			return fmt.Errorf("output tensor %s: %w", e.bind.Outputs[i], err)
		}
		e.outputs = append(e.outputs, t)
		e.outData = append(e.outData, data)
		if conv != nil {
			e.fromOut = append(e.fromOut, conv)
		}
		vals[i] = t
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return fmt.Errorf("session options: %w", err)
	}
	defer opts.Destroy()
	if o.NoSpin {
		if err := opts.AddSessionConfigEntry("session.intra_op.allow_spinning", "0"); err != nil {
			return fmt.Errorf("session options: %w", err)
		}
	}
	if o.IntraOpThreads > 0 {
		if err := opts.SetIntraOpNumThreads(o.IntraOpThreads); err != nil {
			return fmt.Errorf("intra-op threads: %w", err)
		}
	}
	e.session, err = ort.NewAdvancedSession(o.Path, names, e.bind.Outputs, ins, vals, opts)
	if err != nil {
		return fmt.Errorf("creating session: %w", err)
	}
	// One warm-up run: ORT's first run allocates and plans; timing it as a
	// frame's cost would make the first deadline predictions pessimistic.
	if err := e.run(); err != nil {
		return fmt.Errorf("warm-up run: %w", err)
	}
	e.pix = make([]byte, e.bind.InW*e.bind.InH*3)
	e.lastLB = make([]Letterbox, e.bind.Batch)
	e.itemOut = make([][]float32, len(e.outData))
	return nil
}

// Model returns the model name given in Options (default: the adapter name).
func (e *Engine) Model() string { return e.name }

// Adapter returns the format's name ("yolox", "yolov8", ...).
func (e *Engine) Adapter() string { return e.adapter.Name() }

// Chosen says in one line which format reads the model and, under format
// auto, why (Binding.Chosen).
func (e *Engine) Chosen() string { return e.bind.Chosen }

// Labels returns the class names of the engine's detections, by class id
// (Adapter.Labels).
func (e *Engine) Labels() []string { return e.adapter.Labels() }

// InputSize returns the model's input width and height in pixels.
func (e *Engine) InputSize() (w, h int) { return e.bind.InW, e.bind.InH }

// Detect implements pipeline.Engine: letterbox img with the Resizer, fill
// the input tensor, run the session and decode. On a batch-N model it runs
// img in slot 0 (the other slots are padding). Errors come from the
// Resizer or from ORT's Run.
func (e *Engine) Detect(img pipeline.Image, st *pipeline.StageTimes, dst []pipeline.Detection) ([]pipeline.Detection, error) {
	return pipeline.DetectOne(e, img, st, dst)
}

// Batch returns the model's fixed batch size.
func (e *Engine) Batch() int { return e.bind.Batch }

// DetectBatch runs up to Batch() images in one execution: image i goes to
// slot i of the [Batch, ...] input, unused slots are padding (their old
// contents; their outputs are ignored). Each image's stage times go to
// sts[i] (preprocess and postprocess its own; infer the whole execution,
// the same for all) and its detections are appended to dsts[i][:0]. The
// returned slice aliases dsts. Errors: more images than the batch, the
// Resizer, or ORT's Run.
func (e *Engine) DetectBatch(imgs []pipeline.Image, sts []*pipeline.StageTimes, dsts [][]pipeline.Detection) ([][]pipeline.Detection, error) {
	tw := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.resizer == nil {
		return dsts, errors.New("infer: engine has no Resizer")
	}
	if len(imgs) > e.bind.Batch || len(sts) != len(imgs) || len(dsts) != len(imgs) {
		return dsts, fmt.Errorf("infer: %d images for a batch of %d", len(imgs), e.bind.Batch)
	}
	t0 := time.Now()
	in := e.in
	item := len(in) / e.bind.Batch
	for i, img := range imgs {
		ti := time.Now()
		sts[i].Queue += t0.Sub(tw) // waiting for the engine is queueing
		lb := e.bind.Letterbox(img.Width(), img.Height())
		if err := e.resizer.Resize(img, lb.ContentW, lb.ContentH, e.bind.Order, e.pix); err != nil {
			return dsts, err
		}
		e.adapter.Fill(in[i*item:(i+1)*item], e.pix, lb, lb != e.lastLB[i])
		e.lastLB[i] = lb
		sts[i].Preprocess = time.Since(ti)
	}
	t1 := time.Now()
	if err := e.run(); err != nil {
		return dsts, fmt.Errorf("onnxruntime run %s: %w", e.name, err)
	}
	t2 := time.Now()
	for i := range imgs {
		ti := time.Now()
		ItemOutputs(e.itemOut, e.outData, e.bind.Batch, i)
		dsts[i] = e.adapter.Decode(e.itemOut, e.lastLB[i], dsts[i][:0])
		sts[i].Infer, sts[i].Postprocess = t2.Sub(t1), time.Since(ti)
	}
	return dsts, nil
}

// Raw copies in (which must have the input tensor's element count) into
// the input tensor, runs the model and returns the outputs in adapter order.
// The returned slices alias the engine's output tensors and are valid until
// the next call. It exists to test the ORT binding and for benchmarks.
func (e *Engine) Raw(in []float32) ([][]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(in) != len(e.in) {
		return nil, fmt.Errorf("infer: Raw input has %d values, the model takes %d", len(in), len(e.in))
	}
	copy(e.in, in)
	clear(e.lastLB) // padding must be rewritten by the next Detect
	if err := e.run(); err != nil {
		return nil, fmt.Errorf("onnxruntime run %s: %w", e.name, err)
	}
	return e.outData, nil
}

// Decode turns outputs as Raw returns them, for a srcW×srcH frame, into
// detections appended to dst, as Detect would (slot 0 of a batch model).
// With InputTensor and Raw it replays stored preprocessed frames through
// other copies of a model (the INT8 search in internal/quantize).
func (e *Engine) Decode(outs [][]float32, srcW, srcH int, dst []pipeline.Detection) []pipeline.Detection {
	item := make([][]float32, len(outs))
	ItemOutputs(item, outs, e.bind.Batch, 0)
	return e.adapter.Decode(item, e.bind.Letterbox(srcW, srcH), dst)
}

// InputTensor returns a copy of the input tensor's current contents, e.g.
// a real preprocessed frame after Detect, for replay through Raw.
func (e *Engine) InputTensor() []float32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]float32(nil), e.in...)
}

// OutputNames returns the output names in the order Raw returns them.
func (e *Engine) OutputNames() []string { return e.bind.Outputs }

// Close frees the session and the tensors. It is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	if e.session != nil {
		errs = append(errs, e.session.Destroy())
		e.session = nil
	}
	if e.input != nil {
		errs = append(errs, e.input.Destroy())
		e.input = nil
	}
	for _, t := range append(e.consts, e.outputs...) {
		errs = append(errs, t.Destroy())
	}
	e.consts, e.outputs, e.outData = nil, nil, nil
	return errors.Join(errs...)
}
