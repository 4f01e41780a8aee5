// Package config loads vigil's YAML configuration: strict decoding (an
// unknown key is an error naming the file, line and key), defaults in code,
// and one Validate that reports every problem with the field it concerns.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/allowlist"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/internal/registry"
)

// Config is the whole file. See configs/demo.yaml and docs/config.md.
type Config struct {
	// DataDir holds vigil's state: the embedded NATS server's JetStream
	// store (the stream registry). Default ~/.local/share/vigil.
	DataDir  string   `yaml:"data_dir"`
	API      API      `yaml:"api"`
	Log      Log      `yaml:"log"`
	Metrics  Metrics  `yaml:"metrics"`
	NATS     NATS     `yaml:"nats"`
	Infer    Infer    `yaml:"infer"`
	Decode   Decode   `yaml:"decode"`
	Pipeline Pipeline `yaml:"pipeline"`
	// Models adds named models to (or overrides) infer.BuiltinModels.
	Models  []Model  `yaml:"models"`
	Streams []Stream `yaml:"streams"`
}

// API configures the REST API (/v1/streams).
type API struct {
	// Listen is host:port (default 127.0.0.1:8080); "off" disables the API.
	Listen string `yaml:"listen"`
	// TokenFile holds a bearer token; when set, every call needs
	// "Authorization: Bearer <token>".
	TokenFile string `yaml:"token_file"`
	// TLSCert and TLSKey (PEM files) serve the API over HTTPS.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// Insecure lets the API listen on an address other than loopback
	// without TokenFile (refused otherwise), with a WARN at every start.
	Insecure bool `yaml:"insecure"`
	// AllowedSources restricts the URLs of streams, however they are
	// registered (this file, the API, the CLI) and when a stored stream
	// starts: entries such as rtsp://10.0.0.0/8, rtsps://cam-*.site.local,
	// http://* or file:///srv/video/ (see package allowlist). Empty (the
	// default): any URL.
	AllowedSources []string `yaml:"allowed_sources"`
}

// Log configures zap.
type Log struct {
	// Level: debug, info (default), warn or error.
	Level string `yaml:"level"`
	// Format: console (default) or json.
	Format string `yaml:"format"`
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Listen is the host:port serving /metrics (default 127.0.0.1:9090);
	// "off" disables it.
	Listen string `yaml:"listen"`
}

// NATS configures where detections go.
type NATS struct {
	// URL of an external server or cluster (comma-separated). Empty (the
	// default) starts an embedded server instead.
	URL string `yaml:"url"`
	// Listen is the embedded server's host:port (default 127.0.0.1:4222;
	// port 0 picks a free one). Ignored when URL is set.
	Listen string `yaml:"listen"`
	// SubjectPrefix is the first subject token (default "vigil").
	SubjectPrefix string `yaml:"subject_prefix"`
	// TokenFile holds a token for NATS: the embedded server requires it from
	// every client, and vigil presents it to an external server.
	TokenFile string `yaml:"token_file"`
	// Insecure lets the embedded server listen on an address other than
	// loopback without TokenFile (refused otherwise), with a WARN at every
	// start.
	Insecure bool `yaml:"insecure"`
	// Bucket is the JetStream key-value bucket of the stream registry
	// (default vigil_streams); Replicas its replica count on a cluster
	// (default 1).
	Bucket   string `yaml:"bucket"`
	Replicas int    `yaml:"replicas"`
}

// Infer configures ONNX Runtime.
type Infer struct {
	// ORTLibrary is libonnxruntime.so (default: assets.ORTLibrary()).
	ORTLibrary string `yaml:"ort_library"`
	// ModelsDir resolves relative model files (default: assets.ModelsDir()).
	ModelsDir string `yaml:"models_dir"`
	// IntraOpThreads per engine; 0 lets ONNX Runtime choose.
	IntraOpThreads int `yaml:"intra_op_threads"`
	// BatchSizes are the engine instances per model for cross-stream
	// batching, e.g. [1, 4, 8] (default [1]: no batching). Sizes above 1
	// need the model's fixed-batch copies <model>.b<N>.onnx beside it
	// (make setup makes 4, 8 and 32 for BlazeFace, and for YOLOX-Nano when
	// yolox_nano.onnx is in the models directory).
	BatchSizes []int `yaml:"batch_sizes"`
	// Provider is the preferred ONNX Runtime execution provider: auto (the
	// default: tensorrt, then cuda, then cpu), tensorrt, cuda or cpu. Each
	// falls back along tensorrt → cuda → cpu and logs one line saying which
	// provider each model got and why.
	Provider string `yaml:"provider"`
	// Device is the CUDA device ordinal of the GPU engine (default 0) for
	// one-shot tools (detect, bench) and, when Devices is empty and no GPU
	// is visible, for vigil run.
	Device int `yaml:"device"`
	// Devices are the CUDA device ordinals vigil run places streams on,
	// fewest streams first, sticky, rebalanced when streams are removed;
	// each has its own engines, CUDA streams and pinned slots. Empty (the
	// default): every visible GPU.
	Devices []int `yaml:"devices"`
	// CUDAGraph replays each GPU run as a CUDA graph (default true).
	CUDAGraph *bool `yaml:"cuda_graph"`
	// TF32 lets the CUDA provider use TF32 tensor-core maths (use_tf32;
	// default false), which can make convolutions faster on Ampere and later
	// (not measured against fp32 here, docs/performance.md), with inputs
	// rounded to a 10-bit mantissa, so detections drift slightly from the
	// CPU engine's.
	TF32 bool `yaml:"tf32"`
	// Slots is the GPU engine's pinned staging slots, i.e. batches in
	// flight per engine (default 2: double buffering).
	Slots int `yaml:"slots"`
	// TensorRT settings for the tensorrt provider.
	TensorRT TensorRT `yaml:"tensorrt"`
}

// Decode configures decoding for every stream.
type Decode struct {
	// HWAccel: none (the default: FFmpeg on the CPU), auto (NVDEC when the
	// codec and GPU allow it, else the CPU with one log line per stream)
	// or cuda (NVDEC required). NVDEC frames stay in GPU memory for the
	// GPU engine; on the GPU device infer.device. hybrid uses both NVDEC
	// and the CPU cores as decoders: each stream goes to its GPU's NVDEC or
	// to the CPU, whichever would be less loaded relative to its capacity
	// (NVDECFPS, CPUFPS).
	HWAccel string `yaml:"hwaccel"`
	// NVDECFPS and CPUFPS are the decode capacities hybrid decoding
	// places streams by, in frames per second of the streams vigil serves:
	// one GPU's NVDEC engines, and all the CPU cores. Measure them with
	// `vigil bench --streams` under decode.hwaccel cuda and none (the
	// processed fps of the best point); give the CPU less than its
	// CPU-only figure, since under hybrid decoding the cores also serve
	// the NVDEC streams and the engine. 0 takes defaults measured on an
	// H200 machine with 16 cores for 1080p30 H.264 at 6 Mbit/s: 2150 for
	// NVDEC and 62 per core for the CPU (docs/performance.md).
	NVDECFPS float64 `yaml:"nvdec_fps"`
	CPUFPS   float64 `yaml:"cpu_fps"`
	// HWSurfaces bounds the NVDEC frames per stream held downstream
	// (queued or in a batch; default 8): decoded surfaces are copied into a
	// per-stream pool of device frames of this size, and the decoder waits
	// when all are out.
	HWSurfaces int `yaml:"hw_surfaces"`
}

// TensorRT configures ONNX Runtime's TensorRT execution provider (see
// docs/gpu.md). Profiles are fixed to each engine's batch and input size.
type TensorRT struct {
	FP16 bool `yaml:"fp16"`
	INT8 bool `yaml:"int8"`
	// INT8CalibrationTable is the calibration table file (needed by int8).
	INT8CalibrationTable string `yaml:"int8_calibration_table"`
	// EngineCacheDir keeps built engines (empty, the default: no cache;
	// every start builds them again).
	EngineCacheDir string `yaml:"engine_cache_dir"`
	// TimingCacheDir keeps TensorRT's layer timings (default: EngineCacheDir).
	TimingCacheDir string `yaml:"timing_cache_dir"`
}

// Pipeline holds defaults for every stream.
type Pipeline struct {
	// QueueSize is the bounded queue before the engine, in frames (default 4).
	QueueSize int `yaml:"queue_size"`
	// ProgressInterval between progress lines on stderr (default 5s; 0s
	// disables them).
	ProgressInterval *Duration `yaml:"progress_interval"`
	// DefaultModel for streams that name none (default "blazeface").
	DefaultModel string `yaml:"default_model"`
	// BudgetMS is the default per-frame latency budget in ms, arrival to
	// publish (default 200; 0: no budget, no deadline drops).
	BudgetMS *int `yaml:"budget_ms"`
	// Degradation: when the total queue depth stays above DegradeDepth
	// frames (default 10) for DegradeAfter (3s), priority-low streams run at
	// DegradedFPS (2) until it stays at or below half of it for
	// RestoreAfter (10s).
	DegradeDepth int      `yaml:"degrade_depth"`
	DegradeAfter Duration `yaml:"degrade_after"`
	RestoreAfter Duration `yaml:"restore_after"`
	DegradedFPS  float64  `yaml:"degraded_fps"`
	// PreferredBatchSizes: a batch is dispatched at once when the largest
	// is reached (default: the largest of infer.batch_sizes).
	PreferredBatchSizes []int `yaml:"preferred_batch_sizes"`
	// MaxQueueDelayUS is the longest a frame waits for its batch to fill,
	// in µs (default 2000).
	MaxQueueDelayUS int `yaml:"max_queue_delay_us"`
	// AlertInterval is the least time between two alerts of one kind for
	// one stream on <prefix>.<id>.alerts (default 10s).
	AlertInterval Duration `yaml:"alert_interval"`
}

// Model is a named model.
type Model struct {
	Name string `yaml:"name"`
	// Path to the .onnx file, absolute or relative to infer.models_dir.
	Path string `yaml:"path"`
	// Adapter: blazeface, yolox, or empty to detect it from the model.
	Adapter        string  `yaml:"adapter"`
	ScoreThreshold float32 `yaml:"score_threshold"`
	IoUThreshold   float32 `yaml:"iou_threshold"`
}

// Stream is one camera or file.
type Stream struct {
	// ID: 1-64 characters of [A-Za-z0-9_-]; it becomes a NATS subject
	// token and a metric label.
	ID string `yaml:"id"`
	// URL: rtsp://, rtsps://, http(s)://, file:// or a path. ${VAR} is
	// expanded; ${VIGIL_CACHE_DIR} defaults to the asset cache.
	URL string `yaml:"url"`
	// Model: a model name or an .onnx path (default pipeline.default_model).
	Model string `yaml:"model"`
	// Transport for RTSP: tcp (default) or udp.
	Transport string `yaml:"transport"`
	// FPSLimit caps processed frames per second (0: none) with a token
	// bucket of FPSBurst frames (default 1).
	FPSLimit float64 `yaml:"fps_limit"`
	FPSBurst int     `yaml:"fps_burst"`
	// BudgetMS is the latency budget in ms (0: default).
	BudgetMS int `yaml:"budget_ms"`
	// Priority: high, normal (default) or low.
	Priority string `yaml:"priority"`
	// Enabled (default true) streams run; disabled ones are only stored.
	Enabled *bool `yaml:"enabled"`
	// Labels are free-form key/value pairs.
	Labels map[string]string `yaml:"labels"`
	// Realtime paces a file at its native rate; Loop restarts it.
	Realtime bool `yaml:"realtime"`
	Loop     bool `yaml:"loop"`
	// OpenTimeout bounds opening up to the first frame (default 60s);
	// StallTimeout bounds the wait for each packet after it (default 10s).
	OpenTimeout  Duration `yaml:"open_timeout"`
	StallTimeout Duration `yaml:"stall_timeout"`
	// QueueSize overrides pipeline.queue_size.
	QueueSize int `yaml:"queue_size"`
	// DecodeThreads is FFmpeg's thread count (0: FFmpeg chooses).
	DecodeThreads int `yaml:"decode_threads"`
}

// Duration is a time.Duration written as a Go duration string ("10s").
type Duration struct{ time.Duration }

// UnmarshalYAML parses "1.5s", "250ms" and so on.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (e.g. 10s, 500ms)", n.Line, s)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// DefaultBudgetMS is the default latency budget: 200 ms from the packet's
// arrival to the published message leaves room for a detector at 5–10 fps
// per camera on a busy CPU, and is far below the hundreds of ms at which
// unbounded queues are reported to end.
const DefaultBudgetMS = 200

func ptr[T any](v T) *T { return &v }

// Default returns the configuration used when a file sets nothing.
func Default() Config {
	five := Duration{5 * time.Second}
	return Config{
		DataDir: defaultDataDir(),
		API:     API{Listen: "127.0.0.1:8080"},
		Log:     Log{Level: "info", Format: "console"},
		Metrics: Metrics{Listen: "127.0.0.1:9090"},
		NATS:    NATS{Listen: "127.0.0.1:4222", SubjectPrefix: "vigil", Bucket: "vigil_streams", Replicas: 1},
		Infer: Infer{ORTLibrary: assets.ORTLibrary(), ModelsDir: assets.ModelsDir(), BatchSizes: []int{1},
			Provider: "auto", CUDAGraph: ptr(true), Slots: 2},
		Decode: Decode{HWAccel: "none", HWSurfaces: 8},
		Pipeline: Pipeline{QueueSize: 4, ProgressInterval: &five, DefaultModel: "blazeface", BudgetMS: ptr(DefaultBudgetMS),
			AlertInterval: Duration{10 * time.Second}, DegradeDepth: 10, DegradeAfter: Duration{3 * time.Second},
			RestoreAfter: Duration{10 * time.Second}, DegradedFPS: 2, MaxQueueDelayUS: 2000},
	}
}

// Load reads, decodes, defaults and validates the file at path.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes data (named name in errors) over Default(), expands
// environment variables in URLs and paths, fills stream defaults and
// validates. Errors name the file and the line or field.
func Parse(data []byte, name string) (Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: empty file
		return Config{}, fmt.Errorf("%s: %s", name, yamlError(err))
	}
	c.expand()
	c.fill()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

var (
	reUnknown = regexp.MustCompile(`line (\d+): field (\S+) not found in type config\.(\w+)`)
	sections  = map[string]string{
		"Config": "top level", "API": "api", "Log": "log", "Metrics": "metrics", "NATS": "nats", "Infer": "infer",
		"Pipeline": "pipeline", "Model": "models[]", "Stream": "streams[]", "TensorRT": "infer.tensorrt", "Decode": "decode",
	}
)

// yamlError rewrites yaml.v3's messages into one line that names the key
// and its section: `line 7: unknown key "bogus" in streams[]`.
func yamlError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		if m := reUnknown.FindStringSubmatch(e); m != nil {
			e = fmt.Sprintf("line %s: unknown key %q in %s", m[1], m[2], sections[m[3]])
		}
		msgs = append(msgs, e)
	}
	return strings.Join(msgs, "; ")
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "vigil")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "vigil")
	}
	return filepath.Join(os.TempDir(), "vigil-data")
}

func (c *Config) expand() {
	c.DataDir = assets.ExpandEnv(c.DataDir)
	c.API.TokenFile = assets.ExpandEnv(c.API.TokenFile)
	c.API.TLSCert = assets.ExpandEnv(c.API.TLSCert)
	c.API.TLSKey = assets.ExpandEnv(c.API.TLSKey)
	c.NATS.TokenFile = assets.ExpandEnv(c.NATS.TokenFile)
	for i := range c.API.AllowedSources {
		c.API.AllowedSources[i] = assets.ExpandEnv(c.API.AllowedSources[i])
	}
	c.Infer.ORTLibrary = assets.ExpandEnv(c.Infer.ORTLibrary)
	c.Infer.ModelsDir = assets.ExpandEnv(c.Infer.ModelsDir)
	for i := range c.Models {
		c.Models[i].Path = assets.ExpandEnv(c.Models[i].Path)
	}
	for i := range c.Streams {
		c.Streams[i].URL = assets.ExpandEnv(c.Streams[i].URL)
		c.Streams[i].Model = assets.ExpandEnv(c.Streams[i].Model)
	}
}

func (c *Config) fill() {
	for i := range c.Streams {
		s := &c.Streams[i]
		if s.Model == "" {
			s.Model = c.Pipeline.DefaultModel
		}
		if s.Transport == "" {
			s.Transport = "tcp"
		}
		if s.OpenTimeout.Duration == 0 {
			s.OpenTimeout.Duration = decode.DefaultOpenTimeout
		}
		if s.StallTimeout.Duration == 0 {
			s.StallTimeout.Duration = decode.DefaultStallTimeout
		}
		if s.QueueSize == 0 {
			s.QueueSize = c.Pipeline.QueueSize
		}
	}
}

// MaxQueueSize bounds queue_size: a queue is latency, and 1000 frames is
// over 30 s of a 30 fps camera.
const MaxQueueSize = 1000

// checkedHere are the stream fields Validate checks itself (reporting
// every problem), so the registry spec's first error on them is skipped.
var checkedHere = map[string]bool{"id": true, "url": true, "transport": true, "queue_size": true, "decode_threads": true}

var registryBucket = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate reports every problem, each prefixed by the field it concerns,
// joined with "; " so the message stays one line.
func (c *Config) Validate() error {
	var p problems
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "console", "json":
	default:
		p.add("log.format", "%q: want console or json", c.Log.Format)
	}
	if c.Metrics.Listen != "off" {
		if _, _, err := net.SplitHostPort(c.Metrics.Listen); err != nil {
			p.add("metrics.listen", "%q: want host:port or off", c.Metrics.Listen)
		}
	}
	if c.NATS.URL == "" {
		if _, _, err := net.SplitHostPort(c.NATS.Listen); err != nil {
			p.add("nats.listen", "%q: want host:port", c.NATS.Listen)
		}
	}
	if c.API.Listen != "off" {
		if _, _, err := net.SplitHostPort(c.API.Listen); err != nil {
			p.add("api.listen", "%q: want host:port or off", c.API.Listen)
		}
	}
	c.exposure(&p)
	sources, bad := allowlist.Parse(c.API.AllowedSources)
	for _, e := range bad {
		p.add(fmt.Sprintf("api.allowed_sources[%d]", e.Index), "%v", e)
	}
	if (c.API.TLSCert == "") != (c.API.TLSKey == "") {
		p.add("api.tls_cert", "tls_cert and tls_key go together")
	}
	for f, path := range map[string]string{"api.token_file": c.API.TokenFile, "api.tls_cert": c.API.TLSCert, "api.tls_key": c.API.TLSKey, "nats.token_file": c.NATS.TokenFile} {
		if path != "" {
			if _, err := os.Stat(path); err != nil {
				p.add(f, "%v", err)
			}
		}
	}
	for f, path := range map[string]string{"api.token_file": c.API.TokenFile, "nats.token_file": c.NATS.TokenFile} {
		if path != "" {
			if _, err := ReadToken(path); err != nil {
				p.add(f, "%v", err)
			}
		}
	}
	if c.DataDir == "" {
		p.add("data_dir", "is required")
	}
	if !registryBucket.MatchString(c.NATS.Bucket) {
		p.add("nats.bucket", "%q: want 1-64 characters of A-Z a-z 0-9 _ -", c.NATS.Bucket)
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		p.add("nats.replicas", "%d: want 1 to 5", c.NATS.Replicas)
	}
	if c.NATS.SubjectPrefix == "" || strings.ContainsAny(c.NATS.SubjectPrefix, " .*>\t") {
		p.add("nats.subject_prefix", "%q: want one subject token (no spaces, dots, * or >)", c.NATS.SubjectPrefix)
	}
	if c.Pipeline.QueueSize < 1 || c.Pipeline.QueueSize > MaxQueueSize {
		p.add("pipeline.queue_size", "%d: want 1 to %d", c.Pipeline.QueueSize, MaxQueueSize)
	}
	if len(c.Infer.BatchSizes) == 0 {
		p.add("infer.batch_sizes", "at least one size (1: no batching)")
	}
	for _, b := range c.Infer.BatchSizes {
		if b < 1 || b > 64 {
			p.add("infer.batch_sizes", "%d: want 1 to 64", b)
		}
	}
	if !slices.Contains([]string{"auto", "tensorrt", "cuda", "cpu"}, c.Infer.Provider) {
		p.add("infer.provider", "%q: want auto, tensorrt, cuda or cpu", c.Infer.Provider)
	}
	if !slices.Contains([]string{"none", "auto", "cuda", "hybrid"}, c.Decode.HWAccel) {
		p.add("decode.hwaccel", "%q: want auto, cuda, hybrid or none", c.Decode.HWAccel)
	}
	if !(c.Decode.NVDECFPS >= 0 && c.Decode.NVDECFPS < 1e7) { // also refuses NaN
		p.add("decode.nvdec_fps", "%v: want 0 (default) or a positive rate in frames per second", c.Decode.NVDECFPS)
	}
	if !(c.Decode.CPUFPS >= 0 && c.Decode.CPUFPS < 1e7) {
		p.add("decode.cpu_fps", "%v: want 0 (default) or a positive rate in frames per second", c.Decode.CPUFPS)
	}
	if c.Decode.HWSurfaces < 1 || c.Decode.HWSurfaces > 64 {
		p.add("decode.hw_surfaces", "%d: want 1 to 64", c.Decode.HWSurfaces)
	}
	if c.Infer.Device < 0 {
		p.add("infer.device", "%d: want a CUDA device ordinal, 0 or more", c.Infer.Device)
	}
	for i, d := range c.Infer.Devices {
		if d < 0 || slices.Contains(c.Infer.Devices[:i], d) {
			p.add("infer.devices", "%v: want distinct CUDA device ordinals, 0 or more", c.Infer.Devices)
			break
		}
	}
	if c.Infer.Slots < 1 || c.Infer.Slots > 16 {
		p.add("infer.slots", "%d: want 1 to 16", c.Infer.Slots)
	}
	if t := c.Infer.TensorRT; t.INT8 && t.INT8CalibrationTable == "" {
		p.add("infer.tensorrt.int8_calibration_table", "int8 needs a calibration table file")
	}
	for _, b := range c.Pipeline.PreferredBatchSizes {
		if !slices.Contains(c.Infer.BatchSizes, b) {
			p.add("pipeline.preferred_batch_sizes", "%d is not one of infer.batch_sizes %v", b, c.Infer.BatchSizes)
		}
	}
	if c.Pipeline.MaxQueueDelayUS < 1 || c.Pipeline.MaxQueueDelayUS > 1000000 {
		p.add("pipeline.max_queue_delay_us", "%d: want 1 to 1000000", c.Pipeline.MaxQueueDelayUS)
	}
	if c.Pipeline.DegradeDepth < 1 {
		p.add("pipeline.degrade_depth", "%d: want at least 1", c.Pipeline.DegradeDepth)
	}
	if c.Pipeline.DegradeAfter.Duration <= 0 {
		p.add("pipeline.degrade_after", "%s: must be positive", c.Pipeline.DegradeAfter)
	}
	if c.Pipeline.RestoreAfter.Duration <= 0 {
		p.add("pipeline.restore_after", "%s: must be positive", c.Pipeline.RestoreAfter)
	}
	if !(c.Pipeline.DegradedFPS > 0 && c.Pipeline.DegradedFPS <= 1000) { // also refuses NaN
		p.add("pipeline.degraded_fps", "%v: want more than 0, at most 1000", c.Pipeline.DegradedFPS)
	}
	if c.Pipeline.AlertInterval.Duration < 100*time.Millisecond {
		p.add("pipeline.alert_interval", "%s: want at least 100ms", c.Pipeline.AlertInterval)
	}
	if b := c.Pipeline.BudgetMS; b != nil && (*b < 0 || *b > 60000) {
		p.add("pipeline.budget_ms", "%d: want 0 (none) to 60000", *b)
	}
	if c.Infer.IntraOpThreads < 0 || c.Infer.IntraOpThreads > 256 {
		p.add("infer.intra_op_threads", "%d: want 0 (ONNX Runtime chooses) to 256", c.Infer.IntraOpThreads)
	}
	if c.NATS.URL != "" {
		// Split as the redaction does (a raw ',' in a password stays in
		// its URL), so that no part of a password is shown on its own.
		for _, u := range redact.SplitURLs(c.NATS.URL) {
			scheme, _, ok := strings.Cut(u, "://")
			switch {
			case !ok || (scheme != "nats" && scheme != "tls" && scheme != "ws" && scheme != "wss"):
				p.add("nats.url", "%q: want nats://, tls://, ws:// or wss:// URLs, comma-separated", redact.URL(u))
			case strings.Contains(u, ","):
				p.add("nats.url", "%q: a ',' inside one URL; the list is split at every ',' (percent-encode it in a password: %%2C)", redact.URL(u))
			}
		}
	}
	if c.Pipeline.ProgressInterval != nil && c.Pipeline.ProgressInterval.Duration < 0 {
		p.add("pipeline.progress_interval", "must not be negative")
	}
	seenModel := map[string]bool{}
	for i, m := range c.Models {
		f := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "":
			p.add(f+".name", "is required")
		case seenModel[m.Name]:
			p.add(f+".name", "%q is defined twice", m.Name)
		}
		seenModel[m.Name] = true
		if m.Path == "" {
			p.add(f+".path", "is required")
		}
		if m.Adapter != "" {
			if _, err := infer.NewAdapter(m.Adapter, 0, 0); err != nil {
				p.add(f+".adapter", "%v", err)
			}
		}
		if m.ScoreThreshold < 0 || m.ScoreThreshold > 1 {
			p.add(f+".score_threshold", "%v: want 0..1", m.ScoreThreshold)
		}
		if m.IoUThreshold < 0 || m.IoUThreshold > 1 {
			p.add(f+".iou_threshold", "%v: want 0..1", m.IoUThreshold)
		}
	}
	seen := map[string]bool{}
	for i, s := range c.Streams {
		f := fmt.Sprintf("streams[%d]", i)
		switch {
		case !registry.ValidID(s.ID):
			p.add(f+".id", "%q: want 1-64 characters of A-Z a-z 0-9 _ -", s.ID)
		case seen[s.ID]:
			p.add(f+".id", "%q is used twice", s.ID)
		}
		seen[s.ID] = true
		if _, _, err := decode.ParseURL(s.URL); err != nil {
			p.add(f+".url", "%v", err)
		} else if err := sources.Check(s.URL); err != nil && len(bad) == 0 {
			p.add(f+".url", "%v", err)
		}
		if s.Transport != "tcp" && s.Transport != "udp" {
			p.add(f+".transport", "%q: want tcp or udp", s.Transport)
		}
		if s.QueueSize < 1 || s.QueueSize > MaxQueueSize {
			p.add(f+".queue_size", "%d: want 1 to %d", s.QueueSize, MaxQueueSize)
		}
		if s.OpenTimeout.Duration < 0 || s.StallTimeout.Duration < 0 {
			p.add(f, "timeouts must not be negative")
		}
		if s.DecodeThreads < 0 || s.DecodeThreads > 64 {
			p.add(f+".decode_threads", "%d: want 0 (FFmpeg chooses) to 64", s.DecodeThreads)
		}
		// Fields shared with the registry spec; those checked above are
		// not reported twice.
		sp := c.Spec(s)
		var fe *registry.FieldError
		if err := sp.Validate(nil); errors.As(err, &fe) && !checkedHere[fe.Field] {
			p.add(f+"."+fe.Field, "%s", fe.Msg)
		}
		if m, err := c.ResolveModel(s.Model); err != nil {
			p.add(f+".model", "%v", err)
		} else if _, err := os.Stat(m.File); err != nil {
			p.add(f+".model", "model file %s does not exist (%s)", m.File, missingModelHint(m.Name))
		}
	}
	return p.err()
}

// Loopback reports whether listen ("host:port") binds loopback interfaces
// only: host localhost (any case) or an IP address in 127.0.0.0/8 or ::1
// (IPv4-mapped too). An empty host, 0.0.0.0 and :: (every interface), any
// other address and any other name are not loopback: names other than
// localhost are not resolved.
func Loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// exposure adds a problem for each listener that would serve the network
// without a token: the API (registering a stream makes vigil connect to
// the URL it names) and the embedded NATS server (every detection, and the
// registry with the cameras' credentials). /metrics is only warned about
// by vigil run at start: it shows stream ids and rates, and
// has no token to set.
func (c *Config) exposure(p *problems) {
	if c.API.Listen != "off" && c.API.TokenFile == "" && !c.API.Insecure && !Loopback(c.API.Listen) {
		if _, _, err := net.SplitHostPort(c.API.Listen); err == nil {
			p.add("api.listen", "%q is not a loopback address and api.token_file is not set: anyone who can reach it could "+
				"register streams (vigil connects to any URL they name), change or delete them; set api.token_file, "+
				"listen on 127.0.0.1, or set api.insecure: true to serve it without a token anyway", c.API.Listen)
		}
	}
	if c.NATS.URL == "" && c.NATS.TokenFile == "" && !c.NATS.Insecure && !Loopback(c.NATS.Listen) {
		if _, _, err := net.SplitHostPort(c.NATS.Listen); err == nil {
			p.add("nats.listen", "%q is not a loopback address and nats.token_file is not set: anyone who can reach it could "+
				"read every detection, publish false ones, and read or rewrite the stream registry (camera credentials "+
				"included); set nats.token_file, listen on 127.0.0.1, or set nats.insecure: true to serve it without a "+
				"token anyway", c.NATS.Listen)
		}
	}
}

// CheckExposure returns the listener problems of Validate alone (an API or
// embedded NATS server on a non-loopback address without a token or
// insecure: true), for vigil run to check again before it listens.
func (c *Config) CheckExposure() error {
	var p problems
	c.exposure(&p)
	return p.err()
}

// Sources returns the parsed api.allowed_sources (nil: any URL), or an
// error naming the first bad entry. Validate reports them all.
func (c *Config) Sources() (*allowlist.List, error) {
	l, bad := allowlist.Parse(c.API.AllowedSources)
	if len(bad) > 0 {
		return nil, fmt.Errorf("api.allowed_sources[%d]: %w", bad[0].Index, bad[0])
	}
	return l, nil
}

// Spec converts a config stream into the registry's stream spec (config
// streams seed the registry).
func (c *Config) Spec(s Stream) registry.Spec {
	sp := registry.Spec{
		ID: s.ID, URL: s.URL, Model: s.Model, FPSLimit: s.FPSLimit, FPSBurst: s.FPSBurst, BudgetMS: s.BudgetMS,
		Priority: s.Priority, Enabled: s.Enabled, Transport: s.Transport, Labels: s.Labels,
		Realtime: s.Realtime, Loop: s.Loop, DecodeThreads: s.DecodeThreads,
	}
	if s.QueueSize != c.Pipeline.QueueSize { // only a per-stream override
		sp.QueueSize = s.QueueSize
	}
	if s.OpenTimeout.Duration > 0 {
		sp.OpenTimeout = s.OpenTimeout.String()
	}
	if s.StallTimeout.Duration > 0 {
		sp.StallTimeout = s.StallTimeout.String()
	}
	return sp
}

// Budget returns a stream's latency budget: its own budget_ms, else
// pipeline.budget_ms (0: none).
func (c *Config) Budget(streamBudgetMS int) time.Duration {
	ms := streamBudgetMS
	if ms == 0 && c.Pipeline.BudgetMS != nil {
		ms = *c.Pipeline.BudgetMS
	}
	return time.Duration(ms) * time.Millisecond
}

// CheckModel reports whether a model reference resolves to an existing
// file (for API validation).
func (c *Config) CheckModel(ref string) error {
	if ref == "" {
		ref = c.Pipeline.DefaultModel
	}
	m, err := c.ResolveModel(ref)
	if err != nil {
		return err
	}
	if _, err := os.Stat(m.File); err != nil {
		return fmt.Errorf("model file %s does not exist (%s)", m.File, missingModelHint(m.Name))
	}
	return nil
}

// ResolveModel turns a stream's model reference (a configured name, a
// built-in name or an .onnx path) into a Model whose File is a path.
func (c *Config) ResolveModel(ref string) (infer.Model, error) {
	for _, m := range c.Models {
		if m.Name == ref {
			return infer.Model{Name: m.Name, File: infer.Model{File: m.Path}.Resolve(c.Infer.ModelsDir),
				Adapter: m.Adapter, ScoreThreshold: m.ScoreThreshold, IoUThreshold: m.IoUThreshold}, nil
		}
	}
	if m, ok := infer.BuiltinModels[ref]; ok {
		m.File = m.Resolve(c.Infer.ModelsDir)
		return m, nil
	}
	if infer.IsPath(ref) {
		file := ref
		if !filepath.IsAbs(ref) {
			// Relative: the working directory first, then models_dir.
			if _, err := os.Stat(ref); err != nil {
				file = filepath.Join(c.Infer.ModelsDir, ref)
			}
		}
		return infer.Model{Name: strings.TrimSuffix(filepath.Base(ref), ".onnx"), File: file}, nil
	}
	return infer.Model{}, fmt.Errorf("unknown model %q (built-in: %s; or define it under models, or give an .onnx path)",
		ref, strings.Join(infer.BuiltinNames(), ", "))
}

// ReadToken reads a secret token file: surrounding whitespace is trimmed
// and an empty token is an error.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return t, nil
}

// missingModelHint says how to get a model file.
func missingModelHint(name string) string {
	if name == "yolox-nano" {
		return "make setup does not install it: no reachable registry has it; copy yolox_nano.onnx into infer.models_dir"
	}
	return "run `make setup`, or set infer.models_dir"
}

type problems []string

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, field+": "+fmt.Sprintf(format, args...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return errors.New(strings.Join(p, "; "))
}
