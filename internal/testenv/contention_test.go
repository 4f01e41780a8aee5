package testenv

import (
	"os/exec"
	"testing"
	"time"
)

// A busy child process counts as other work: a shell loop keeps one core
// for a second, so at least half a core of others is seen however the
// host shares its cores (a loaded host only adds to it).
func TestContentionSeesOtherProcesses(t *testing.T) {
	c := StartContention()
	cmd := exec.Command("sh", "-c", "end=$(($(date +%s)+2)); while [ $(date +%s) -lt $end ]; do :; done")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	time.Sleep(time.Second)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := c.Others(); got < 0.5 {
		t.Fatalf("Others = %.2f cores with a busy child, want >= 0.5", got)
	}
}
