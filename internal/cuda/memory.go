package cuda

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// DevicePtr is a device memory address (CUdeviceptr), e.g. a
// DeviceBuffer's Ptr plus a byte offset. It can be passed to kernels.
type DevicePtr uintptr

// DeviceBuffer is device memory allocated with cuMemAlloc. Free it when
// done; the context must still be retained then.
type DeviceBuffer struct {
	ctx uintptr
	p   atomic.Uintptr // CUdeviceptr
	n   int
}

// Alloc allocates bytes (> 0) of device memory (cuMemAlloc; aligned for
// any type). The memory is not cleared. It returns an error for bytes <= 0,
// an ErrClosed error after Release, or an *Error
// (CUDA_ERROR_OUT_OF_MEMORY).
func (c *Context) Alloc(bytes int) (*DeviceBuffer, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: Alloc: %d bytes, want > 0", bytes)
	}
	p, r := cMemAlloc(h, bytes)
	if err := check("cuMemAlloc", r); err != nil {
		return nil, err
	}
	b := &DeviceBuffer{ctx: h, n: bytes}
	b.p.Store(uintptr(p))
	return b, nil
}

// Ptr returns the buffer's device address; 0 once freed.
func (b *DeviceBuffer) Ptr() DevicePtr {
	if b == nil {
		return 0
	}
	return DevicePtr(b.p.Load())
}

// Len returns the buffer's size in bytes.
func (b *DeviceBuffer) Len() int {
	if b == nil {
		return 0
	}
	return b.n
}

// Free releases the memory (cuMemFree), which synchronizes with the device
// if work may still use it. Calling it again, or on nil, does nothing and
// returns nil. It returns an *Error if the driver refuses.
func (b *DeviceBuffer) Free() error {
	if b == nil {
		return nil
	}
	p := b.p.Swap(0)
	if p == 0 {
		return nil
	}
	return check("cuMemFree", cMemFree(b.ctx, DevicePtr(p)))
}

// HostBuffer is pinned (page-locked) host memory from cuMemHostAlloc, which
// the GPU reads and writes by DMA: the memory that asynchronous copies
// need, and the fastest for synchronous ones. Free it when done.
type HostBuffer struct {
	ctx uintptr
	p   atomic.Pointer[byte] // C memory
	n   int
}

// AllocHost allocates bytes (> 0) of pinned host memory
// (cuMemHostAlloc with CU_MEMHOSTALLOC_PORTABLE, so every context may use
// it). Pinned memory is a scarce OS resource: allocate it once and reuse
// it. It returns an error for bytes <= 0, an ErrClosed error after Release,
// or an *Error (CUDA_ERROR_OUT_OF_MEMORY).
func (c *Context) AllocHost(bytes int) (*HostBuffer, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: AllocHost: %d bytes, want > 0", bytes)
	}
	p, r := cMemHostAlloc(h, bytes)
	if err := check("cuMemHostAlloc", r); err != nil {
		return nil, err
	}
	hb := &HostBuffer{ctx: h, n: bytes}
	hb.p.Store(p)
	return hb, nil
}

// Bytes returns the buffer's memory as a slice (nil once freed). The slice
// views C memory: it is valid only until Free, and reading it while an
// asynchronous copy into it runs sees partial data.
func (h *HostBuffer) Bytes() []byte {
	if h == nil {
		return nil
	}
	p := h.p.Load()
	if p == nil {
		return nil
	}
	return unsafe.Slice(p, h.n)
}

// Len returns the buffer's size in bytes.
func (h *HostBuffer) Len() int {
	if h == nil {
		return 0
	}
	return h.n
}

// Free releases the memory (cuMemFreeHost). Copies that use it must have
// finished. Calling it again, or on nil, does nothing and returns nil. It
// returns an *Error if the driver refuses.
func (h *HostBuffer) Free() error {
	if h == nil {
		return nil
	}
	p := h.p.Swap(nil)
	if p == nil {
		return nil
	}
	return check("cuMemFreeHost", cMemFreeHost(h.ctx, p))
}

// span returns the address of bytes [off, off+n) of the buffer (nil for
// n == 0), or an error if the buffer is freed or the range is outside it.
func (h *HostBuffer) span(op string, off, n int) (unsafe.Pointer, error) {
	if h == nil {
		return nil, closedError("host buffer")
	}
	p := h.p.Load()
	if p == nil {
		return nil, closedError("host buffer")
	}
	if off < 0 || n < 0 || off > h.n || n > h.n-off {
		return nil, fmt.Errorf("cuda: %s: bytes [%d, %d+%d) outside the %d-byte host buffer", op, off, off, n, h.n)
	}
	if n == 0 {
		return nil, nil // nothing to copy; off may be one past the end
	}
	return unsafe.Add(unsafe.Pointer(p), off), nil
}

// CopyHtoDAsync queues a copy of n bytes from src, starting at byte off,
// to dst on s (cuMemcpyHtoDAsync). src must stay allocated and unchanged
// until the copy has run (synchronize s or an event recorded after it). n
// == 0 does nothing. It returns an error for a range outside src, an
// ErrClosed error for a released context, freed buffer or destroyed
// stream, or an *Error.
func (c *Context) CopyHtoDAsync(dst DevicePtr, src *HostBuffer, off, n int, s *Stream) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	p, err := src.span("CopyHtoDAsync", off, n)
	if err != nil {
		return err
	}
	sh, err := streamArg(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", cMemcpyHtoDAsync(h, dst, p, n, sh))
}

// CopyDtoHAsync queues a copy of n bytes from src to dst, starting at byte
// off, on s (cuMemcpyDtoHAsync). The data is in dst once the copy has run
// (synchronize s or an event recorded after it). n == 0 does nothing. It
// returns an error for a range outside dst, an ErrClosed error for a
// released context, freed buffer or destroyed stream, or an *Error.
func (c *Context) CopyDtoHAsync(dst *HostBuffer, off int, src DevicePtr, n int, s *Stream) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	p, err := dst.span("CopyDtoHAsync", off, n)
	if err != nil {
		return err
	}
	sh, err := streamArg(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", cMemcpyDtoHAsync(h, p, src, n, sh))
}

// CopyDtoDAsync queues a copy of n bytes from src to dst, both device
// memory, on s (cuMemcpyDtoDAsync). n == 0 does nothing. It returns an
// error for n < 0, an ErrClosed error for a released context or destroyed
// stream, or an *Error.
func (c *Context) CopyDtoDAsync(dst, src DevicePtr, n int, s *Stream) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("cuda: CopyDtoDAsync: %d bytes, want >= 0", n)
	}
	sh, err := streamArg(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync", cMemcpyDtoDAsync(h, dst, src, n, sh))
}

// CopyHtoD copies len(src) bytes from Go (pageable) memory to dst
// (cuMemcpyHtoD). It returns once src has been read; the driver stages
// pageable memory through its own pinned buffers, so this is slower than
// CopyHtoDAsync from a HostBuffer (it is here to measure that). It
// synchronizes with the legacy default stream only. It returns an
// ErrClosed error after Release, or an *Error.
func (c *Context) CopyHtoD(dst DevicePtr, src []byte) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD", cMemcpyHtoD(h, dst, src))
}

// CopyDtoH copies len(dst) bytes from src to Go (pageable) memory and
// returns when they are there (cuMemcpyDtoH). It returns an ErrClosed
// error after Release, or an *Error.
func (c *Context) CopyDtoH(dst []byte, src DevicePtr) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH", cMemcpyDtoH(h, dst, src))
}

// MemsetD8Async queues setting n bytes at dst to v on s (cuMemsetD8Async).
// n == 0 does nothing. It returns an error for n < 0, an ErrClosed error
// for a released context or destroyed stream, or an *Error.
func (c *Context) MemsetD8Async(dst DevicePtr, v byte, n int, s *Stream) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("cuda: MemsetD8Async: %d bytes, want >= 0", n)
	}
	sh, err := streamArg(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return check("cuMemsetD8Async", cMemsetD8Async(h, dst, v, n, sh))
}
