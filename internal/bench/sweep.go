package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/pipeline"
)

// SweepOptions are `vigil bench --sweep`'s flags.
type SweepOptions struct {
	Source  string        // looped real-time file (default Megamind.avi)
	Model   string        // default blazeface
	Streams []int         // stream counts to try, ascending
	Each    time.Duration // measuring time per point, after Warmup
	// Warmup is how long each point's streams run before measuring
	// (default 1 s): opens and first frames; a point whose streams have
	// not all decoded a frame by then waits until they have (at most
	// firstFrameLimit more; SweepPoint.StartWait), then 1 s.
	Warmup time.Duration
	Budget time.Duration // the policy's latency budget
	Plot   string        // PNG path for P99 against load; "" for none
	// place gives stream i's decode settings, device and (with several
	// devices) engine and batcher (benchPlacement.at); Sweep and
	// Streams set it.
	place func(i int) benchSlot
	// tools holds the batcher's and the GPU engine's metrics
	// (toolEngines), read with each point's own.
	tools prometheus.Gatherer
}

// SweepPoint is one load level in one mode.
type SweepPoint struct {
	Streams                  int
	OfferedFPS, ProcessedFPS float64
	DropRatio                float64
	P50, P99, P999           time.Duration
	// OnNVDEC is the number of streams decoding on NVDEC when the window
	// started (decode.Info.NVDEC): those placed there whose NVDEC opened.
	OnNVDEC int
	// StartWait is how long the point waited after its warm-up until
	// every stream had decoded a frame (0: all had; then 1 s more before
	// measuring); NotStarted says some had not after firstFrameLimit and
	// the point was measured anyway.
	StartWait  time.Duration
	NotStarted bool
	// RealTimeFPS is what the streams send in real time: the sum of their
	// sources' average frame rates (decode.Info.FPS; 0 where unknown).
	// OfferedFPS counts decoded frames, so decoders running slower than
	// real time lower it too; the pass rule compares the two.
	RealTimeFPS float64
	// Breakdown says where frames went over the window: drops by
	// reason@stage as shares of decoded frames; the mean wall time per
	// processed frame in each stage (vigil_stage_latency_seconds, ms);
	// with batching, the mean frames and ms per execution, the GPU
	// engine's mean ms per batch by stage and the share of decoded frames
	// the batcher refused as late; the process's CPU use in cores and the
	// P99 time goroutines waited to run (ms, the upper edge of the
	// runtime's histogram bucket); and at the end of the window its
	// resident memory (RSS, GB) and the part of it Go holds (GB; the rest
	// is C: FFmpeg, ONNX Runtime, pinned staging). When streams decode on
	// both NVDEC and the CPU, a second line gives for each kind apart:
	// offered and processed fps, the drop share and P99 (ms); it also
	// says how many streams placed on NVDEC decode on the CPU because
	// NVDEC could not open them (no GPU, an unsupported profile).
	Breakdown string
}

// Sweep is `vigil bench --sweep`: it runs N looped, real-time copies of a
// file through one model for each N, twice in the same run: with vigil's
// policy (latency budget, bounded drop-oldest queues, the EDF gate) and
// without it (unbounded lossless queues, no deadline, a plain lock), and
// prints offered and processed fps, drop ratio and P50/P99/P99.9 latency,
// then the first load at which P99 exceeds the budget in each mode. With
// Plot it writes P99 against offered load as a PNG.
func Sweep(ctx context.Context, c config.Config, o SweepOptions, log *zap.Logger, out io.Writer) (policy, none []SweepPoint, err error) {
	if o.Source == "" {
		o.Source = filepath.Join(assets.MediaDir(), "Megamind.avi")
	}
	if o.Model == "" {
		o.Model = "blazeface"
	}
	decode.SetLogger(nil)
	if err := engines.OpenRuntime(&c); err != nil {
		return nil, nil, err
	}
	o.place = newBenchPlacement(&c, []int{c.Infer.Device}).at
	engs, tools := toolEngines(&c)
	o.tools = tools
	defer engs.CloseLogging(log)
	eng, err := engs.Get(o.Model)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "vigil bench --sweep: %s looped in real time, model %s, budget %s, %s per point\n",
		filepath.Base(o.Source), eng.Model(), o.Budget, o.Each)
	fmt.Fprintf(out, "decode: hwaccel %s, nvdec %s\n", c.Decode.HWAccel, c.Decode.NVDECMode)
	for _, ch := range engs.ChoiceLines() {
		fmt.Fprintf(out, "engine: %s\n", ch)
	}
	fmt.Fprintf(out, "%-7s %7s %10s %10s %7s %9s %9s %9s\n", "mode", "streams", "offered", "processed", "drops", "P50 ms", "P99 ms", "P99.9 ms")
	// With infer.batch_sizes beyond 1 the policy runs streams through the
	// cross-stream batcher, as vigil run does.
	batcher, stopBatcher, err := toolBatcher(ctx, engs, o.Model, c.Infer.Device, eng)
	if err != nil {
		return nil, nil, err
	}
	defer stopBatcher()
	if batcher != nil {
		fmt.Fprintf(out, "batching: infer.batch_sizes %v, max queue delay %d µs\n", c.Infer.BatchSizes, c.Pipeline.MaxQueueDelayUS)
	}
	for _, withPolicy := range []bool{true, false} {
		for _, n := range o.Streams {
			p, err := sweepPoint(ctx, eng, batcher, o, n, withPolicy)
			if err == nil && ctx.Err() != nil {
				err = ctx.Err() // interrupted: the point is not a measurement
			}
			if err != nil {
				return policy, none, err
			}
			mode := "policy"
			if withPolicy {
				policy = append(policy, p)
			} else {
				mode = "none"
				none = append(none, p)
			}
			fmt.Fprintf(out, "%-7s %7d %10.1f %10.1f %6.1f%% %9.1f %9.1f %9.1f\n", mode, n, p.OfferedFPS, p.ProcessedFPS,
				100*p.DropRatio, ms(p.P50), ms(p.P99), ms(p.P999))
			fmt.Fprintf(out, "          %s\n", p.Breakdown)
		}
	}
	fmt.Fprintf(out, "first load with P99 over %s: with the policy %s; without it %s\n", o.Budget, breakPoint(policy, o.Budget), breakPoint(none, o.Budget))
	if o.Plot != "" {
		if err := plotSweep(o.Plot, o.Budget, policy, none); err != nil {
			return policy, none, err
		}
		fmt.Fprintf(out, "plot: %s\n", o.Plot)
	}
	return policy, none, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func breakPoint(ps []SweepPoint, budget time.Duration) string {
	for _, p := range ps {
		if p.P99 > budget {
			return fmt.Sprintf("%d streams (%.0f fps offered)", p.Streams, p.OfferedFPS)
		}
	}
	return "none up to the largest load tried"
}

// latencySink records end-to-end latencies of published results; it does
// not send them anywhere (the sweep measures the pipeline, not NATS).
type latencySink struct {
	mu  sync.Mutex
	on  bool
	lat []time.Duration
	n   int
	// When streams decode on both NVDEC and the CPU: each stream's side
	// (sideNVDEC or sideCPU) and the latencies per side.
	side    map[string]int
	sideLat [2][]time.Duration
}

const (
	sideNVDEC = iota
	sideCPU
)

func (l *latencySink) Publish(_ context.Context, r *pipeline.Result) error {
	now := time.Now()
	r.Published, r.Stages.Total = now, now.Sub(r.Capture)
	l.mu.Lock()
	if l.on {
		l.lat = append(l.lat, r.Stages.Total)
		l.n++
		if s, ok := l.side[r.StreamID]; ok {
			l.sideLat[s] = append(l.sideLat[s], r.Stages.Total)
		}
	}
	l.mu.Unlock()
	return nil
}

func sweepPoint(ctx context.Context, eng pipeline.Engine, batcher *pipeline.Batcher, o SweepOptions, n int, withPolicy bool) (SweepPoint, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sink := &latencySink{}
	reg := prometheus.NewRegistry()
	metrics := pipeline.NewMetrics(reg)
	// The process's resident memory and Go's share of it, read at the end
	// of the window (the rest is C: FFmpeg frames, ORT, pinned slots).
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorMemStatsMetricsDisabled(),
			collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/memory/classes/(total|heap/released):bytes$`)})))
	gates := map[pipeline.Engine]*pipeline.Gate{} // one per engine, as vigil run has
	var wg sync.WaitGroup
	errs := make(chan error, n)
	warm := o.Warmup
	if warm <= 0 {
		warm = time.Second
	}
	stagger := min(warm/2, 2*time.Second) // 2 s: a keyframe interval of IP cameras (60 frames at 30 fps)
	placed := map[string]int{}            // the side each stream was placed on
	srcs := map[string]*decode.Source{}   // for the side it decodes on
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("s%d", i)
		var slot benchSlot
		if o.place != nil {
			slot = o.place(i)
		}
		so := slot.decode
		placed[id] = sideCPU
		if so.HWAccel != "" && so.HWAccel != decode.HWNone {
			placed[id] = sideNVDEC
		}
		so.URL, so.StreamID, so.Realtime, so.Loop = o.Source, id, true, true
		src, err := decode.New(so)
		if err != nil {
			return SweepPoint{}, err
		}
		srcs[id] = src
		eng, batcher := eng, batcher
		if slot.eng != nil {
			eng, batcher = slot.eng, slot.batcher
		}
		sc := pipeline.StreamConfig{ID: id, Source: src, Engine: eng, Sink: sink, Metrics: metrics}
		if withPolicy {
			gate := gates[eng]
			if gate == nil {
				gate = pipeline.NewGate()
				gates[eng] = gate
			}
			sc.Budget, sc.Gate, sc.QueueSize, sc.Batcher = o.Budget, gate, 4, batcher
		} else {
			// The usual failure: a queue that never drops, no deadline.
			sc.Lossless, sc.QueueSize = true, 1<<16
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Independent cameras are not in step: start the copies
			// spread over stagger, so that their keyframes (and loop
			// restarts) do not all fall on the same instant.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i) * stagger / time.Duration(n)):
			}
			if err := pipeline.RunStream(ctx, sc); err != nil {
				errs <- err
			}
		}()
	}
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	sleep(warm) // staggered starts, opens, first frames, catch-up
	// Decoders are made one at a time by the driver (about 70 ms each on
	// an H200 with 96 starting: docs/h200-runs/2026-12-01-nvdec2), so
	// 200 streams need some 14 s before the last one decodes, longer than
	// a usual warm-up: measuring then would count streams that have not
	// started. Wait until every stream has decoded a frame, then warm
	// again for one second so the last ones settle, up to firstFrameLimit.
	waited, allStarted := waitFirstFrames(ctx, metrics, n, firstFrameLimit, func() bool { return len(errs) > 0 })
	if waited > 0 {
		sleep(time.Second)
	}
	// The side each stream decodes on: NVDEC only if it opened there.
	side, fellBack := map[string]int{}, 0
	for id, src := range srcs {
		switch info := src.Info(); {
		case info == nil: // not open yet: where it was placed
			side[id] = placed[id]
		case info.NVDEC:
			side[id] = sideNVDEC
		default:
			side[id] = sideCPU
			if placed[id] == sideNVDEC {
				fellBack++
			}
		}
	}
	snap0 := breakdownSnapshot(reg, o.tools)
	sched0 := readSched()
	sink.mu.Lock()
	if nv := countSide(side, sideNVDEC); (nv > 0 && nv < len(side)) || fellBack > 0 {
		sink.side = side // report the two kinds apart
	}
	// Offered (decoded), dropped and processed frames are counted over
	// the same window: the decode and drop counters are read under the
	// sink's lock, as it opens and as it closes. (Read from the gathers
	// around it instead, offered also counted the frames decoded while
	// gathering: up to 8 % of a 1 s point at 24 fps.)
	sink.on = true
	counts0 := frameCounts(metrics)
	sink.mu.Unlock()
	start := time.Now()
	sleep(o.Each)
	sink.mu.Lock()
	el := time.Since(start)
	sink.on = false
	counts1 := frameCounts(metrics)
	lat, processed := slices.Clone(sink.lat), sink.n
	sideLat := [2][]time.Duration{slices.Clone(sink.sideLat[0]), slices.Clone(sink.sideLat[1])}
	sink.mu.Unlock()
	snap1 := breakdownSnapshot(reg, o.tools)
	sched1 := readSched()
	maps.Copy(snap0, counts0)
	maps.Copy(snap1, counts1)
	decoded, dropped := snap1["decoded"]-snap0["decoded"], snap1["dropped"]-snap0["dropped"]
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		return SweepPoint{}, err
	}
	p := SweepPoint{Streams: n, OfferedFPS: decoded / el.Seconds(), ProcessedFPS: float64(processed) / el.Seconds(),
		OnNVDEC: countSide(side, sideNVDEC), StartWait: waited, NotStarted: !allStarted}
	for _, src := range srcs {
		if info := src.Info(); info != nil {
			p.RealTimeFPS += info.FPS
		}
	}
	if decoded > 0 {
		p.DropRatio = dropped / decoded
	}
	p.P50, p.P99, p.P999 = pipeline.Percentile(lat, 50), pipeline.Percentile(lat, 99), pipeline.Percentile(lat, 99.9)
	p.Breakdown = breakdown(snap0, snap1, decoded)
	if cpu := snap1["cpu"] - snap0["cpu"]; cpu > 0 {
		p.Breakdown += fmt.Sprintf("; CPU %.1f of %d cores", cpu/el.Seconds(), runtime.NumCPU())
	}
	if lat := schedP99(sched0, sched1); lat > 0 {
		p.Breakdown += fmt.Sprintf(", Go scheduling P99 %.3f ms", ms(lat))
	}
	if rss := snap1["rss"]; rss > 0 {
		p.Breakdown += fmt.Sprintf("; memory: RSS %.2f GB, Go %.2f GB", rss/1e9, (snap1["go total"]-snap1["go released"])/1e9)
	}
	if sink.side != nil {
		p.Breakdown += "\n          " + sidesLine(sink.side, snap0, snap1, sideLat, el)
		if fellBack > 0 {
			p.Breakdown += fmt.Sprintf(" (%d placed on NVDEC decode on the CPU: NVDEC could not open them)", fellBack)
		}
	}
	return p, nil
}

func countSide(side map[string]int, s int) (n int) {
	for _, v := range side {
		if v == s {
			n++
		}
	}
	return n
}

// sidesLine reports the streams decoding on NVDEC and on the CPU apart: streams,
// offered and processed fps, the share of their decoded frames dropped,
// and P99 (ms), from the per-stream counters of two snapshots
// ("stream decoded ID", "stream dropped ID") and the latencies per side.
func sidesLine(side map[string]int, a, b map[string]float64, lat [2][]time.Duration, el time.Duration) string {
	var decoded, dropped [2]float64
	for id, s := range side {
		decoded[s] += b["stream decoded "+id] - a["stream decoded "+id]
		dropped[s] += b["stream dropped "+id] - a["stream dropped "+id]
	}
	var parts []string
	for s, name := range []string{"NVDEC", "CPU"} {
		share := 0.0
		if decoded[s] > 0 {
			share = 100 * dropped[s] / decoded[s]
		}
		parts = append(parts, fmt.Sprintf("%s %d streams: offered %.1f, processed %.1f fps, dropped %.1f%%, P99 %.1f ms",
			name, countSide(side, s), decoded[s]/el.Seconds(), float64(len(lat[s]))/el.Seconds(), share, ms(pipeline.Percentile(lat[s], 99))))
	}
	return "by decoder: " + strings.Join(parts, "; ")
}

// firstFrameLimit bounds how long a point waits, after its warm-up, for
// every stream's first frame: 60 s is four times what 200 direct-NVDEC
// decoders took to be made one by one on an H200 (about 70 ms each).
const firstFrameLimit = 60 * time.Second

// waitFirstFrames polls m until n streams have decoded at least one frame
// each, for at most limit, or until failed (nil: never) says a stream has
// ended with an error (it will never decode: the point reports its error
// without waiting out the limit); it returns how long it waited (0 when
// they had already) and whether all had.
func waitFirstFrames(ctx context.Context, m *pipeline.Metrics, n int, limit time.Duration, failed func() bool) (time.Duration, bool) {
	start := time.Now()
	started := func() int {
		k := 0
		for key, v := range frameCounts(m) {
			if strings.HasPrefix(key, "stream decoded ") && v > 0 {
				k++
			}
		}
		return k
	}
	if started() >= n {
		return 0, true
	}
	for started() < n {
		if time.Since(start) >= limit || (failed != nil && failed()) {
			return time.Since(start), false
		}
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return time.Since(start), true
}

// frameCounts reads m's frame counters now (frames): "decoded" and
// "dropped" over all streams, "stream decoded ID" and "stream dropped ID"
// per stream, and "drop reason@stage". sweepPoint reads them as its
// window opens and closes, under the sink's lock.
func frameCounts(m *pipeline.Metrics) map[string]float64 {
	out := map[string]float64{}
	each := func(c *prometheus.CounterVec, f func(x *dto.Metric, v float64)) {
		ch := make(chan prometheus.Metric)
		go func() { c.Collect(ch); close(ch) }()
		for s := range ch {
			var x dto.Metric
			if s.Write(&x) == nil {
				f(&x, x.GetCounter().GetValue())
			}
		}
	}
	each(m.Decoded, func(x *dto.Metric, v float64) {
		out["decoded"] += v
		out["stream decoded "+labelValue(x, "stream")] += v
	})
	each(m.Dropped, func(x *dto.Metric, v float64) {
		out["dropped"] += v
		out["stream dropped "+labelValue(x, "stream")] += v
		out["drop "+labelValue(x, "reason")+"@"+labelValue(x, "stage")] += v
	})
	return out
}

// labelValue returns the value of x's label called name ("" if none).
func labelValue(x *dto.Metric, name string) string {
	for _, l := range x.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// breakdownSnapshot reads the counters a sweep point compares, summed
// over regs (nil ones skipped), each gathered once: per stage the sum (s)
// and count of frame latencies, the process's CPU seconds, the batcher's
// and GPU engine's histograms, and the gauges of resident memory ("rss")
// and Go's memory ("go total", "go released"; bytes). The frame counters
// come from frameCounts.
func breakdownSnapshot(regs ...prometheus.Gatherer) map[string]float64 {
	m := map[string]float64{}
	for _, reg := range regs {
		if reg == nil {
			continue
		}
		fams := gathered(reg)
		add := func(key, family string) {
			for _, x := range fams[family] {
				m[key] += x.GetCounter().GetValue() + x.GetGauge().GetValue()
			}
		}
		hist := func(family, key string, by func(*dto.Metric) string) {
			for _, x := range fams[family] {
				k := key
				if by != nil {
					k = strings.TrimSpace(key + " " + by(x))
				}
				m["sum "+k] += x.GetHistogram().GetSampleSum()
				m["n "+k] += float64(x.GetHistogram().GetSampleCount())
			}
		}
		add("cpu", "process_cpu_seconds_total")
		add("late", "vigil_batch_late_total")
		add("rss", "process_resident_memory_bytes")
		add("go total", "go_memory_classes_total_bytes")
		add("go released", "go_memory_classes_heap_released_bytes")
		hist("vigil_stage_latency_seconds", "", func(x *dto.Metric) string { return labelValue(x, "stage") })
		hist("vigil_batch_size", "batch", nil)
		hist("vigil_engine_batch_seconds", "exec", nil)
		hist("vigil_gpu_batch_stage_seconds", "gpu", func(x *dto.Metric) string { return labelValue(x, "stage") })
	}
	return m
}

// readSched reads the Go runtime's histogram of the time goroutines spent
// runnable before running (runtime/metrics /sched/latencies:seconds); nil
// where the runtime does not have it.
func readSched() *metrics.Float64Histogram {
	sm := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(sm)
	if sm[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return sm[0].Value.Float64Histogram()
}

// schedP99 returns the 99th percentile of the scheduling latencies
// recorded between two readings (the upper edge of its bucket; the last
// finite edge for the open top bucket), 0 when none were.
func schedP99(a, b *metrics.Float64Histogram) time.Duration {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return 0
	}
	total := uint64(0)
	for i := range b.Counts {
		total += b.Counts[i] - a.Counts[i]
	}
	if total == 0 {
		return 0
	}
	want, seen := uint64(math.Ceil(0.99*float64(total))), uint64(0)
	for i := range b.Counts {
		seen += b.Counts[i] - a.Counts[i]
		if seen >= want {
			edge := b.Buckets[i+1]
			if math.IsInf(edge, 1) {
				edge = b.Buckets[i]
			}
			return time.Duration(edge * float64(time.Second))
		}
	}
	return 0
}

// breakdown formats the difference of two snapshots: drop shares of the
// decoded frames, largest first, then mean stage times in ms.
func breakdown(a, b map[string]float64, decoded float64) string {
	var drops []string
	keys := slices.Sorted(maps.Keys(b))
	slices.SortStableFunc(keys, func(x, y string) int { return cmp.Compare(b[y]-a[y], b[x]-a[x]) })
	for _, k := range keys {
		if r, ok := strings.CutPrefix(k, "drop "); ok && decoded > 0 && b[k] > a[k] {
			drops = append(drops, fmt.Sprintf("%s %.1f%%", r, 100*(b[k]-a[k])/decoded))
		}
	}
	if len(drops) == 0 {
		drops = []string{"none"}
	}
	var stages []string
	for _, st := range []string{pipeline.StageDecode, pipeline.StageQueue, pipeline.StagePreprocess, pipeline.StageInfer,
		pipeline.StagePostprocess, pipeline.StagePublish} {
		if n := b["n "+st] - a["n "+st]; n > 0 {
			stages = append(stages, fmt.Sprintf("%s %.1f", st, 1000*(b["sum "+st]-a["sum "+st])/n))
		}
	}
	out := "drops: " + strings.Join(drops, ", ") + "; mean ms: " + strings.Join(stages, ", ")
	d := func(k string) float64 { return b[k] - a[k] }
	if n := d("n batch"); n > 0 {
		out += fmt.Sprintf("; batches: mean %.1f frames, %.1f ms", d("sum batch")/n, 1000*d("sum exec")/max(1, d("n exec")))
		var gpu []string
		for _, st := range []string{"host", "h2d", "preprocess", "infer", "d2h"} {
			if n := d("n gpu " + st); n > 0 {
				gpu = append(gpu, fmt.Sprintf("%s %.2f", st, 1000*d("sum gpu "+st)/n))
			}
		}
		if len(gpu) > 0 {
			out += " (GPU engine ms per batch: " + strings.Join(gpu, ", ") + ")"
		}
		if decoded > 0 {
			out += fmt.Sprintf(", refused as late %.1f%%", 100*d("late")/decoded)
		}
	}
	return out
}

// gathered indexes one Gather of reg by family name (on an error, what
// could be gathered: one failing collector does not hide the others).
func gathered(reg prometheus.Gatherer) map[string][]*dto.Metric {
	mfs, _ := reg.Gather()
	out := make(map[string][]*dto.Metric, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf.Metric
	}
	return out
}

// series returns the series of the family called name in reg (none when
// it cannot be gathered).
func series(reg prometheus.Gatherer, name string) []*dto.Metric { return gathered(reg)[name] }

// plotSweep draws P99 (ms, log scale) against offered fps for both modes,
// with the budget as a horizontal line.
func plotSweep(path string, budget time.Duration, policy, none []SweepPoint) error {
	p := plot.New()
	p.Title.Text = "vigil: P99 end-to-end latency against load"
	p.X.Label.Text = "offered load (frames/s)"
	p.Y.Label.Text = "P99 latency (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	pts := func(ps []SweepPoint) plotter.XYs {
		xy := make(plotter.XYs, len(ps))
		for i, q := range ps {
			xy[i].X, xy[i].Y = q.OfferedFPS, math.Max(ms(q.P99), 0.1)
		}
		return xy
	}
	maxX := 0.0
	for _, q := range append(slices.Clone(policy), none...) {
		maxX = math.Max(maxX, q.OfferedFPS)
	}
	for _, s := range []struct {
		name string
		ps   []SweepPoint
		dash bool
	}{{"with vigil's policy", policy, false}, {"unbounded queues, no deadline", none, true}} {
		l, sc, err := plotter.NewLinePoints(pts(s.ps))
		if err != nil {
			return err
		}
		if s.dash {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, sc)
		p.Legend.Add(s.name, l, sc)
	}
	b, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ms(budget)}, {X: maxX, Y: ms(budget)}})
	if err != nil {
		return err
	}
	b.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
	p.Add(b)
	p.Legend.Add(fmt.Sprintf("budget %s", budget), b)
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
