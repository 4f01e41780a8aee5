package bench

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd when vigil's thread that started
// it exits (PR_SET_PDEATHSIG), so that a vigil killed outright (SIGKILL,
// SIGHUP) leaves no looping ffmpeg behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
