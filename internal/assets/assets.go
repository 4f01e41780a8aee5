// Package assets locates the files that scripts/setup.sh installs outside
// the repository: the ONNX Runtime library, the models and the sample media.
//
// The cache directory is $VIGIL_CACHE_DIR, else $XDG_CACHE_HOME/vigil, else
// ~/.cache/vigil. Inside it: lib/libonnxruntime.so.1, models/*.onnx and
// media/{Megamind,vtest,tree}.avi, media/astronaut.png.
package assets

import (
	"os"
	"path/filepath"
)

// CacheDir returns vigil's download cache directory (it may not exist).
func CacheDir() string {
	if d := os.Getenv("VIGIL_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "vigil")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "vigil")
	}
	return filepath.Join(os.TempDir(), "vigil-cache")
}

// ORTLibrary returns the ONNX Runtime shared library path:
// $VIGIL_ORT_LIBRARY, else CacheDir()/lib/libonnxruntime.so.1.
func ORTLibrary() string {
	if p := os.Getenv("VIGIL_ORT_LIBRARY"); p != "" {
		return p
	}
	return filepath.Join(CacheDir(), "lib", "libonnxruntime.so.1")
}

// ModelsDir returns CacheDir()/models.
func ModelsDir() string { return filepath.Join(CacheDir(), "models") }

// MediaDir returns CacheDir()/media.
func MediaDir() string { return filepath.Join(CacheDir(), "media") }

// ExpandEnv expands ${VAR} and $VAR in s like os.ExpandEnv, except that
// VIGIL_CACHE_DIR defaults to CacheDir() when it is unset, so shipped
// configs can say ${VIGIL_CACHE_DIR}/media/Megamind.avi.
func ExpandEnv(s string) string {
	return os.Expand(s, func(k string) string {
		if k == "VIGIL_CACHE_DIR" {
			return CacheDir()
		}
		return os.Getenv(k)
	})
}
