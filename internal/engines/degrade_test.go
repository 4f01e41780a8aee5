package engines_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/internal/testenv"
)

// A degrade_to model is checked with the files at start: it loads, runs
// the model's batch, has its batch copies; and a stream that may switch
// to it names only classes it has (matched by name). Each problem is one
// line naming the field, exit 2.
func TestCheckDegrade(t *testing.T) {
	testenv.Model(t, "face_detection_front_128x128_barracuda.b4.onnx") // skips without make setup
	c := config.Default()
	c.Infer.Provider = "cpu"
	c.Models = []config.Model{
		{Name: "faces", Path: "face_detection_back_256x256_barracuda.onnx", DegradeTo: "blazeface"},
		{Name: "missing", Path: "face_detection_back_256x256_barracuda.onnx", DegradeTo: "gone"},
		{Name: "gone", Path: "no_such_model.onnx"},
		{Name: "batched", Path: "face_detection_back_256x256_barracuda.onnx", DegradeTo: "b4"},
		{Name: "b4", Path: "face_detection_front_128x128_barracuda.b4.onnx", Format: "blazeface"},
		{Name: "heads", Path: "face_detection_back_256x256_barracuda.onnx", DegradeTo: "heads-light"},
		{Name: "heads-light", Path: "face_detection_front_128x128_barracuda.onnx", Format: "blazeface", Labels: []string{"head"}},
	}
	require.NoError(t, c.Validate())
	require.NoError(t, engines.OpenRuntime(&c))
	err := engines.CheckDegrade(&c)
	require.True(t, cli.IsBadInput(err), "%v", err)
	require.NotContains(t, err.Error(), "\n")
	require.Contains(t, err.Error(), "models[1].degrade_to: model gone does not load")
	require.Contains(t, err.Error(), "models[3].degrade_to: model b4 runs batch 4, model batched batch 1")
	require.NotContains(t, err.Error(), "models[0]", "blazeface is a fine degrade_to for faces")
	require.NotContains(t, err.Error(), "models[5]", "classes are the streams' to check")

	c.Infer.BatchSizes = []int{1, 4}
	c.Models = c.Models[:1]
	require.NoError(t, engines.CheckDegrade(&c), "blazeface has its .b4 copy")

	// Classes: "face" is a class of heads (BlazeFace) but not of
	// heads-light (labelled head).
	a := &analytics.Config{Zones: []analytics.Zone{{Name: "door", Polygon: []analytics.XY{{0, 0}, {9, 0}, {9, 9}}, Classes: []string{"face"}}}}
	c.Models = []config.Model{
		{Name: "heads", Path: "face_detection_back_256x256_barracuda.onnx", DegradeTo: "heads-light"},
		{Name: "heads-light", Path: "face_detection_front_128x128_barracuda.onnx", Format: "blazeface", Labels: []string{"head"}},
	}
	sp := registry.Spec{ID: "cam", Model: "heads", Analytics: a}
	fe := engines.StreamClasses(&c, sp)
	require.NotNil(t, fe)
	require.Equal(t, "analytics.zones[0].classes[0]", fe.Field)
	require.Contains(t, fe.Msg, "of model heads-light, the degrade_to of model heads")
	sp.Priority = "high"
	require.Nil(t, engines.StreamClasses(&c, sp), "high priority never switches: only its own model counts")
	sp.Priority, sp.Model = "low", "heads-light"
	require.NotNil(t, engines.StreamClasses(&c, sp), "its own model lacks face")
}
