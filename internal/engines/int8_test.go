package engines_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/testenv"
)

// infer.precision int8 with no INT8 copy in the cache runs fp32 on the
// CPU engine, and the engine's line says so and how to make one.
func TestPrecisionINT8WithoutCopy(t *testing.T) {
	testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
	c := config.Default() // models_dir resolved before the cache moves
	t.Setenv("VIGIL_CACHE_DIR", t.TempDir())
	c.Infer.Precision = "int8"
	require.NoError(t, engines.OpenRuntime(&c))
	p := engines.New(&c)
	defer p.CloseLogging(zaptest.NewLogger(t))
	eng, err := p.Get("blazeface")
	require.NoError(t, err)
	require.IsType(t, &infer.Engine{}, eng)
	require.Len(t, p.ChoiceLines(), 1)
	line := p.ChoiceLines()[0]
	require.Contains(t, line, "execution provider cpu (infer.precision: int8)")
	require.Contains(t, line, "no INT8 copy of this model yet, running fp32")
	require.Contains(t, line, "vigil model quantize --model blazeface --calibrate CLIP")
}
