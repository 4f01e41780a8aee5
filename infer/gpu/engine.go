// Package gpu is vigil's NVIDIA GPU engine: frames are staged in pinned
// (page-locked) host slots, uploaded on a copy stream, letterboxed and
// normalised by an NVRTC kernel straight into the model's device input, run
// by ONNX Runtime's CUDA or TensorRT execution provider on vigil's compute
// stream with inputs and outputs bound to device buffers (IoBinding), and
// downloaded on a second copy stream. With CUDA graphs on, each run after
// warm-up replays one captured graph. Ordering between the streams is by
// CUDA events; the same events time each batch's copies and compute.
//
// It needs an NVIDIA driver (libcuda.so.1), NVRTC and an ONNX Runtime
// build with the CUDA provider; without them Open fails with an error
// that says which is missing, and callers fall back to infer.Engine on the
// CPU.
package gpu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/pipeline"
)

// Options configure an Engine.
type Options struct {
	// Name, Path and Spec are as in infer.Options (thresholds are in
	// Spec).
	Name, Path string
	Spec       infer.Spec
	// Device is the CUDA device ordinal.
	Device int
	// Providers is the execution-provider chain; nil means tensorrt, then
	// cuda. The cpu provider is refused: the engine's buffers live on the GPU.
	Providers []ortdev.Provider
	// CUDAGraph replays each run as a CUDA graph after warm-up (the CUDA
	// EP's enable_cuda_graph; TensorRT's trt_cuda_graph_enable).
	CUDAGraph bool
	// Precision is the maths the model runs in: PrecisionFP32 (the
	// default, ""), PrecisionTF32 (the CUDA provider's use_tf32) or
	// PrecisionFP16 (see Open).
	Precision Precision
	// CacheDir keeps the fp16 copies of models (Precision fp16, the CUDA
	// provider), named by the model's SHA-256; "" is the OS's temporary
	// directory.
	CacheDir string
	// NHWC and ConvAlgoSearch are the CUDA provider's prefer_nhwc and
	// cudnn_conv_algo_search (ortdev.Options).
	NHWC           bool
	ConvAlgoSearch string
	// Instances is the number of ONNX Runtime sessions of the model, each
	// with its own CUDA compute stream and bound input and outputs
	// (default 1). Batches go to whichever instance is free, so with more
	// than one, batches run on the GPU at the same time, filling it where
	// one batch's kernels leave it idle. Each instance costs its session's
	// memory (weights, workspace and arena).
	Instances int
	// TensorRT settings; ProfileShapes is filled in from the model's fixed
	// input shape when empty.
	TensorRT ortdev.TensorRTOptions
	// Slots is the number of pinned staging slots per instance, i.e.
	// batches in flight per instance (default 2: double buffering).
	Slots int
	// Resizer resizes frames that are not 8-bit 4:2:0 on the CPU
	// (decode.Scaler); nil refuses such frames.
	Resizer infer.Resizer
	// CPUPreprocess resizes every frame with Resizer on the CPU (swscale)
	// and leaves only normalisation to the GPU: bit-for-bit the CPU
	// engine's input, at the CPU's cost. For checking the GPU against the
	// CPU engine, or models that are sensitive to the last 8-bit level.
	CPUPreprocess bool
	// OnBatch, when set, receives every batch's timings (from the calling
	// goroutine, after the batch).
	OnBatch func(BatchTimes)
}

// BatchTimes are one batch's timings, measured with CUDA events on the
// streams (H2D, Compute, D2H) and with the host clock (Launch, Wall).
type BatchTimes struct {
	// Size is the number of frames in the batch; Batch the engine's fixed
	// batch size.
	Size, Batch int
	// Host: staging on the host (copying planes into pinned memory, or
	// swscale for frames that are not 4:2:0), host clock.
	Host time.Duration
	// H2D: the upload of the frames' planes from pinned memory.
	H2D time.Duration
	// Compute: preprocessing kernels plus the ONNX Runtime run, on the
	// compute stream.
	Compute time.Duration
	// Preprocess: the preprocessing kernels alone (part of Compute).
	Preprocess time.Duration
	// D2H: the download of the outputs into pinned memory.
	D2H time.Duration
	// Launch: host time spent in ONNX Runtime's Run. ORT waits for its
	// stream at the end of Run, so this includes the GPU time of the run.
	// (disable_synchronize_execution_providers would return at once, but
	// ORT 1.29's CUDA provider then frees pinned staging buffers inside a
	// CUDA host callback, which CUDA refuses: error 800, abort.)
	Launch time.Duration
	// Wall: host time from the start of DetectBatch to the outputs being
	// in host memory.
	Wall time.Duration
}

// Engine is a fixed-shape detection engine on one GPU; it implements
// pipeline.Engine. Up to Slots × Instances batches are in flight at once:
// calls from several goroutines overlap one batch's upload and download
// with another's compute, and with several instances, computes with each
// other.
type Engine struct {
	name    string
	adapter infer.Adapter
	bind    infer.Binding
	half    bool
	o       Options

	ctx      *cuda.Context
	up       *cuda.Stream
	down     *cuda.Stream
	pre      *Preprocessor
	choice   string
	provider ortdev.Provider
	// model is the file the sessions run: Options.Path, or its fp16 copy.
	model string
	// precision is the precision the sessions run in (Options.Precision,
	// or fp32 after a refused fp16).
	precision Precision

	lanes    []*lane
	free     chan *lane // lanes not running a batch
	last     atomic.Pointer[lane]
	outBytes []int
	itemIn   int // bytes of one item's input

	slots chan *slot
	all   []*slot
	// resizeMu serialises the Resizer (decode.Scaler is not safe for
	// concurrent use) across the batches in flight.
	resizeMu sync.Mutex
	closeMu  sync.Mutex
	closed   bool
}

// lane is one instance of the model: an ONNX Runtime session on its own
// compute stream, with its bound input and outputs, and the OS thread its
// session runs on. A batch holds its lane from its preprocessing kernels
// to the device copy of its outputs.
type lane struct {
	compute *cuda.Stream
	sess    *ortdev.Session
	input   *cuda.DeviceBuffer   // [Batch, ...] model input, bound
	outputs []*cuda.DeviceBuffer // model outputs, bound
	r0, r1  *cuda.Event          // around RunModel's run
	// req and rep carry calls to the lane's goroutine, which is locked to
	// its OS thread (see do); done closes when it has ended.
	req  chan func() error
	rep  chan error
	done chan struct{}
}

// startThread starts the lane's goroutine, locked to one OS thread for
// its life. ONNX Runtime's CUDA and TensorRT providers keep a session's
// CUDA graph in per-thread state (CUDAExecutionProvider's
// PerThreadContext): a Run on a thread that has not run the session
// before runs eagerly and then captures a new graph, in global capture
// mode, at a run of ORT's choosing. Goroutines move between threads, so
// every Run of a session goes through its lane's thread (do): the graph is
// captured once, in the warm-up under cuda.Exclusive, and only replayed
// after. (Seen on the H200 with two instances whose runs came from any
// thread: cudaErrorStreamCaptureUnsupported in one instance's Slice while
// the other captured, 2026-12-01.)
func (l *lane) startThread() {
	l.req, l.rep, l.done = make(chan func() error), make(chan error), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer close(l.done)
		for f := range l.req {
			l.rep <- f()
		}
	}()
}

// do runs f on the lane's thread and returns its error. One caller at a
// time: the holder of the lane.
func (l *lane) do(f func() error) error {
	l.req <- f
	return <-l.rep
}

// stopThread ends the lane's goroutine (its thread exits with it). It is
// idempotent.
func (l *lane) stopThread() {
	if l.req != nil {
		close(l.req)
		<-l.done
		l.req = nil
	}
}

var _ pipeline.Engine = (*Engine)(nil)

// Capture and runs. ONNX Runtime captures a session's CUDA graph in global
// capture mode on one of its first runs, which forbids allocations, frees
// and synchronising calls on every other thread while it lasts (seen on
// the H200: one session's capture invalidated by another's run,
// cudaErrorStreamCaptureInvalidated, then "misaligned address"). So the
// sections that may capture (session creation and the warm-up runs, in
// Open) and allocations and frees take cuda.Exclusive, and runs take
// cuda.Shared (runLock): after warm-up a session only replays its graph,
// which captures nothing, so runs of every session and instance overlap,
// each on its own stream, as do direct NVDEC's copies (decode takes
// cuda.Shared too). Warm-up runs five times, and ORT captures on the second
// (the CUDA and TensorRT providers' min_num_runs_before_cuda_graph_capture
// is 1). (Before: runs with graphs took the lock exclusively and runs
// without took a per-device lock, so one GPU ran one batch at a time.)

// runLock takes the capture lock shared for one ONNX Runtime run and
// returns its unlock.
func runLock() (unlock func()) { return cuda.Shared() }

// syncShared waits for ev under cuda.Shared: waiting on an event is among
// the calls a capture in global mode forbids on other threads (seen on the
// H200: cuEventSynchronize failing with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// while another session captured).
func syncShared(ev *cuda.Event) error {
	defer cuda.Shared()()
	return ev.Synchronize()
}

// slot is one batch's staging: pinned host memory and device memory for
// the frames, device and pinned memory for the outputs, and its events.
type slot struct {
	host     *cuda.HostBuffer
	dev      *cuda.DeviceBuffer
	outDev   *cuda.DeviceBuffer
	outHost  *cuda.HostBuffer
	outViews [][]float32 // per output, the whole [Batch, ...] tensor in outHost
	itemOut  [][]float32
	lbs      []infer.Letterbox
	// events: up0/up1 around H2D, c0/c1 around compute (p1 after the
	// kernels), d0/d1 around D2H.
	up0, up1, c0, p1, c1, d0, d1 *cuda.Event
}

// Open initialises CUDA on o.Device, compiles the kernels, opens
// o.Instances ONNX Runtime sessions of the model (the first down the
// provider chain o.Providers, the others on the provider it took), each on
// its own compute stream with I/O bound to device buffers, allocates the
// slots and warms each session up (five runs, so that a CUDA-graph session
// has captured its graph).
//
// Precision fp16: on the CUDA provider the sessions run an fp16 copy of the
// model that Open makes (onnxfp16.Convert) and keeps in o.CacheDir; on
// TensorRT the fp32 model runs with trt_fp16_enable. Open then runs the
// built-in frame (BuiltinFrame) through the engine and through an fp32
// engine and, unless their detections agree (infer.Compare: same count, IoU
// ≥ 0.9, score within 0.02), reopens the engine in fp32 and says why in
// Choice.
//
// infer.InitRuntime and ortdev.Init must have succeeded. Errors wrap
// cuda.ErrNoDriver (no driver), cuda.ErrNoNVRTC, the model errors of
// infer.Describe, or say that no GPU provider could be opened, with each
// provider's reason.
func Open(o Options) (*Engine, error) {
	if err := cuda.Init(); err != nil {
		return nil, err
	}
	if _, err := ParsePrecision(string(o.Precision)); err != nil {
		return nil, err
	}
	if o.Precision == "" {
		o.Precision = PrecisionFP32
	}
	e, err := open(o)
	if err != nil || o.Precision != PrecisionFP16 {
		return e, err
	}
	why, err := e.agreesWithFP32()
	if err == nil && why == "" {
		return e, nil
	}
	if err != nil {
		why = "checking it against fp32: " + cli1(err)
	}
	e.Close()
	o.Precision = PrecisionFP32
	f, err := open(o)
	if err != nil {
		return nil, err
	}
	f.choice += "; fp16 refused: " + why
	return f, nil
}

// cli1 keeps an error to its first line.
func cli1(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func open(o Options) (*Engine, error) {
	ad, bind, half, err := infer.Describe(infer.Options{Name: o.Name, Path: o.Path, Spec: o.Spec})
	if err != nil {
		return nil, err
	}
	if o.Slots <= 0 {
		o.Slots = 2
	}
	if o.Instances <= 0 {
		o.Instances = 1
	}
	if len(o.Providers) == 0 {
		o.Providers = []ortdev.Provider{ortdev.TensorRT, ortdev.CUDA}
	}
	for _, p := range o.Providers {
		if p == ortdev.CPU {
			return nil, errors.New("gpu: the cpu provider cannot run the GPU engine; use infer.Engine")
		}
	}
	e := &Engine{name: o.Name, adapter: ad, bind: bind, half: half, o: o, precision: o.Precision}
	if e.name == "" {
		e.name = ad.Name()
	}
	unlock := cuda.Exclusive() // allocations, session creation and the capture in warm-up
	err = e.open()
	unlock()
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("GPU %d: %w", o.Device, err)
	}
	return e, nil
}

func (e *Engine) elem() ortdev.ElemType {
	if e.half {
		return ortdev.Float16
	}
	return ortdev.Float32
}

func (e *Engine) inShape() []int64 {
	b := e.bind
	if !e.adapter.Format().NCHW {
		return []int64{int64(b.Batch), int64(b.InH), int64(b.InW), 3}
	}
	return []int64{int64(b.Batch), 3, int64(b.InH), int64(b.InW)}
}

// sessionOptions are the ortdev options of one instance's session on
// provider p, running model.
func (e *Engine) sessionOptions(p ortdev.Provider, model string, l *lane) ortdev.Options {
	trt := e.o.TensorRT
	if trt.ProfileShapes == "" {
		trt.ProfileShapes = ortdev.FixedProfile(e.bind.Input, e.inShape())
	}
	trt.CUDAGraph = trt.CUDAGraph || e.o.CUDAGraph
	trt.FP16 = trt.FP16 || e.precision == PrecisionFP16
	return ortdev.Options{Model: model, Providers: []ortdev.Provider{p}, DeviceID: e.o.Device,
		ComputeStream: l.compute.Handle(), CUDAGraph: e.o.CUDAGraph, TF32: e.precision == PrecisionTF32,
		NHWC: e.o.NHWC, ConvAlgoSearch: e.o.ConvAlgoSearch, TensorRT: trt}
}

// modelFor is the file a session on provider p runs: the fp16 copy for
// precision fp16 on the CUDA provider (made on first use), else the model.
func (e *Engine) modelFor(p ortdev.Provider) (string, error) {
	if e.precision != PrecisionFP16 || p != ortdev.CUDA {
		return e.o.Path, nil
	}
	return FP16Copy(e.o.Path, e.o.CacheDir)
}

func (e *Engine) open() error {
	var err error
	if e.ctx, err = cuda.Primary(e.o.Device); err != nil {
		return err
	}
	for _, s := range []**cuda.Stream{&e.up, &e.down} {
		if *s, err = e.ctx.NewStream(); err != nil {
			return err
		}
	}
	if e.pre, err = NewPreprocessor(e.ctx); err != nil {
		return err
	}
	b := e.bind
	e.itemIn = b.InW * b.InH * 3 * e.elem().Size()
	for i := range b.Outputs {
		n := 4
		for _, d := range b.OutShapes[i] {
			n *= int(d)
		}
		e.outBytes = append(e.outBytes, n)
	}
	// The first instance goes down the provider chain: a provider whose
	// session does not open, or opens but cannot bind or run (a TensorRT
	// build failure, say), gives way to the next.
	first, err := e.newLane()
	if err != nil {
		return err
	}
	var skipped []string
	for _, p := range e.o.Providers {
		model, err := e.modelFor(p)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s unavailable: making the fp16 copy: %s", p, cli1(err)))
			continue
		}
		var sess *ortdev.Session
		err = first.do(func() (err error) {
			sess, err = ortdev.Open(e.sessionOptions(p, model, first))
			if err == nil {
				if err = e.warmUp(first, sess); err != nil {
					sess.Close()
				}
			}
			return err
		})
		if err != nil {
			skipped = append(skipped, unavailable(p, model, err))
			continue
		}
		first.sess, e.provider, e.model = sess, p, model
		break
	}
	if first.sess == nil {
		return errors.New(strings.Join(skipped, "; "))
	}
	why := "first choice"
	if len(skipped) > 0 {
		why = strings.Join(skipped, "; ")
	}
	e.choice = fmt.Sprintf("execution provider %s (%s); precision %s, %d instance(s)", e.provider, why, e.precision, e.o.Instances)
	for range e.o.Instances - 1 {
		l, err := e.newLane()
		if err != nil {
			return err
		}
		var sess *ortdev.Session
		err = l.do(func() (err error) {
			if sess, err = ortdev.Open(e.sessionOptions(e.provider, e.model, l)); err != nil {
				return err
			}
			if err = e.warmUp(l, sess); err != nil {
				sess.Close()
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("instance %d: %w", len(e.lanes), err)
		}
		l.sess = sess
	}
	e.free = make(chan *lane, len(e.lanes))
	for _, l := range e.lanes {
		e.free <- l
	}
	e.last.Store(e.lanes[0])
	n := e.o.Slots * e.o.Instances
	e.slots = make(chan *slot, n)
	for range n {
		s, err := e.newSlot()
		if s != nil {
			e.all = append(e.all, s) // Close frees what it holds
			e.slots <- s
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unavailable is the choice line's reason for provider p, whose session
// on model failed with err: ortdev.Open's "model M: no execution provider
// works (P unavailable: why)" for a chain of one is cut to "P unavailable:
// why".
func unavailable(p ortdev.Provider, model string, err error) string {
	msg := cli1(err)
	inner := strings.TrimPrefix(msg, "model "+model+": no execution provider works (")
	if inner != msg && strings.HasSuffix(inner, ")") {
		return strings.TrimSuffix(inner, ")")
	}
	return fmt.Sprintf("%s unavailable: %s", p, strings.TrimPrefix(msg, "model "+model+": "))
}

// newLane makes an instance's stream, bound buffers and events (Close
// frees them), without its session.
func (e *Engine) newLane() (*lane, error) {
	l := &lane{}
	e.lanes = append(e.lanes, l)
	l.startThread()
	var err error
	if l.compute, err = e.ctx.NewStream(); err != nil {
		return nil, err
	}
	if l.input, err = e.ctx.Alloc(e.itemIn * e.bind.Batch); err != nil {
		return nil, err
	}
	for _, n := range e.outBytes {
		buf, err := e.ctx.Alloc(n)
		if err != nil {
			return nil, err
		}
		l.outputs = append(l.outputs, buf)
	}
	for _, ev := range []**cuda.Event{&l.r0, &l.r1} {
		if *ev, err = e.ctx.NewEvent(true); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (e *Engine) newSlot() (*slot, error) {
	s := &slot{lbs: make([]infer.Letterbox, e.bind.Batch), itemOut: make([][]float32, len(e.outBytes))}
	total := 0
	for _, n := range e.outBytes {
		total += n
	}
	var err error
	if s.outDev, err = e.ctx.Alloc(total); err != nil {
		return s, err
	}
	if s.outHost, err = e.ctx.AllocHost(total); err != nil {
		return s, err
	}
	off := 0
	for _, n := range e.outBytes {
		s.outViews = append(s.outViews, bytesAsFloat32(s.outHost.Bytes()[off:off+n]))
		off += n
	}
	for _, ev := range []**cuda.Event{&s.up0, &s.up1, &s.c0, &s.p1, &s.c1, &s.d0, &s.d1} {
		if *ev, err = e.ctx.NewEvent(true); err != nil {
			return s, err
		}
	}
	return s, nil
}

// ensure grows the slot's frame staging to n bytes (pinned and device).
func (e *Engine) ensure(s *slot, n int) error {
	if s.host != nil && len(s.host.Bytes()) >= n {
		return nil
	}
	defer cuda.Exclusive()()
	n = max(n, 1<<20)
	n += n / 4
	if s.host != nil {
		s.host.Free()
		s.dev.Free()
		s.host, s.dev = nil, nil
	}
	host, err := e.ctx.AllocHost(n)
	if err != nil {
		return err
	}
	dev, err := e.ctx.Alloc(n)
	if err != nil {
		host.Free() // leave the slot empty: the next batch tries again
		return err
	}
	s.host, s.dev = host, dev
	return nil
}

// Model returns the model name.
func (e *Engine) Model() string { return e.name }

// Adapter returns the format's name.
func (e *Engine) Adapter() string { return e.adapter.Name() }

// Chosen says which format reads the model and, under format auto, why
// (infer.Binding.Chosen).
func (e *Engine) Chosen() string { return e.bind.Chosen }

// Batch returns the model's fixed batch size.
func (e *Engine) Batch() int { return e.bind.Batch }

// InputSize returns the model input's width and height in pixels.
func (e *Engine) InputSize() (w, h int) { return e.bind.InW, e.bind.InH }

// Provider is the execution provider the sessions run on.
func (e *Engine) Provider() ortdev.Provider { return e.provider }

// Precision is the precision the sessions run in: Options.Precision, or
// fp32 when fp16 was refused (Choice says why).
func (e *Engine) Precision() Precision { return e.precision }

// ScoreThreshold is the adapter's score threshold (infer.ScoreThreshold).
func (e *Engine) ScoreThreshold() float32 { return infer.ScoreThreshold(e.adapter) }

// Instances is the number of sessions (Options.Instances).
func (e *Engine) Instances() int { return len(e.lanes) }

// Choice is the provider line to log: the provider taken and why the ones
// before it in the chain were not (see ortdev.Session.Choice).
func (e *Engine) Choice() string { return e.choice }

// warmUp binds lane l's device buffers to sess and runs it five times
// on a zeroed input: ORT allocates and plans on the first runs and, with
// CUDA graphs on, captures its graph on one of the next. It runs on the
// lane's thread (lane.do).
func (e *Engine) warmUp(l *lane, sess *ortdev.Session) error {
	b := e.bind
	if err := sess.BindDevice(b.Input, false, uintptr(l.input.Ptr()), l.input.Len(), e.inShape(), e.elem()); err != nil {
		return err
	}
	for i, name := range b.Outputs {
		if err := sess.BindDevice(name, true, uintptr(l.outputs[i].Ptr()), e.outBytes[i], b.OutShapes[i], ortdev.Float32); err != nil {
			return err
		}
	}
	if err := e.ctx.MemsetD8Async(l.input.Ptr(), 0, l.input.Len(), l.compute); err != nil {
		return err
	}
	for range 5 {
		if err := sess.Run(); err != nil {
			return fmt.Errorf("warm-up run: %w", err)
		}
		if err := l.compute.Synchronize(); err != nil {
			return err
		}
	}
	return nil
}

// Detect implements pipeline.Engine with a batch of one.
func (e *Engine) Detect(img pipeline.Image, st *pipeline.StageTimes, dst []pipeline.Detection) ([]pipeline.Detection, error) {
	return pipeline.DetectOne(e, img, st, dst)
}

type staged struct {
	yuv    bool
	device bool // planes already in device memory (NVDEC)
	planes Planes
	off    int // packed: offset of the content pixels
}

// DetectBatch runs up to Batch() images in one execution, as
// infer.Engine.DetectBatch does: image i goes to item i; unused items keep
// old contents and their outputs are ignored. Stage times: Preprocess is
// the host staging, the upload and the GPU kernels, Infer the ORT run on the GPU
// (CUDA events), Postprocess the decoding on the host; the wait for a free
// slot counts as Queue; all but Postprocess are the batch's, the same for
// every frame of it. Errors: too many images, a frame format the engine
// cannot take, CUDA or ORT errors.
func (e *Engine) DetectBatch(imgs []pipeline.Image, sts []*pipeline.StageTimes, dsts [][]pipeline.Detection) ([][]pipeline.Detection, error) {
	if len(imgs) > e.bind.Batch || len(sts) != len(imgs) || len(dsts) != len(imgs) {
		return dsts, fmt.Errorf("gpu: %d images for a batch of %d", len(imgs), e.bind.Batch)
	}
	tw := time.Now()
	s, ok := <-e.slots
	if !ok || s == nil {
		return dsts, errors.New("gpu: engine closed")
	}
	defer func() { e.slots <- s }()
	t0 := time.Now()
	for i := range imgs {
		sts[i].Queue += t0.Sub(tw)
	}
	bt, err := e.run(s, imgs)
	if err != nil {
		return dsts, err
	}
	bt.Wall = time.Since(t0)
	for i := range imgs {
		ti := time.Now()
		infer.ItemOutputs(s.itemOut, s.outViews, e.bind.Batch, i)
		dsts[i] = e.adapter.Decode(s.itemOut, s.lbs[i], dsts[i][:0])
		sts[i].Preprocess = bt.Host + bt.H2D + bt.Preprocess
		sts[i].Infer = bt.Compute - bt.Preprocess
		sts[i].Postprocess = time.Since(ti)
	}
	if e.o.OnBatch != nil {
		e.o.OnBatch(bt)
	}
	return dsts, nil
}

func (e *Engine) run(s *slot, imgs []pipeline.Image) (BatchTimes, error) {
	bt := BatchTimes{Size: len(imgs), Batch: e.bind.Batch}
	th := time.Now()
	// Stage 1 (host): copy each frame's planes into the pinned slot.
	st := make([]staged, len(imgs))
	need := 0
	views := make([]decode.YUV420, len(imgs))
	for i, img := range imgs {
		s.lbs[i] = e.bind.Letterbox(img.Width(), img.Height())
		if p, ok := img.(*decode.Picture); ok && !e.o.CPUPreprocess {
			if c, ok := p.CUDA(); ok {
				// NVDEC surface: the kernel reads it where it is.
				st[i].yuv, st[i].device = true, true
				st[i].planes = Planes{Y: cuda.DevicePtr(c.Y), U: cuda.DevicePtr(c.UV), NV12: true, Deep: c.Deep, YStride: c.YStride,
					UVStride: c.UVStride, Width: c.Width, Height: c.Height, FullRange: c.FullRange, Matrix: c.Matrix}
				continue
			}
			if v, ok := p.YUV420(); ok {
				views[i] = v
				st[i].yuv = true
				need += v.Width*v.Height + 2*((v.Width+1)/2)*((v.Height+1)/2)
				continue
			}
		}
		if e.o.Resizer == nil {
			return bt, fmt.Errorf("gpu: frame %d is not 8-bit 4:2:0 and the engine has no Resizer", i)
		}
		need += s.lbs[i].ContentW * s.lbs[i].ContentH * 3
	}
	if err := e.ensure(s, need); err != nil {
		return bt, err
	}
	buf := s.host.Bytes()
	base := s.dev.Ptr()
	off := 0
	type job struct {
		dst, src     []byte
		stride, w, h int
	}
	var jobs []job
	for i, img := range imgs {
		lb := s.lbs[i]
		if st[i].device {
			continue
		}
		if !st[i].yuv {
			n := lb.ContentW * lb.ContentH * 3
			e.resizeMu.Lock()
			err := e.o.Resizer.Resize(img, lb.ContentW, lb.ContentH, e.adapter.Format().Order, buf[off:off+n])
			e.resizeMu.Unlock()
			if err != nil {
				return bt, err
			}
			st[i].off = off
			off += n
			continue
		}
		v := views[i]
		cw, ch := (v.Width+1)/2, (v.Height+1)/2
		p := Planes{Width: v.Width, Height: v.Height, YStride: v.Width, UVStride: cw, FullRange: v.FullRange, Matrix: v.Matrix}
		for _, pl := range []struct {
			dst    *cuda.DevicePtr
			src    []byte
			stride int
			w, h   int
		}{{&p.Y, v.Y, v.YStride, v.Width, v.Height}, {&p.U, v.U, v.UVStride, cw, ch}, {&p.V, v.V, v.UVStride, cw, ch}} {
			*pl.dst = base + cuda.DevicePtr(off)
			jobs = append(jobs, job{buf[off : off+pl.w*pl.h], pl.src, pl.stride, pl.w, pl.h})
			off += pl.w * pl.h
		}
		st[i].planes = p
	}
	// The copies into pinned memory are the host's share of a batch (21 MB
	// for 32 SD frames); spread them over the cores.
	parallel(len(jobs), func(j int) { copyPlane(jobs[j].dst, jobs[j].src, jobs[j].stride, jobs[j].w, jobs[j].h) })
	bt.Host = time.Since(th)
	// Stage 2 (copy stream): upload.
	if err := e.up0rec(s, off); err != nil {
		return bt, err
	}
	// Stage 3 (compute stream): kernels into the bound input, the run, and
	// a device copy of the outputs into the slot, so the next batch may run
	// while this one downloads.
	if err := e.computeBatch(s, st, &bt); err != nil {
		return bt, err
	}
	// Stage 4 (download stream).
	if err := e.down.WaitEvent(s.c1); err != nil {
		return bt, err
	}
	if err := s.d0.Record(e.down); err != nil {
		return bt, err
	}
	if err := e.ctx.CopyDtoHAsync(s.outHost, 0, s.outDev.Ptr(), s.outDev.Len(), e.down); err != nil {
		return bt, err
	}
	if err := s.d1.Record(e.down); err != nil {
		return bt, err
	}
	if err := syncShared(s.d1); err != nil {
		return bt, err
	}
	var err error
	if bt.H2D, err = cuda.Elapsed(s.up0, s.up1); err != nil {
		return bt, err
	}
	if bt.Compute, err = cuda.Elapsed(s.c0, s.c1); err != nil {
		return bt, err
	}
	if bt.Preprocess, err = cuda.Elapsed(s.c0, s.p1); err != nil {
		return bt, err
	}
	bt.D2H, err = cuda.Elapsed(s.d0, s.d1)
	return bt, err
}

func (e *Engine) up0rec(s *slot, n int) error {
	if err := s.up0.Record(e.up); err != nil {
		return err
	}
	if n > 0 {
		if err := e.ctx.CopyHtoDAsync(s.dev.Ptr(), s.host, 0, n, e.up); err != nil {
			return err
		}
	}
	return s.up1.Record(e.up)
}

func (e *Engine) computeBatch(s *slot, st []staged, bt *BatchTimes) error {
	l := <-e.free
	defer func() { e.free <- l }()
	e.last.Store(l)
	if err := l.compute.WaitEvent(s.up1); err != nil {
		return err
	}
	if err := s.c0.Record(l.compute); err != nil {
		return err
	}
	f := e.adapter.Format()
	for i := range st {
		t := Target{Dst: l.input.Ptr() + cuda.DevicePtr(i*e.itemIn), W: e.bind.InW, H: e.bind.InH, Format: f, Half: e.half}
		var err error
		if st[i].yuv {
			err = e.pre.YUV420(l.compute, st[i].planes, s.lbs[i], t)
		} else {
			err = e.pre.Packed(l.compute, s.dev.Ptr()+cuda.DevicePtr(st[i].off), s.lbs[i], t)
		}
		if err != nil {
			return err
		}
	}
	if err := s.p1.Record(l.compute); err != nil {
		return err
	}
	unlock := runLock()
	tl := time.Now()
	err := l.do(l.sess.Run)
	bt.Launch = time.Since(tl)
	unlock()
	if err != nil {
		return fmt.Errorf("onnxruntime run %s: %w", e.name, err)
	}
	off := 0
	for i, b := range l.outputs {
		if err := e.ctx.CopyDtoDAsync(s.outDev.Ptr()+cuda.DevicePtr(off), b.Ptr(), e.outBytes[i], l.compute); err != nil {
			return err
		}
		off += e.outBytes[i]
	}
	return s.c1.Record(l.compute)
}

// bytesAsFloat32 views pinned bytes (4-byte aligned: cuMemHostAlloc
// returns page-aligned memory and outputs are whole float32 tensors) as
// float32s.
func bytesAsFloat32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// parallel runs fn(0..n-1) on up to GOMAXPROCS goroutines and waits.
func parallel(n int, fn func(int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// copyPlane copies h rows of w bytes from src (row stride stride) to dst
// packed, returning w*h.
func copyPlane(dst, src []byte, stride, w, h int) int {
	for y := range h {
		copy(dst[y*w:y*w+w], src[y*stride:y*stride+w])
	}
	return w * h
}

func (e *Engine) isClosed() bool {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	return e.closed
}

// Close waits for in-flight batches, then frees the session, buffers,
// streams and kernels. It is idempotent.
func (e *Engine) Close() error {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for range e.all {
		<-e.slots // every slot home: nothing in flight
	}
	if e.slots != nil {
		close(e.slots) // later calls fail with "engine closed"
	}
	if e.free != nil {
		for range e.lanes {
			<-e.free // every instance idle: no RunModel in flight
		}
		close(e.free)
	}
	defer cuda.Exclusive()()
	var errs []error
	for _, l := range e.lanes {
		if l.sess != nil {
			_ = l.do(func() error { l.sess.Close(); return nil })
		}
		l.stopThread()
		for _, ev := range []*cuda.Event{l.r0, l.r1} {
			if ev != nil {
				errs = append(errs, ev.Destroy())
			}
		}
		for _, b := range append(l.outputs, l.input) {
			if b != nil {
				errs = append(errs, b.Free())
			}
		}
		if l.compute != nil {
			errs = append(errs, l.compute.Destroy())
		}
	}
	for _, s := range e.all {
		for _, ev := range []*cuda.Event{s.up0, s.up1, s.c0, s.p1, s.c1, s.d0, s.d1} {
			if ev != nil {
				errs = append(errs, ev.Destroy())
			}
		}
		for _, b := range []*cuda.DeviceBuffer{s.dev, s.outDev} {
			if b != nil {
				errs = append(errs, b.Free())
			}
		}
		for _, h := range []*cuda.HostBuffer{s.host, s.outHost} {
			if h != nil {
				errs = append(errs, h.Free())
			}
		}
	}
	if e.pre != nil {
		e.pre.Close()
	}
	for _, s := range []*cuda.Stream{e.up, e.down} {
		if s != nil {
			errs = append(errs, s.Destroy())
		}
	}
	if e.ctx != nil {
		errs = append(errs, e.ctx.Release())
	}
	return errors.Join(errs...)
}

// RunModel runs the model once on a free instance's input as it stands
// (no frames, no copies) and waits for it: the engine-only benchmark;
// calls from several goroutines run on different instances at once. total
// is the host time of the call; gpu the run's span on the GPU between CUDA
// events recorded just before and after it; overhead = total − gpu is the
// host time not covered by GPU work (ORT's per-run bookkeeping, kernel or
// graph launches, the final synchronisation).
func (e *Engine) RunModel() (overhead, gpu, total time.Duration, err error) {
	if e.isClosed() {
		return 0, 0, 0, errors.New("gpu: engine closed")
	}
	l, ok := <-e.free
	if !ok {
		return 0, 0, 0, errors.New("gpu: engine closed")
	}
	defer func() { e.free <- l }()
	t0 := time.Now()
	if err := l.r0.Record(l.compute); err != nil {
		return 0, 0, 0, err
	}
	unlock := runLock()
	err = l.do(l.sess.Run)
	unlock()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("onnxruntime run %s: %w", e.name, err)
	}
	if err := l.r1.Record(l.compute); err != nil {
		return 0, 0, 0, err
	}
	if err := syncShared(l.r1); err != nil {
		return 0, 0, 0, err
	}
	total = time.Since(t0)
	if gpu, err = cuda.Elapsed(l.r0, l.r1); err != nil {
		return 0, 0, 0, err
	}
	return max(total-gpu, 0), gpu, total, nil
}

// InputTensor downloads the model input as it stands (after DetectBatch:
// the preprocessed frames of the instance that ran the last batch), as
// float32 values in the adapter's layout, [Batch, ...]. fp16 inputs are
// widened. For tests and benchmarks.
func (e *Engine) InputTensor() ([]float32, error) {
	if e.isClosed() {
		return nil, errors.New("gpu: engine closed")
	}
	l := e.last.Load()
	raw := make([]byte, l.input.Len())
	unlock := cuda.Shared() // synchronous calls: not beside a capture
	err := l.compute.Synchronize()
	if err == nil {
		err = e.ctx.CopyDtoH(raw, l.input.Ptr())
	}
	unlock()
	if err != nil {
		return nil, err
	}
	if !e.half {
		return append([]float32(nil), bytesAsFloat32(raw)...), nil
	}
	out := make([]float32, len(raw)/2)
	for i := range out {
		out[i] = HalfToFloat(uint16(raw[2*i]) | uint16(raw[2*i+1])<<8)
	}
	return out, nil
}

// HalfToFloat widens an IEEE 754 binary16 value (sign, 5-bit exponent,
// 10-bit mantissa) to float32, exactly.
func HalfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for man&0x400 == 0 {
			man <<= 1
			exp--
		}
		exp++
		man &= 0x3ff
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | uint32(exp+112)<<23 | man<<13)
}

// MeasureH2D times host-to-device copies of n bytes, reps times each, from
// pinned memory (cuMemHostAlloc, asynchronous on a stream) and from
// pageable Go memory (synchronous cuMemcpyHtoD), and returns both
// bandwidths in GB/s (1e9 bytes per second), timed with CUDA events for
// pinned and the host clock for pageable.
func MeasureH2D(device, n, reps int) (pinned, pageable float64, err error) {
	if err := cuda.Init(); err != nil {
		return 0, 0, err
	}
	c, err := cuda.Primary(device)
	if err != nil {
		return 0, 0, err
	}
	defer c.Release()
	s, err := c.NewStream()
	if err != nil {
		return 0, 0, err
	}
	defer s.Destroy()
	d, err := c.Alloc(n)
	if err != nil {
		return 0, 0, err
	}
	defer d.Free()
	h, err := c.AllocHost(n)
	if err != nil {
		return 0, 0, err
	}
	defer h.Free()
	a, err := c.NewEvent(true)
	if err != nil {
		return 0, 0, err
	}
	defer a.Destroy()
	b, err := c.NewEvent(true)
	if err != nil {
		return 0, 0, err
	}
	defer b.Destroy()
	// One warm-up copy each.
	if err := c.CopyHtoDAsync(d.Ptr(), h, 0, n, s); err != nil {
		return 0, 0, err
	}
	if err := s.Synchronize(); err != nil {
		return 0, 0, err
	}
	if err := a.Record(s); err != nil {
		return 0, 0, err
	}
	for range reps {
		if err := c.CopyHtoDAsync(d.Ptr(), h, 0, n, s); err != nil {
			return 0, 0, err
		}
	}
	if err := b.Record(s); err != nil {
		return 0, 0, err
	}
	if err := b.Synchronize(); err != nil {
		return 0, 0, err
	}
	el, err := cuda.Elapsed(a, b)
	if err != nil {
		return 0, 0, err
	}
	pinned = float64(n) * float64(reps) / el.Seconds() / 1e9
	g := make([]byte, n)
	for i := range g {
		g[i] = byte(i)
	}
	if err := c.CopyHtoD(d.Ptr(), g); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	for range reps {
		if err := c.CopyHtoD(d.Ptr(), g); err != nil {
			return 0, 0, err
		}
	}
	pageable = float64(n) * float64(reps) / time.Since(t0).Seconds() / 1e9
	return pinned, pageable, nil
}
