// C helpers for NVDEC decoding (hw.go). Definitions are in hwdev.c because
// hw.go exports a Go function to C, and cgo then allows only declarations
// in its preamble.
#ifndef VIGIL_DECODE_HWDEV_H
#define VIGIL_DECODE_HWDEV_H

#include <stdint.h>
#include <libavutil/buffer.h>
#include <libavutil/frame.h>

int vigil_hw_sw_format(const AVFrame *f);
AVBufferRef *vigil_cuda_device_new(uintptr_t cuctx, uintptr_t stream, uintptr_t opaque, int *err, int *owned);
int vigil_hw_copy(AVBufferRef **pool, const AVFrame *src, AVFrame *dst);

#endif
