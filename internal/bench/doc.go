// Package bench is `vigil bench`: four benchmarks of vigil's own pipeline,
// one file each, all opening engines through internal/engines as the
// service does, so that they measure what `vigil run` runs.
//
//   - Engine (engine.go, `vigil bench`): on one file and model, decode-only,
//     inference-only and whole-pipeline frames per second, allocations per
//     frame and latency at the native frame rate.
//   - Sweep (sweep.go, `vigil bench --sweep`): N looped real-time streams for
//     rising N, with vigil's policy and without it; P99 against load.
//   - GPU (gpu.go, `vigil bench --gpu`): the GPU engine, eager against CUDA
//     graphs, copies, preprocessing, H2D bandwidth, GPU against CPU
//     detections.
//   - Streams (streams.go, `vigil bench --streams`): how many real-time
//     streams a machine carries within the budget, against vigil's own
//     decode-only ceilings (direct NVDEC, software; ceilings.go) and the
//     engine ceiling (the detector alone on held frames), with the
//     capacities hybrid placement takes.
//
// Sweep and Streams share a point's measurement (sweepPoint) and place
// their streams as the service places them (place.go). Errors that are the
// user's (flags, files, models) are *cli.BadInputError; a benchmark that
// SIGINT or SIGTERM cut short returns a *cli.InterruptedError naming the
// step, or ctx's error (cmd/vigil turns it into one).
package bench
