package live

import "golang.org/x/sys/unix"

// encoderNice is the nice value of the encoders' threads: CFS gives a
// thread at nice 10 about a tenth of the share of one at 0 (weights 110
// and 1024, kernel/sched/core.c sched_prio_to_weight), so when the cores
// are busy the streams' threads (decoders, ONNX Runtime, workers) run
// first and pictures wait.
const encoderNice = 10

// lowerPriority lowers the calling thread's scheduling priority to
// encoderNice (setpriority(2) with a thread id applies to that thread
// only, on Linux). The caller has locked its goroutine to the thread and
// never unlocks it, so that the thread ends with the goroutine instead of
// running other goroutines at that priority. An error (a sandbox that
// forbids it) leaves the priority as it was.
func lowerPriority() error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), encoderNice)
}
