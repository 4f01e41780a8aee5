package decode

/*
#include <stdlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

// vigil_set_mmap_threshold fixes glibc's mmap threshold at bytes; 1 when
// set, 0 where the C library has no such setting (not glibc).
static int vigil_set_mmap_threshold(int bytes) {
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD)
	return mallopt(M_MMAP_THRESHOLD, bytes);
#else
	return 0;
#endif
}

// vigil_mmapped_after_free frees an mmapped block of big bytes (which
// raises glibc's dynamic threshold, when it is not fixed) and reports
// whether a block of small bytes is then mmapped too: 1 yes, 0 no, -1
// unknown (not glibc 2.33 or later, for mallinfo2).
static int vigil_mmapped_after_free(size_t big, size_t small) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
	// volatile: the compiler may drop a malloc whose block is not used.
	char *volatile b = malloc(big);
	if (b == NULL) return -1;
	b[0] = 1;
	free(b);
	size_t before = mallinfo2().hblks;
	char *volatile s = malloc(small);
	if (s == NULL) return -1;
	s[0] = 1;
	size_t after = mallinfo2().hblks;
	free(s);
	return after > before;
#else
	return -1;
#endif
}
*/
import "C"

import (
	"os"
	"strings"
)

// MMapThreshold is the size in bytes from which glibc's malloc serves
// allocations with mmap, fixed by this package at start-up (256 KiB) unless
// GLIBC_TUNABLES sets glibc.malloc.mmap_threshold.
//
// Why: glibc starts at 128 KiB and raises the threshold to the size of
// every mmapped block that is freed, up to 32 MiB. After the first decoded
// frame is freed (3.1 MB of 1080p 4:2:0), frames come from malloc's arenas,
// one per thread that allocates, and streams that come and go leave those
// arenas fragmented: on the H200, 64 hybrid streams with 6 replaced every
// 15 s grew vigil's resident memory by 598 MiB in 150 s (3,657 to 4,470 MiB
// in 5 min, still growing). With the threshold fixed at 256 KiB
// (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=262144, which is what
// mallopt(M_MMAP_THRESHOLD) sets; it also stops the raising) the same
// soak grew by 32 MiB and stayed near 3.45 GB (docs/performance.md).
// FFmpeg pools its decoders' frame buffers, so the mmap calls this costs
// come with opening and closing streams, not with every frame; the one
// download buffer of an NVDEC frame for the CPU (Scaler) is reused.
// Only glibc has the setting; elsewhere (musl) nothing is changed.
const MMapThreshold = 256 << 10

func init() {
	if strings.Contains(os.Getenv("GLIBC_TUNABLES"), "mmap_threshold") {
		return // the operator's setting wins
	}
	C.vigil_set_mmap_threshold(C.int(MMapThreshold)) // 0 (not glibc): nothing to fix
}

// mmappedAfterFree reports whether, after an mmapped block of big bytes is
// freed, a block of small bytes is still served by mmap (it is when the
// threshold is fixed below small); ok is false where that cannot be told.
func mmappedAfterFree(big, small int) (mmapped, ok bool) {
	r := C.vigil_mmapped_after_free(C.size_t(big), C.size_t(small))
	return r == 1, r >= 0
}
