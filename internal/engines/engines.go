// Package engines is the glue between the config and the engines: it opens
// one engine per model, pool and device (on the GPU when infer.provider
// allows it and it works, else on the CPU), shared by the streams that use
// it, with its EDF gate and, when infer.batch_sizes asks for it, its
// cross-stream batcher; and it says where a stream runs: on which GPU
// (PlacementDevices) and, with hybrid decoding, on that GPU's NVDEC or on
// the CPU (NewDecodePlacer, PlaceDecoder, WithHW). The service
// (internal/app), `vigil detect` and the benchmarks (internal/bench) open
// engines only through a Pool, so that a benchmark measures what the
// service runs.
package engines

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/pipeline"
)

// Detector is what the service needs of an engine: infer.Engine on the
// CPU, gpu.Engine on an NVIDIA GPU.
type Detector interface {
	pipeline.Engine
	pipeline.BatchEngine
	Adapter() string
	InputSize() (w, h int)
	Close() error
}

var (
	_ Detector = (*infer.Engine)(nil)
	_ Detector = (*gpu.Engine)(nil)
)

// Pool opens one engine per distinct model, pool and device (shared by the
// streams that use it: the engine serialises calls) and closes them all on
// Close. Safe for concurrent use.
type Pool struct {
	mu       sync.Mutex
	byName   map[string]Detector
	choices  map[string]string // engine key -> execution provider line
	devs     map[string]int    // engine key -> device
	gates    map[Detector]*pipeline.Gate
	batchers map[Detector]*pipeline.Batcher
	// metrics receives GPU batch timings and the batchers' figures once
	// set (SetMetrics).
	metrics atomic.Pointer[pipeline.Metrics]
	// runBatcher starts a batcher's dispatcher (SetRunBatcher; nil: the
	// batcher is not started).
	runBatcher func(*pipeline.Batcher)
	cfg        *config.Config
	scs        []*decode.Scaler
	// loadedLog, once LogLoaded ran, logs engines opened later (streams
	// added through the API, priority pools, batched copies).
	loadedLog *zap.Logger
}

// New returns an empty pool for config c (infer, decode and pipeline
// settings, the models); engines open on first use.
func New(c *config.Config) *Pool {
	return &Pool{byName: map[string]Detector{}, choices: map[string]string{}, devs: map[string]int{}, gates: map[Detector]*pipeline.Gate{},
		batchers: map[Detector]*pipeline.Batcher{}, cfg: c}
}

// Batching reports whether infer.batch_sizes asks for more than batch 1.
func (e *Pool) Batching() bool {
	bs := e.cfg.Infer.BatchSizes
	return len(bs) > 1 || (len(bs) == 1 && bs[0] != 1)
}

// BatchEngines opens (or finds) the engines of every configured batch size
// for a model and pool: base for size 1, the model's .b<N>.onnx copies for
// the others. Errors name the missing or mismatched file.
func (e *Pool) BatchEngines(ref, pool string, dev int, base Detector) ([]pipeline.BatchEngine, error) {
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
		file := batchFile(m.File, n)
		// The copy keeps the model's name, adapter and thresholds.
		mb := m
		mb.File = file
		eng, err := e.instanceOf(mb, engineKey(m.Name, pool, dev)+"#b"+strconv.Itoa(n), pool, dev)
		if err != nil {
			return nil, fmt.Errorf("batch size %d needs %s (make setup makes .b4, .b8 and .b32 copies of BlazeFace and .b4, .b8, .b32, .b64 and .b128 of a yolox_nano.onnx in the models directory; scripts/batch_models.py makes others): %w", n, file, err)
		}
		if eng.Batch() != n {
			return nil, cli.BadInput(fmt.Errorf("%s has batch %d, not %d", file, eng.Batch(), n))
		}
		list = append(list, eng)
	}
	return list, nil
}

// batchFile is the batch-n copy of model file: x.onnx → x.b<n>.onnx.
func batchFile(file string, n int) string {
	return strings.TrimSuffix(file, ".onnx") + ".b" + strconv.Itoa(n) + ".onnx"
}

// SetMetrics gives the pool the metrics that the GPU engines' batch
// timings and the batchers created from now on report to.
func (e *Pool) SetMetrics(m *pipeline.Metrics) { e.metrics.Store(m) }

// Metrics returns what SetMetrics set (nil before).
func (e *Pool) Metrics() *pipeline.Metrics { return e.metrics.Load() }

// SetRunBatcher sets how the pool starts the dispatcher of each batcher it
// creates from now on (Batcher): run must start b.Run on a goroutine its
// caller waits for.
func (e *Pool) SetRunBatcher(run func(b *pipeline.Batcher)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runBatcher = run
}

// Batcher returns the running cross-stream batcher of base (the batch-1
// engine of a model and pool), creating it on first use with the pool's
// Metrics and starting it with SetRunBatcher's function; nil when
// batching is off. Errors: BatchEngines's.
func (e *Pool) Batcher(ref, pool string, dev int, base Detector) (*pipeline.Batcher, error) {
	if !e.Batching() {
		return nil, nil
	}
	e.mu.Lock()
	b := e.batchers[base]
	e.mu.Unlock()
	if b != nil {
		return b, nil
	}
	list, err := e.BatchEngines(ref, pool, dev, base)
	if err != nil {
		return nil, err
	}
	conc := 1
	if g, ok := list[len(list)-1].(*gpu.Engine); ok {
		// One batch uploads while another computes, on each instance.
		conc = e.cfg.Infer.Slots * g.Instances()
	}
	b = pipeline.NewBatcher(pipeline.BatcherConfig{Engines: list, Preferred: e.cfg.Pipeline.PreferredBatchSizes,
		MaxQueueDelay: time.Duration(e.cfg.Pipeline.MaxQueueDelayUS) * time.Microsecond, Metrics: e.metrics.Load(), Concurrency: conc})
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

// ChoiceLines are the provider lines of the engines opened so far.
func (e *Pool) ChoiceLines() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ch := range e.choices {
		out = append(out, ch)
	}
	return out
}

// GateWaiting returns the frames waiting at every engine's gate.
func (e *Pool) GateWaiting() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, g := range e.gates {
		w, _ := g.Load()
		n += w
	}
	return n
}

// Gate returns the engine's shared EDF gate (one per engine).
func (e *Pool) Gate(eng Detector) *pipeline.Gate {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.gates[eng]
	if g == nil {
		g = pipeline.NewGate()
		e.gates[eng] = g
	}
	return g
}

// LogLoaded logs the runtime and each engine once everything opened, so a
// start-up error is the only line a failed start prints.
func (e *Pool) LogLoaded(log *zap.Logger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	log.Info("ONNX Runtime loaded", zap.String("version", infer.RuntimeVersion()),
		zap.String("library", e.cfg.Infer.ORTLibrary), zap.String("provider", e.cfg.Infer.Provider))
	if e.cfg.Infer.TF32 {
		log.Warn("infer.tf32 is deprecated: write infer.precision: tf32 (read as that now)")
	}
	for key, eng := range e.byName {
		logEngine(log, eng, e.choices[key], e.devs[key])
	}
	e.loadedLog = log
}

// Get is Instance of ref on infer.device in the default pool.
func (e *Pool) Get(ref string) (Detector, error) { return e.Instance(ref, "", e.cfg.Infer.Device) }

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

// Instance returns the engine for a model reference ("" is
// pipeline.default_model) in pool on CUDA device dev, opening it on first
// use. Streams share one engine (and its gate) per model, except that each
// pool ("high" for priority-high streams) gets its own instance: its own ORT
// session and gate, so those streams never queue behind bulk ones. Errors:
// an unknown model or one that does not load (*cli.BadInputError).
func (e *Pool) Instance(ref, pool string, dev int) (Detector, error) {
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

// instanceOf is Instance for an already resolved model under its own key.
func (e *Pool) instanceOf(m infer.Model, key, pool string, dev int) (Detector, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.openLocked(m, key, pool, dev)
}

// openLocked returns the engine under key, opening m on first use; e.mu
// is held.
func (e *Pool) openLocked(m infer.Model, key, pool string, dev int) (Detector, error) {
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

// Close closes every engine and scaler the pool opened; its error joins
// the engines' (a session or CUDA resource that could not be freed).
func (e *Pool) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for key, eng := range e.byName {
		if err := eng.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing engine %s: %w", key, err))
		}
	}
	for _, sc := range e.scs {
		sc.Close()
	}
	return errors.Join(errs...)
}

// CloseLogging is Close with its error logged as a warning on log: for
// the deferred close of a command, whose outcome no longer depends on it.
func (e *Pool) CloseLogging(log *zap.Logger) {
	if err := e.Close(); err != nil {
		log.Warn("freeing the engines", zap.Error(err))
	}
}
