package infer

import (
	"errors"
	"fmt"
	"os"
)

// Shape is what a model's signature says about its input, as its format
// binds it.
type Shape struct {
	// Adapter is the format's name ("blazeface", "yolox", "yolov8", ...).
	Adapter string
	// Chosen is Binding.Chosen: the format and, under auto, why.
	Chosen string
	// InW and InH are the input size in pixels; Batch the fixed batch.
	InW, InH, Batch int
	// Square is true when the format only takes square inputs.
	Square bool
	// Labels are the class names of the model's detections, by class id
	// (Adapter.Labels): ["face"] for BlazeFace, the 80 COCO names for a
	// COCO YOLOX model, the model block's labels when it has them.
	Labels []string
}

// Inspect reads a model's input and output shapes and binds them to its
// format (s.Format "" or "auto" detects it) exactly as Open does, without
// creating an engine: ONNX Runtime loads the model once to read its
// signature and no tensors are allocated. InitRuntime must have succeeded
// first. Errors are Open's: they wrap os.ErrNotExist or ErrModelMismatch
// and name the file.
func Inspect(path string, s Spec) (Shape, error) {
	if _, err := os.Stat(path); err != nil {
		return Shape{}, fmt.Errorf("model %s: %w", path, err)
	}
	if RuntimeVersion() == "" {
		return Shape{}, errors.New("infer: InitRuntime has not succeeded")
	}
	ad, b, err := inspect(Options{Path: path, Spec: s})
	if err != nil {
		return Shape{}, err
	}
	sq, _ := ad.(interface{ squareOnly() bool })
	return Shape{Adapter: ad.Name(), Chosen: b.Chosen, InW: b.InW, InH: b.InH, Batch: b.Batch, Square: sq != nil && sq.squareOnly(),
		Labels: ad.Labels()}, nil
}
