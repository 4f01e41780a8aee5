package infer

import (
	"fmt"
	"os"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

var runtimeState struct {
	mu   sync.Mutex
	path string
	err  error
}

// InitRuntime loads the ONNX Runtime shared library at libPath and creates
// the process-wide ORT environment. It is idempotent: later calls with the
// same path return the first result; a different path is an error, because
// ORT cannot be loaded twice into one process. Errors name the path and
// say how to install the library.
func InitRuntime(libPath string) error {
	s := &runtimeState
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path != "" {
		if s.path != libPath {
			return fmt.Errorf("onnxruntime: already loaded from %s, cannot load %s too", s.path, libPath)
		}
		return s.err
	}
	s.path = libPath
	if _, err := os.Stat(libPath); err != nil {
		s.err = fmt.Errorf("onnxruntime library %s not found (run `make setup`, or set infer.ort_library / VIGIL_ORT_LIBRARY): %w", libPath, err)
		return s.err
	}
	ort.SetSharedLibraryPath(libPath)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		s.err = fmt.Errorf("onnxruntime: loading %s: %w", libPath, err)
		return s.err
	}
	return nil
}

// RuntimeVersion returns the loaded ONNX Runtime's version string (e.g.
// "1.30.0"), or "" before InitRuntime succeeded.
func RuntimeVersion() string {
	runtimeState.mu.Lock()
	defer runtimeState.mu.Unlock()
	if runtimeState.path == "" || runtimeState.err != nil {
		return ""
	}
	return ort.GetVersion()
}
