package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/sinks"
)

// `vigil detect --realtime` on two MPEG-TS parts with PTS 1000 s then 0 s
// (the ts_backjump.ts, one second each): the demuxer unwraps the
// step back into a +26 h jump, which the pacer used to sleep through. Now
// the file plays to its end in real time, every message is valid, pts
// keeps increasing and exactly the first message after the step says
// "discontinuity": true.
func TestDetectRealtimeBackwardStep(t *testing.T) {
	var data []byte
	for _, offset := range []int{1000, 0} {
		part := filepath.Join(t.TempDir(), fmt.Sprintf("part%d.ts", offset))
		b, err := exec.Command("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25",
			"-frames:v", "25", "-c:v", "libx264", "-bf", "0", "-pix_fmt", "yuv420p", "-output_ts_offset", fmt.Sprint(offset), part).CombinedOutput()
		require.NoError(t, err, "ffmpeg: %s", b)
		b, err = os.ReadFile(part)
		require.NoError(t, err)
		data = append(data, b...)
	}
	input := filepath.Join(t.TempDir(), "ts_backjump.ts")
	require.NoError(t, os.WriteFile(input, data, 0o644))

	c, err := config.Parse([]byte("log: {level: warn}\n"), "detect.yaml")
	require.NoError(t, err)
	// The input plays for 2 s; the bug slept ~26 h. A minute tells them
	// apart on any machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err = app.Detect(ctx, c, app.DetectOptions{Source: input, Model: "blazeface", Realtime: true}, zap.NewNop(), &out)
	require.NoError(t, ctx.Err(), "detect must not hang at the step")
	require.NoError(t, err)

	schema := compileSchema(t)
	var msgs []sinks.Message
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var doc any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &doc))
		require.NoError(t, schema.Validate(doc), "%s", sc.Text())
		var m sinks.Message
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		msgs = append(msgs, m)
	}
	require.Len(t, msgs, 50, "files are processed losslessly")
	for i, m := range msgs {
		require.Equal(t, uint64(i), m.Seq)
		require.Equal(t, i == 25, m.Discontinuity, "seq %d", i)
		if i > 0 {
			require.Greater(t, m.PTS, msgs[i-1].PTS, "seq %d", i)
		}
	}
	require.InDelta(t, 1/25.0, msgs[25].PTS-msgs[24].PTS, 1e-6, "the new timeline starts one frame later")
}
