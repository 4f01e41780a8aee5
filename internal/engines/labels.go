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
	"github.com/vigil-video/vigil/internal/registry"
)

// labelsCache holds the signatures read from model files, by file,
// model block, size and modification time (a replaced file is read
// again).
var labelsCache sync.Map // labelsKey -> infer.Shape

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
	s, err := shapeOf(c, ref)
	return s.Labels, err
}

// shapeOf is infer.Inspect of model ref, cached as Labels says.
func shapeOf(c *config.Config, ref string) (infer.Shape, error) {
	if ref == "" {
		ref = c.Pipeline.DefaultModel
	}
	m, err := c.ResolveModel(ref)
	if err != nil {
		return infer.Shape{}, err
	}
	fi, err := os.Stat(m.File)
	if err != nil {
		return infer.Shape{}, fmt.Errorf("model %s: %w", m.File, err)
	}
	k := labelsKey{file: m.File, spec: fmt.Sprintf("%+v", m.Spec), size: fi.Size(), mod: fi.ModTime()}
	if s, ok := labelsCache.Load(k); ok {
		return s.(infer.Shape), nil
	}
	if err := infer.InitRuntime(c.Infer.ORTLibrary); err != nil {
		return infer.Shape{}, cli.BadInput(err)
	}
	s, err := infer.Inspect(m.File, m.Spec)
	if err != nil {
		return infer.Shape{}, err
	}
	labelsCache.Store(k, s)
	return s, nil
}

// CheckModels reads the signature (Labels's infer.Inspect, no session) of
// the model each of the config's streams runs (its model, or
// pipeline.default_model), as vigil run does when it opens them, so that
// check-config refuses what run would: a file that is missing, is not an
// ONNX model, or fits no format. It returns every problem as one
// *cli.BadInputError naming each stream's field ("streams[0].model:
// ..."), or nil. Each file is read once (Labels's cache).
func CheckModels(c *config.Config) error {
	var p []string
	for i, s := range c.Streams {
		if _, err := shapeOf(c, c.Spec(s).Model); err != nil {
			p = append(p, fmt.Sprintf("streams[%d].model: %s", i, cli.OneLine(err.Error())))
		}
	}
	if len(p) == 0 {
		return nil
	}
	return cli.BadInput(errors.New(strings.Join(p, "; ")))
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
		if fe := StreamClasses(c, sp); fe != nil {
			p = append(p, fmt.Sprintf("streams[%d].%s", i, fe))
		}
	}
	if len(p) == 0 {
		return nil
	}
	return cli.BadInput(errors.New(strings.Join(p, "; ")))
}

// Light returns the lighter model that stream sp switches to under
// sustained load: its model's degrade_to (config.Config.DegradeTo), ""
// for none or for a stream of priority high, which never switches.
func Light(c *config.Config, sp registry.Spec) string {
	if sp.Priority == "high" {
		return ""
	}
	return c.DegradeTo(sp.Model)
}

// StreamClasses checks the classes that stream sp's analytics name
// against its model's class names and, when the stream may switch to a
// lighter model (Light), against that model's too: the tracker matches
// classes by name across a switch, so a class the lighter model lacks
// would vanish from the stream's zones and lines under load. It returns
// the first problem, naming the field, or nil.
func StreamClasses(c *config.Config, sp registry.Spec) *registry.FieldError {
	labels := func(m string) ([]string, error) { return Labels(c, m) }
	if fe := sp.CheckClasses(labels); fe != nil {
		return fe
	}
	light := Light(c, sp)
	if light == "" {
		return nil
	}
	lsp := sp
	lsp.Model = light
	if fe := lsp.CheckClasses(labels); fe != nil {
		fe.Msg += fmt.Sprintf(" (of model %s, the degrade_to of model %s, which this stream switches to under load; "+
			"classes are matched by name: give it a model whose labels have the class, or priority high, which never switches)", light, c.ModelName(sp.Model))
		return fe
	}
	return nil
}

// CheckDegrade checks each models[] degrade_to against its model, with the
// model files (config.Parse checked the names): the lighter model loads
// with its format and takes as many frames per execution (batch) as the
// model, and with infer.batch_sizes its batch copies exist. It returns
// every problem as one *cli.BadInputError naming the field, or nil. A
// stream's analytics classes are CheckClasses's.
func CheckDegrade(c *config.Config) error {
	var p []string
	for i, m := range c.Models {
		if m.DegradeTo == "" {
			continue
		}
		f := fmt.Sprintf("models[%d].degrade_to", i)
		ls, err := shapeOf(c, m.DegradeTo)
		if err != nil {
			p = append(p, fmt.Sprintf("%s: model %s does not load: %s", f, m.DegradeTo, cli.OneLine(err.Error())))
			continue
		}
		if s, err := shapeOf(c, m.Name); err == nil && s.Batch != ls.Batch {
			p = append(p, fmt.Sprintf("%s: model %s runs batch %d, model %s batch %d: a stream's frames go one execution at a time to either",
				f, m.DegradeTo, ls.Batch, m.Name, s.Batch))
		}
		if err := batchCopies(c, m.DegradeTo); err != nil {
			p = append(p, fmt.Sprintf("%s: %v", f, err))
		}
	}
	if len(p) == 0 {
		return nil
	}
	return cli.BadInput(errors.New(strings.Join(p, "; ")))
}

// batchCopies checks that model ref's .b<N>.onnx copies for
// infer.batch_sizes exist (Pool.BatchEngines opens them).
func batchCopies(c *config.Config, ref string) error {
	m, err := c.ResolveModel(ref)
	if err != nil {
		return err
	}
	for _, n := range c.Infer.BatchSizes {
		if n == 1 {
			continue
		}
		file := batchFile(m.File, n)
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("infer.batch_sizes has %d, and model %s has no batch copy %s", n, ref, file)
		}
	}
	return nil
}
