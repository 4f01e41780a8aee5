package decode_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/pipeline"
)

// tasksAtNice lists this process's threads (Linux tasks) whose nice value
// is nice, from field 19 of /proc/self/task/<tid>/stat (proc(5)); nil when
// /proc cannot be read (the callers then fail on what they expected).
func tasksAtNice(nice int) []int {
	dirs, _ := os.ReadDir("/proc/self/task")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", d.Name(), "stat"))
		if err != nil {
			continue // the thread ended meanwhile
		}
		// The command name (field 2) is in parentheses and may hold
		// spaces: split after its closing one, where field 3 starts.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if n, err := strconv.Atoi(f[16]); err == nil && n == nice {
			tid, _ := strconv.Atoi(d.Name())
			out = append(out, tid)
		}
	}
	return out
}

// A source decoding in software with CPUNice runs at that nice value, on
// its own thread and on the decoder threads FFmpeg starts from it (the
// Threads: 3 decoder has two workers besides the caller with frame
// threads); once the source has stopped and its goroutine ended, no
// thread of the process is left at that value, whether the process may
// raise the priority back (root) or not (the thread then ends with its
// goroutine). Hybrid decoding's CPU side relies on it (decode.cpu_nice).
func TestCPUNiceLowersSoftwareDecoders(t *testing.T) {
	const nice = 13 // a value nothing else in the test process uses
	require.Empty(t, tasksAtNice(nice), "threads at nice %d before the test", nice)
	src, err := decode.New(decode.Options{URL: testenv.Media(t, "Megamind.avi"), StreamID: "nice", Threads: 3, CPUNice: nice})
	require.NoError(t, err)
	type seen struct{ own, tasks int }
	got := make(chan seen, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		frames := 0
		done <- src.Run(ctx, func(f *pipeline.Frame) {
			if frames++; frames == 10 {
				p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
				own := -100
				if err == nil {
					own = 20 - p
				}
				got <- seen{own: own, tasks: len(tasksAtNice(nice))}
				cancel()
			}
			f.Image.Release()
		})
	}()
	var s seen
	select {
	case s = <-got:
	case <-time.After(60 * time.Second): // 10 frames of a local file take well under a second
		t.Fatal("no 10th frame within 60 s")
	}
	require.Equal(t, nice, s.own, "the emitting (decoding) thread's nice value")
	require.GreaterOrEqual(t, s.tasks, 3, "threads at nice %d while decoding: the source's and FFmpeg's two workers", nice)
	<-done
	testenv.Eventually(t, func() bool { return len(tasksAtNice(nice)) == 0 }, 10*time.Second, 20*time.Millisecond,
		"threads still at nice %d after the source stopped: %v", nice, tasksAtNice(nice))
}
