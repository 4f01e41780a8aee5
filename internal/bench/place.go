package bench

import (
	"context"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/pipeline"
)

// benchSlot is where bench stream i runs: its decode settings (NVDEC on
// GPU dev, or the CPU), its device (a CUDA ordinal), and with several
// devices that device's engine and batcher (nil: the one engine of the
// run).
type benchSlot struct {
	decode  decode.Options
	dev     int
	eng     pipeline.Engine
	batcher *pipeline.Batcher
}

// benchPlacement places bench streams as vigil run places streams: each on
// the device with the fewest streams (pipeline.Placer), and with hybrid
// decoding on that GPU's NVDEC or on the CPU, in proportion to their
// capacities in pixels per second (engines.NewDecodePlacer,
// engines.PlaceDecoder). Every bench stream plays the same clip, so each
// keeps the default weight: the split is the one the measured weights
// would give.
// CPU-decoded streams use one decoder thread each, as the CPU ceiling's
// decodes do. Stream i's place depends only on streams 0..i-1, so every
// point of a run places its first streams alike. Safe for concurrent use.
type benchPlacement struct {
	mu       sync.Mutex
	c        *config.Config
	devs     []int
	gpus     *pipeline.Placer
	decoders *pipeline.Placer // nil unless decode.hwaccel is hybrid
	slots    []benchSlot
	// engines, when set, gives device index k's engine and batcher.
	engines func(k int) (pipeline.Engine, *pipeline.Batcher)
	// cpuThreads: StreamsOptions.CPUThreads (0: 1).
	cpuThreads int
}

func newBenchPlacement(c *config.Config, devs []int) *benchPlacement {
	return &benchPlacement{c: c, devs: devs, gpus: pipeline.NewPlacer(len(devs)), decoders: engines.NewDecodePlacer(c, len(devs))}
}

// at returns stream i's slot.
func (p *benchPlacement) at(i int) benchSlot {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.slots) <= i {
		id := strconv.Itoa(len(p.slots))
		k := p.gpus.Place(id, 1)
		s, nvdec := benchSlot{dev: p.devs[k]}, true
		if p.decoders != nil {
			nvdec = engines.PlaceDecoder(p.decoders, id, k, len(p.devs))
		}
		s.decode = engines.WithHW(decode.Options{}, p.c, s.dev, nvdec)
		if !nvdec {
			s.decode.Threads = max(p.cpuThreads, 1)
		}
		if p.engines != nil {
			s.eng, s.batcher = p.engines(k)
		}
		p.slots = append(p.slots, s)
	}
	return p.slots[i]
}

// toolEngines returns the engines of a one-shot tool (bench --sweep,
// bench --streams) with metrics of their own: the batcher's and the GPU
// engine's histograms land in the returned registry.
func toolEngines(c *config.Config) (*engines.Pool, prometheus.Gatherer) {
	e := engines.New(c)
	reg := prometheus.NewRegistry()
	e.SetMetrics(pipeline.NewMetrics(reg))
	return e, reg
}

// toolBatcher starts, for a one-shot tool (bench --sweep, bench
// --streams), the batcher of base in e (nil when batching is off) with its
// dispatcher on a goroutine of its own; stop ends it and waits for it.
func toolBatcher(ctx context.Context, e *engines.Pool, ref string, dev int, base engines.Detector) (b *pipeline.Batcher, stop func(), err error) {
	stop = func() {}
	if !e.Batching() {
		return nil, stop, nil
	}
	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	e.SetRunBatcher(func(b *pipeline.Batcher) {
		wg.Add(1)
		go func() { defer wg.Done(); b.Run(bctx) }()
	})
	if b, err = e.Batcher(ref, "", dev, base); err != nil {
		stop()
		return nil, func() {}, err
	}
	return b, stop, nil
}
