package engines_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/testenv"
)

// Models configured with a model block open through the pool as the
// service opens them; what cannot start is bad input (exit 2), in one
// line naming the model.
func TestPoolModelBlocks(t *testing.T) {
	edge := testenv.EdgeModels(t)
	c := config.Default()
	c.Infer.Provider = "auto" // no GPU here: the CPU engine, saying why
	c.Models = []config.Model{
		{Name: "two", Path: filepath.Join(edge, "two_images.onnx")},
		{Name: "text", Path: filepath.Join(edge, "not_onnx.onnx")},
		{Name: "few", Path: filepath.Join(edge, "yolov8_nan.onnx"), LabelsFile: filepath.Join(edge, "three.txt")},
		{Name: "people", Path: filepath.Join(edge, "e2e_full.onnx"), Format: "yolo26", Classes: []string{"person"}},
	}
	require.NoError(t, c.Validate())
	require.NoError(t, engines.OpenRuntime(&c))
	p := engines.New(&c)
	defer p.CloseLogging(zaptest.NewLogger(t))
	for _, m := range []struct{ name, want string }{
		{"two", `2 image inputs ["left" [1 3 32 32] "right" [1 3 32 32]]`},
		{"text", "cannot read it as an ONNX model"},
		{"few", "3 labels for a model with 80 classes"},
	} {
		_, err := p.Get(m.name)
		require.True(t, cli.IsBadInput(err), "%s: %v", m.name, err)
		require.Contains(t, err.Error(), m.want)
		require.NotContains(t, err.Error(), "\n")
	}
	eng, err := p.Get("people")
	require.NoError(t, err)
	require.Equal(t, "yolov10", eng.Adapter(), "yolo26 is yolov10's alias")
	l, err := engines.Labels(&c, "people")
	require.NoError(t, err)
	require.Len(t, l, 80)
	p.LogLoaded(zaptest.NewLogger(t))
}
