// Package doctor is `vigil doctor`: a health report of a running vigil
// from two scrapes of its /metrics (Run), one line per check with the
// measured value, the threshold and the direction to take. It reads only
// the metrics endpoint, so it works on any vigil it can reach.
package doctor

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/redact"
)

// Options are `vigil doctor`'s flags.
type Options struct {
	// URL of a running vigil's /metrics.
	URL string
	// Window between the two scrapes that rates and latencies come from.
	Window time.Duration
}

// Check is one line of the health report.
type Check struct {
	Name      string `json:"name"`
	Measured  string `json:"measured"` // "" when the metric is not available
	Threshold string `json:"threshold"`
	OK        bool   `json:"ok"`
	// Advice is the direction to take when the check fails (or why it
	// cannot be measured).
	Advice string `json:"advice,omitempty"`
}

// Thresholds of the report (the field's long-tail playbook).
const (
	gpuUtilHigh   = 0.70 // GPU busy enough to be worth its cost
	gpuUtilLow    = 0.30 // below this the GPU is mostly idle
	gpuMemMax     = 0.80 // headroom for engines, graphs and bursts
	tailToMean    = 3.0  // P99 / mean of the engine time per frame
	queueDelayMax = 5 * time.Millisecond
	copyShareMax  = 0.15 // host↔device copies as a share of GPU batch time
)

// Run is `vigil doctor`: it scrapes a running vigil's metrics twice,
// Window apart, and writes a health report: GPU utilisation (above 70 %, not
// under 30 %), GPU memory use (under 80 %), the engine-time tail (P99 under
// 3× the mean), queue delay (mean under 5 ms), the host↔device copy share
// (under 15 % of batch time), the frames lost (under 20 % of those not
// skipped by policy; skips are shown, never warned about), the NATS
// connection (connected, nothing undelivered), how many streams run, and
// one line for each stream that does not run (vigil_stream_state at the
// second scrape). Each line gives the measured value, the threshold and the
// direction to take. It returns the checks.
func Run(ctx context.Context, o Options, out io.Writer) ([]Check, error) {
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	a, err := scrape(ctx, o.URL)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.Window):
	}
	b, err := scrape(ctx, o.URL)
	if err != nil {
		return nil, err
	}
	checks := evaluate(a, b)
	fmt.Fprintf(out, "vigil doctor: %s over %s\n", redact.URL(o.URL), o.Window)
	for _, c := range checks {
		status := "ok  "
		switch {
		case c.Measured == "":
			status, c.Measured = "n/a ", "-"
		case !c.OK:
			status = "WARN"
		}
		fmt.Fprintf(out, "  %s %-28s %-14s (want %s)", status, c.Name, c.Measured, c.Threshold)
		if c.Advice != "" && (status != "ok  ") {
			fmt.Fprintf(out, "  -> %s", c.Advice)
		}
		fmt.Fprintln(out)
	}
	return checks, nil
}

// evaluate runs every check on two scrapes, a before b.
func evaluate(a, b families) []Check {
	checks := []Check{gpuUtilCheck(b), gpuMemCheck(b), tailCheck(a, b), queueCheck(a, b), copyCheck(a, b), dropCheck(a, b), natsCheck(a, b)}
	return append(checks, streamChecks(b)...)
}

type families map[string]*dto.MetricFamily

func scrape(ctx context.Context, url string) (families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, cli.BadInput(fmt.Errorf("--metrics %q: %w", url, err))
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w (is vigil run up? see --metrics)", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading %s: HTTP %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return mfs, nil
}

func gauges(f families, name string) []float64 {
	var v []float64
	if mf := f[name]; mf != nil {
		for _, m := range mf.Metric {
			v = append(v, m.GetGauge().GetValue())
		}
	}
	return v
}

func gpuUtilCheck(f families) Check {
	c := Check{Name: "GPU utilisation", Threshold: "> 70 %, not < 30 %"}
	u := gauges(f, "vigil_gpu_utilization_ratio")
	if len(u) == 0 {
		c.Advice = "no NVIDIA GPU metrics (no driver, or inference on the CPU)"
		return c
	}
	mean := 0.0
	for _, x := range u {
		mean += x / float64(len(u))
	}
	c.Measured = fmt.Sprintf("%.0f %%", 100*mean)
	c.OK = mean > gpuUtilHigh
	if mean < gpuUtilLow {
		c.Advice = "the GPU idles: raise the batch size (preferred_batch_sizes) or put more streams on it"
	} else if !c.OK {
		c.Advice = "raise the batch size or the dynamic-batching delay so each launch does more work"
	}
	return c
}

func gpuMemCheck(f families) Check {
	c := Check{Name: "GPU memory use", Threshold: "< 80 %"}
	used, total := gauges(f, "vigil_gpu_memory_used_bytes"), gauges(f, "vigil_gpu_memory_total_bytes")
	if len(used) == 0 || len(used) != len(total) {
		c.Advice = "no NVIDIA GPU metrics"
		return c
	}
	worst := 0.0
	for i := range used {
		if total[i] > 0 {
			worst = math.Max(worst, used[i]/total[i])
		}
	}
	c.Measured = fmt.Sprintf("%.0f %%", 100*worst)
	c.OK = worst < gpuMemMax
	c.Advice = "lower the batch size or quantise the model (FP16/INT8) to shrink engines and activations"
	return c
}

// stageDelta returns the histogram buckets (upper bound -> cumulative
// count), sum and count of vigil_stage_latency_seconds for one stage,
// summed over streams, between two scrapes.
func stageDelta(a, b families, stage string) (map[float64]float64, float64, float64) {
	buckets := map[float64]float64{}
	var sum, count float64
	add := func(f families, sign float64) {
		mf := f["vigil_stage_latency_seconds"]
		if mf == nil {
			return
		}
		for _, m := range mf.Metric {
			match := false
			for _, l := range m.Label {
				if l.GetName() == "stage" && l.GetValue() == stage {
					match = true
				}
			}
			if !match {
				continue
			}
			h := m.GetHistogram()
			sum += sign * h.GetSampleSum()
			count += sign * float64(h.GetSampleCount())
			for _, bk := range h.Bucket {
				buckets[bk.GetUpperBound()] += sign * float64(bk.GetCumulativeCount())
			}
		}
	}
	add(b, 1)
	add(a, -1)
	return buckets, sum, count
}

// quantile estimates q from cumulative buckets as Prometheus'
// histogram_quantile does (linear within the bucket).
func quantile(q float64, buckets map[float64]float64, count float64) float64 {
	bounds := make([]float64, 0, len(buckets))
	for ub := range buckets {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	rank := q * count
	prevB, prevC := 0.0, 0.0
	for _, ub := range bounds {
		c := buckets[ub]
		if c >= rank {
			if math.IsInf(ub, 1) {
				return prevB
			}
			if c == prevC {
				return ub
			}
			return prevB + (ub-prevB)*(rank-prevC)/(c-prevC)
		}
		prevB, prevC = ub, c
	}
	return prevB
}

func tailCheck(a, b families) Check {
	c := Check{Name: "engine time tail (P99/mean)", Threshold: "< 3x"}
	buckets, sum, count := stageDelta(a, b, "infer")
	if count < 20 {
		c.Advice = "too few inferences in the window"
		return c
	}
	mean := sum / count
	p99 := quantile(0.99, buckets, count)
	ratio := p99 / mean
	c.Measured = fmt.Sprintf("%.1fx (%.1f/%.1f ms)", ratio, 1e3*p99, 1e3*mean)
	c.OK = ratio < tailToMean
	if gpuEngineRan(a, b) {
		c.Advice = "operator fusion / fixed shapes with CUDA graphs (infer.cuda_graph), and fewer engines competing for the same GPU"
	} else {
		// The CPU engine: CUDA graphs and GPU kernels do not apply; its
		// tail comes from threads competing for the cores.
		c.Advice = "fewer engines and decoders competing for the same cores: fewer streams, fewer infer.intra_op_threads, or a lighter model"
	}
	return c
}

// gpuEngineRan reports whether the GPU engine timed any batch between the
// two scrapes (vigil_gpu_batch_stage_seconds grew); without it inference
// ran on the CPU.
func gpuEngineRan(a, b families) bool {
	for _, sec := range gpuStageSums(a, b) {
		if sec > 0 {
			return true
		}
	}
	return false
}

func queueCheck(a, b families) Check {
	c := Check{Name: "queue delay (mean)", Threshold: "< 5 ms"}
	_, sum, count := stageDelta(a, b, "queue")
	if count < 1 {
		c.Advice = "no frame processed in the window"
		return c
	}
	mean := time.Duration(sum / count * float64(time.Second))
	c.Measured = fmt.Sprintf("%.2f ms", float64(mean)/1e6)
	c.OK = mean < queueDelayMax
	c.Advice = "serve fewer streams per engine (or a lighter model), or shorten pipeline.max_queue_delay_us when batching"
	return c
}

// counterTotal sums every series of a counter family.
func counterTotal(f families, name string) float64 {
	sum := 0.0
	if mf := f[name]; mf != nil {
		for _, m := range mf.Metric {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// dropCheck is the outcome the other lines explain: the share of the
// frames vigil meant to process (decoded, less those skipped by policy)
// that were lost in the window (20 % is where the VigilHighDropRatio alert
// starts). Frames skipped by policy (fps_limit, degraded rate, connect
// catch-up) are not lost: they are shown beside it and never warn.
func dropCheck(a, b families) Check {
	c := Check{Name: "frames dropped", Threshold: "< 20 % of admitted"}
	delta := func(name string) float64 { return counterTotal(b, name) - counterTotal(a, name) }
	decoded, dropped, skipped := delta("vigil_frames_decoded_total"), delta("vigil_frames_dropped_total"), delta("vigil_frames_skipped_total")
	if decoded <= 0 {
		c.Advice = "no frame decoded in the window: are the streams up? (vigil streams ls)"
		return c
	}
	admitted := decoded - skipped
	ratio := 0.0
	if admitted > 0 {
		ratio = dropped / admitted
	}
	c.Measured = fmt.Sprintf("%.0f %%", 100*ratio)
	if skipped > 0 {
		c.Measured += fmt.Sprintf(" (%.0f %% skipped by policy)", 100*skipped/decoded)
	}
	c.OK = ratio < 0.2
	c.Advice = "see vigil_frames_dropped_total by reason: deadline/queue_full mean too little engine capacity for the load (fewer streams, a lighter model, fps_limit, a larger budget)"
	return c
}

// gpuStageSums returns, per stage label of vigil_gpu_batch_stage_seconds
// (h2d, preprocess, infer, d2h), the seconds added between two scrapes,
// over every model and batch size.
func gpuStageSums(a, b families) map[string]float64 {
	out := map[string]float64{}
	add := func(f families, sign float64) {
		mf := f["vigil_gpu_batch_stage_seconds"]
		if mf == nil {
			return
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "stage" {
					out[l.GetValue()] += sign * m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	add(b, 1)
	add(a, -1)
	return out
}

// copyCheck: the GPU engine's host↔device copies (H2D of frames, D2H of
// outputs) against its whole GPU time per batch, from the CUDA-event
// timings in vigil_gpu_batch_stage_seconds over the window.
func copyCheck(a, b families) Check {
	c := Check{Name: "host-device copy share", Threshold: "< 15 % of batch time"}
	st := gpuStageSums(a, b)
	copies := st["h2d"] + st["d2h"]
	total := copies + st["preprocess"] + st["infer"]
	if total <= 0 {
		c.Advice = "no GPU batch timings: the engines run on the CPU (no NVIDIA driver or infer.provider: cpu), or no frame ran in the window"
		return c
	}
	share := copies / total
	c.Measured = fmt.Sprintf("%.1f %%", 100*share)
	c.OK = share < copyShareMax
	c.Advice = "larger batches amortise less here: copies scale with frames; decode on the GPU (NVDEC) to drop the frame upload, or use a model with smaller outputs"
	return c
}

// natsCheck: vigil's NATS connection at the second scrape, and what it
// could not deliver or had to reconnect for in the window.
func natsCheck(a, b families) Check {
	c := Check{Name: "NATS connection", Threshold: "connected, 0 undelivered"}
	up := gauges(b, "vigil_nats_connected")
	if len(up) == 0 {
		c.Advice = "no vigil_nats_connected: not a vigil run, or one older than this doctor"
		return c
	}
	undelivered := counterTotal(b, "vigil_nats_undelivered_messages_total") - counterTotal(a, "vigil_nats_undelivered_messages_total")
	reconnects := counterTotal(b, "vigil_nats_reconnects_total") - counterTotal(a, "vigil_nats_reconnects_total")
	if up[0] != 1 {
		held, bytes, limit := sum(gauges(b, "vigil_nats_reconnect_buffer_messages")), sum(gauges(b, "vigil_nats_reconnect_buffer_bytes")), sum(gauges(b, "vigil_nats_reconnect_buffer_limit_bytes"))
		c.Measured = fmt.Sprintf("down, %.0f held (%s of %s)", held, cli.HumanBytes(int(bytes)), cli.HumanBytes(int(limit)))
		if undelivered > 0 {
			c.Measured += fmt.Sprintf(", %.0f undelivered", undelivered)
		}
		c.Advice = "vigil cannot reach NATS (nats.url): detections, events and alerts are held in the client's reconnect buffer and sent when it is back, lost if it fills (vigil_nats_undelivered_messages_total, reason buffer_full) or vigil stops first; the registry cannot be changed meanwhile. Check the NATS server and the network to it"
		return c
	}
	c.Measured = "connected"
	switch {
	case undelivered > 0:
		c.Measured = fmt.Sprintf("connected, %.0f undelivered", undelivered)
		c.Advice = "messages were lost in the window: see vigil_nats_undelivered_messages_total by reason (buffer_full: an outage outlasted the reconnect buffer)"
	case reconnects > 0:
		c.Measured = fmt.Sprintf("connected, %.0f reconnects", reconnects)
		c.Advice = "the connection to NATS dropped in the window: messages published meanwhile were held and sent on reconnect; check the server's and the network's stability"
	default:
		c.OK = true
	}
	return c
}

func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

// streamAdvice is the direction to take for a stream in each state but
// running; %[1]s is the stream id.
var streamAdvice = map[string]string{
	"starting": "waiting for its first frame (up to open_timeout, 60 s by default); if it stays, the source is slow or unreachable: vigil streams get %[1]s",
	"reconnecting": "vigil cannot read its source (camera off or unreachable, wrong URL or credentials, a stall) and retries with backoff up to 30 s: " +
		"vigil streams get %[1]s shows the error",
	"failed": "it will not retry (a file's error, a model that does not load, a panic): vigil streams get %[1]s shows the cause; " +
		"fix it, then change the stream (vigil streams set %[1]s) or restart vigil",
	"stopped": "registered and enabled but not running: usually a file that reached its end (loop: true replays it; vigil streams rm %[1]s if it is done); vigil streams get %[1]s says why",
	"":        "not running (vigil_stream_up 0): vigil streams get %[1]s says why",
}

// streamChecks: how many streams run, then one line per stream that does
// not, from vigil_stream_state (or, for a vigil without it,
// vigil_stream_up) at the second scrape.
func streamChecks(f families) []Check {
	state := map[string]string{} // stream -> state; "" when only up is known
	if mf := f["vigil_stream_up"]; mf != nil {
		for _, m := range mf.Metric {
			st := ""
			if m.GetGauge().GetValue() == 1 {
				st = "running"
			}
			state[label(m, "stream")] = st
		}
	}
	if mf := f["vigil_stream_state"]; mf != nil {
		for _, m := range mf.Metric {
			if m.GetGauge().GetValue() == 1 {
				state[label(m, "stream")] = label(m, "state")
			}
		}
	}
	total := Check{Name: "streams running", Threshold: "all"}
	if len(state) == 0 {
		total.Advice = "no stream: vigil streams add, or streams in the config"
		return []Check{total}
	}
	ids := make([]string, 0, len(state))
	for id := range state {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var down []Check
	for _, id := range ids {
		st := state[id]
		if st == "running" {
			continue
		}
		measured := st
		if st == "" {
			measured = "not running"
		}
		advice, ok := streamAdvice[st]
		if !ok {
			advice = streamAdvice[""]
		}
		down = append(down, Check{Name: "stream " + id, Measured: measured, Threshold: "running", Advice: fmt.Sprintf(advice, id)})
	}
	total.Measured = fmt.Sprintf("%d of %d", len(ids)-len(down), len(ids))
	total.OK = len(down) == 0
	total.Advice = "see the lines below"
	return append([]Check{total}, down...)
}

// label returns the value of a series' label name ("" if absent).
func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
