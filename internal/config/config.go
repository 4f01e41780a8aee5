// Package config loads vigil's YAML configuration: strict decoding (an
// unknown key is an error naming the file, line and key), defaults in code,
// and one Validate that reports every problem with the field it concerns.
//
// The config reference in docs/config.md and configs/example.yaml is
// generated from this package's structs (see Config).
package config

//go:generate go run ./gen

import (
	"bytes"
	"cmp"
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

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/allowlist"
	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/internal/registry"
)

// Config is the whole file. See configs/example.yaml (every key, generated
// from these structs) and docs/config.md.
//
// The config reference (docs/config.md's table and configs/example.yaml)
// is generated from the structs below by `go generate ./internal/config`,
// and a test fails when they drift: each key is a field's yaml tag, its
// meaning the field's doc comment (Go field names of the same struct
// become their keys), its default the value in Default() (FillStream for
// streams). A field without a doc comment shares the one above it, and
// the keys are documented together. Two optional tags serve the generator
// only: default:"..." replaces the default shown (a rule rather than a
// value, e.g. "every visible GPU"), and example:"..." is the value a list
// entry shows in the example (for required keys).
type Config struct {
	// DataDir holds vigil's state: the embedded NATS server's JetStream
	// store, which holds the stream registry ($XDG_DATA_HOME/vigil when
	// that is set).
	DataDir  string   `yaml:"data_dir"`
	API      API      `yaml:"api"`
	Log      Log      `yaml:"log"`
	Metrics  Metrics  `yaml:"metrics"`
	Node     Node     `yaml:"node"`
	NATS     NATS     `yaml:"nats"`
	Cluster  Cluster  `yaml:"cluster"`
	Infer    Infer    `yaml:"infer"`
	Decode   Decode   `yaml:"decode"`
	Pipeline Pipeline `yaml:"pipeline"`
	Live     Live     `yaml:"live"`
	// Models are named models, added to (or overriding) the built-in ones
	// (blazeface, blazeface-back, yolox-nano).
	Models []Model `yaml:"models"`
	// Streams are the cameras and files to serve. They seed the stream
	// registry (docs/api.md) the first time vigil sees them; after that
	// the registry's version runs.
	Streams []Stream `yaml:"streams"`

	// Source is the file Load read, as an absolute path ("" after Parse):
	// messages that say how to apply the file name it. Not a key.
	Source string `yaml:"-"`
	// Version is the version vigil was built as (vigil version's, set by
	// cmd/vigil), for this node's entry in the fleet (vigil nodes ls);
	// "": the module's build information. Not a key.
	Version string `yaml:"-"`
}

// API configures the REST API (/v1/streams, docs/api.md).
type API struct {
	// Listen is the host:port of the REST API (docs/api.md); off disables
	// it.
	Listen string `yaml:"listen"`
	// TokenFile is a file holding a bearer token; when set, every API call
	// needs `Authorization: Bearer <token>`.
	TokenFile string `yaml:"token_file"`
	// TLSCert and TLSKey are PEM files: with both, the API is served over
	// HTTPS (TLS 1.2+).
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
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is console or json.
	Format string `yaml:"format"`
}

// Live configures the pictures of the streams (docs/api.md, Pictures):
// snapshots, live views and event snapshots. Nothing is encoded while
// nobody watches.
type Live struct {
	// DefaultFPS is a live view's frame rate when the viewer asks for none
	// (?fps=), in frames per second.
	DefaultFPS float64 `yaml:"default_fps"`
	// MaxFPSPerViewer caps the rate a viewer may ask for, in frames per
	// second (a higher ?fps= is lowered to it).
	MaxFPSPerViewer float64 `yaml:"max_fps_per_viewer"`
	// MaxViewers caps the live views and snapshot requests served at once,
	// across streams (more are answered 503): with max_fps_per_viewer it
	// bounds the JPEG pictures encoded per second.
	MaxViewers int `yaml:"max_viewers"`
	// JPEGQuality is the quality of the JPEG pictures, 1-100.
	JPEGQuality int `yaml:"jpeg_quality"`
	// Encoders is the number of goroutines that draw and encode pictures
	// (live views and event snapshots together), each on a thread of its
	// own at nice 10 (Linux), so that the streams' threads get the cores
	// first: a picture takes a core for milliseconds (about 5 ms for
	// 720×528 here). Under more demand than they can encode, views get
	// fewer frames rather than slow the streams.
	Encoders int `yaml:"encoders"`
	// Snapshots configures event snapshots.
	Snapshots Snapshots `yaml:"snapshots"`
}

// Snapshots configures event snapshots: track_start, zone_enter,
// line_cross and loiter events carry a snapshot id, and the JPEG of the
// frame (the object highlighted) is stored in the JetStream object store
// bucket <nats.subject_prefix>_snapshots (docs/schema.md).
type Snapshots struct {
	// Enabled turns event snapshots on.
	Enabled *bool `yaml:"enabled"`
	// TTL is how long a snapshot is kept (the bucket's max age).
	TTL Duration `yaml:"ttl"`
	// MaxBytes caps the bucket's size in bytes; when it is full, new
	// snapshots are dropped (counted in
	// vigil_live_event_snapshots_total{outcome="store_error"}) until old
	// ones expire.
	MaxBytes int64 `yaml:"max_bytes"`
	// Queue bounds the frames waiting to be encoded; when it is full a
	// frame's snapshots are dropped (outcome queue_full) rather than
	// making the pipeline wait.
	Queue int `yaml:"queue"`
}

// SnapshotsBucket is the event snapshots' object store bucket,
// <nats.subject_prefix>_snapshots.
func (c *Config) SnapshotsBucket() string { return c.NATS.SubjectPrefix + "_snapshots" }

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Listen is the host:port serving /metrics and /healthz; off disables
	// them.
	Listen string `yaml:"listen"`
}

// NATS configures where detections go.
type NATS struct {
	// URL is an external NATS server, or a comma-separated cluster (nats://,
	// tls://, ws:// or wss://); empty starts the embedded server.
	URL string `yaml:"url"`
	// Listen is the embedded server's host:port (port 0: a free port).
	// Ignored when URL is set.
	Listen string `yaml:"listen"`
	// SubjectPrefix is the first subject token: messages go to
	// `<prefix>.<stream_id>.detections`, lifecycle events to
	// `<prefix>.<stream_id>.events`, alerts to `<prefix>.<stream_id>.alerts`.
	SubjectPrefix string `yaml:"subject_prefix"`
	// TokenFile is a file holding a token: the embedded server then
	// requires it from every client (`vigil tail --token-file`), and vigil
	// presents it to an external server.
	TokenFile string `yaml:"token_file"`
	// Insecure lets the embedded server listen on an address other than
	// loopback without TokenFile (refused otherwise), with a WARN at every
	// start.
	Insecure bool `yaml:"insecure"`
	// Bucket is the JetStream key-value bucket of the stream registry.
	Bucket string `yaml:"bucket"`
	// Replicas is the bucket's replica count (1 to 5): on an external
	// cluster, or on the embedded cluster (nats.cluster), at most its
	// number of servers; 3 survives one server lost.
	Replicas int `yaml:"replicas"`
	// MQTT turns on the embedded server's own MQTT 3.1.1 listener, so that
	// MQTT clients (Home Assistant, Node-RED) subscribe to
	// `<prefix>/<stream_id>/detections` and the other subjects with `/`
	// for `.` (docs/api.md, "MQTT"). Only with the embedded server.
	MQTT MQTT `yaml:"mqtt"`
	// Cluster joins the embedded server to the embedded servers of other
	// vigil nodes, forming one NATS cluster with JetStream replicated
	// across them (deploy/README.md, "Three nodes, no separate NATS").
	// Only with the embedded server.
	Cluster NATSCluster `yaml:"cluster"`
	// SyncInterval is how often the embedded server's JetStream flushes
	// its files to disk (fsync): a duration, or always to fsync every
	// write before acknowledging it. Writes acknowledged since the last
	// flush are lost if every replica loses power at once
	// (deploy/README.md, "Durability"). Only with the embedded server; an
	// external server has its own jetstream { sync_interval }.
	SyncInterval string `yaml:"sync_interval"`
}

// NATSCluster configures the embedded server's cluster routes: three
// vigil nodes, each listing the others in Routes, form one NATS cluster,
// so that the registry bucket can have nats.replicas: 3 without a
// separate NATS deployment.
type NATSCluster struct {
	// Listen is the host:port of the route listener that the other nodes
	// connect to (6222 is NATS's cluster port); off: no cluster.
	Listen string `yaml:"listen"`
	// Routes are the other nodes' route listeners, as nats://host:port
	// URLs; this node's own may be listed too (nats-server skips it), so
	// every node can share one list. Give no credentials in them: with
	// nats.token_file set, routes authenticate with that token.
	Routes []string `yaml:"routes"`
	// Name is the cluster's name, the same on every node (1-64 characters
	// of `A-Z a-z 0-9 _ -`).
	Name string `yaml:"name"`
	// ServerName is this node's NATS server name, unique in the cluster
	// and unchanged across restarts (JetStream's replicas are placed by
	// it); empty: the host name.
	ServerName string `yaml:"server_name"`
	// Advertise is the host:port the other nodes are told to reach this
	// node's route listener at, when that is not the address they would
	// find (NAT, a container's published port); empty: nats-server's own
	// choice.
	Advertise string `yaml:"advertise"`
}

// Node names this vigil among the nodes that share a registry.
type Node struct {
	// ID names this node in every message it publishes (the "node" field
	// and the Vigil-Node header), in its metrics (label node on the
	// per-node series) and in `vigil nodes ls`: 1-64 characters of A-Z a-z
	// 0-9 _ -. Two running nodes cannot share one: the second refuses to
	// start, naming the first. Empty: the host name.
	ID string `yaml:"id" default:"the host name, other characters replaced by -"`
}

// Cluster configures how the nodes sharing a registry split its streams
// (docs/architecture.md, "The fleet"): each enabled stream is run by the
// one node holding its lease, a key in a JetStream key-value bucket.
type Cluster struct {
	// Bucket is the JetStream key-value bucket of leases, nodes and
	// placement requests.
	Bucket string `yaml:"bucket"`
	// LeaseTTL is how long a lease lasts without renewal (at least 1s):
	// a dead node's streams run again elsewhere within about this plus
	// their start-up. Leases are renewed every quarter of it, and a node
	// stops a stream when three quarters have passed since its last
	// successful renewal (on its monotonic clock), so it never publishes
	// after another node could have taken over.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// Replicas is the bucket's replica count; 0: nats.replicas when that
	// is above 1, else 3 when the NATS cluster has 3 or more servers, else
	// 1.
	Replicas int `yaml:"replicas"`
	// MaxStreams is the most streams this node runs (0: no limit).
	MaxStreams int `yaml:"max_streams"`
	// DecodePixelsPerSecond and EnginePixelsPerSecond are this node's
	// decode and inference capacities (width x height x fps summed over
	// streams, e.g. from `vigil bench --streams`); streams are placed on
	// the node with the lowest load relative to the smaller of the two. 0:
	// unknown, taken as 8 streams of 1080p at 30 fps.
	DecodePixelsPerSecond float64 `yaml:"decode_pixels_per_second"`
	EnginePixelsPerSecond float64 `yaml:"engine_pixels_per_second"`
	// RebalanceInterval is how often the placer moves streams to even out
	// the nodes' loads (a node joined), at most MaxMoves per interval and
	// never the same stream twice in a row.
	RebalanceInterval Duration `yaml:"rebalance_interval"`
	MaxMoves          int      `yaml:"max_moves"`
}

// MQTT configures the embedded NATS server's MQTT listener.
type MQTT struct {
	// Listen is the MQTT listener's host:port (1883 is MQTT's port; port 0:
	// a free port); off turns it off. It needs the embedded server (no
	// nats.url). With nats.token_file set, MQTT clients give the token as
	// their password, with any user name (docs/api.md, "MQTT").
	Listen string `yaml:"listen"`
	// Insecure lets the MQTT listener listen on an address other than
	// loopback without nats.token_file (refused otherwise), with a WARN at
	// every start.
	Insecure bool `yaml:"insecure"`
}

// Infer configures ONNX Runtime.
type Infer struct {
	// ORTLibrary is the ONNX Runtime 1.30 C library (the environment
	// variable VIGIL_ORT_LIBRARY overrides the default).
	ORTLibrary string `yaml:"ort_library"`
	// ModelsDir is where relative model paths are resolved.
	ModelsDir string `yaml:"models_dir"`
	// IntraOpThreads is ONNX Runtime's intra-op thread count per engine; 0
	// lets ONNX Runtime choose.
	IntraOpThreads int `yaml:"intra_op_threads"`
	// BatchSizes are the engine instances per model for cross-stream
	// batching, e.g. [1, 4, 8] ([1]: no batching). Sizes above 1 use the
	// fixed-batch copies `<model>.b<N>.onnx` beside the model: `make setup`
	// makes .b4, .b8 and .b32 of both BlazeFace models, and of
	// yolox_nano.onnx when it is in `${VIGIL_CACHE_DIR}/models`;
	// `scripts/batch_models.py MODEL.onnx N...` makes others.
	BatchSizes []int `yaml:"batch_sizes"`
	// Provider is the ONNX Runtime execution provider to prefer: auto and
	// tensorrt try TensorRT, then CUDA, then the CPU; cuda tries CUDA, then
	// the CPU; cpu uses the CPU engine only. TensorRT and CUDA run vigil's
	// GPU engine (docs/gpu.md). Each model logs one line, `model loaded:
	// execution provider X` with why the ones before it were skipped.
	Provider string `yaml:"provider"`
	// Device is the CUDA device ordinal of the GPU engine for detect and
	// bench, and for run when Devices is empty and at most one GPU is
	// visible.
	Device int `yaml:"device"`
	// Devices are the CUDA device ordinals vigil run places streams on:
	// each new stream goes to the device with the fewest streams, stays
	// there, and when streams are removed or disabled the others are
	// rebalanced with as few moves as possible (a moved stream restarts).
	// Each device has its own engines, CUDA streams and pinned slots, and
	// NVDEC decodes on the stream's device.
	Devices []int `yaml:"devices" default:"every visible GPU"`
	// CUDAGraph replays each GPU run as a CUDA graph after warm-up (CUDA EP
	// enable_cuda_graph, TensorRT EP trt_cuda_graph_enable).
	CUDAGraph *bool `yaml:"cuda_graph"`
	// Precision is the maths the GPU engine runs models in: fp32 (IEEE
	// single precision, the CPU engine's results), tf32 (the CUDA
	// provider's TensorFloat-32 tensor-core maths, use_tf32: inputs of
	// convolutions rounded to a 10-bit mantissa) or fp16 (half precision:
	// on the CUDA provider vigil makes an fp16 copy of the model, with fp32
	// inputs and outputs, kept in the cache directory by the model's hash;
	// on TensorRT it sets trt_fp16_enable). With fp16 each engine checks at
	// start that its detections on a built-in frame agree with fp32's
	// (IoU ≥ 0.9, score within 0.02) and runs fp32 with one log line if
	// not. Empty: fp16 on the GPU engine, the setting that took YOLOX-Nano
	// past 10,000 images/s on an H200 with two instances (docs/gpu.md,
	// docs/performance.md "Detector throughput"). The CPU engine runs
	// fp32, or with int8 the model's calibrated INT8 copy (static QDQ,
	// made by `vigil model quantize --model NAME --calibrate CLIP` into the
	// cache directory; by default the blocks whose quantisation costs the
	// most stay float, as few as make it agree with fp32: --keep-float),
	// after checking at start that its detections on two
	// built-in frames agree with fp32's (the same count, each pair IoU ≥
	// 0.9); without a copy, or when they disagree, it runs fp32 with one
	// log line saying why. int8 takes the CPU engine: infer.provider must
	// be auto or cpu (docs/performance.md, "INT8 on the CPU").
	Precision string `yaml:"precision" default:"fp16 (GPU engine)"`
	// TF32 is deprecated: write precision: tf32. tf32: true with no
	// precision is read as precision tf32, with a warning at start; beside
	// another precision it is an error.
	TF32 bool `yaml:"tf32"`
	// Instances is the GPU engine's ONNX Runtime sessions per model and
	// device, each on its own CUDA stream with its own bound buffers and
	// pinned slots, so that batches run on the GPU at once (one CUDA
	// context: two processes on one GPU only time-slice). 0: the default,
	// 2 (with fp16: 9,950 images/s at batch 64 against 6,521 for one fp32
	// instance on an H200, docs/performance.md). 1 to 16; each costs its
	// session's memory.
	Instances int `yaml:"instances" default:"0 (2)"`
	// PreferNHWC asks the CUDA provider for channels-last convolutions
	// (prefer_nhwc), with ORT inserting the layout transposes. Off by
	// default: YOLOX-Nano ran about 20 % slower with it on the H200 (fp32, batch
	// 32 and 64, docs/performance.md).
	PreferNHWC bool `yaml:"prefer_nhwc"`
	// CuDNNConvAlgoSearch is how the CUDA provider has cuDNN choose each
	// convolution's algorithm (cudnn_conv_algo_search): heuristic (cuDNN's
	// heuristics pick one), exhaustive (time them all on the first run,
	// ONNX Runtime's own default) or default. vigil's default is
	// heuristic: on the H200 with the GPU defaults (fp16, two instances)
	// YOLOX-Nano's engine ceiling was 7,509.5 fps with it against 6,976.3
	// with exhaustive in the same run; end to end, 192 direct-NVDEC
	// streams kept P99 under 100 ms with it in four runs (four builds)
	// and not with exhaustive (one run; one heuristic run at 160 failed
	// too); exhaustive also spent about 90 s of CPU at start
	// (docs/performance.md, "Hybrid decoding at 176 streams").
	CuDNNConvAlgoSearch string `yaml:"cudnn_conv_algo_search"`
	// Slots is the GPU engine's pinned staging slots per instance (2:
	// double buffering): with batching (BatchSizes beyond 1), the batches
	// in flight per model are Slots × Instances; without it the engine's
	// EDF gate runs one frame at a time. 1 to 16.
	Slots int `yaml:"slots"`
	// TensorRT configures the tensorrt provider.
	TensorRT TensorRT `yaml:"tensorrt"`
}

// Decode configures decoding for every stream.
type Decode struct {
	// HWAccel is auto, cuda, hybrid or none: none decodes with FFmpeg on
	// the CPU; auto and cuda decode with NVDEC into GPU memory
	// (experimental, docs/gpu.md), on the stream's GPU; auto falls back to
	// the CPU per stream with one log line, cuda fails a stream that cannot
	// use it. hybrid sends each stream to its GPU's NVDEC or to the CPU
	// cores, whichever would be less loaded relative to its capacity, each
	// stream weighing its pixel rate (NVDECPixelRate, CPUPixelRate;
	// docs/gpu.md, "Hybrid placement").
	HWAccel string `yaml:"hwaccel"`
	// NVDECMode is how NVDEC decodes H.264 and HEVC streams, direct or ffmpeg:
	// direct drives NVIDIA's decoder (libnvcuvid.so.1) itself, with FFmpeg
	// demuxing; ffmpeg uses FFmpeg's cuda hwaccel, as vigil did before.
	// Other codecs always take FFmpeg's hwaccel. On an H200, decoding
	// 1080p H.264 only, direct gave 23 % more frames per second than ffmpeg
	// at 7 streams and the same at 14 and 28 (docs/performance.md, "Direct
	// NVDEC"); end to end with YOLOX-Nano both carried 96 streams with the
	// same P99 and cores ("Direct NVDEC's late start, found and fixed").
	NVDECMode string `yaml:"nvdec"`
	// NVDECPixelRate is hybrid decoding's capacity of one GPU's NVDEC, in
	// pixels per second (width × height × frames per second, summed over
	// the streams it decodes). `vigil bench --streams` measures it on your
	// machine and clips and prints the line to paste here. 0 takes
	// nvdec_fps × 1920 × 1080 when nvdec_fps is set, else 4458240000
	// (2,150 fps of 1080p, what one H200's NVDEC carried end to end through
	// FFmpeg's hwaccel; docs/performance.md). Only the ratio to
	// cpu_pixel_rate matters: it sets the share of the pixels each side
	// decodes.
	NVDECPixelRate float64 `yaml:"nvdec_pixel_rate"`
	// CPUPixelRate is hybrid decoding's capacity of all CPU cores, in
	// pixels per second (`vigil bench --streams` measures and prints it).
	// 0 takes cpu_fps × 1920 × 1080 when cpu_fps is set, else 128563200 per
	// core (62 fps of 1080p a core). Give hybrid less than the cores'
	// decode-only figure: they also serve the NVDEC streams and the engine.
	CPUPixelRate float64 `yaml:"cpu_pixel_rate"`
	// NVDECFPS is deprecated: set nvdec_pixel_rate. It is read as frames
	// of 1080p per second (nvdec_pixel_rate = nvdec_fps × 1920 × 1080),
	// vigil logs the line to use instead at start, and setting both is an
	// error.
	NVDECFPS float64 `yaml:"nvdec_fps"`
	// CPUFPS is deprecated: set cpu_pixel_rate. It is read as frames of
	// 1080p per second (cpu_pixel_rate = cpu_fps × 1920 × 1080), as
	// nvdec_fps is.
	CPUFPS float64 `yaml:"cpu_fps"`
	// ReweighInterval is how often hybrid decoding reads each running
	// stream's pixel rate (its frame size × the larger of its declared
	// frame rate and the frames it decoded per second over the last 5 s)
	// to reweigh it: a stream whose rate stays more than
	// 25 % off its weight for two readings in a row takes the new weight,
	// and streams then move between NVDEC and the CPU if that evens the
	// load by more than 5 % of a side's capacity, at most 2 moves a
	// reading (docs/gpu.md, "Hybrid placement"). 0s: never reweigh.
	ReweighInterval Duration `yaml:"reweigh_interval"`
	// HWSurfaces bounds the NVDEC frames per stream held downstream at once
	// (queued or batched), 1 to 64: decoded surfaces are copied into a
	// per-stream pool of device frames of this size (3.1 MB each at 1080p),
	// and the decoder waits when all are out.
	HWSurfaces int `yaml:"hw_surfaces"`
	// NVDECPoll, for decode.nvdec direct: 0s lets the driver's
	// cuvidMapVideoFrame64 wait for each decoded picture; a positive
	// interval (at most 10ms) sleeps until cuvidGetDecodeStatus says the
	// picture is decoded, checking at that interval, before mapping it
	// (docs/gpu.md, "CPU per frame").
	NVDECPoll Duration `yaml:"nvdec_poll"`
	// CPUNice, under decode.hwaccel hybrid, is the nice value (0 to 19) of
	// the threads that decode streams in software (the stream's own
	// thread and the FFmpeg threads it starts), so that the cores go
	// first to what every stream needs (the NVDEC sessions' host work,
	// batching, the engine) and software decoding takes what is left: a
	// CPU side placed beyond what the cores can do then drops its own
	// streams' frames instead of delaying every stream's (docs/gpu.md,
	// "Hybrid placement"). 0 runs them like the rest of vigil. Not
	// applied outside hybrid decoding.
	CPUNice int `yaml:"cpu_nice"`
}

// TensorRT configures ONNX Runtime's TensorRT execution provider (see
// docs/gpu.md). Profiles are fixed to each engine's batch and input size.
type TensorRT struct {
	// FP16 lets TensorRT use fp16 kernels (trt_fp16_enable).
	FP16 bool `yaml:"fp16"`
	// INT8 lets TensorRT use int8 kernels (trt_int8_enable); it needs
	// INT8CalibrationTable.
	INT8 bool `yaml:"int8"`
	// INT8CalibrationTable is the calibration table file
	// (trt_int8_calibration_table_name).
	INT8CalibrationTable string `yaml:"int8_calibration_table"`
	// EngineCacheDir keeps built TensorRT engines
	// (trt_engine_cache_enable, trt_engine_cache_path); empty: no cache,
	// every start builds them again. Strongly advised: building takes
	// seconds to minutes.
	EngineCacheDir string `yaml:"engine_cache_dir"`
	// TimingCacheDir keeps TensorRT's layer timing cache
	// (trt_timing_cache_enable, trt_timing_cache_path).
	TimingCacheDir string `yaml:"timing_cache_dir" default:"engine_cache_dir"`
}

// Pipeline holds defaults for every stream.
type Pipeline struct {
	// QueueSize is the frames waiting for the engine, per stream (1 to
	// 1000); when full the oldest is dropped (queue_full). During the burst
	// that follows each connect of a live stream a new frame replaces the
	// waiting ones instead, which are skipped as catch_up
	// (docs/architecture.md).
	QueueSize int `yaml:"queue_size"`
	// ProgressInterval is the period of the progress lines on stderr; 0s
	// disables them.
	ProgressInterval *Duration `yaml:"progress_interval"`
	// DefaultModel is the model of streams that name none.
	DefaultModel string `yaml:"default_model"`
	// BudgetMS is the default latency budget per frame in ms, packet
	// arrival to publish; frames that can no longer make it are dropped
	// (deadline). For streams with B-frames the budget starts when a frame
	// could first leave the decoder: the stream's reorder delay (its
	// status's reorder_delay_ms; docs/architecture.md) comes on top, with a
	// warning when it is more than half the budget. 0: no budget, no
	// deadline drops.
	BudgetMS *int `yaml:"budget_ms"`
	// DegradeDepth, DegradeAfter, RestoreAfter and DegradedFPS drive
	// degradation: a total queue depth above DegradeDepth frames for
	// DegradeAfter switches streams of normal and low priority whose model
	// has a degrade_to (models[]) to that lighter model and `priority: low`
	// streams without one to DegradedFPS frames per second; if the load
	// lasts another DegradeAfter, low-priority streams on their lighter
	// model get DegradedFPS too. At or below half of it for RestoreAfter
	// undoes the last step, and another RestoreAfter the first.
	DegradeDepth int      `yaml:"degrade_depth"`
	DegradeAfter Duration `yaml:"degrade_after"`
	RestoreAfter Duration `yaml:"restore_after"`
	DegradedFPS  float64  `yaml:"degraded_fps"`
	// PreferredBatchSizes: a batch is dispatched as soon as the largest of
	// these is reached.
	PreferredBatchSizes []int `yaml:"preferred_batch_sizes" default:"the largest of infer.batch_sizes"`
	// MaxQueueDelayUS is the longest a frame waits for its batch to fill
	// while no batch is running, in µs (a batch also leaves early when
	// waiting would break the earliest deadline). With the GPU engine's
	// slots, while a batch runs a partial batch waits for it to end or to
	// fill instead: it could only queue behind it, and a fixed-shape engine
	// runs a padded batch in about the time of a full one.
	MaxQueueDelayUS int `yaml:"max_queue_delay_us"`
	// AlertInterval is the least time between two alerts of one kind
	// (frame_drop, budget_miss) for one stream on
	// `<prefix>.<stream_id>.alerts`; at least 100ms. frame_drop counts
	// frames lost, never frames skipped by policy.
	AlertInterval Duration `yaml:"alert_interval"`
}

// Model is a named model: its file and its model block (docs/config.md,
// "Model formats", gives each format's layout and defaults).
type Model struct {
	// Name is what streams[].model refers to.
	Name string `yaml:"name" default:"required" example:"faces-far"`
	// Path is the .onnx file, absolute or relative to infer.models_dir.
	Path string `yaml:"path" default:"required" example:"face_detection_back_256x256_barracuda.onnx"`
	// Format is how the model's outputs are laid out: yolox, blazeface,
	// yolov8 (also YOLOv9, YOLO11: [1, 4+C, N] or [1, N, 4+C], NMS by
	// vigil), yolov10 (also YOLO26: [1, K, 6] end to end), rtdetr (also
	// D-FINE: labels, boxes, scores, orig_target_sizes input), rfdetr
	// (dets and labels logits) or ssd (TensorFlow detection API:
	// detection_boxes, _classes, _scores); auto recognises it from the model's input
	// and output names and shapes, says which it took in the `model
	// loaded` line, and refuses to start (exit 2) listing what fits when
	// it cannot tell.
	Format string `yaml:"format" default:"auto" example:"auto"`
	// Adapter is the former name of format, still read; set one of them.
	Adapter string `yaml:"adapter"`
	// Input overrides the format's preprocessing; unset keys take the
	// format's convention or what the model's input says.
	Input ModelInput `yaml:"input" example:"{pad: 0}"`
	// Labels are the class names by class id; LabelsFile is a file of
	// them, one per line (# comments). Neither: the 80 COCO names for an
	// 80-class model (BlazeFace: face). A model with more classes than
	// names does not start. labels_file is absolute or relative to
	// infer.models_dir.
	Labels     []string `yaml:"labels"`
	LabelsFile string   `yaml:"labels_file"`
	// Classes, when set, keeps only detections of these class names.
	Classes []string `yaml:"classes"`
	// ScoreThreshold and IoUThreshold (0 to 1) replace the format's
	// defaults; 0 keeps them. ClassThresholds replace score_threshold
	// for single classes, by name.
	ScoreThreshold  float32            `yaml:"score_threshold"`
	ClassThresholds map[string]float32 `yaml:"class_thresholds"`
	IoUThreshold    float32            `yaml:"iou_threshold"`
	// DegradeTo names a lighter model (a models[] name or a built-in
	// name) that streams of this model switch to, without restarting
	// their decoder, when the degradation governor engages (total queue
	// depth above pipeline.degrade_depth for pipeline.degrade_after), and
	// back after pipeline.restore_after of calm; the frame-rate cut of
	// low-priority streams comes one pipeline.degrade_after later, if the
	// load lasts. Streams of priority normal and low switch; high never
	// does. Each message's model field names the model that produced it.
	// The two models' classes are matched by name (tracks go on across a
	// switch): at start vigil refuses a degrade_to model that lacks a
	// class a stream's analytics name, that does not load, or whose batch
	// differs. A stream takes one step: with a → b → c, streams of a run b
	// and streams of b run c under load; cycles are refused.
	DegradeTo string `yaml:"degrade_to" example:"blazeface"`
}

// ModelInput is how frames are written into a model's image input.
type ModelInput struct {
	// Layout is nchw (planar) or nhwc (interleaved); empty: the model's
	// input shape says.
	Layout string `yaml:"layout"`
	// Order is the channel order, rgb or bgr.
	Order string `yaml:"order" default:"the format's"`
	// DType is float32, float16 or uint8; empty: the model's (a value
	// given must be the model's).
	DType string `yaml:"dtype"`
	// Range maps 8-bit levels 0..255 linearly onto [low, high] ([0, 1]:
	// v/255). A uint8 input gets the levels as they are.
	Range []float32 `yaml:"range" default:"the format's"`
	// Mean and Std (three numbers each, R, G, B) normalise each channel
	// after range, (x - mean) / std; with them range defaults to [0, 1]
	// (ImageNet: mean [0.485, 0.456, 0.406], std [0.229, 0.224, 0.225]).
	Mean []float32 `yaml:"mean"`
	Std  []float32 `yaml:"std"`
	// Resize is letterbox (aspect ratio kept, padded right and bottom) or
	// stretch (the whole input, aspect ratio lost).
	Resize string `yaml:"resize" default:"the format's"`
	// Pad is the 8-bit level (0 to 255) of letterbox padding, before
	// normalisation.
	Pad *float32 `yaml:"pad" default:"the format's"`
	// Size is [width, height] in pixels: the fixed size vigil runs a
	// model with a dynamic input height and width at (CUDA graphs,
	// TensorRT profiles and vigil shapes need one); for a fixed-size
	// model it must match the model or be unset.
	Size []int `yaml:"size"`
}

// Spec is m's model block as infer takes it. Labels come from
// labels_file (relative to modelsDir) when it is set; its read error is
// returned.
func (m Model) Spec(modelsDir string) (infer.Spec, error) {
	f := m.Format
	if f == "" || f == infer.FormatAuto {
		f = m.Adapter
	}
	in := m.Input
	// An empty list is an unset one (the generated example writes []).
	s := infer.Spec{Format: f, Labels: nilIfEmpty(m.Labels), Classes: nilIfEmpty(m.Classes), ScoreThreshold: m.ScoreThreshold,
		ClassThresholds: m.ClassThresholds, IoUThreshold: m.IoUThreshold,
		Input: infer.InputSpec{Layout: in.Layout, Order: in.Order, DType: in.DType, Range: nilIfEmpty(in.Range), Mean: nilIfEmpty(in.Mean),
			Std: nilIfEmpty(in.Std), Resize: in.Resize, Pad: in.Pad}}
	switch len(in.Size) {
	case 0:
	case 2:
		s.Input.Width, s.Input.Height = in.Size[0], in.Size[1]
	default:
		s.Input.Width = -1 // Check refuses it, naming input.size
	}
	if m.LabelsFile != "" {
		l, err := infer.ReadLabels(infer.Model{File: m.LabelsFile}.Resolve(modelsDir))
		if err != nil {
			return s, fmt.Errorf("labels_file: %w", err)
		}
		s.Labels = l
	}
	return s, nil
}

// Stream is one camera or file.
type Stream struct {
	// ID is 1-64 characters of `A-Z a-z 0-9 _ -`; it becomes a NATS subject
	// token and a metric label.
	ID string `yaml:"id" default:"required" example:"lobby"`
	// URL is rtsp://, rtsps://, http(s)://, file:// or a path; ${VAR} is
	// expanded (${VIGIL_CACHE_DIR} defaults to the asset cache), and
	// credentials in it are redacted in logs.
	URL string `yaml:"url" default:"required" example:"rtsp://viewer:secret@192.0.2.10:554/stream1"`
	// Model is a models[] name, a built-in name (blazeface, blazeface-back,
	// yolox-nano) or an .onnx path.
	Model string `yaml:"model" default:"pipeline.default_model"`
	// Transport is RTSP's lower transport: tcp or udp. Over UDP each RTP
	// socket gets a receive buffer of one second of the stream's bitrate
	// (measured over its previous session of 5 s or more; 40 Mbit/s, so
	// 5 MB, before that), which the kernel caps at net.core.rmem_max (a
	// warning says so, once per stream); lost packets are counted in
	// vigil_rtp_packets_lost_total (docs/architecture.md, "Input faults").
	Transport string `yaml:"transport"`
	// FPSLimit is an admission token bucket's rate, in frames per second by
	// decode time (0: none); refused frames are skipped by policy
	// (vigil_frames_skipped_total{reason="rate_limit"}, skipped_since_last):
	// not lost, no alert, not in the drop ratio. FPSBurst is the bucket's
	// size (0: 1).
	FPSLimit float64 `yaml:"fps_limit"`
	FPSBurst int     `yaml:"fps_burst"`
	// BudgetMS is the stream's latency budget in ms (0:
	// pipeline.budget_ms).
	BudgetMS int `yaml:"budget_ms"`
	// Priority is high, normal or low: high streams get their own engine
	// instance and queue; low streams drop to pipeline.degraded_fps while
	// degradation is engaged (docs/architecture.md).
	Priority string `yaml:"priority" default:"normal" example:"normal"`
	// Enabled streams run; a disabled stream is stored in the registry but
	// not run.
	Enabled *bool `yaml:"enabled" default:"true" example:"true"`
	// Labels are free-form `key: value` pairs: at most 16, keys 1-63 of
	// `A-Z a-z 0-9 _ . -`, values up to 256 bytes.
	Labels map[string]string `yaml:"labels"`
	// Realtime paces a file at its native frame rate, as a camera would
	// send it.
	Realtime bool `yaml:"realtime"`
	// Loop restarts a file at its end (pts keeps increasing).
	Loop bool `yaml:"loop"`
	// OpenTimeout bounds opening the input, probing its streams and
	// decoding the first frame (a slow camera gets this long).
	OpenTimeout Duration `yaml:"open_timeout"`
	// StallTimeout bounds the wait for one packet after that, raised to 3
	// of the stream's frame intervals for slower streams
	// (decode.StallIntervals; docs/api.md); longer is a stall, and a live
	// stream reconnects.
	StallTimeout Duration `yaml:"stall_timeout"`
	// QueueSize overrides pipeline.queue_size for this stream.
	QueueSize int `yaml:"queue_size" default:"pipeline.queue_size"`
	// DecodeThreads is FFmpeg's decoder thread count, 0 to 64; 0 lets
	// FFmpeg choose, with slice threads only for live and real-time streams
	// (frame threads would delay every frame by threads-1 frames); a count
	// above 0 keeps frame threads (NVDEC decoders always use 1).
	DecodeThreads int `yaml:"decode_threads"`
	// Analytics turns on tracking for the stream, with its zones and
	// lines (docs/api.md, "Analytics"): detections get track ids and the
	// zones they are in, events go to `<prefix>.<id>.analytics` and counts
	// to `<prefix>.<id>.counts`. Absent: no analytics. Its classes must be
	// class names of the stream's model.
	Analytics *analytics.Config `yaml:"analytics" default:"none: no analytics" example:"{tracker: {high_score: 0.5, match_iou: 0.2, confirm_hits: 3, lost_after: 2s, stationary_after: 10s, stationary_move: 0.1}, frame_size: [1280, 720]}"`
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

// DefaultNodeID is node.id's default: the host name with every character
// outside A-Z a-z 0-9 _ - replaced by - (a node id is a key token), cut
// to 64; "vigil" when the host name is unknown.
func DefaultNodeID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "vigil"
	}
	b := []byte(h)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b[:min(len(b), 64)])
}

// validateLive checks the live section.
func (c *Config) validateLive(p *problems) {
	l := &c.Live
	// 0.1: a frame every 10 s, the slowest view served (live.MinFPS).
	if !(l.DefaultFPS >= 0.1) || l.DefaultFPS > l.MaxFPSPerViewer {
		p.add("live.default_fps", "%g: want 0.1 to live.max_fps_per_viewer (%g)", l.DefaultFPS, l.MaxFPSPerViewer)
	}
	if !(l.MaxFPSPerViewer >= 0.1) || l.MaxFPSPerViewer > 60 {
		p.add("live.max_fps_per_viewer", "%g: want 0.1 to 60", l.MaxFPSPerViewer)
	}
	if l.MaxViewers < 1 || l.MaxViewers > 10000 {
		p.add("live.max_viewers", "%d: want 1 to 10000", l.MaxViewers)
	}
	if l.Encoders < 1 || l.Encoders > 64 {
		p.add("live.encoders", "%d: want 1 to 64", l.Encoders)
	}
	if l.JPEGQuality < 1 || l.JPEGQuality > 100 {
		p.add("live.jpeg_quality", "%d: want 1 to 100", l.JPEGQuality)
	}
	if l.Snapshots.TTL.Duration < 0 || l.Snapshots.TTL.Duration > 0 && l.Snapshots.TTL.Duration < time.Second {
		p.add("live.snapshots.ttl", "%s: want 0 (for good) or at least 1s", l.Snapshots.TTL.Duration)
	}
	if l.Snapshots.MaxBytes < 0 {
		p.add("live.snapshots.max_bytes", "%d: want 0 (no cap) or more", l.Snapshots.MaxBytes)
	}
	if l.Snapshots.Queue < 1 || l.Snapshots.Queue > 1024 {
		p.add("live.snapshots.queue", "%d: want 1 to 1024", l.Snapshots.Queue)
	}
}

// Default returns the configuration used when a file sets nothing.
func Default() Config {
	five := Duration{5 * time.Second}
	return Config{
		DataDir: defaultDataDir(),
		API:     API{Listen: "127.0.0.1:8080"},
		Log:     Log{Level: "info", Format: "console"},
		Metrics: Metrics{Listen: "127.0.0.1:9090"},
		NATS: NATS{Listen: "127.0.0.1:4222", SubjectPrefix: "vigil", Bucket: "vigil_streams", Replicas: 1, MQTT: MQTT{Listen: "off"},
			Cluster: NATSCluster{Listen: "off", Name: "vigil"}, SyncInterval: DefaultSyncInterval},
		Cluster: Cluster{Bucket: "vigil_leases", LeaseTTL: Duration{10 * time.Second}, RebalanceInterval: Duration{10 * time.Second}, MaxMoves: 2},
		Infer: Infer{ORTLibrary: assets.ORTLibrary(), ModelsDir: assets.ModelsDir(), BatchSizes: []int{1},
			Provider: "auto", CUDAGraph: ptr(true), Slots: 2, CuDNNConvAlgoSearch: "heuristic"},
		Decode: Decode{HWAccel: "none", NVDECMode: "direct", HWSurfaces: 8, ReweighInterval: Duration{10 * time.Second}, CPUNice: 10},
		Pipeline: Pipeline{QueueSize: 4, ProgressInterval: &five, DefaultModel: "blazeface", BudgetMS: ptr(DefaultBudgetMS),
			AlertInterval: Duration{10 * time.Second}, DegradeDepth: 10, DegradeAfter: Duration{3 * time.Second},
			RestoreAfter: Duration{10 * time.Second}, DegradedFPS: 2, MaxQueueDelayUS: 2000},
		Live: Live{DefaultFPS: 5, MaxFPSPerViewer: 15, MaxViewers: 16, JPEGQuality: 80, Encoders: 1,
			Snapshots: Snapshots{Enabled: ptr(true), TTL: Duration{24 * time.Hour}, MaxBytes: 1 << 30, Queue: 8}},
	}
}

// Load reads, decodes, defaults and validates the file at path, and
// records it in Source.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data, path)
	if err != nil {
		return c, err
	}
	if c.Source, err = filepath.Abs(path); err != nil {
		c.Source = path
	}
	return c, nil
}

// Parse decodes data (named name in errors) over Default(), expands
// environment variables in URLs and paths, fills stream defaults and
// validates. Errors name the file and the line or field. Unknown keys and
// the problems Validate finds are reported together (an unknown key is
// left out of the decoded value, so the rest can still be checked); other
// decoding errors stop before validation.
func Parse(data []byte, name string) (Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var unknown string
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // io.EOF: empty file
		msg, onlyUnknown := yamlError(err)
		if !onlyUnknown {
			return Config{}, fmt.Errorf("%s: %s", name, msg)
		}
		unknown = msg
	}
	c.expand()
	c.fill()
	err := c.Validate()
	switch {
	case unknown != "" && err != nil:
		return Config{}, fmt.Errorf("%s: %s; %w", name, unknown, err)
	case unknown != "":
		return Config{}, fmt.Errorf("%s: %s", name, unknown)
	case err != nil:
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

var reUnknown = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (\S+)$`)

// yamlError rewrites yaml.v3's messages into one line that names each
// unknown key, its section and, when one is close, the key meant:
// `line 7: unknown key "urll" in streams[] (did you mean "url"?)`.
// onlyUnknown is true when every error is an unknown key.
func yamlError(err error) (msg string, onlyUnknown bool) {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "yaml: "), false
	}
	onlyUnknown = true
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		m := reUnknown.FindStringSubmatch(e)
		if m == nil {
			onlyUnknown = false
			msgs = append(msgs, e)
			continue
		}
		section, keys := m[3], []string(nil)
		if t, ok := sectionByTypeName(m[3]); ok {
			section, keys, _ = sectionName(t)
		}
		e = fmt.Sprintf("line %s: unknown key %q in %s", m[1], m[2], section)
		if k := suggest(m[2], keys); k != "" {
			e += fmt.Sprintf(" (did you mean %q?)", k)
		}
		msgs = append(msgs, e)
	}
	return strings.Join(msgs, "; "), onlyUnknown
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
	c.NATS.Cluster.ServerName = assets.ExpandEnv(c.NATS.Cluster.ServerName)
	c.NATS.Cluster.Advertise = assets.ExpandEnv(c.NATS.Cluster.Advertise)
	for i := range c.NATS.Cluster.Routes {
		c.NATS.Cluster.Routes[i] = assets.ExpandEnv(c.NATS.Cluster.Routes[i])
	}
	for i := range c.API.AllowedSources {
		c.API.AllowedSources[i] = assets.ExpandEnv(c.API.AllowedSources[i])
	}
	c.Infer.ORTLibrary = assets.ExpandEnv(c.Infer.ORTLibrary)
	c.Infer.ModelsDir = assets.ExpandEnv(c.Infer.ModelsDir)
	for i := range c.Models {
		c.Models[i].Path = assets.ExpandEnv(c.Models[i].Path)
		c.Models[i].LabelsFile = assets.ExpandEnv(c.Models[i].LabelsFile)
	}
	for i := range c.Streams {
		c.Streams[i].URL = assets.ExpandEnv(c.Streams[i].URL)
		c.Streams[i].Model = assets.ExpandEnv(c.Streams[i].Model)
	}
}

func (c *Config) fill() {
	if c.Node.ID == "" {
		c.Node.ID = DefaultNodeID()
	}
	for i := range c.Streams {
		c.FillStream(&c.Streams[i])
	}
}

// FillStream sets the keys s leaves unset to their defaults: the model
// and queue size from pipeline, tcp, and decode's open and stall timeouts.
// Parse does it for every stream of the file.
func (c *Config) FillStream(s *Stream) {
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
	c.validateLive(&p)
	if c.NATS.MQTT.Listen != "off" {
		if _, _, err := net.SplitHostPort(c.NATS.MQTT.Listen); err != nil {
			p.add("nats.mqtt.listen", "%q: want host:port or off", c.NATS.MQTT.Listen)
		} else if c.NATS.URL != "" {
			p.add("nats.mqtt.listen", "%q: the MQTT listener is the embedded NATS server's, and nats.url selects an "+
				"external one: turn MQTT on in that server's own configuration (mqtt { port: 1883 }), or set nats.mqtt.listen: off",
				c.NATS.MQTT.Listen)
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
	// In a fixed order, each file once: ReadToken's error already says
	// when a token file is missing.
	for _, f := range []struct {
		field, path string
		token       bool
	}{
		{"api.token_file", c.API.TokenFile, true}, {"api.tls_cert", c.API.TLSCert, false},
		{"api.tls_key", c.API.TLSKey, false}, {"nats.token_file", c.NATS.TokenFile, true},
	} {
		var err error
		switch {
		case f.path == "":
		case f.token:
			_, err = ReadToken(f.path)
		default:
			_, err = os.Stat(f.path)
		}
		if err != nil {
			p.add(f.field, "%v", err)
		}
	}
	if c.DataDir == "" {
		p.add("data_dir", "is required")
	}
	if !registryBucket.MatchString(c.NATS.Bucket) {
		p.add("nats.bucket", "%q: want 1-64 characters of A-Z a-z 0-9 _ -", c.NATS.Bucket)
	}
	// Empty is the host name's (Parse fills it in; a config built from
	// Default and not parsed still has it empty).
	if id := cmp.Or(c.Node.ID, DefaultNodeID()); !registryBucket.MatchString(id) {
		p.add("node.id", "%q: want 1-64 characters of A-Z a-z 0-9 _ -", id)
	}
	if !registryBucket.MatchString(c.Cluster.Bucket) || c.Cluster.Bucket == c.NATS.Bucket {
		p.add("cluster.bucket", "%q: want 1-64 characters of A-Z a-z 0-9 _ -, not nats.bucket", c.Cluster.Bucket)
	}
	if c.Cluster.LeaseTTL.Duration < time.Second {
		p.add("cluster.lease_ttl", "%s: want at least 1s", c.Cluster.LeaseTTL.Duration)
	}
	if c.Cluster.Replicas < 0 || c.Cluster.Replicas > 5 {
		p.add("cluster.replicas", "%d: want 0 (automatic) to 5", c.Cluster.Replicas)
	}
	if c.Cluster.MaxStreams < 0 {
		p.add("cluster.max_streams", "%d: want 0 (no limit) or more", c.Cluster.MaxStreams)
	}
	if c.Cluster.DecodePixelsPerSecond < 0 || c.Cluster.EnginePixelsPerSecond < 0 {
		p.add("cluster.decode_pixels_per_second", "want 0 (unknown) or more, and the same for engine_pixels_per_second")
	}
	if c.Cluster.RebalanceInterval.Duration < c.Cluster.LeaseTTL.Duration/4 {
		p.add("cluster.rebalance_interval", "%s: want at least a quarter of cluster.lease_ttl", c.Cluster.RebalanceInterval.Duration)
	}
	if c.Cluster.MaxMoves < 0 {
		p.add("cluster.max_moves", "%d: want 0 (no rebalancing) or more", c.Cluster.MaxMoves)
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		p.add("nats.replicas", "%d: want 1 to 5", c.NATS.Replicas)
	}
	c.validateCluster(&p)
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
		if b < 1 || b > 128 {
			p.add("infer.batch_sizes", "%d: want 1 to 128", b)
		}
	}
	switch c.Infer.Precision {
	case "", "fp32", "tf32", "fp16":
		if c.Infer.TF32 && c.Infer.Precision != "" && c.Infer.Precision != "tf32" {
			p.add("infer.tf32", "deprecated, and precision is %s: remove tf32 (precision: tf32 replaces it)", c.Infer.Precision)
		}
	case "int8":
		if c.Infer.Provider == "tensorrt" || c.Infer.Provider == "cuda" {
			p.add("infer.precision", "int8 runs on the CPU engine: set infer.provider to auto or cpu (TensorRT's INT8 from the same QDQ file is not wired in)")
		}
		if c.Infer.TF32 {
			p.add("infer.tf32", "deprecated, and precision is int8: remove tf32")
		}
	default:
		p.add("infer.precision", "%q: want fp32, tf32, fp16 or int8", c.Infer.Precision)
	}
	if c.Infer.Instances < 0 || c.Infer.Instances > 16 {
		p.add("infer.instances", "%d: want 0 (the default) or 1 to 16", c.Infer.Instances)
	}
	switch strings.ToLower(c.Infer.CuDNNConvAlgoSearch) {
	case "", "exhaustive", "heuristic", "default":
	default:
		p.add("infer.cudnn_conv_algo_search", "%q: want exhaustive, heuristic or default", c.Infer.CuDNNConvAlgoSearch)
	}
	if !slices.Contains([]string{"auto", "tensorrt", "cuda", "cpu"}, c.Infer.Provider) {
		p.add("infer.provider", "%q: want auto, tensorrt, cuda or cpu", c.Infer.Provider)
	}
	if !slices.Contains([]string{"none", "auto", "cuda", "hybrid"}, c.Decode.HWAccel) {
		p.add("decode.hwaccel", "%q: want auto, cuda, hybrid or none", c.Decode.HWAccel)
	}
	if !slices.Contains([]string{"direct", "ffmpeg"}, c.Decode.NVDECMode) {
		p.add("decode.nvdec", "%q: want direct or ffmpeg", c.Decode.NVDECMode)
	}
	if !(c.Decode.NVDECFPS >= 0 && c.Decode.NVDECFPS < 1e7) { // also refuses NaN
		p.add("decode.nvdec_fps", "%v: want 0 (default) or a positive rate in frames per second", c.Decode.NVDECFPS)
	}
	if !(c.Decode.CPUFPS >= 0 && c.Decode.CPUFPS < 1e7) {
		p.add("decode.cpu_fps", "%v: want 0 (default) or a positive rate in frames per second", c.Decode.CPUFPS)
	}
	for _, r := range []struct {
		key, old  string
		rate, fps float64
	}{{"decode.nvdec_pixel_rate", "decode.nvdec_fps", c.Decode.NVDECPixelRate, c.Decode.NVDECFPS},
		{"decode.cpu_pixel_rate", "decode.cpu_fps", c.Decode.CPUPixelRate, c.Decode.CPUFPS}} {
		if !(r.rate >= 0 && r.rate < 1e13) { // 1e13: 4,800,000 fps of 1080p, no decoder's rate
			p.add(r.key, "%v: want 0 (default) or a positive rate in pixels per second", r.rate)
		} else if r.rate > 0 && r.fps > 0 {
			p.add(r.old, "deprecated, and %s is set too: keep %s only", r.key, r.key)
		}
	}
	if c.Decode.ReweighInterval.Duration < 0 || (c.Decode.ReweighInterval.Duration > 0 && c.Decode.ReweighInterval.Duration < 100*time.Millisecond) {
		p.add("decode.reweigh_interval", "%s: want 0s (never) or at least 100ms", c.Decode.ReweighInterval)
	}
	if c.Decode.NVDECPoll.Duration < 0 || c.Decode.NVDECPoll.Duration > 10*time.Millisecond {
		p.add("decode.nvdec_poll", "%s: want 0s to 10ms", c.Decode.NVDECPoll.Duration)
	}
	if c.Decode.CPUNice < 0 || c.Decode.CPUNice > 19 {
		p.add("decode.cpu_nice", "%d: want 0 to 19 (a nice value; vigil only lowers its decoders' priority)", c.Decode.CPUNice)
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
		checkModelBlock(&p, f, m, c.Infer.ModelsDir)
		c.checkDegradeTo(&p, f, m)
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
		for _, fe := range sp.Problems(nil) {
			if !checkedHere[fe.Field] {
				p.add(f+"."+fe.Field, "%s", fe.Msg)
			}
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
// the URL it names), the embedded NATS server (every detection, and the
// registry with the cameras' credentials) and its MQTT listener (the same
// server, so the same reach). /metrics is only warned about by vigil run
// at start: it shows stream ids and rates, and has no token to set.
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
	if l := c.NATS.Cluster.Listen; c.NATS.URL == "" && l != "off" && c.NATS.TokenFile == "" && !c.NATS.Insecure && !Loopback(l) {
		if _, _, err := net.SplitHostPort(l); err == nil {
			p.add("nats.cluster.listen", "%q is not a loopback address and nats.token_file is not set: any server that can "+
				"reach it could join the cluster as a route and read or rewrite everything (every detection, the stream "+
				"registry with camera credentials); set nats.token_file (routes then authenticate with it), listen on "+
				"127.0.0.1, or set nats.insecure: true to serve it without a token anyway", l)
		}
	}
	if m := c.NATS.MQTT; c.NATS.URL == "" && m.Listen != "off" && c.NATS.TokenFile == "" && !m.Insecure && !Loopback(m.Listen) {
		if _, _, err := net.SplitHostPort(m.Listen); err == nil {
			p.add("nats.mqtt.listen", "%q is not a loopback address and nats.token_file is not set: any MQTT client that "+
				"can reach it could read every detection and event, publish false ones, and read or rewrite the stream "+
				"registry (camera credentials included: MQTT reaches every subject of the embedded server); set nats.token_file (MQTT clients then give it as their password), listen on "+
				"127.0.0.1, or set nats.mqtt.insecure: true to serve it without a token anyway", m.Listen)
		}
	}
}

// CheckExposure returns the listener problems of Validate alone (an API,
// embedded NATS server or MQTT listener on a non-loopback address without
// a token or insecure: true), for vigil run to check again before it
// listens.
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
		Realtime: s.Realtime, Loop: s.Loop, DecodeThreads: s.DecodeThreads, Analytics: s.Analytics,
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

// checkDegradeTo adds the problems of model m's degrade_to (field f,
// "models[0]") that show without model files: it must name another
// model, configured or built in, and following degrade_to from it must
// not come back to m.
func (c *Config) checkDegradeTo(p *problems, f string, m Model) {
	if m.DegradeTo == "" {
		return
	}
	f += ".degrade_to"
	if m.DegradeTo == m.Name {
		p.add(f, "%q: a model cannot degrade to itself", m.DegradeTo)
		return
	}
	if _, ok := infer.BuiltinModels[m.DegradeTo]; !ok && c.model(m.DegradeTo) == nil {
		p.add(f, "unknown model %q (want a models[] name or a built-in name: %s)", m.DegradeTo, strings.Join(infer.BuiltinNames(), ", "))
		return
	}
	chain := []string{m.Name}
	for next := m.DegradeTo; next != ""; {
		chain = append(chain, next)
		if next == m.Name {
			p.add(f, "a cycle: %s", strings.Join(chain, " → "))
			return
		}
		if len(chain) > len(c.Models)+1 { // a cycle that does not pass through m: reported at its own models
			return
		}
		nm := c.model(next)
		if nm == nil {
			return
		}
		next = nm.DegradeTo
	}
}

// model returns the models[] entry named name, or nil.
func (c *Config) model(name string) *Model {
	for i := range c.Models {
		if c.Models[i].Name == name {
			return &c.Models[i]
		}
	}
	return nil
}

// DegradeTo returns the lighter model that streams of model ref ("":
// pipeline.default_model) switch to under sustained load: the models[]
// entry's degrade_to, "" for none (built-in and path references have
// none).
func (c *Config) DegradeTo(ref string) string {
	if ref == "" {
		ref = c.Pipeline.DefaultModel
	}
	if m := c.model(ref); m != nil {
		return m.DegradeTo
	}
	return ""
}

// ModelName is model reference ref with "" read as
// pipeline.default_model, for messages.
func (c *Config) ModelName(ref string) string {
	if ref == "" {
		return c.Pipeline.DefaultModel
	}
	return ref
}

// ResolveModel turns a stream's model reference (a configured name, a
// built-in name or an .onnx path) into a Model whose File is a path.
func (c *Config) ResolveModel(ref string) (infer.Model, error) {
	for _, m := range c.Models {
		if m.Name == ref {
			spec, err := m.Spec(c.Infer.ModelsDir)
			if err != nil {
				return infer.Model{}, fmt.Errorf("model %s: %w", m.Name, err)
			}
			return infer.Model{Name: m.Name, File: infer.Model{File: m.Path}.Resolve(c.Infer.ModelsDir), Spec: spec}, nil
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
		return "make setup downloads it from Megvii's YOLOX GitHub release when github.com can be reached (it said so if not); " +
			"or copy yolox_nano.onnx into infer.models_dir"
	}
	return "run `make setup`, or set infer.models_dir"
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// checkModelBlock adds the problems of model block m (field f,
// "models[0]") that show without the model file.
func checkModelBlock(p *problems, f string, m Model, modelsDir string) {
	if m.Adapter != "" && m.Format != "" && m.Format != infer.FormatAuto && m.Adapter != m.Format {
		p.add(f+".adapter", "%q and format %q: adapter is format's former name; keep format", m.Adapter, m.Format)
	}
	if len(m.Labels) > 0 && m.LabelsFile != "" {
		p.add(f+".labels_file", "set labels or labels_file, not both")
	}
	s, err := m.Spec(modelsDir)
	if err != nil {
		p.add(f+".labels_file", "%v", strings.TrimPrefix(err.Error(), "labels_file: "))
	}
	if err := s.Check(); err != nil {
		key, msg, _ := strings.Cut(err.Error(), ": ")
		if m.Format == "" && m.Adapter != "" && key == "format" {
			key = "adapter"
		}
		p.add(f+"."+key, "%s", msg)
	}
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

// ReferenceFramePixels is the frame size, 1920 × 1080, that the
// deprecated decode.nvdec_fps and decode.cpu_fps count their frames in.
const ReferenceFramePixels = 1920 * 1080

// Deprecations returns one line per deprecated key the config sets, each
// naming the key to use instead with the value it converts to, for the log
// at start.
func (c *Config) Deprecations() []string {
	var out []string
	for _, d := range []struct {
		old, key string
		fps      float64
	}{{"nvdec_fps", "nvdec_pixel_rate", c.Decode.NVDECFPS}, {"cpu_fps", "cpu_pixel_rate", c.Decode.CPUFPS}} {
		if d.fps > 0 {
			out = append(out, fmt.Sprintf("decode.%s is deprecated: it is read as frames of 1920x1080 per second; write decode.%s: %.0f instead (vigil bench --streams measures it)",
				d.old, d.key, d.fps*ReferenceFramePixels))
		}
	}
	return out
}
