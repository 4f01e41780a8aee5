package decode

import "syscall"

// canNice reports that setThreadNice works here (Linux: nice values are
// per thread).
const canNice = true

// setThreadNice sets the calling OS thread's nice value (setpriority(2)
// with PRIO_PROCESS and the thread ID, which Linux applies to that thread
// alone). The caller must hold runtime.LockOSThread. It returns the
// errno of setpriority, e.g. EACCES when n is below the current value
// without CAP_SYS_NICE.
func setThreadNice(n int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), n)
}
