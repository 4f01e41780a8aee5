package engines

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
)

// labelsCache holds the class names read from model files, by file,
// model block, size and modification time (a replaced file is read
// again).
var labelsCache sync.Map // labelsKey -> []string

type labelsKey struct {
	file, spec string // spec: the model block, printed
	size       int64
	mod        time.Time
}

// Labels returns the class names of the detections of model ref (a
// configured name, a built-in name or an .onnx path; "" is
// pipeline.default_model), by class id: ["face"] for BlazeFace, the 80
// COCO names for YOLOX-Nano. They are what analytics' classes are checked
// against. It loads ONNX Runtime from infer.ort_library when it is not
// loaded yet, and reads the model's signature (infer.Inspect, no session)
// once per file. Errors: an unknown model, a missing file or one that fits
// no adapter, a runtime that does not load (*cli.BadInputError).
func Labels(c *config.Config, ref string) ([]string, error) {
	if ref == "" {
		ref = c.Pipeline.DefaultModel
	}
	m, err := c.ResolveModel(ref)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(m.File)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.File, err)
	}
	k := labelsKey{file: m.File, spec: fmt.Sprintf("%+v", m.Spec), size: fi.Size(), mod: fi.ModTime()}
	if l, ok := labelsCache.Load(k); ok {
		return l.([]string), nil
	}
	if err := infer.InitRuntime(c.Infer.ORTLibrary); err != nil {
		return nil, cli.BadInput(err)
	}
	s, err := infer.Inspect(m.File, m.Spec)
	if err != nil {
		return nil, err
	}
	labelsCache.Store(k, s.Labels)
	return s.Labels, nil
}

// CheckClasses checks the classes that the analytics of each of the
// config's streams name against the class names of the stream's model
// (Labels, registry.Spec.CheckClasses): config.Parse cannot, since it does
// not load models. It returns every problem as one *cli.BadInputError
// naming each field ("streams[0].analytics.lines[0].classes[1]: ..."),
// or nil.
func CheckClasses(c *config.Config) error {
	var p []string
	for i, s := range c.Streams {
		sp := c.Spec(s)
		if fe := sp.CheckClasses(func(m string) ([]string, error) { return Labels(c, m) }); fe != nil {
			p = append(p, fmt.Sprintf("streams[%d].%s", i, fe))
		}
	}
	if len(p) == 0 {
		return nil
	}
	return cli.BadInput(errors.New(strings.Join(p, "; ")))
}
