// vigil's GPU preprocessing, compiled at run time with NVRTC.
//
// yuv420_letterbox: one thread per pixel of the model input. It resizes a
// 4:2:0 picture (planar I420, or NV12 with interleaved chroma; 8-bit, or
// with deep set 16-bit samples holding the value in their high bits, as
// NVDEC's P016 surfaces of 10-bit streams do) into
// the content rectangle of a letterboxed input (top-left, cw x ch pixels of
// a dst_w x dst_h input; the rest is padding), converts YCbCr to RGB and
// writes the normalised value v*scale+bias of each channel, in the
// adapter's order (RGB or BGR) and layout (NCHW planes or NHWC pixels), as
// fp32 or fp16.
//
// Resampling is libswscale's SWS_BILINEAR: a triangle (tent) filter centred
// on the destination pixel's centre mapped into the source, (d+0.5)*f-0.5,
// whose half-width is max(f, 1) source pixels for a scale factor f = src/dst,
// so downscaling averages the whole footprint instead of aliasing.
// Chroma is sited at the centre of each 2x2 luma block and, as in swscale's
// packed-RGB output, resampled to half the output width; RGB is rounded to
// 8 bits before normalising. The result matches swscale within the
// tolerance stated in gpu_test.go.
//
// Colour: R = ky*(Y-yoff) + krv*(Cr-128); G = ky*(Y-yoff) - kgu*(Cb-128) -
// kgv*(Cr-128); B = ky*(Y-yoff) + kbu*(Cb-128), with the host choosing the
// constants for BT.601 or BT.709 and full or limited range.

// tent_sample reads samples of type T (unsigned char, or unsigned short for
// deep pictures), rows stride bytes apart and step samples between
// neighbours, and returns them on their own scale.
template <typename T>
__device__ __forceinline__ float tent_sample(const unsigned char *p, int stride, int step, int w, int h,
                                             float cx, float cy, float hx, float hy) {
	int x0 = max((int)ceilf(cx - hx), 0), x1 = min((int)floorf(cx + hx), w - 1);
	int y0 = max((int)ceilf(cy - hy), 0), y1 = min((int)floorf(cy + hy), h - 1);
	if (x0 > x1) { x0 = x1 = min(max((int)floorf(cx + 0.5f), 0), w - 1); }
	if (y0 > y1) { y0 = y1 = min(max((int)floorf(cy + 0.5f), 0), h - 1); }
	float acc = 0.f, wsum = 0.f;
	for (int y = y0; y <= y1; y++) {
		float wy = fmaxf(1.f - fabsf((float)y - cy) / hy, 0.f);
		if (wy == 0.f) continue;
		const T *row = (const T *)(p + (size_t)y * stride);
		for (int x = x0; x <= x1; x++) {
			float wx = fmaxf(1.f - fabsf((float)x - cx) / hx, 0.f);
			float wgt = wx * wy;
			acc += wgt * (float)row[x * step];
			wsum += wgt;
		}
	}
	if (wsum == 0.f) {
		int x = min(max((int)floorf(cx + 0.5f), 0), w - 1), y = min(max((int)floorf(cy + 0.5f), 0), h - 1);
		return (float)((const T *)(p + (size_t)y * stride))[x * step];
	}
	return acc / wsum;
}

__device__ __forceinline__ unsigned short f2h(float x) {
	unsigned short h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
	return h;
}

__device__ __forceinline__ void store3(void *dst, int half, int nchw, int dst_w, int dst_h, int x, int y,
                                       float c0, float c1, float c2) {
	size_t plane = (size_t)dst_w * dst_h, pix = (size_t)y * dst_w + x;
	size_t i0, i1, i2;
	if (nchw) { i0 = pix; i1 = plane + pix; i2 = 2 * plane + pix; }
	else { i0 = 3 * pix; i1 = i0 + 1; i2 = i0 + 2; }
	if (half) {
		unsigned short *d = (unsigned short *)dst;
		d[i0] = f2h(c0); d[i1] = f2h(c1); d[i2] = f2h(c2);
	} else {
		float *d = (float *)dst;
		d[i0] = c0; d[i1] = c1; d[i2] = c2;
	}
}

extern "C" __global__ void yuv420_letterbox(
	const unsigned char *__restrict__ yp, const unsigned char *__restrict__ up, const unsigned char *__restrict__ vp,
	int ystride, int uvstride, int nv12, int deep, int src_w, int src_h,
	int cw, int ch, int dst_w, int dst_h,
	float ky, float yoff, float krv, float kgu, float kgv, float kbu, float br, float bg, float bb,
	int nchw, int bgr, float scale, float bias, float pad, int half, void *dst) {
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
	if (x >= dst_w || y >= dst_h) return;
	if (x >= cw || y >= ch) {
		store3(dst, half, nchw, dst_w, dst_h, x, y, pad, pad, pad);
		return;
	}
	float fx = (float)src_w / cw, fy = (float)src_h / ch;
	float sx = (x + 0.5f) * fx - 0.5f, sy = (y + 0.5f) * fy - 0.5f;
	float hy0 = fmaxf(fy, 1.f), hx0 = fmaxf(fx, 1.f);
	float Y = deep ? tent_sample<unsigned short>(yp, ystride, 1, src_w, src_h, sx, sy, hx0, hy0)
	               : tent_sample<unsigned char>(yp, ystride, 1, src_w, src_h, sx, sy, hx0, hy0);
	// Chroma as swscale produces it for packed RGB output (without
	// SWS_FULL_CHR_H_INT): resampled to half the output width, each value
	// shared by a pair of output pixels, and to the full output height;
	// chroma samples are centred (swscale's default siting).
	int cwid = (src_w + 1) / 2, chei = (src_h + 1) / 2, cdw = (cw + 1) / 2;
	float cfx = (float)cwid / cdw, cfy = (float)chei / ch;
	float csx = ((x >> 1) + 0.5f) * cfx - 0.5f, csy = (y + 0.5f) * cfy - 0.5f;
	float hx = fmaxf(cfx, 1.f), hy = fmaxf(cfy, 1.f);
	float U, V;
	if (deep) {
		// P016 (NVDEC's deep surfaces are always interleaved): a 16-bit
		// sample v holds a 10-bit value v/64 (12-bit: v/16); on the 8-bit
		// scale the rest of the kernel works in, that is v/256.
		U = tent_sample<unsigned short>(up, uvstride, 2, cwid, chei, csx, csy, hx, hy);
		V = tent_sample<unsigned short>(up + 2, uvstride, 2, cwid, chei, csx, csy, hx, hy);
		Y *= 1.f / 256.f; U *= 1.f / 256.f; V *= 1.f / 256.f;
	} else if (nv12) {
		U = tent_sample<unsigned char>(up, uvstride, 2, cwid, chei, csx, csy, hx, hy);
		V = tent_sample<unsigned char>(up + 1, uvstride, 2, cwid, chei, csx, csy, hx, hy);
	} else {
		U = tent_sample<unsigned char>(up, uvstride, 1, cwid, chei, csx, csy, hx, hy);
		V = tent_sample<unsigned char>(vp, uvstride, 1, cwid, chei, csx, csy, hx, hy);
	}
	float yy = ky * (Y - yoff), u = U - 128.f, v = V - 128.f;
	// Rounded to 8 bits, as swscale's RGB24 output is; bias (host) moves
	// each channel as swscale's fixed-point tables do (see Bias in
	// preprocess.go).
	float r = rintf(fminf(fmaxf(yy + krv * v + br, 0.f), 255.f));
	float g = rintf(fminf(fmaxf(yy - kgu * u - kgv * v + bg, 0.f), 255.f));
	float b = rintf(fminf(fmaxf(yy + kbu * u + bb, 0.f), 255.f));
	r = r * scale + bias; g = g * scale + bias; b = b * scale + bias;
	if (bgr) store3(dst, half, nchw, dst_w, dst_h, x, y, b, g, r);
	else store3(dst, half, nchw, dst_w, dst_h, x, y, r, g, b);
}

// packed_letterbox: the content is already resized on the CPU (swscale,
// for pixel formats other than 4:2:0) into cw x ch packed 8-bit pixels in
// the adapter's channel order; this only normalises, lays out and pads.
extern "C" __global__ void packed_letterbox(const unsigned char *__restrict__ src, int cw, int ch, int dst_w,
                                            int dst_h, int nchw, float scale, float bias, float pad, int half,
                                            void *dst) {
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
	if (x >= dst_w || y >= dst_h) return;
	if (x >= cw || y >= ch) {
		store3(dst, half, nchw, dst_w, dst_h, x, y, pad, pad, pad);
		return;
	}
	const unsigned char *p = src + ((size_t)y * cw + x) * 3;
	store3(dst, half, nchw, dst_w, dst_h, x, y, p[0] * scale + bias, p[1] * scale + bias, p[2] * scale + bias);
}
