package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// On a machine without an NVIDIA driver every provider setting ends on the
// CPU engine, and the log says, in one line per model, which provider was
// taken and why the GPU ones were not.
func TestProviderFallbackLine(t *testing.T) {
	testenv.SkipIfGPU(t)
	video := testenv.Media(t, "Megamind.avi")
	for provider, want := range map[string]string{
		"auto":     "execution provider cpu (GPU engine unavailable: cuda: no NVIDIA driver found (libcuda.so.1",
		"tensorrt": "execution provider cpu (GPU engine unavailable: cuda: no NVIDIA driver found (libcuda.so.1",
		"cuda":     "execution provider cpu (GPU engine unavailable: cuda: no NVIDIA driver found (libcuda.so.1",
		"cpu":      "execution provider cpu (infer.provider: cpu)",
	} {
		t.Run(provider, func(t *testing.T) {
			v := vigiltest.Start(t, t.TempDir(), fmt.Sprintf("infer: {provider: %s}\nstreams:\n  - {id: cam, url: %q, loop: true}\n", provider, video))
			logs := v.Logs.String()
			var line string
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "model loaded") {
					line = l
				}
			}
			require.Contains(t, line, want, logs)
			require.Equal(t, 1, strings.Count(logs, "model loaded"), "one line per model")
		})
	}
}
