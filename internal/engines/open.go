package engines

import (
	"errors"
	"os"
	"strconv"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/infer/gpu"
	"github.com/vigil-video/vigil/infer/ortdev"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/quantize"
)

// OpenRuntime loads ONNX Runtime from infer.ort_library, for the CPU
// engine (infer) and the GPU engine's providers (infer/ortdev), once per
// process. Errors: a library that does not load (*cli.BadInputError).
func OpenRuntime(c *config.Config) error {
	if err := infer.InitRuntime(c.Infer.ORTLibrary); err != nil {
		return cli.BadInput(err)
	}
	if err := ortdev.Init(c.Infer.ORTLibrary); err != nil {
		return err
	}
	return nil
}

// logEngine is the one line per engine: which execution provider it got
// and why.
func logEngine(log *zap.Logger, eng Detector, choice string, dev int) {
	w, h := eng.InputSize()
	fields := []zap.Field{zap.String("model", eng.Model()), zap.String("adapter", eng.Adapter()),
		zap.Int("input_width", w), zap.Int("input_height", h), zap.Int("batch", eng.Batch())}
	if _, ok := eng.(*gpu.Engine); ok {
		fields = append(fields, zap.Int("device", dev))
	}
	if c, ok := eng.(interface{ Chosen() string }); ok {
		fields = append(fields, zap.String("format", c.Chosen()))
	}
	log.Info("model loaded: "+choice, fields...)
}

// The GPU engine's defaults where the config leaves them unset. On the
// H200 on 2026-12-01 (docs/performance.md, "Detector throughput";
// docs/h200-runs/2026-12-01-acceptance) YOLOX-Nano model-only at batch 64
// ran 6,521 images/s in fp32 with one instance, 7,340 with two, and
// 9,950 in fp16 with two (10,233 at batch 128): fp16 and two instances
// are the defaults. fp16 checks its detections against fp32 at start and
// falls back to fp32 with one line when they disagree.
const (
	DefaultPrecision = gpu.PrecisionFP16
	DefaultInstances = 2
)

// GPUSettings are the GPU engine's precision, instances and CUDA provider
// options with the defaults filled in (GPUSettingsOf).
type GPUSettings struct {
	Precision      gpu.Precision
	Instances      int
	NHWC           bool
	ConvAlgoSearch string
}

// GPUSettingsOf reads infer.precision (the deprecated infer.tf32 as
// precision tf32), infer.instances, infer.prefer_nhwc and
// infer.cudnn_conv_algo_search from a validated config, defaults filled in.
func GPUSettingsOf(ic config.Infer) GPUSettings {
	st := GPUSettings{Precision: gpu.Precision(ic.Precision), Instances: ic.Instances, NHWC: ic.PreferNHWC}
	if st.Precision == "" {
		st.Precision = DefaultPrecision
		if ic.TF32 {
			st.Precision = gpu.PrecisionTF32
		}
	}
	if st.Instances == 0 {
		st.Instances = DefaultInstances
	}
	st.ConvAlgoSearch, _ = ortdev.ParseConvAlgoSearch(ic.CuDNNConvAlgoSearch) // validated
	return st
}

// GraphsWithDecode reports whether CUDA graphs may be on with decoding
// configured as d: yes unless FFmpeg's NVDEC hwaccel may decode
// (decode.hwaccel other than none with decode.nvdec ffmpeg). ONNX Runtime
// captures a session's graph in global capture mode during the engine's
// warm-up, and CUDA calls on FFmpeg's decoder threads then invalidate the
// capture (seen on the H200: cudaErrorStreamCaptureInvalidated, then
// illegal memory accesses); vigil's own NVDEC sessions (decode.nvdec
// direct) hold cuda.Shared around their CUDA calls, so captures wait for
// them and they for captures.
func GraphsWithDecode(d config.Decode) bool {
	return d.HWAccel == "none" || d.NVDECMode == "direct"
}

// GPUChain is the GPU part of the provider chain infer.provider asks for
// (auto and tensorrt: tensorrt then cuda; cuda: cuda; cpu: none).
func GPUChain(p string) []ortdev.Provider {
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
func (e *Pool) open(m infer.Model, pool string, dev int, sc *decode.Scaler) (Detector, string, error) {
	ic := e.cfg.Infer
	var gpuErr error
	if chain := GPUChain(ic.Provider); chain != nil && ic.Precision != "int8" {
		trt := ortdev.TensorRTOptions{FP16: ic.TensorRT.FP16, INT8: ic.TensorRT.INT8,
			INT8CalibrationTable: ic.TensorRT.INT8CalibrationTable, EngineCacheDir: ic.TensorRT.EngineCacheDir,
			TimingCacheDir: ic.TensorRT.TimingCacheDir}
		if trt.TimingCacheDir == "" {
			trt.TimingCacheDir = trt.EngineCacheDir
		}
		graph := (ic.CUDAGraph == nil || *ic.CUDAGraph) && GraphsWithDecode(e.cfg.Decode)
		// A capture beside running direct NVDEC sessions failed on the
		// H200 (decode.DirectNVDECSessions): an engine opened while they
		// decode (a model first used after streams started) runs eagerly.
		besideNVDEC := graph && decode.DirectNVDECSessions() > 0
		if besideNVDEC {
			graph = false
		}
		st := GPUSettingsOf(ic)
		g, err := gpu.Open(gpu.Options{Name: m.Name, Path: m.File, Spec: m.Spec, Device: dev, Providers: chain, CUDAGraph: graph, Precision: st.Precision,
			CacheDir: assets.CacheDir(), NHWC: st.NHWC, ConvAlgoSearch: st.ConvAlgoSearch, Instances: st.Instances,
			TensorRT: trt, Slots: ic.Slots, Resizer: sc, OnBatch: e.observeGPU(m.Name)})
		if err == nil {
			choice := g.Choice()
			switch {
			case besideNVDEC:
				choice += "; CUDA graphs off: the engine opened while direct NVDEC sessions decoded, and capturing beside them fails (docs/gpu.md)"
			case !graph && (ic.CUDAGraph == nil || *ic.CUDAGraph):
				choice += "; CUDA graphs off: they conflict with FFmpeg's NVDEC hwaccel (decode.nvdec: ffmpeg)"
			}
			return g, choice, nil
		}
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, infer.ErrModelMismatch) {
			return nil, "", cli.BadInput(err)
		}
		gpuErr = err
	}
	o := infer.Options{
		Name: m.Name, Path: m.File, Spec: m.Spec, IntraOpThreads: ic.IntraOpThreads, Resizer: sc,
		// A pool's instance serves few streams and idles between frames.
		NoSpin: pool != "",
	}
	eng, err := infer.Open(o)
	if err != nil {
		return nil, "", cli.BadInput(err)
	}
	choice := "execution provider cpu (infer.provider: cpu)"
	if gpuErr != nil {
		choice = "execution provider cpu (GPU engine unavailable: " + cli.OneLine(gpuErr.Error()) + ")"
	}
	if ic.Precision == "int8" {
		choice = "execution provider cpu (infer.precision: int8)"
		q, note, err := quantize.Open(o, eng, assets.CacheDir(), m.Name)
		if err != nil {
			note += ": " + cli.OneLine(err.Error())
		}
		return q, choice + ", " + note, nil
	}
	return eng, choice, nil
}

// observeGPU returns the GPU engine's per-batch hook: stage histograms.
func (e *Pool) observeGPU(model string) func(gpu.BatchTimes) {
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
