package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/shapes"
	"github.com/vigil-video/vigil/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func shapeRow(t *testing.T, r shapes.Report, stream, model string) shapes.Row {
	t.Helper()
	for _, row := range r.Rows {
		if row.Stream == stream && row.Model == model {
			return row
		}
	}
	t.Fatalf("no row for stream %s and model %s in %+v", stream, model, r.Rows)
	return shapes.Row{}
}

// vigil shapes against a real service (the sample video through the real
// BlazeFace models, embedded NATS): from the API while it runs, and with
// --probe through its NATS server and, once it has stopped, from its data
// directory.
func TestShapesEndToEnd(t *testing.T) {
	megamind := testenv.Media(t, "Megamind.avi")
	body := fmt.Sprintf(`
data_dir: %q
api: {listen: "127.0.0.1:0"}
metrics: {listen: "off"}
nats: {listen: "127.0.0.1:%d"}
pipeline: {progress_interval: 0s}
infer: {batch_sizes: [1, 8, 32]}
streams:
  - {id: megamind, url: %q, realtime: true, loop: true}
  - {id: dead, url: "rtsp://viewer:secret@127.0.0.1:%d/x", open_timeout: 1s}
`, t.TempDir(), freePort(t), megamind, freePort(t))
	cfg := writeConfig(t, body)
	c, err := config.Load(cfg)
	require.NoError(t, err)
	ep, stop := startVigil(t, c)
	testenv.Eventually(t, func() bool {
		rc, out, _ := vigil("streams", "get", "megamind", "-o", "json", "--api", ep.API)
		var s api.Stream
		return rc == 0 && json.Unmarshal([]byte(out), &s) == nil && s.Status != nil && s.Status.Width > 0
	}, 30*time.Second, 50*time.Millisecond, "megamind's resolution known")

	// The table: one row per stream, the numbers of a 720x528 frame
	// letterboxed into BlazeFace's 128x128 input.
	rc, out, errOut := vigil("shapes", "--api", ep.API, "--config", cfg)
	require.Equal(t, 0, rc, errOut)
	t.Logf("vigil shapes:\n%s", out)
	lines := strings.Split(out, "\n")
	require.Equal(t, strings.Fields("STREAM SOURCE MODEL INPUT BATCH SCALE CONTENT PAD R/B WASTE FLAG"), strings.Fields(lines[0]))
	require.Equal(t, strings.Fields("dead ? blazeface 128x128 1,8,32 - - - - unknown"), strings.Fields(lines[1]))
	require.Equal(t, strings.Fields("megamind 720x528 blazeface 128x128 1,8,32 0.1778 128x93 0/35 27.3% waste"), strings.Fields(lines[2]))
	require.Contains(t, out, "megamind 720x528 on blazeface 128x128: 128x96, waste 3.1% instead of 27.3%")
	require.Contains(t, out, "dead (blazeface): no frame decoded yet")
	require.NotContains(t, out, "secret")

	// JSON, every model, and a limit that megamind's 27.3 % stays under.
	rc, out, errOut = vigil("shapes", "--api", ep.API, "--config", cfg, "--json", "--all-models", "--max-waste", "30")
	require.Equal(t, 0, rc, errOut)
	var r shapes.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "api", r.Source)
	row := shapeRow(t, r, "megamind", "blazeface")
	require.True(t, row.InUse)
	require.Equal(t, []int{720, 528, 128, 128}, []int{row.SourceWidth, row.SourceHeight, row.InputWidth, row.InputHeight})
	require.Equal(t, []int{1, 8, 32}, row.BatchSizes)
	require.Empty(t, row.MissingBatchCopies, "make setup made the .b8 and .b32 copies")
	require.Equal(t, shapes.Fit{Scale: 128.0 / 720, ContentWidth: 128, ContentHeight: 93, PadRight: 0, PadBottom: 35, WastePct: 100 * 35.0 / 128}, *row.Fit)
	require.Empty(t, row.Flags, "27.3 %% is under --max-waste 30")
	require.Nil(t, row.Suggestion)
	back := shapeRow(t, r, "megamind", "blazeface-back")
	require.False(t, back.InUse)
	require.Equal(t, []int{256, 187, 0, 69}, []int{back.Fit.ContentWidth, back.Fit.ContentHeight, back.Fit.PadRight, back.Fit.PadBottom})
	if _, err := os.Stat(c.Infer.ModelsDir + "/yolox_nano.onnx"); err == nil {
		yx := shapeRow(t, r, "megamind", "yolox-nano")
		require.Equal(t, []int{416, 305, 0, 111}, []int{yx.Fit.ContentWidth, yx.Fit.ContentHeight, yx.Fit.PadRight, yx.Fit.PadBottom})
	} else {
		require.Contains(t, strings.Join(r.Skipped, "\n"), "yolox-nano")
	}
	require.Equal(t, []string{shapes.FlagUnknown}, shapeRow(t, r, "dead", "blazeface").Flags)

	// --probe while vigil runs: the registry through its NATS server.
	rc, out, errOut = vigil("shapes", "--probe", "--timeout", "3s", "--config", cfg, "--json")
	require.Equal(t, 0, rc, errOut)
	r = shapes.Report{}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "probe", r.Source)
	require.Contains(t, r.From, "running vigil's NATS")
	require.Equal(t, 528, shapeRow(t, r, "megamind", "blazeface").SourceHeight)

	// --probe once vigil has stopped: its data directory's registry, plus
	// a config stream that the next start would add.
	stop()
	cfg2 := writeConfig(t, body+fmt.Sprintf("  - {id: later, url: %q, model: blazeface-back}\n", testenv.Media(t, "vtest.avi")))
	start := time.Now()
	rc, out, errOut = vigil("shapes", "--probe", "--timeout", "3s", "--config", cfg2, "--json")
	require.Equal(t, 0, rc, errOut)
	require.Less(t, time.Since(start), 20*time.Second)
	r = shapes.Report{}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Contains(t, r.From, "registry in ")
	require.Len(t, r.Rows, 3)
	mm := shapeRow(t, r, "megamind", "blazeface")
	require.Equal(t, []int{720, 528}, []int{mm.SourceWidth, mm.SourceHeight})
	require.Equal(t, []string{shapes.FlagWaste}, mm.Flags)
	later := shapeRow(t, r, "later", "blazeface-back")
	require.Equal(t, []int{768, 576}, []int{later.SourceWidth, later.SourceHeight})
	dead := shapeRow(t, r, "dead", "blazeface")
	require.Equal(t, []string{shapes.FlagUnknown}, dead.Flags)
	require.Contains(t, dead.Note, "probe: ")
	require.NotContains(t, out, "secret")
}
