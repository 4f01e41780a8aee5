package cuda

import (
	"sync/atomic"
)

// Context is a retained reference to a device's primary context: the
// context the CUDA runtime (and so ONNX Runtime's CUDA execution provider)
// uses, so device memory and streams are shared with it. It is safe for
// concurrent use; each call makes the context current on its own OS thread.
// Release it when done, after the streams, events, buffers, graphs and
// modules made from it.
type Context struct {
	h        uintptr // CUcontext
	dev      Device
	cudev    int32 // CUdevice
	released atomic.Bool
}

// Primary retains the primary context of the device of the given ordinal
// (cuDevicePrimaryCtxRetain), creating it if no one holds it. A context
// vigil creates gets CU_CTX_SCHED_BLOCKING_SYNC (cuDevicePrimaryCtxSetFlags),
// the flags FFmpeg's NVDEC device context needs to share it. Each
// successful call needs its own Release. It returns Init's error, or an
// *Error (CUDA_ERROR_INVALID_DEVICE for an ordinal out of range).
func Primary(ordinal int) (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	d, dev, err := getDevice(ordinal)
	if err != nil {
		return nil, err
	}
	h, r := cPrimaryCtxRetain(dev)
	if err := check("cuDevicePrimaryCtxRetain", r); err != nil {
		return nil, err
	}
	return &Context{h: h, dev: d, cudev: dev}, nil
}

// Release drops this reference to the primary context
// (cuDevicePrimaryCtxRelease); the context is destroyed when the last
// reference in the process goes. Calling it again, or on nil, does nothing
// and returns nil. It returns an *Error if the driver refuses.
func (c *Context) Release() error {
	if c == nil || c.h == 0 || c.released.Swap(true) {
		return nil
	}
	return check("cuDevicePrimaryCtxRelease", cPrimaryCtxRelease(c.cudev))
}

// Handle returns the CUcontext as an integer, for C libraries that share
// the context (FFmpeg's CUDA device context for NVDEC); 0 after Release.
func (c *Context) Handle() uintptr {
	h, _ := c.handle()
	return h
}

// handle returns the CUcontext, or an ErrClosed error.
func (c *Context) handle() (uintptr, error) {
	if c == nil || c.h == 0 || c.released.Load() {
		return 0, closedError("context")
	}
	return c.h, nil
}

// Device describes the context's device (as GetDevice did when the
// context was retained).
func (c *Context) Device() Device {
	if c == nil {
		return Device{}
	}
	return c.dev
}

// MemInfo returns the free and total device memory in bytes
// (cuMemGetInfo). Free counts every process's allocations. It returns an
// ErrClosed error after Release, or an *Error.
func (c *Context) MemInfo() (free, total uint64, err error) {
	h, err := c.handle()
	if err != nil {
		return 0, 0, err
	}
	free, total, r := cMemGetInfo(h)
	if err := check("cuMemGetInfo", r); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}
