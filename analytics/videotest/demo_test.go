package videotest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/testenv"
)

// The demo configs' analytics blocks decode as analytics.Config, are
// valid for their models' classes, and hold the geometry these tests
// check on the same clips; the rest of each file is a valid vigil config.
func TestDemoConfigs(t *testing.T) {
	for _, tc := range []struct {
		file, stream, class string
		want                analytics.Config
	}{
		{"demo-people.yaml", "vtest", "person", analytics.Config{Zones: []analytics.Zone{vtestZone}, Lines: []analytics.Line{vtestLine}}},
		{"demo-faces.yaml", "megamind", "face", analytics.Config{Zones: []analytics.Zone{megamindZone}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(testenv.RepoRoot(), "configs", tc.file)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			var doc yaml.Node
			require.NoError(t, yaml.Unmarshal(data, &doc))
			streams := mapValue(&doc, "streams")
			require.NotNil(t, streams, "%s has streams", tc.file)
			require.Len(t, streams.Content, 1)
			s := streams.Content[0]
			require.Equal(t, tc.stream, mapValue(s, "id").Value)
			var cfg analytics.Config
			require.NoError(t, mapValue(s, "analytics").Decode(&cfg))
			require.NoError(t, cfg.Validate())
			require.NoError(t, cfg.CheckClasses([]string{tc.class}))
			require.Equal(t, tc.want, cfg)

			// The whole file is a valid vigil config whose stream has the
			// same analytics, its model file standing in an empty models
			// directory (YOLOX-Nano may not be installed here; the
			// classes, which need the model itself, are checked above and
			// by cmd/vigil's TestCheckConfigShippedConfigs).
			models := t.TempDir()
			for _, m := range []string{"yolox_nano.onnx", "face_detection_front_128x128_barracuda.onnx"} {
				require.NoError(t, os.WriteFile(filepath.Join(models, m), nil, 0o600))
			}
			c, err := config.Parse(append(data, []byte("infer: {models_dir: "+models+"}\n")...), path)
			require.NoError(t, err)
			require.Len(t, c.Streams, 1)
			require.Equal(t, &tc.want, c.Streams[0].Analytics)
		})
	}
}

// mapValue returns the value of key in the mapping n (or in the document
// n holds), or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
