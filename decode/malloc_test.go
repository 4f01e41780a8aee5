package decode

import (
	"os"
	"strings"
	"testing"
)

// The package fixes glibc's mmap threshold at start-up: after a 20 MiB
// block is freed, an 8 MiB block is still mmapped. With glibc's dynamic
// threshold the free raises it to 20 MiB and the 8 MiB block comes from an
// arena, which is what fragments. (Blocks larger than decoded frames: a
// smaller one can come from the free top of the thread's arena whatever
// the threshold, which would tell nothing. So this shows the threshold is
// fixed below 8 MiB, not that it is 256 KiB.)
func TestMMapThresholdFixed(t *testing.T) {
	if strings.Contains(os.Getenv("GLIBC_TUNABLES"), "mmap_threshold") {
		t.Skip("GLIBC_TUNABLES sets the threshold; the package leaves it alone")
	}
	mmapped, ok := mmappedAfterFree(20<<20, 8<<20)
	if !ok {
		t.Skip("not glibc 2.33 or later: cannot read mallinfo2")
	}
	if !mmapped {
		t.Fatalf("an 8 MiB block after freeing a 20 MiB one came from an arena: the threshold is not fixed at %d bytes", MMapThreshold)
	}
}
