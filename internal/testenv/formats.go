package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vigil-video/vigil/internal/assets"
)

// YOLOXNano returns the path of Megvii's YOLOX-Nano: the asset cache's
// (make setup downloads it where github.com answers), else
// ../shared/testdata's; it skips the test with a clear message when
// neither is there.
func YOLOXNano(t testing.TB) string {
	t.Helper()
	if p := filepath.Join(assets.ModelsDir(), "yolox_nano.onnx"); exists(p) {
		return p
	}
	return Shared(t, "models/yolox_nano.onnx")
}

// FormatModels returns the directory holding YOLOX-Nano rewritten into
// every output format vigil decodes (yolov8.onnx, yolov8t.onnx,
// yolov10.onnx, rtdetr.onnx, rfdetr.onnx, ssd.onnx;
// scripts/format_models.py),
// made into ${VIGIL_CACHE_DIR}/models/formats on first use and again when
// the script or YOLOX-Nano is newer (about 3 s). It skips the test without
// YOLOX-Nano or Debian's python3-onnx.
func FormatModels(t testing.TB) string {
	t.Helper()
	yolox := YOLOXNano(t)
	return makeModels(t, "formats", yolox, yolox)
}

// EdgeModels returns the directory of format_models.py's synthetic edge
// cases (format_models.py --edge: e2e_zero, e2e_full, e2e_outside,
// e2e_nan, yolov8_nan, rfdetr_nan, two_images, not_onnx and the labels
// file three.txt), made into ${VIGIL_CACHE_DIR}/models/formats-edge as
// FormatModels does. It skips the test without python3-onnx.
func EdgeModels(t testing.TB) string {
	t.Helper()
	return makeModels(t, "formats-edge", "", "--edge")
}

// makeModels runs format_models.py ARG DIR into a new directory and
// renames it to models/<name>, unless that is newer than the script and
// than dep. Packages testing at once may both make it: the first rename
// wins and the other's copy is removed.
func makeModels(t testing.TB, name, dep, arg string) string {
	t.Helper()
	script := filepath.Join(RepoRoot(), "scripts", "format_models.py")
	dir := filepath.Join(assets.ModelsDir(), name)
	if fresh(dir, script, dep) {
		return dir
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import onnx, numpy").Run(); err != nil {
		t.Skipf("format test models need Debian's python3-onnx and python3-numpy (make setup installs them): %v", err)
	}
	tmp, err := os.MkdirTemp(assets.ModelsDir(), name+".tmp")
	if err != nil {
		t.Fatalf("making %s: %v", dir, err)
	}
	defer os.RemoveAll(tmp)
	out, err := exec.Command("/usr/bin/python3", script, arg, tmp).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, arg, err, out)
	}
	if fresh(dir, script, dep) { // another package made it meanwhile
		return dir
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil && !fresh(dir, script, dep) {
		t.Fatalf("making %s: %v", dir, err)
	}
	return dir
}

// fresh reports whether dir exists and is newer than each of deps.
func fresh(dir string, deps ...string) bool {
	d, err := os.Stat(dir)
	if err != nil {
		return false
	}
	for _, p := range deps {
		if p == "" || p[0] == '-' {
			continue
		}
		if s, err := os.Stat(p); err != nil || s.ModTime().After(d.ModTime()) {
			return false
		}
	}
	return true
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
