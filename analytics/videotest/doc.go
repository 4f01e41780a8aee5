// Package videotest holds the analytics stage's tests and benchmarks on
// real video: YOLOX-Nano (CPU) on vtest.avi's pedestrians and BlazeFace on
// Megamind's faces, decoded and detected by vigil's own decode and infer
// packages, then tracked by analytics.Stage. It is a package of its own
// because those need cgo (FFmpeg, ONNX Runtime) and package analytics
// stays pure Go. It has no code besides its tests.
package videotest
