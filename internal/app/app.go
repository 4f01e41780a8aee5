// Package app wires vigil's packages into the commands of cmd/vigil: the
// service (Run), one-shot detection (Detect), the downstream client (Tail)
// and the benchmark (Bench). It holds no state of its own between calls.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/internal/hwmon"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// detector is what the service needs of an engine: infer.Engine on the
// CPU, gpu.Engine on an NVIDIA GPU.
type detector interface {
	pipeline.Engine
	pipeline.BatchEngine
	Adapter() string
	InputSize() (w, h int)
	Close() error
}

var (
	_ detector = (*infer.Engine)(nil)
	_ detector = (*gpu.Engine)(nil)
)

// engines opens one engine per distinct model (shared by the streams that
// use it: the engine serialises calls) and closes them all on close.
type engines struct {
	mu       sync.Mutex
	byName   map[string]detector
	choices  map[string]string // engine key -> execution provider line
	devs     map[string]int    // engine key -> device
	gates    map[detector]*pipeline.Gate
	batchers map[detector]*pipeline.Batcher
	// metrics receives GPU batch timings once Run has created it.
	metrics atomic.Pointer[pipeline.Metrics]
	// runBatcher starts a batcher's dispatcher (set by Run; nil elsewhere).
	runBatcher func(*pipeline.Batcher)
	cfg        *config.Config
	scs        []*decode.Scaler
	// loadedLog, once logLoaded ran, logs engines opened later (streams
	// added through the API, priority pools, batched copies).
	loadedLog *zap.Logger
}

func newEngines(c *config.Config) *engines {
	return &engines{byName: map[string]detector{}, choices: map[string]string{}, devs: map[string]int{}, gates: map[detector]*pipeline.Gate{},
		batchers: map[detector]*pipeline.Batcher{}, cfg: c}
}

// batching reports whether infer.batch_sizes asks for more than batch 1.
func (e *engines) batching() bool {
	bs := e.cfg.Infer.BatchSizes
	return len(bs) > 1 || (len(bs) == 1 && bs[0] != 1)
}

// batchEngines opens (or finds) the engines of every configured batch size
// for a model and pool: base for size 1, the model's .b<N>.onnx copies for
// the others. Errors name the missing or mismatched file.
func (e *engines) batchEngines(ref, pool string, dev int, base detector) ([]pipeline.BatchEngine, error) {
	if ref == "" {
		ref = e.cfg.Pipeline.DefaultModel
	}
	m, err := e.cfg.ResolveModel(ref)
	if err != nil {
		return nil, cli.BadInput(err)
	}
	var list []pipeline.BatchEngine
	for _, n := range e.cfg.Infer.BatchSizes {
		if n == 1 {
			list = append(list, base)
			continue
		}
		file := strings.TrimSuffix(m.File, ".onnx") + ".b" + strconv.Itoa(n) + ".onnx"
		// The copy keeps the model's name, adapter and thresholds.
		mb := m
		mb.File = file
		eng, err := e.instanceOf(mb, engineKey(m.Name, pool, dev)+"#b"+strconv.Itoa(n), pool, dev)
		if err != nil {
			return nil, fmt.Errorf("batch size %d needs %s (make setup makes .b4, .b8 and .b32 copies of BlazeFace and of a yolox_nano.onnx in the models directory; scripts/batch_models.py makes others): %w", n, file, err)
		}
		if eng.Batch() != n {
			return nil, cli.BadInput(fmt.Errorf("%s has batch %d, not %d", file, eng.Batch(), n))
		}
		list = append(list, eng)
	}
	return list, nil
}

// batcher returns the running cross-stream batcher of base (the batch-1
// engine of a model and pool), creating and starting it on first use; nil
// when batching is off.
func (e *engines) batcher(ref, pool string, dev int, base detector, metrics *pipeline.Metrics) (*pipeline.Batcher, error) {
	if !e.batching() {
		return nil, nil
	}
	e.mu.Lock()
	b := e.batchers[base]
	e.mu.Unlock()
	if b != nil {
		return b, nil
	}
	list, err := e.batchEngines(ref, pool, dev, base)
	if err != nil {
		return nil, err
	}
	conc := 1
	if _, ok := base.(*gpu.Engine); ok {
		conc = e.cfg.Infer.Slots // one batch uploads while another computes
	}
	b = pipeline.NewBatcher(pipeline.BatcherConfig{Engines: list, Preferred: e.cfg.Pipeline.PreferredBatchSizes,
		MaxQueueDelay: time.Duration(e.cfg.Pipeline.MaxQueueDelayUS) * time.Microsecond, Metrics: metrics, Concurrency: conc})
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.batchers[base]; old != nil {
		return old, nil
	}
	e.batchers[base] = b
	if e.runBatcher != nil {
		e.runBatcher(b)
	}
	return b, nil
}

// toolEngines returns the engines of a one-shot tool (bench --sweep,
// bench --streams) with metrics of their own: the batcher's and the GPU
// engine's histograms land in the returned registry.
func toolEngines(c *config.Config) (*engines, prometheus.Gatherer) {
	e := newEngines(c)
	reg := prometheus.NewRegistry()
	e.metrics.Store(pipeline.NewMetrics(reg))
	return e, reg
}

// toolBatcher starts, for a one-shot tool (bench --sweep, bench
// --streams), the batcher of base (nil when batching is off) with its
// dispatcher on a goroutine of its own; stop ends it and waits for it.
func (e *engines) toolBatcher(ctx context.Context, ref string, dev int, base detector) (b *pipeline.Batcher, stop func(), err error) {
	stop = func() {}
	if !e.batching() {
		return nil, stop, nil
	}
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	e.mu.Lock()
	e.runBatcher = func(b *pipeline.Batcher) {
		wg.Add(1)
		go func() { defer wg.Done(); b.Run(bctx) }()
	}
	e.mu.Unlock()
	if b, err = e.batcher(ref, "", dev, base, e.metrics.Load()); err != nil {
		stop()
		return nil, func() {}, err
	}
	return b, stop, nil
}

// choiceLines are the provider lines of the engines opened so far.
func (e *engines) choiceLines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ch := range e.choices {
		out = append(out, ch)
	}
	return out
}

// gateWaiting returns the frames waiting at every engine's gate.
func (e *engines) gateWaiting() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, g := range e.gates {
		w, _ := g.Load()
		n += w
	}
	return n
}

// gate returns the engine's shared EDF gate (one per engine).
func (e *engines) gate(eng detector) *pipeline.Gate {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.gates[eng]
	if g == nil {
		g = pipeline.NewGate()
		e.gates[eng] = g
	}
	return g
}

func openRuntime(c *config.Config) error {
	if err := infer.InitRuntime(c.Infer.ORTLibrary); err != nil {
		return cli.BadInput(err)
	}
	if err := ortdev.Init(c.Infer.ORTLibrary); err != nil {
		return err
	}
	return nil
}

// logLoaded logs the runtime and each engine once everything opened, so a
// start-up error is the only line a failed start prints.
func (e *engines) logLoaded(log *zap.Logger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	log.Info("ONNX Runtime loaded", zap.String("version", infer.RuntimeVersion()),
		zap.String("library", e.cfg.Infer.ORTLibrary), zap.String("provider", e.cfg.Infer.Provider))
	for key, eng := range e.byName {
		logEngine(log, eng, e.choices[key], e.devs[key])
	}
	e.loadedLog = log
}

// logEngine is the one line per engine: which execution provider it got
// and why.
func logEngine(log *zap.Logger, eng detector, choice string, dev int) {
	w, h := eng.InputSize()
	fields := []zap.Field{zap.String("model", eng.Model()), zap.String("adapter", eng.Adapter()),
		zap.Int("input_width", w), zap.Int("input_height", h), zap.Int("batch", eng.Batch())}
	if _, ok := eng.(*gpu.Engine); ok {
		fields = append(fields, zap.Int("device", dev))
	}
	log.Info("model loaded: "+choice, fields...)
}

func (e *engines) get(ref string) (detector, error) { return e.instance(ref, "", e.cfg.Infer.Device) }

// engineKey names an engine instance: the model, its pool ("" or "high")
// and, beyond the first, its device.
func engineKey(model, pool string, dev int) string {
	key := model
	if pool != "" {
		key += "#" + pool
	}
	if dev != 0 {
		key += "@gpu" + strconv.Itoa(dev)
	}
	return key
}

// instance returns the engine for a model reference. Streams share one
// engine (and its gate) per model, except that each pool ("high" for
// priority-high streams) gets its own instance: its own ORT session and
// gate, so those streams never queue behind bulk ones.
func (e *engines) instance(ref, pool string, dev int) (detector, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ref == "" {
		ref = e.cfg.Pipeline.DefaultModel
	}
	m, err := e.cfg.ResolveModel(ref)
	if err != nil {
		return nil, cli.BadInput(err)
	}
	return e.openLocked(m, engineKey(m.Name, pool, dev), pool, dev)
}

// instanceOf is instance for an already resolved model under its own key.
func (e *engines) instanceOf(m infer.Model, key, pool string, dev int) (detector, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.openLocked(m, key, pool, dev)
}

// openLocked returns the engine under key, opening m on first use; e.mu
// is held.
func (e *engines) openLocked(m infer.Model, key, pool string, dev int) (detector, error) {
	if eng, ok := e.byName[key]; ok {
		return eng, nil
	}
	sc := decode.NewScaler()
	eng, choice, err := e.open(m, pool, dev, sc)
	if err != nil {
		sc.Close()
		return nil, err
	}
	e.byName[key] = eng
	e.choices[key] = choice
	e.devs[key] = dev
	e.scs = append(e.scs, sc)
	if e.loadedLog != nil {
		logEngine(e.loadedLog, eng, choice, dev)
	}
	return eng, nil
}

// placementDevices are the CUDA ordinals streams are placed on:
// infer.devices when set, else every visible GPU when the GPU engine may
// be used, else just infer.device. With the CPU engine a device is only a
// label: each gets its own CPU engine instance (which is how the placement
// is tested on machines without GPUs).
func placementDevices(c *config.Config) ([]int, error) {
	if len(c.Infer.Devices) > 0 {
		if gpuChain(c.Infer.Provider) != nil && cuda.Init() == nil {
			if n, err := cuda.DeviceCount(); err == nil {
				for _, d := range c.Infer.Devices {
					if d >= n {
						return nil, cli.BadInput(fmt.Errorf("infer.devices: device %d does not exist (%d GPUs visible)", d, n))
					}
				}
			}
		}
		return c.Infer.Devices, nil
	}
	if gpuChain(c.Infer.Provider) != nil && cuda.Init() == nil {
		if n, err := cuda.DeviceCount(); err == nil && n > 1 {
			devs := make([]int, n)
			for i := range devs {
				devs[i] = i
			}
			return devs, nil
		}
	}
	return []int{c.Infer.Device}, nil
}

// withHW sets on o the config's NVDEC settings (decode.hwaccel,
// decode.hw_surfaces) for CUDA device dev. With decode.hwaccel hybrid,
// nvdec says where the stream was placed: on NVDEC (auto, so that a stream
// NVDEC cannot take still falls back to the CPU) or on the CPU (none).
func withHW(o decode.Options, c *config.Config, dev int, nvdec bool) decode.Options {
	o.HWAccel, o.HWDevice, o.HWSurfaces = decode.HWAccel(c.Decode.HWAccel), strconv.Itoa(dev), c.Decode.HWSurfaces
	if c.Decode.HWAccel == "hybrid" {
		o.HWAccel = decode.HWNone
		if nvdec {
			o.HWAccel = decode.HWAuto
		}
	}
	return o
}

// hybridCapacity returns hybrid decoding's capacities in frames per
// second: one GPU's NVDEC and all CPU cores (decode.nvdec_fps and
// decode.cpu_fps, or their defaults). The defaults come from `vigil bench
// --streams` on the H200 machine (16 cores, 1080p30 H.264 High at 6 Mbit/s,
// YOLOX-Nano, docs/performance.md): NVDEC alone carried 2,176 fps, and the
// split that carried the most streams in hybrid gave the CPU 1,000 fps,
// i.e. 62 per core (CPU-only carried 1,189, but under hybrid decoding the
// cores also serve the NVDEC streams and the engine's staging).
func hybridCapacity(c *config.Config) (nvdec, cpu float64) {
	nvdec, cpu = c.Decode.NVDECFPS, c.Decode.CPUFPS
	if nvdec <= 0 {
		nvdec = 2150
	}
	if cpu <= 0 {
		cpu = 62 * float64(runtime.NumCPU())
	}
	return nvdec, cpu
}

// newDecodePlacer returns hybrid decoding's placer: devices 0..gpus-1 are
// the GPUs' NVDEC engines, device gpus the CPU cores; nil unless
// decode.hwaccel is hybrid.
func newDecodePlacer(c *config.Config, gpus int) *pipeline.Placer {
	if c.Decode.HWAccel != "hybrid" {
		return nil
	}
	nv, cpu := hybridCapacity(c)
	caps := make([]float64, gpus+1)
	for i := range gpus {
		caps[i] = nv
	}
	caps[gpus] = cpu
	return pipeline.NewPlacerCapacity(caps)
}

// placeDecoder places stream id, on GPU gi of gpus, on that GPU's NVDEC or
// on the CPU with the placer of newDecodePlacer (sticky, like
// Placer.PlaceAmong); true for NVDEC.
func placeDecoder(p *pipeline.Placer, id string, gi, gpus int) (nvdec bool) {
	return p.PlaceAmong(id, 1, []int{gi, gpus}) != gpus
}

// gpuChain is the GPU part of the provider chain infer.provider asks for
// (auto and tensorrt: tensorrt then cuda; cuda: cuda; cpu: none).
func gpuChain(p string) []ortdev.Provider {
	switch p {
	case "cpu":
		return nil
	case "cuda":
		return []ortdev.Provider{ortdev.CUDA}
	}
	return []ortdev.Provider{ortdev.TensorRT, ortdev.CUDA}
}

// open opens model m on the GPU when infer.provider allows it and it works,
// else on the CPU. It returns the line to log: the provider taken and why
// the ones before it were not.
func (e *engines) open(m infer.Model, pool string, dev int, sc *decode.Scaler) (detector, string, error) {
	ic := e.cfg.Infer
	var gpuErr error
	if chain := gpuChain(ic.Provider); chain != nil {
		trt := ortdev.TensorRTOptions{FP16: ic.TensorRT.FP16, INT8: ic.TensorRT.INT8,
			INT8CalibrationTable: ic.TensorRT.INT8CalibrationTable, EngineCacheDir: ic.TensorRT.EngineCacheDir,
			TimingCacheDir: ic.TensorRT.TimingCacheDir}
		if trt.TimingCacheDir == "" {
			trt.TimingCacheDir = trt.EngineCacheDir
		}
		// ONNX Runtime 1.29 captures CUDA graphs in global capture mode, at
		// runs of its choosing; NVDEC's CUDA calls on FFmpeg's decoder
		// threads then invalidate the capture (seen on the H200:
		// cudaErrorStreamCaptureInvalidated, then illegal memory accesses).
		// With NVDEC decoding, runs are eager.
		graph := (ic.CUDAGraph == nil || *ic.CUDAGraph) && e.cfg.Decode.HWAccel == "none"
		g, err := gpu.Open(gpu.Options{Name: m.Name, Path: m.File, Adapter: m.Adapter, ScoreThreshold: m.ScoreThreshold,
			IoUThreshold: m.IoUThreshold, Device: dev, Providers: chain, CUDAGraph: graph, TF32: ic.TF32,
			TensorRT: trt, Slots: ic.Slots, Resizer: sc, OnBatch: e.observeGPU(m.Name)})
		if err == nil {
			choice := g.Choice()
			if !graph && (ic.CUDAGraph == nil || *ic.CUDAGraph) {
				choice += "; CUDA graphs off: they conflict with decode.hwaccel " + e.cfg.Decode.HWAccel
			}
			return g, choice, nil
		}
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, infer.ErrModelMismatch) {
			return nil, "", cli.BadInput(err)
		}
		gpuErr = err
	}
	eng, err := infer.Open(infer.Options{
		Name: m.Name, Path: m.File, Adapter: m.Adapter, ScoreThreshold: m.ScoreThreshold,
		IoUThreshold: m.IoUThreshold, IntraOpThreads: ic.IntraOpThreads, Resizer: sc,
		// A pool's instance serves few streams and idles between frames.
		NoSpin: pool != "",
	})
	if err != nil {
		return nil, "", cli.BadInput(err)
	}
	choice := "execution provider cpu (infer.provider: cpu)"
	if gpuErr != nil {
		choice = "execution provider cpu (GPU engine unavailable: " + cli.OneLine(gpuErr.Error()) + ")"
	}
	return eng, choice, nil
}

// observeGPU returns the GPU engine's per-batch hook: stage histograms.
func (e *engines) observeGPU(model string) func(gpu.BatchTimes) {
	return func(bt gpu.BatchTimes) {
		m := e.metrics.Load()
		if m == nil {
			return
		}
		b := strconv.Itoa(bt.Batch)
		m.GPUStage.WithLabelValues(model, b, "host").Observe(bt.Host.Seconds())
		m.GPUStage.WithLabelValues(model, b, "h2d").Observe(bt.H2D.Seconds())
		m.GPUStage.WithLabelValues(model, b, "preprocess").Observe(bt.Preprocess.Seconds())
		m.GPUStage.WithLabelValues(model, b, "infer").Observe((bt.Compute - bt.Preprocess).Seconds())
		m.GPUStage.WithLabelValues(model, b, "d2h").Observe(bt.D2H.Seconds())
		m.GPULaunch.WithLabelValues(model, b).Observe(bt.Launch.Seconds())
	}
}

func (e *engines) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, eng := range e.byName {
		_ = eng.Close()
	}
	for _, sc := range e.scs {
		sc.Close()
	}
}

// Endpoints are the addresses a running vigil serves ("" when disabled).
type Endpoints struct {
	NATS    string // NATS client URL
	Metrics string // host:port of /metrics
	API     string // base URL of the REST API, e.g. http://127.0.0.1:8080
}

// Run is `vigil run`. It starts the metrics endpoint, NATS (embedded with
// JetStream under data_dir, or external), opens the stream registry (a
// JetStream key-value bucket) and seeds it with the config's streams,
// serves the REST API, and reconciles running streams with the registry
// until ctx ends: added streams start, removed ones stop, changed ones
// restart, the others are not touched. Then it stops in order: streams
// (each RunStream returns after its goroutines), the API, the NATS sink
// (flush, so no published frame is lost), the embedded server, the metrics
// endpoint, and the engines last. Progress lines go to progress every
// Pipeline.ProgressInterval. ready, when not nil, is called once
// everything is up, just before reconciling starts streams (so a
// subscriber set up in ready sees every frame).
func Run(ctx context.Context, c config.Config, log *zap.Logger, progress io.Writer, ready func(Endpoints)) error {
	// config.Parse refuses these already; a Config built another way is
	// held to the same rule before anything listens.
	if err := c.CheckExposure(); err != nil {
		return cli.BadInput(err)
	}
	sources, err := c.Sources()
	if err != nil {
		return cli.BadInput(err)
	}
	decode.SetLogger(log)
	defer decode.SetLogger(nil) // logs FFmpeg line counts still pending
	if err := openRuntime(&c); err != nil {
		return err
	}
	engs := newEngines(&c)
	defer engs.close()
	devices, err := placementDevices(&c)
	if err != nil {
		return err
	}
	// Open every configured engine before anything starts: a bad model in
	// the config is a start-up error (exit 2), not a failure at the first
	// frame. Models of streams registered through the API open when those
	// streams start; a failure marks only that stream failed.
	for _, s := range c.Streams {
		eng, err := engs.instance(s.Model, "", devices[0])
		if err != nil {
			return fmt.Errorf("streams[%s].model: %w", s.ID, err)
		}
		// Batched copies must exist for every configured batch size.
		if !engs.batching() {
			continue
		}
		if _, err := engs.batchEngines(s.Model, "", devices[0], eng); err != nil {
			return cli.BadInput(fmt.Errorf("infer.batch_sizes: streams[%s]: %w", s.ID, err))
		}
	}
	var token, natsToken string
	for _, t := range []struct {
		field, path string
		dst         *string
	}{{"api.token_file", c.API.TokenFile, &token}, {"nats.token_file", c.NATS.TokenFile, &natsToken}} {
		if t.path == "" {
			continue
		}
		v, err := config.ReadToken(t.path)
		if err != nil {
			return cli.BadInput(fmt.Errorf("%s: %w", t.field, err))
		}
		*t.dst = v
	}
	engs.logLoaded(log)
	var ep Endpoints

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := pipeline.NewMetrics(reg)
	engs.metrics.Store(metrics)
	if hw := hwmon.Start(log); hw != nil {
		reg.MustRegister(hw)
		defer hw.Close()
	}
	if c.Metrics.Listen != "off" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		addr, stop, err := serveHTTP(c.Metrics.Listen, mux, "", "")
		if err != nil {
			return fmt.Errorf("metrics.listen %s: %w", c.Metrics.Listen, err)
		}
		defer stop()
		if err := boundAsConfigured("metrics.listen", c.Metrics.Listen, addr); err != nil {
			return err
		}
		ep.Metrics = addr
		log.Info("metrics endpoint", zap.String("url", "http://"+addr+"/metrics"))
		if !config.Loopback(c.Metrics.Listen) {
			log.Warn("metrics endpoint open to the network without authentication: /metrics shows stream ids, "+
				"frame rates, drops and errors to anyone who can reach it (it cannot change anything); listen on "+
				"127.0.0.1 or restrict it with a firewall", zap.String("listen", c.Metrics.Listen))
		}
	}

	ep.NATS = c.NATS.URL
	if ep.NATS == "" {
		ns, err := natsserver.Start(c.NATS.Listen, filepath.Join(c.DataDir, "jetstream"), natsToken)
		if err != nil {
			return err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		if err := boundAsConfigured("nats.listen", c.NATS.Listen, ns.Addr().String()); err != nil {
			return err
		}
		ep.NATS = ns.ClientURL()
		log.Info("embedded NATS server started", zap.String("url", ep.NATS), zap.String("store", filepath.Join(c.DataDir, "jetstream")),
			zap.Bool("auth", natsToken != ""))
		if !config.Loopback(c.NATS.Listen) && natsToken == "" {
			log.Warn("embedded NATS server open to the network without a token (nats.insecure: true): anyone who can "+
				"reach it can read every detection, publish false ones, and read or rewrite the stream registry, camera "+
				"credentials included; set nats.token_file", zap.String("listen", c.NATS.Listen))
		}
	}
	sink, err := sinks.DialNATS(ctx, sinks.NATSOptions{URL: ep.NATS, Token: natsToken, Prefix: c.NATS.SubjectPrefix,
		Metrics: sinks.NewNATSMetrics(reg), Logger: log.Named("nats")})
	if err != nil {
		return err
	}
	defer func() {
		if err := sink.Close(); err != nil {
			log.Warn("closing NATS", zap.Error(err))
		}
	}()
	octx, cancelOpen := context.WithTimeout(ctx, 15*time.Second)
	defer cancelOpen()
	streams, err := registry.Open(octx, sink.Conn(), c.NATS.Bucket, c.NATS.Replicas)
	if err != nil {
		return err
	}
	seed := make([]registry.Spec, len(c.Streams))
	for i, s := range c.Streams {
		seed[i] = c.Spec(s)
	}
	if n, err := streams.Seed(octx, seed); err != nil {
		return err
	} else if n > 0 {
		log.Info("registry seeded from the config", zap.Int("streams", n))
	}

	stats := pipeline.NewStats()
	sup := pipeline.NewSupervisor(ctx)
	if len(devices) > 1 {
		log.Info("placing streams across GPUs", zap.Ints("devices", devices))
	}
	if c.Decode.HWAccel == "hybrid" {
		nv, cpu := hybridCapacity(&c)
		log.Info("hybrid decoding: streams go to NVDEC or the CPU in proportion to capacity",
			zap.Float64("nvdec_fps_per_gpu", nv), zap.Float64("cpu_fps", cpu))
	}
	svc := &service{c: &c, log: log, engs: engs, sink: sink, metrics: metrics, faults: decode.NewMetrics(reg), stats: stats, sup: sup, sources: sources,
		placer: pipeline.NewPlacer(len(devices)), devices: devices, specs: map[string]registry.Spec{},
		decoders: newDecodePlacer(&c, len(devices)), known: map[string]registry.Entry{},
		priorities: map[string]string{}, degraded: map[string]bool{}, gov: &pipeline.Governor{Threshold: c.Pipeline.DegradeDepth,
			EngageAfter: c.Pipeline.DegradeAfter.Duration, ReleaseAfter: c.Pipeline.RestoreAfter.Duration}}
	if c.API.Listen != "off" {
		h := api.New(api.Options{Registry: streams, Status: sup.Status, CheckModel: c.CheckModel, Token: token, Sources: sources,
			Logger: log.Named("api"), NATS: sink.State, Known: svc.knownEntries}).Handler()
		addr, stop, err := serveHTTP(c.API.Listen, h, c.API.TLSCert, c.API.TLSKey)
		if err != nil {
			return fmt.Errorf("api.listen %s: %w", c.API.Listen, err)
		}
		defer stop()
		if err := boundAsConfigured("api.listen", c.API.Listen, addr); err != nil {
			return err
		}
		scheme := "http"
		if c.API.TLSCert != "" {
			scheme = "https"
		}
		ep.API = scheme + "://" + addr
		log.Info("API", zap.String("url", ep.API+"/v1/streams"), zap.Bool("auth", token != ""),
			zap.Bool("allowed_sources", sources != nil))
		warnAPIExposure(log, &c, token, sources != nil)
	}
	logDrift(octx, log, streams, &c, seed, ep.API)
	if ready != nil {
		ready(ep)
	}

	var wg sync.WaitGroup
	engs.mu.Lock()
	engs.runBatcher = func(b *pipeline.Batcher) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Run(ctx)
		}()
	}
	engs.mu.Unlock()
	wg.Add(3)
	go func() {
		defer wg.Done()
		svc.alertLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		svc.governorLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			err := streams.Watch(ctx, svc.reconcile, func(key string, err error) {
				log.Error("ignoring a registry entry", zap.String("key", key), zap.Error(err))
			})
			if err != nil && ctx.Err() == nil {
				log.Warn("registry watch failed; retrying", zap.Error(err))
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	if iv := c.Pipeline.ProgressInterval; iv != nil && iv.Duration > 0 && progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(iv.Duration)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					writeProgress(progress, stats.Snapshot(), sink.State(), time.Now())
				}
			}
		}()
	}
	<-ctx.Done()
	log.Info("shutting down")
	wg.Wait()
	sup.Wait()
	return nil
}

// warnAPIExposure logs a WARN, at every start, for an API on an address
// other than loopback: without a token (api.insecure), or with a token
// sent in clear text (no api.tls_cert).
func warnAPIExposure(log *zap.Logger, c *config.Config, token string, restricted bool) {
	if config.Loopback(c.API.Listen) {
		return
	}
	listen := zap.String("listen", c.API.Listen)
	switch {
	case token == "":
		what := "register streams that make vigil connect to any URL they name (set api.allowed_sources to restrict them)"
		if restricted {
			what = "register streams (within api.allowed_sources)"
		}
		log.Warn("API open to the network without a token (api.insecure: true): anyone who can reach it can "+what+
			", and change or delete every stream; set api.token_file", listen)
	case c.API.TLSCert == "":
		log.Warn("API token sent in clear text over the network: set api.tls_cert and api.tls_key, or listen on "+
			"127.0.0.1 behind a TLS proxy", listen)
	}
}

// boundAsConfigured refuses a listener configured on loopback (localhost
// included) that the system bound elsewhere: "localhost" is a name, and
// the rule that spares loopback listeners a token must hold for the
// address actually bound. field names the setting in the error.
func boundAsConfigured(field, listen, bound string) error {
	if !config.Loopback(listen) {
		return nil
	}
	host, _, err := net.SplitHostPort(bound)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return cli.BadInput(fmt.Errorf("%s %s: bound to %s, which is not a loopback address", field, listen, bound))
	}
	return nil
}

// writeProgress writes the progress lines (pipeline.WriteProgress) and,
// while NATS is down, one more line saying so: how long, what the client
// holds and what was lost, e.g.
//
//	NATS             down 12 s: 288 messages (310 KiB of 8.0 MiB) held in the reconnect buffer, sent when it is back, lost if it fills or vigil stops; undelivered 0
func writeProgress(w io.Writer, snaps []pipeline.StreamSnapshot, st sinks.NATSState, now time.Time) {
	held := ""
	if !st.Connected {
		held = "NATS down " + cli.RoughDuration(now.Sub(st.DownSince))
	}
	pipeline.WriteProgress(w, snaps, held)
	if !st.Connected {
		fmt.Fprintf(w, "%-16s down %s: %d messages (%s of %s) held in the reconnect buffer, sent when it is back, lost if it fills or vigil stops; undelivered %d\n",
			"NATS", cli.RoughDuration(now.Sub(st.DownSince)), st.HeldMessages, cli.HumanBytes(st.HeldBytes), cli.HumanBytes(st.BufferLimitBytes), st.Undelivered)
	}
}

// serveHTTP listens on addr and serves h (over TLS when cert and key are
// set) until stop is called; it returns the bound address.
func serveHTTP(addr string, h http.Handler, cert, key string) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			ln.Close()
			return "", nil, fmt.Errorf("TLS key pair: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
