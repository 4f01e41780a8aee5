// Package pipeline is vigil's core: it defines the small interfaces that the
// other packages implement (Source in decode, Engine in infer, Sink in sinks)
// and runs one stream as two goroutines joined by a bounded queue:
//
//	Source.Run ──emit──▶ Queue (drop-oldest) ──▶ worker: Engine.Detect → Sink.Publish
//
// The source never blocks on a slow engine: when the queue is full the oldest
// frame is dropped and counted (reason queue_full), so latency stays bounded
// instead of growing with a backlog. Every frame carries its arrival time and
// the time spent in each stage; Result.Stages holds them in the published
// message and the Metrics histograms.
//
// pipeline has no cgo and imports no C wrapper: cmd/vigil wires the concrete
// implementations together.
package pipeline
