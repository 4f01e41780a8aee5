//go:build gpu && linux

package cuda

// These tests need an NVIDIA GPU, its driver and NVRTC:
//
//	go test -tags gpu ./internal/cuda
//	go test -tags gpu -run '^$' -bench . ./internal/cuda
//
// Set VIGIL_NVRTC_LIBRARY when libnvrtc is not on the loader's path.

import (
	"fmt"
	"testing"
)

// TestGPU runs the device suite (device_suite_test.go) on device 0.
func TestGPU(t *testing.T) {
	for _, c := range deviceTests {
		t.Run(c.name, c.fn)
	}
}

// syncEvery bounds the work queued ahead in the launch benchmarks, so they
// measure the host's launch cost rather than a full queue's wait.
const syncEvery = 64

// timeLaunches runs launch b.N times on s, synchronising every syncEvery
// ops outside the timer, and reports the host time per op in µs.
func timeLaunches(b *testing.B, s *Stream, launch func() error) {
	b.Helper()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := launch(); err != nil {
			b.Fatal(err)
		}
		if i%syncEvery == syncEvery-1 {
			b.StopTimer()
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	if err := s.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "host-us/op")
}

// BenchmarkKernelLaunch is the host time of cuLaunchKernel: kernels=N
// launches N empty kernels per op.
func BenchmarkKernelLaunch(b *testing.B) {
	for _, k := range []int{1, 8} {
		b.Run(fmt.Sprintf("kernels=%d", k), func(b *testing.B) {
			c := gpuContext(b)
			s := gpuStream(b, c)
			empty := gpuKernels(b, c, "empty")[0]
			one := [3]uint32{1, 1, 1}
			timeLaunches(b, s, func() error {
				for j := 0; j < k; j++ {
					if err := empty.Launch(s, one, [3]uint32{32, 1, 1}, 0); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// BenchmarkGraphLaunch is the host time of cuGraphLaunch for a graph of
// kernels=N empty kernels: compare with BenchmarkKernelLaunch's same N.
func BenchmarkGraphLaunch(b *testing.B) {
	for _, k := range []int{1, 8} {
		b.Run(fmt.Sprintf("kernels=%d", k), func(b *testing.B) {
			c := gpuContext(b)
			s := gpuStream(b, c)
			empty := gpuKernels(b, c, "empty")[0]
			one := [3]uint32{1, 1, 1}
			g, err := s.Capture(CaptureThreadLocal, func() error {
				for j := 0; j < k; j++ {
					if err := empty.Launch(s, one, [3]uint32{32, 1, 1}, 0); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Destroy()
			x, err := g.Instantiate()
			if err != nil {
				b.Fatal(err)
			}
			defer x.Destroy()
			timeLaunches(b, s, func() error { return x.Launch(s) })
		})
	}
}
