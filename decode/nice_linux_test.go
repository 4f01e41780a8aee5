package decode_test

import (
	"context"
	"io"
	"runtime"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// threadNice is the calling thread's nice value. The raw getpriority
// system call, which Go's syscall.Getpriority is, returns 20 - nice.
func threadNice(t *testing.T) int {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	require.NoError(t, err)
	return 20 - p
}

// Options.Nice: frames are decoded (and emitted) on a thread at that nice
// value, and the caller's thread keeps its own.
func TestNiceDecodingThread(t *testing.T) {
	runtime.LockOSThread() // the caller's thread ID must stay the same
	defer runtime.UnlockOSThread()
	before := threadNice(t)
	require.Less(t, before, 7, "the test process already runs at nice %d", before)
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), Nice: 7, Threads: 2})
	require.NoError(t, err)
	n, niced := 0, 0
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		f.Image.Release()
		n++
		if threadNice(t) == 7 {
			niced++
		}
	})
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 270, n)
	require.Equal(t, n, niced, "every frame is emitted from the niced decoding thread")
	require.Equal(t, before, threadNice(t), "the caller's thread keeps its nice value")

	// Without Nice nothing changes: Run decodes on the caller's thread.
	src, err = decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi")})
	require.NoError(t, err)
	same := 0
	err = src.Run(context.Background(), func(f *pipeline.Frame) {
		f.Image.Release()
		if threadNice(t) == before {
			same++
		}
	})
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 270, same)
}
