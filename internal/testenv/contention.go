package testenv

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Contention measures how much of the host's CPU other processes used
// over a window of a test: the tests that judge latency or frame rates run
// vigil in the test process, on machines shared with other work (CI runs
// test packages side by side; development machines are shared), and a
// frame rate or a P99 says nothing about vigil when the cores were busy
// with something else. Start it at the window's start; Others at its end.
type Contention struct {
	start       time.Time
	busy0, all0 uint64 // host jiffies from /proc/stat
	self0       float64
}

// StartContention starts a window.
func StartContention() *Contention {
	c := &Contention{start: time.Now(), self0: selfCPU()}
	c.busy0, c.all0 = HostJiffies()
	return c
}

// Others returns the CPU cores that processes other than this one used on
// average since StartContention: the host's busy time (/proc/stat, in
// USER_HZ ticks of 10 ms) less this process's user and system time
// (getrusage), over the wall time. It returns 0 where /proc/stat cannot be
// read (such a host is judged as if idle).
func (c *Contention) Others() float64 {
	busy1, all1 := HostJiffies()
	if all1 <= c.all0 {
		return 0
	}
	const hz = 100 // USER_HZ on Linux, for every architecture Go supports
	wall := time.Since(c.start).Seconds()
	host := float64(busy1-c.busy0) / hz
	return max(0, (host-(selfCPU()-c.self0))/wall)
}

// BusyHost is how many cores of other work make a window too contended to
// judge a timing assertion: one core, half of the 2-core CI machine.
// Tests that relax an assertion above it log why.
const BusyHost = 1.0

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// HostJiffies returns the busy and total jiffies (USER_HZ ticks) of
// /proc/stat's cpu line (busy: all but idle and iowait); 0, 0 where it
// cannot be read.
func HostJiffies() (busy, all uint64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fs := strings.Fields(sc.Text())
	var idle uint64
	for i := 1; i < len(fs) && i <= 8; i++ {
		v, _ := strconv.ParseUint(fs[i], 10, 64)
		all += v
		if i == 4 || i == 5 {
			idle += v
		}
	}
	return all - idle, all
}

// Damage inverts n bytes at each of count places spread evenly over the
// second half of data, in place: a file damaged where a decoder meets it
// after its first pictures (the first keyframe and the container's header
// stay whole).
func Damage(data []byte, count, n int) {
	half := len(data) / 2
	for i := range count {
		at := half + i*(len(data)-half-n)/count
		for j := range n {
			data[at+j] ^= 0xff
		}
	}
}
