package decode

import (
	"runtime"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"
)

// niceWarned makes a failure to lower a decoder's priority a warning once
// per process, not once per stream and reconnect.
var niceWarned atomic.Bool

// threadNice returns the nice value (-20 to 19) of the calling OS thread.
// Linux's getpriority system call returns 20 - nice, so that it is never
// negative (getpriority(2), "C library/kernel differences"); Go's syscall
// package passes that through unchanged.
func threadNice() (int, error) {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		return 0, err
	}
	return 20 - p, nil
}

// niceThread sets the calling goroutine's OS thread, which must be locked
// to it (router.attach locks a source's thread while its input is open),
// to nice value nice; threads it creates from then on, FFmpeg's decoder
// threads among them, inherit it. The returned function puts the old value
// back. Raising a thread's priority again needs CAP_SYS_NICE (or an
// RLIMIT_NICE above the default 0) on Linux; where that is refused, the
// function locks the goroutine to the thread once more and never unlocks
// it, so that the lowered thread ends with the goroutine (runtime.
// LockOSThread: a goroutine that exits locked takes its thread with it)
// instead of going back to Go's pool to run other goroutines at low
// priority. Failing to lower the value at all is logged once per process
// and otherwise ignored: the stream decodes at normal priority.
func niceThread(nice int, log *zap.Logger) (restore func()) {
	old, err := threadNice()
	if err == nil && old >= nice {
		return func() {}
	}
	if err == nil {
		err = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
	}
	if err != nil {
		if niceWarned.CompareAndSwap(false, true) {
			log.Warn("decode.cpu_nice: cannot lower the software decoders' priority; they run at normal priority", zap.Int("nice", nice), zap.Error(err))
		}
		return func() {}
	}
	return func() {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), old); err != nil {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			log.Debug("decode.cpu_nice: the thread keeps its lowered priority until its goroutine ends", zap.Error(err))
		}
	}
}
